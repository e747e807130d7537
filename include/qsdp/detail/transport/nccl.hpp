// SPDX-License-Identifier: Apache-2.0
//
// The NCCL transport's error reporting (qsdp::nccl_communicator, nccl.hpp): every NCCL result that
// is not ncclSuccess becomes a qsdp::error naming the call, NCCL's error string and its last-error
// text.
#pragma once

#include <nccl.h>

#include <string>

#include "../../config.hpp"

namespace qsdp::detail {

/// "<where>: <call> failed: <ncclGetErrorString> (<ncclGetLastError>)".
inline std::string nccl_failure(ncclResult_t r, ncclComm_t comm, const char* call,
                                const char* where) {
  std::string message = std::string(where) + ": " + call + " failed: " + ncclGetErrorString(r);
  const char* last = comm ? ncclGetLastError(comm) : nullptr;
  if (last && *last) message += std::string(" (") + last + ")";
  return message;
}

inline void nccl_check(ncclResult_t r, ncclComm_t comm, const char* call, const char* where) {
  if (r != ncclSuccess) throw qsdp::error(nccl_failure(r, comm, call, where));
}

/// The enumerator's name ("ncclRemoteError"), which ncclGetErrorString does not give.
inline std::string nccl_result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult_t " + std::to_string(static_cast<int>(r));
  }
}

}  // namespace qsdp::detail
