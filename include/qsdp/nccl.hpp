// SPDX-License-Identifier: Apache-2.0
//
// qsdp::nccl_communicator: a non-owning wrapper of an ncclComm_t for the device collectives. Bytes
// move with ncclAllGather (all_gather_bytes) and grouped ncclSend/ncclRecv (all_to_all_bytes) on
// the caller's stream; nothing synchronises the host. Every NCCL result that is not ncclSuccess
// becomes a qsdp::error naming the call, NCCL's error string and its last-error text; asynchronous
// errors (a peer died, a network failure) are polled before every exchange and by
// check_async_error(). Needs the CUDA runtime and NCCL headers, not nvcc; link NCCL::nccl and
// CUDA::cudart.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "communicator.hpp"
#include "config.hpp"
#include "detail/cuda/runtime.hpp"
#include "device_communicator.hpp"

namespace qsdp {

namespace detail {

inline void nccl_check(ncclResult_t r, ncclComm_t comm, const char* call, const char* where) {
  if (r == ncclSuccess) return;
  std::string message = std::string(where) + ": " + call + " failed: " + ncclGetErrorString(r);
  const char* last = comm ? ncclGetLastError(comm) : nullptr;
  if (last && *last) message += std::string(" (") + last + ")";
  throw qsdp::error(message);
}

}  // namespace detail

class nccl_communicator {
 public:
  static constexpr memory_space memory = memory_space::device;

  /// Wraps `comm`, which the caller keeps owning (and destroys after this object). Queries rank,
  /// size and device once.
  explicit nccl_communicator(ncclComm_t comm) : comm_(comm) {
    constexpr const char* where = "qsdp::nccl_communicator";
    if (comm == nullptr)
      throw qsdp::error(std::string(where) + ": comm is null; expected an initialised ncclComm_t");
    detail::nccl_check(ncclCommUserRank(comm, &rank_), comm, "ncclCommUserRank", where);
    detail::nccl_check(ncclCommCount(comm, &size_), comm, "ncclCommCount", where);
    detail::nccl_check(ncclCommCuDevice(comm, &device_), comm, "ncclCommCuDevice", where);
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int device() const noexcept { return device_; }
  ncclComm_t native() const noexcept { return comm_; }
  device_state& state() noexcept { return state_; }
  std::uint64_t next_call() noexcept { return calls_++; }

  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n,
                        cudaStream_t stream) {
    constexpr const char* where = "qsdp::nccl_communicator::all_gather_bytes";
    check_async_error();
    detail::nccl_check(ncclAllGather(send, recv, n, ncclUint8, comm_, stream), comm_,
                       "ncclAllGather", where);
  }

  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n,
                        cudaStream_t stream) {
    constexpr const char* where = "qsdp::nccl_communicator::all_to_all_bytes";
    check_async_error();
    detail::nccl_check(ncclGroupStart(), comm_, "ncclGroupStart", where);
    ncclResult_t result = ncclSuccess;
    for (int peer = 0; peer < size_ && result == ncclSuccess; ++peer) {
      const std::size_t offset = static_cast<std::size_t>(peer) * n;
      result = ncclSend(send + offset, n, ncclUint8, peer, comm_, stream);
      if (result == ncclSuccess)
        result = ncclRecv(recv + offset, n, ncclUint8, peer, comm_, stream);
    }
    const ncclResult_t ended = ncclGroupEnd();  // always close the group, even after a failed call
    detail::nccl_check(result, comm_, "ncclSend/ncclRecv", where);
    detail::nccl_check(ended, comm_, "ncclGroupEnd", where);
  }

  /// Throws if NCCL has recorded an asynchronous error on the communicator (never blocks).
  void check_async_error() const {
    ncclResult_t async = ncclSuccess;
    detail::nccl_check(ncclCommGetAsyncError(comm_, &async), comm_, "ncclCommGetAsyncError",
                       "qsdp::nccl_communicator");
    if (async != ncclSuccess && async != ncclInProgress)
      detail::nccl_check(async, comm_, "an earlier NCCL operation (asynchronous error)",
                         "qsdp::nccl_communicator");
  }

 private:
  ncclComm_t comm_;
  int rank_ = 0;
  int size_ = 0;
  int device_ = 0;
  std::uint64_t calls_ = 0;
  device_state state_;
};

static_assert(device_communicator<nccl_communicator>);

}  // namespace qsdp
