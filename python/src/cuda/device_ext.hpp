// SPDX-License-Identifier: Apache-2.0
//
// qsdp._ext_cuda, the CUDA side of qsdp.torch: policies whose calls run the device codec and the
// device collectives on torch's current stream, and a device communicator whose byte exchanges are
// torch.distributed collectives on the ProcessGroup (NCCL), so the library's device collectives,
// descriptor agreement and packet checks run unchanged. The kernels are compiled by nvcc
// (device_policies_<family>.cu); the module itself (ext_cuda.cpp) by the host compiler, so nanobind
// never goes through nvcc. This header needs the CUDA runtime's headers only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <qsdp/collectives.hpp>
#include <qsdp/communicator.hpp>
#include <qsdp/device_communicator.hpp>

#include "../shared.hpp"

namespace qsdp::python {

/// One byte exchange through torch.distributed: `send_bytes` at `send` and `recv_bytes` at `recv`,
/// device memory of the communicator's device, enqueued after the work of torch's current stream
/// and before its later work (what ProcessGroupNCCL does with a synchronous call).
using device_exchange = std::function<void(const std::byte* send, std::size_t send_bytes,
                                           std::byte* recv, std::size_t recv_bytes)>;

/// A qsdp::device_communicator over a torch ProcessGroup on one CUDA device. Its exchanges are
/// ordered by torch on its current stream, so a collective must run on that stream: the Python
/// layer sets it (use_stream) before each call, and an exchange asked for on another stream throws.
class device_group_communicator {
 public:
  static constexpr memory_space memory = memory_space::device;

  device_group_communicator(int rank, int size, int device, device_exchange all_gather,
                            device_exchange all_to_all);

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int device() const noexcept { return device_; }
  device_state& state() noexcept { return state_; }
  std::uint64_t next_call() noexcept { return calls_++; }
  std::uint64_t calls() const noexcept { return calls_; }

  /// The stream torch's collectives are ordered on (torch.cuda.current_stream()).
  void use_stream(cudaStream_t stream) noexcept { stream_ = stream; }

  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n, cudaStream_t stream);
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n, cudaStream_t stream);

  /// Throws the bad packet a decoding kernel of this communicator's collectives reported, if any
  /// (the collectives also report it at their next call).
  void check_failures(const char* where) { state_.failures.poll(where); }

  /// qsdp::group_start / qsdp::group_end on this communicator (device_ext.cu: they need nvcc).
  void group_start();
  void group_end();

 private:
  /// Calls `exchange` with `send_bytes` at send (copied out first where it lies inside `recv`)
  /// and `recv_bytes` at recv, after checking that the stream is torch's.
  void exchange(const device_exchange& exchange, const std::byte* send, std::size_t send_bytes,
                std::byte* recv, std::size_t recv_bytes, cudaStream_t stream, const char* where);

  int rank_, size_, device_;
  device_exchange all_gather_, all_to_all_;
  cudaStream_t stream_ = nullptr;
  detail::cuda::device_workspace in_place_;  // a copy of `send` when it lies inside `recv`
  device_state state_;
  std::uint64_t calls_ = 0;
};

static_assert(device_communicator<device_group_communicator>);

/// One qsdp policy's device calls (pointers: device memory of the stream's device, `count` values
/// of the element type given, checked by the Python layer and again by the library).
class device_policy {
 public:
  virtual ~device_policy() = default;
  virtual std::string name() const = 0;
  /// Encodes with the random numbers of call index `call` (the host policy's counter: one counter
  /// per qsdp.torch policy, whichever device its calls run on).
  virtual void encode(element e, const void* src, std::size_t count, std::byte* packet,
                      std::uint64_t call, cudaStream_t stream) = 0;
  virtual void decode(element e, const std::byte* packet, std::size_t count, void* dst,
                      cudaStream_t stream) = 0;
  virtual void all_gather(device_group_communicator& comm, element e, const void* send, void* recv,
                          std::size_t count, cudaStream_t stream, call_options options) = 0;
  virtual void reduce_scatter(device_group_communicator& comm, element e, const void* send,
                              void* recv, std::size_t count, reduce_op op, cudaStream_t stream,
                              call_options options) = 0;
  virtual void all_reduce(device_group_communicator& comm, element e, void* data, std::size_t count,
                          reduce_op op, cudaStream_t stream, call_options options) = 0;
  /// qsdp::all_gather_encoded (the device form) into `elements` and `scales`; the policies without
  /// the block-scaled layout throw qsdp::error.
  virtual void all_gather_encoded(device_group_communicator& comm, element e, const void* send,
                                  std::byte* elements, std::uint8_t* scales, std::size_t count,
                                  cudaStream_t stream) = 0;
  /// qsdp::unpack_block_scaled (the device form) of a packet of this policy into `elements` and
  /// `scales`, on the stream; the policies without the block-scaled layout throw qsdp::error.
  virtual void unpack_block_scaled(const std::byte* packet, std::size_t count, std::byte* elements,
                                   std::uint8_t* scales, cudaStream_t stream) = 0;
};

/// families.hpp's make_named over the device factories below.
std::unique_ptr<device_policy> make_device_policy(const std::string& family, int bits,
                                                  std::size_t bucket_size, std::uint64_t seed,
                                                  bool rotated);

// One per family, each in its own translation unit (device_policies_<family>.cu).
std::unique_ptr<device_policy> make_device_stochastic(int bits, std::size_t bucket_size,
                                                      std::uint64_t seed, bool rotated);
std::unique_ptr<device_policy> make_device_uniform(int bits, std::size_t bucket_size,
                                                   std::uint64_t seed, bool rotated);
std::unique_ptr<device_policy> make_device_symmetric(int bits, std::size_t bucket_size,
                                                     std::uint64_t seed, bool rotated);
std::unique_ptr<device_policy> make_device_random_shift(int bits, std::size_t bucket_size,
                                                        std::uint64_t seed, bool rotated);
std::unique_ptr<device_policy> make_device_identity();
// The block-scaled float policies by C++ name (device_policies_mx.cu, device_policies_fp4.cu);
// null for another name.
std::unique_ptr<device_policy> make_device_mx(const std::string& name, std::size_t bucket_size,
                                              std::uint64_t seed, bool rotated);
std::unique_ptr<device_policy> make_device_fp4(const std::string& name, std::size_t bucket_size,
                                               std::uint64_t seed, bool rotated);

/// qsdp::synchronize_and_check(stream): waits for the stream and throws a bad packet the plain
/// device decode reported on its device.
void device_synchronize_and_check(cudaStream_t stream);

}  // namespace qsdp::python
