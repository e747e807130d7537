// SPDX-License-Identifier: Apache-2.0
/// @file
/// qsdp::nccl_communicator: a non-owning wrapper of an ncclComm_t for the device collectives. Bytes
/// move with ncclAllGather (all_gather_bytes) and grouped ncclSend/ncclRecv (all_to_all_bytes) on
/// the caller's stream; nothing synchronises the host. Every NCCL result that is not ncclSuccess
/// becomes a qsdp::error naming the call, NCCL's error string and its last-error text; asynchronous
/// errors (a peer died, a network failure) are polled before every exchange and by
/// check_async_error(). Needs the CUDA runtime and NCCL headers, not nvcc; link NCCL::nccl and
/// CUDA::cudart.
///
/// Faults (fault_options sets the limits; nccl_default_timeout is 10 min):
/// - An asynchronous error (ncclCommGetAsyncError: a peer died, a network or CUDA failure) is
///   found before the next exchange, by check_async_error() or while synchronize() waits. The
///   communicator is then aborted (ncclCommAbort, unless abort_on_failure is off) and a qsdp::error
///   names NCCL's error, its string and ncclGetLastError.
/// - synchronize(stream) waits for the stream's work on the host while polling for asynchronous
///   errors, so a dead peer is an error instead of a hang. Past fault_options::timeout (a rank that
///   never joined the collective) it aborts the communicator and throws "timed out".
/// - Non-blocking communicators (ncclConfig_t::blocking = 0): an ncclInProgress result (of the
///   initialisation, ncclGroupEnd or a collective) is not an error: the wrapper polls
///   ncclCommGetAsyncError until the enqueue has finished, within the same timeout.
/// - After an abort the wrapper no longer touches the handle: its exchanges, check_async_error()
///   and synchronize() throw a qsdp::error saying the communicator was aborted, and native() is
///   null.
///   ncclCommAbort freed the ncclComm_t, so the caller, who still holds it, must neither use nor
///   ncclCommDestroy it again; rank(), size() and device() keep answering.
///
/// The one wait the device collectives make themselves (the first call of a new signature checks on
/// the host that all ranks agree) goes through synchronize(), so it is watched too; otherwise
/// nothing waits on the host: call synchronize() where the training loop waits for its step.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "communicator.hpp"
#include "config.hpp"
#include "detail/transport/cuda_runtime.hpp"
#include "detail/transport/nccl.hpp"
#include "detail/transport/wait.hpp"
#include "device_communicator.hpp"

namespace qsdp {

/// nccl_communicator's default fault_options::timeout: 10 minutes, PyTorch's NCCL default: longer
/// than a first call that opens connections, or a rank held up by a checkpoint or its data loader,
/// yet a rank that never arrives ends the job in minutes rather than holding its machines until the
/// scheduler's wall-clock limit.
inline constexpr std::chrono::milliseconds nccl_default_timeout = std::chrono::minutes(10);

/// One rank of an NCCL communicator, for the device collectives (see the top of this file for
/// errors and faults). Non-owning and not copyable.
class nccl_communicator {
 public:
  /// Device buffers.
  static constexpr memory_space memory = memory_space::device;
  /// Its exchanges may run on any stream of its device (the pipeline's second stream).
  static constexpr bool exchanges_on_any_stream = true;

  /// Wraps `comm`, which the caller keeps owning (and destroys after this object, unless a
  /// qsdp::error said the communicator was aborted: then ncclCommAbort has freed it). Checks the
  /// options, waits for a non-blocking communicator's initialisation to finish (an asynchronous
  /// error found meanwhile is handled as in synchronize()), then queries rank, size and device.
  /// Use one wrapper per communicator, from one host thread at a time, as NCCL requires.
  /// @param comm an initialised ncclComm_t the caller owns
  /// @param options the fault options (timeout default: nccl_default_timeout)
  /// @throws qsdp::error when comm is null, when an option is out of range (fault_options::timeout
  ///         above max_fault_timeout or negative, fault_options::poll_interval above
  ///         max_poll_interval or negative), when an NCCL query fails or NCCL reports an
  ///         asynchronous error; qsdp::timeout_error when a non-blocking initialisation outlasts
  ///         the timeout
  explicit nccl_communicator(ncclComm_t comm, fault_options options = {})
      : comm_(comm), options_(options) {
    constexpr const char* where = "qsdp::nccl_communicator";
    detail::check_fault_options(options, where);
    if (comm == nullptr)
      throw qsdp::error(std::string(where) + ": comm is null; expected an initialised ncclComm_t");
    wait_while_in_progress(where);
    detail::nccl_check(ncclCommUserRank(comm, &rank_), comm, "ncclCommUserRank", where);
    detail::nccl_check(ncclCommCount(comm, &size_), comm, "ncclCommCount", where);
    detail::nccl_check(ncclCommCuDevice(comm, &device_), comm, "ncclCommCuDevice", where);
  }
  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;
  /// Destroys the event synchronize() uses; the ncclComm_t stays the caller's.
  ~nccl_communicator() {
    if (done_event_) (void)cudaEventDestroy(done_event_);
  }

  /// @return this rank in the communicator (ncclCommUserRank)
  int rank() const noexcept { return rank_; }
  /// @return the number of ranks (ncclCommCount)
  int size() const noexcept { return size_; }
  /// @return the communicator's CUDA device (ncclCommCuDevice)
  int device() const noexcept { return device_; }
  /// The wrapped handle; null once the communicator was aborted (ncclCommAbort freed it).
  /// @return the handle, or null
  ncclComm_t native() const noexcept { return comm_; }
  /// @return the fault options passed to the constructor
  const fault_options& options() const noexcept { return options_; }
  /// Whether this wrapper has called ncclCommAbort on the handle.
  /// @return true once aborted
  bool aborted() const noexcept { return aborted_; }
  /// @return the state the device collectives keep for this communicator
  device_state& state() noexcept { return state_; }
  /// @return the index of the next collective call: 0, 1, 2, ... on every rank alike
  std::uint64_t next_call() noexcept { return calls_++; }

  /// Gathers n bytes of device memory from every rank (ncclAllGather), ordered on `stream`.
  /// @param send this rank's n bytes
  /// @param recv size() x n bytes: rank r's block at offset r x n
  /// @param n bytes per rank, the same on every rank
  /// @param stream a stream of device()
  /// @throws qsdp::error when the communicator was aborted, when NCCL reports an asynchronous
  ///         error (after aborting it, unless abort_on_failure is off) or ncclAllGather fails;
  ///         qsdp::timeout_error when a non-blocking enqueue outlasts the timeout
  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n,
                        cudaStream_t stream) {
    constexpr const char* where = "qsdp::nccl_communicator::all_gather_bytes";
    prepare_exchange(where);
    const ncclResult_t result = ncclAllGather(send, recv, n, ncclUint8, comm_, stream);
    if (result == ncclInProgress)
      wait_while_in_progress(where);
    else
      detail::nccl_check(result, comm_, "ncclAllGather", where);
  }

  /// Sends block j of `send` to rank j (grouped ncclSend/ncclRecv), ordered on `stream`.
  /// @param send size() blocks of n bytes of device memory, block j for rank j
  /// @param recv size() blocks of n bytes: block i from rank i at offset i x n
  /// @param n bytes per block, the same on every rank
  /// @param stream a stream of device()
  /// @throws qsdp::error as all_gather_bytes (ncclSend, ncclRecv or ncclGroupEnd failing)
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n,
                        cudaStream_t stream) {
    constexpr const char* where = "qsdp::nccl_communicator::all_to_all_bytes";
    prepare_exchange(where);
    detail::nccl_check(ncclGroupStart(), comm_, "ncclGroupStart", where);
    // A non-blocking communicator may answer ncclInProgress to the calls in the group as well as to
    // ncclGroupEnd: the enqueue goes on in the background, and is awaited below.
    const auto fine = [](ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; };
    ncclResult_t result = ncclSuccess;
    for (int peer = 0; peer < size_ && fine(result); ++peer) {
      const std::size_t offset = static_cast<std::size_t>(peer) * n;
      result = ncclSend(send + offset, n, ncclUint8, peer, comm_, stream);
      if (fine(result)) result = ncclRecv(recv + offset, n, ncclUint8, peer, comm_, stream);
    }
    const ncclResult_t ended = ncclGroupEnd();  // always close the group, even after a failed call
    if (!fine(result)) detail::nccl_check(result, comm_, "ncclSend/ncclRecv", where);
    if (!fine(ended)) detail::nccl_check(ended, comm_, "ncclGroupEnd", where);
    if (result == ncclInProgress || ended == ncclInProgress) wait_while_in_progress(where);
  }

  /// Throws if NCCL has recorded an asynchronous error on the communicator (never blocks), after
  /// aborting it when options().abort_on_failure.
  /// @throws qsdp::error on an asynchronous error, or when the communicator was aborted
  void check_async_error() {
    constexpr const char* where = "qsdp::nccl_communicator";
    require_not_aborted(where);
    (void)usable_async_state(where);
  }

  /// Blocks until the work queued on `stream` before this call has completed (stream-ordered work
  /// of any kind, this communicator's collectives included), polling ncclCommGetAsyncError every
  /// options().poll_interval at most. Throws a qsdp::error on an asynchronous error ("asynchronous
  /// error", naming ncclGetErrorString and ncclGetLastError) or when options().timeout passes
  /// ("timed out", a qsdp::timeout_error), after aborting the communicator when
  /// options().abort_on_failure; then also reports a bad packet that a decoding kernel found on
  /// this communicator.
  /// @param stream a stream of device(), not under CUDA graph capture
  /// @throws qsdp::error when the communicator was aborted, when `stream` belongs to another
  ///         device or is being captured into a CUDA graph, on an asynchronous error, a failed
  ///         CUDA call or a bad packet a decoding kernel found; qsdp::timeout_error past
  ///         options().timeout
  void synchronize(cudaStream_t stream) {
    constexpr const char* where = "qsdp::nccl_communicator::synchronize";
    require_not_aborted(where);
    const int stream_device = detail::cuda::stream_device(stream, where);
    if (stream_device != device_)
      throw qsdp::error(std::string(where) + ": the stream belongs to device " +
                        std::to_string(stream_device) + ", the communicator to device " +
                        std::to_string(device_));
    if (detail::cuda::capturing(stream, where))
      throw qsdp::error(std::string(where) +
                        ": the stream is being captured into a CUDA graph, where nothing may wait "
                        "on the host; synchronize after launching the graph");
    cudaEvent_t event = completion_event(where);
    // A non-blocking communicator may still be enqueueing work the caller started on the handle
    // directly: record the event only once that is in the stream, or it would complete too early.
    bool recorded = false;
    const auto done = [&] {
      if (!recorded) {
        if (async_state(where) == ncclInProgress) return false;
        detail::cuda::check(cudaEventRecord(event, stream), "cudaEventRecord", where);
        recorded = true;
      }
      const cudaError_t e = cudaEventQuery(event);
      if (e == cudaErrorNotReady) return false;
      detail::cuda::check(e, "cudaEventQuery", where);
      return true;
    };
    detail::wait_until_done(
        done, [&] { return describe_async_error(where); },
        [&](const std::string& failure) { return abort_communicator(failure); }, options_,
        timeout(),
        {.where = where, .what = "the work queued on the stream", .usual_cause = hang_cause});
    state_.failures.poll(where, "the packet from rank");  // the kernels have all finished now
  }

 private:
  std::chrono::milliseconds timeout() const noexcept {
    return detail::effective_timeout(options_, nccl_default_timeout);
  }
  static constexpr const char* hang_cause =
      "a rank that never joined the collective, or a hung kernel, is the usual cause";

  /// Throws, naming what failed first, once this wrapper has aborted the communicator: the handle
  /// is freed, and touching it could crash instead of failing.
  void require_not_aborted(const char* where) const {
    if (aborted_)
      throw qsdp::error(
          std::string(where) +
          ": the communicator was aborted (ncclCommAbort) after an earlier failure (" +
          abort_reason_ + "); create a new ncclComm_t and nccl_communicator");
  }

  ncclResult_t async_state(const char* where) const {
    ncclResult_t async = ncclSuccess;
    detail::nccl_check(ncclCommGetAsyncError(comm_, &async), comm_, "ncclCommGetAsyncError", where);
    return async;
  }

  /// The asynchronous error, described for the watchdog; nothing while there is none.
  std::optional<std::string> describe_async_error(const char* where) const {
    const ncclResult_t async = async_state(where);
    if (async == ncclSuccess || async == ncclInProgress) return std::nullopt;
    std::string text = "ncclCommGetAsyncError reports " + detail::nccl_result_name(async) + ": " +
                       ncclGetErrorString(async);
    const char* last = ncclGetLastError(comm_);
    if (last && *last) text += std::string(" (ncclGetLastError: ") + last + ")";
    return text;
  }

  /// The asynchronous state if it is not an error (ncclSuccess or ncclInProgress); otherwise
  /// aborts when configured and throws the message check_async_error() has always thrown.
  ncclResult_t usable_async_state(const char* where) {
    const ncclResult_t async = async_state(where);
    if (async == ncclSuccess || async == ncclInProgress) return async;
    std::string message =
        detail::nccl_failure(async, comm_, "an earlier NCCL operation (asynchronous error)", where);
    if (!options_.abort_on_failure) throw qsdp::error(message + "; " + detail::not_aborted_note);
    try {
      message += "; " + abort_communicator(message);
    } catch (const qsdp::error& e) {
      message += std::string("; aborting the communicator failed too: ") + e.what();
    }
    throw qsdp::error(message);
  }

  /// Before an exchange: no asynchronous error, and no enqueue of a non-blocking communicator
  /// still running (NCCL forbids a new call until it has finished).
  void prepare_exchange(const char* where) {
    require_not_aborted(where);
    if (usable_async_state("qsdp::nccl_communicator") == ncclInProgress)
      wait_while_in_progress(where);
  }

  /// Polls until a non-blocking communicator has finished its pending initialisation or enqueue
  /// (returns at once for a blocking one), watched like synchronize().
  void wait_while_in_progress(const char* where) {
    detail::wait_until_done([&] { return async_state(where) != ncclInProgress; },
                            [&] { return describe_async_error(where); },
                            [&](const std::string& failure) { return abort_communicator(failure); },
                            options_, timeout(),
                            {.where = where,
                             .what = "NCCL's pending initialisation or enqueue",
                             .usual_cause = hang_cause});
  }

  /// Calls ncclCommAbort and forgets the handle, which it frees; returns the note for the message.
  std::string abort_communicator(const std::string& reason) {
    aborted_ = true;  // set first: whatever ncclCommAbort answers, the handle is not used again
    abort_reason_ = reason;
    const ncclResult_t result = ncclCommAbort(std::exchange(comm_, nullptr));
    if (result != ncclSuccess)
      throw qsdp::error(std::string("ncclCommAbort failed: ") + ncclGetErrorString(result) +
                        "; the ncclComm_t is in an unknown state: neither use nor destroy it");
    return "the communicator was aborted with ncclCommAbort, which freed the ncclComm_t: do not "
           "use or destroy it again";
  }

  /// The event synchronize() records, created on first use on the communicator's device.
  cudaEvent_t completion_event(const char* where) {
    if (done_event_) return done_event_;
    detail::cuda::check(
        detail::cuda::with_device(
            device_, where,
            [&] { return cudaEventCreateWithFlags(&done_event_, cudaEventDisableTiming); }),
        "cudaEventCreateWithFlags", where);
    return done_event_;
  }

  ncclComm_t comm_;
  fault_options options_;
  int rank_ = 0;
  int size_ = 0;
  int device_ = 0;
  std::uint64_t calls_ = 0;
  bool aborted_ = false;
  std::string abort_reason_;
  cudaEvent_t done_event_ = nullptr;
  device_state state_;
};

static_assert(device_communicator<nccl_communicator>);

}  // namespace qsdp
