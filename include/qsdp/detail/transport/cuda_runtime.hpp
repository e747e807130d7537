// SPDX-License-Identifier: Apache-2.0
//
// What the CUDA path needs from the CUDA runtime, wrapped so that every failure is a qsdp::error
// naming the call: error checks, pointer and stream checks, the stream-ordered scratch of the
// device communicators, and the channel through which kernels report failures (bad packets) to the
// host without a synchronisation. Host code only (the runtime API), so g++ compiles it; the kernels
// live in .cuh files.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "../../config.hpp"

namespace qsdp::detail::cuda {

inline std::string describe(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

/// Throws qsdp::error "<where>: <call> failed: cudaErrorX (message)" unless e is cudaSuccess.
inline void check(cudaError_t e, const char* call, const char* where) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear a sticky launch error so the next call starts clean
    throw qsdp::error(std::string(where) + ": " + call + " failed: " + describe(e));
  }
}

/// After kernel launches: a launch error (bad configuration, no device) becomes a qsdp::error.
inline void check_launch(const char* kernel, const char* where) {
  check(cudaGetLastError(), kernel, where);
}

/// Whether a CUDA device is usable here. No driver installed or no GPU: false (tests skip, demos
/// fall back to the host path). A driver that is there but cannot serve this build (too old for the
/// CUDA runtime, or broken) is not "no GPU": that throws, so a GPU machine with a bad setup never
/// looks like a clean, skipped run.
inline bool device_available() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e == cudaSuccess) return devices > 0;
  (void)cudaGetLastError();
  int driver = 0;
  (void)cudaDriverGetVersion(&driver);  // 0 when no driver is installed at all
  if (e == cudaErrorNoDevice || driver == 0) return false;
  int runtime = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  throw qsdp::error("qsdp: a CUDA driver is installed (version " + std::to_string(driver) +
                    ") but cudaGetDeviceCount failed: " + describe(e) +
                    "; this build's runtime is " + std::to_string(runtime));
}

/// Device the stream belongs to (the current device for the legacy default stream).
inline int stream_device(cudaStream_t stream, const char* where) {
  int device = -1;
  check(cudaStreamGetDevice(stream, &device), "cudaStreamGetDevice", where);
  return device;
}

inline std::string address(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

/// Requires `p` to be memory the GPU `device` can read and write: device memory of that device or
/// managed memory. Host memory (pageable or pinned) is refused with a message naming the argument.
inline void require_device_pointer(const void* p, const char* name, int device, const char* where) {
  cudaPointerAttributes a{};
  check(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes", where);
  if (a.type == cudaMemoryTypeManaged) return;
  if (a.type != cudaMemoryTypeDevice)
    throw qsdp::error(
        std::string(where) + ": " + name + " (" + address(p) + ") is " +
        (a.type == cudaMemoryTypeHost ? "pinned host memory" : "host memory") +
        "; the CUDA path expects device memory (cudaMalloc, cudaMallocAsync or managed)");
  if (a.device != device)
    throw qsdp::error(std::string(where) + ": " + name + " (" + address(p) +
                      ") is memory of device " + std::to_string(a.device) +
                      ", but the stream belongs to device " + std::to_string(device));
}

/// True while `stream` is being captured into a CUDA graph (then nothing may synchronise or
/// allocate outside the graph).
inline bool capturing(cudaStream_t stream, const char* where) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing", where);
  return status != cudaStreamCaptureStatusNone;
}

// ---- Reports from kernels
// ----------------------------------------------------------------------------

/// What a kernel leaves for the host when it finds something wrong (the codec's decoders: a bad
/// packet header). Lives in mapped pinned memory: the kernel's write reaches the host without a
/// copy, and the host reads it without synchronising. The transport only carries it: `detail` is
/// the writer's own record, and the writer's report_formatter turns it into the message.
struct device_report {
  unsigned int claimed;  // 0 free; the first failing thread sets 1 (atomicCAS), so one report wins
  unsigned int ready;    // set last, after the fields below are visible to the host
  unsigned int index;    // which input was bad (the packet, the sending rank)
  unsigned int reserved;
  alignas(8) unsigned char detail[112];
};

/// Builds the message of a report: `where` is the call that polls, `source_noun` names what `index`
/// counts ("packet", "the packet from rank").
using report_formatter = std::string (*)(const device_report& report, const char* where,
                                         const char* source_noun);

/// Owner of one device_report record. poll() is cheap (a read of pinned memory) and never waits.
/// Both calls may come from several host threads at once (a mutex orders them).
class failure_channel : private no_copies {
 public:
  ~failure_channel() {
    if (host_) (void)cudaFreeHost(host_);
  }

  /// The record kernels write to, whose reports `describe` formats (allocated on first use: make a
  /// first call before any CUDA graph capture, as cudaHostAlloc cannot run inside one).
  device_report* device_record(const char* where, report_formatter describe) {
    std::lock_guard lock(mutex_);
    describe_ = describe;
    if (!host_) {
      void* p = nullptr;
      check(cudaHostAlloc(&p, sizeof(device_report), cudaHostAllocMapped), "cudaHostAlloc", where);
      host_ = static_cast<device_report*>(p);
      *host_ = device_report{};
      void* d = nullptr;
      check(cudaHostGetDevicePointer(&d, p, 0), "cudaHostGetDevicePointer", where);
      device_ = static_cast<device_report*>(d);
    }
    return device_;
  }

  /// Throws the failure a kernel reported since the last poll, if any, as the formatter words it.
  void poll(const char* where, const char* source_noun = "packet") {
    std::lock_guard lock(mutex_);
    if (!host_) return;
    if (std::atomic_ref<unsigned int>(host_->ready).load(std::memory_order_acquire) == 0) return;
    const device_report copy = *const_cast<const device_report*>(host_);
    *host_ = device_report{};  // rearm
    throw qsdp::error(describe_ ? describe_(copy, where, source_noun)
                                : std::string(where) + ": a kernel reported a failure (" +
                                      source_noun + " " + std::to_string(copy.index) + ")");
  }

 private:
  std::mutex mutex_;
  device_report* host_ = nullptr;
  device_report* device_ = nullptr;
  report_formatter describe_ = nullptr;
};

// ---- Stream-ordered scratch
// --------------------------------------------------------------------------

/// Device scratch of a communicator: grows (cudaMallocAsync on the caller's stream) when a larger
/// call arrives and is reused otherwise. It also holds the communicator's device call counter.
/// - A call on another stream than the previous one first waits for everything queued on the
///   previous stream (an event), so two streams never use the scratch at the same time.
/// - A buffer that is outgrown is kept until the workspace is destroyed, not freed: a CUDA graph
///   that captured a call holds its address, and replaying it later must still find live memory.
///   (Growth is geometric, so the retired buffers add at most twice the final size.)
/// - Growing during capture is refused: run the call once before capturing it, as for NCCL's own
///   buffers.
/// Destroy the workspace (its communicator) before the streams it was used on.
class device_workspace : private no_copies {
 public:
  ~device_workspace() {
    if (data_) (void)cudaFreeAsync(data_, last_stream_);
    if (calls_) (void)cudaFreeAsync(calls_, last_stream_);
    for (std::byte* old : retired_) (void)cudaFreeAsync(old, last_stream_);
    if (handoff_) (void)cudaEventDestroy(handoff_);
  }

  std::byte* get(std::size_t bytes, cudaStream_t stream, const char* where) {
    if (used_ && stream != last_stream_) {
      if (!handoff_)
        check(cudaEventCreateWithFlags(&handoff_, cudaEventDisableTiming),
              "cudaEventCreateWithFlags", where);
      check(cudaEventRecord(handoff_, last_stream_), "cudaEventRecord", where);
      check(cudaStreamWaitEvent(stream, handoff_, 0), "cudaStreamWaitEvent", where);
    }
    if (bytes > capacity_) {
      if (capturing(stream, where))
        throw qsdp::error(
            std::string(where) + ": needs " + std::to_string(bytes) +
            " bytes of device scratch but holds " + std::to_string(capacity_) +
            ", and the stream is being captured into a CUDA graph: make the same call "
            "once before capturing it so the scratch is allocated outside the graph");
      const std::size_t grown =
          bytes > capacity_ + capacity_ / 2 ? bytes : capacity_ + capacity_ / 2;
      void* p = nullptr;
      check(cudaMallocAsync(&p, grown, stream), "cudaMallocAsync", where);
      if (data_) retired_.push_back(data_);
      data_ = static_cast<std::byte*>(p);
      capacity_ = grown;
      ++growths_;
    }
    last_stream_ = stream;
    used_ = true;
    return data_;
  }
  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t growths() const noexcept { return growths_; }

  /// The communicator's call counter in device memory: the call index the next collective's
  /// kernels draw from. Kernels read it and advance it themselves, so that a collective captured
  /// in a CUDA graph draws fresh numbers at every replay. Allocated at the first call (never under
  /// capture: that call agrees its signature on the host first), starting at `first_call`, the
  /// host counter's value then; from there on it, not the host counter, numbers the device calls.
  /// Call after get(), which has ordered `stream` after the previous one.
  std::uint64_t* call_counter(std::uint64_t first_call, cudaStream_t stream, const char* where) {
    if (!calls_) {
      if (capturing(stream, where))
        throw qsdp::error(std::string(where) +
                          ": the communicator's device call counter is allocated by its first "
                          "call, which cannot happen inside CUDA graph capture");
      void* p = nullptr;
      check(cudaMallocAsync(&p, sizeof(std::uint64_t), stream), "cudaMallocAsync", where);
      calls_ = static_cast<std::uint64_t*>(p);
      first_call_ = first_call;  // a member: the copy from pageable memory reads it later
      check(
          cudaMemcpyAsync(calls_, &first_call_, sizeof first_call_, cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync", where);
    }
    return calls_;
  }

 private:
  std::byte* data_ = nullptr;  // cudaMallocAsync returns 256-byte aligned memory
  std::vector<std::byte*> retired_;
  std::size_t capacity_ = 0;
  std::size_t growths_ = 0;
  cudaStream_t last_stream_ = nullptr;
  bool used_ = false;
  cudaEvent_t handoff_ = nullptr;
  std::uint64_t* calls_ = nullptr;
  std::uint64_t first_call_ = 0;
};

/// Runs fn() with `device` current and restores the caller's current device after it: CUDA creates
/// streams and events on the current device, which need not be a communicator's.
template <class Fn>
auto with_device(int device, const char* where, Fn&& fn) {
  int current = 0;
  check(cudaGetDevice(&current), "cudaGetDevice", where);
  if (current != device) check(cudaSetDevice(device), "cudaSetDevice", where);
  struct restore {
    int to, from;
    ~restore() {
      if (to != from) (void)cudaSetDevice(to);
    }
  } const back{current, device};
  return fn();
}

/// The second stream of a communicator's device collectives: a call cut into pipeline pieces runs
/// its exchanges there, so that they overlap the codec kernels on the caller's stream, ordered both
/// ways by events (an exchange waits for the encode that wrote its packets, the decode waits for
/// the exchange). Created at the first call that has pieces (a call that agrees its signature on
/// the host, so never under graph capture; a captured call forks this stream into the graph and
/// joins it back, since every exchange is waited for). Its events are reused call after call: a
/// wait takes an event's state when it is queued.
class exchange_lane : private no_copies {
 public:
  ~exchange_lane() {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
    if (stream_) (void)cudaStreamDestroy(stream_);
  }

  /// The lane's stream, on the communicator's `device`.
  cudaStream_t stream(int device, const char* where) {
    if (!stream_)
      check(with_device(device, where,
                        [&] { return cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); }),
            "cudaStreamCreateWithFlags", where);
    return stream_;
  }

  /// Event number i, on the communicator's `device`, created on first use.
  cudaEvent_t event(std::size_t i, int device, const char* where) {
    while (events_.size() <= i) {
      cudaEvent_t e = nullptr;
      check(with_device(device, where,
                        [&] { return cudaEventCreateWithFlags(&e, cudaEventDisableTiming); }),
            "cudaEventCreateWithFlags", where);
      events_.push_back(e);
    }
    return events_[i];
  }

 private:
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;
};

}  // namespace qsdp::detail::cuda
