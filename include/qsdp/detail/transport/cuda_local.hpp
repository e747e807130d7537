// SPDX-License-Identifier: Apache-2.0
//
// What the rank threads of one run_local_cuda share (cuda_local.hpp): the breakable barrier of the
// in-process transport, each rank's posted send buffer, and the CUDA events that order the ranks'
// streams.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <vector>

#include "../../config.hpp"
#include "cuda_runtime.hpp"
#include "local.hpp"

namespace qsdp::detail {

/// What the rank threads of one run_local_cuda share.
struct cuda_local_world : no_copies {
  cuda_local_world(int size, int gpu, std::chrono::milliseconds wait_limit)
      : barrier(size, "qsdp::cuda_local_communicator"),
        posted(static_cast<std::size_t>(size)),
        posted_bytes(static_cast<std::size_t>(size)),
        ready(static_cast<std::size_t>(size)),
        done(static_cast<std::size_t>(size)),
        device(gpu),
        timeout(wait_limit) {
    constexpr const char* where = "qsdp::run_local_cuda";
    for (std::size_t r = 0; r < ready.size(); ++r) {
      cuda::check(cudaEventCreateWithFlags(&ready[r], cudaEventDisableTiming),
                  "cudaEventCreateWithFlags", where);
      cuda::check(cudaEventCreateWithFlags(&done[r], cudaEventDisableTiming),
                  "cudaEventCreateWithFlags", where);
    }
  }
  ~cuda_local_world() {
    for (cudaEvent_t e : ready)
      if (e) (void)cudaEventDestroy(e);
    for (cudaEvent_t e : done)
      if (e) (void)cudaEventDestroy(e);
  }

  breakable_barrier barrier;
  std::vector<const std::byte*> posted;
  std::vector<std::size_t> posted_bytes;
  std::vector<cudaEvent_t> ready;  // rank r's send buffer is filled (recorded on r's stream)
  std::vector<cudaEvent_t> done;   // rank r has copied what it needs from every peer
  int device;
  std::chrono::milliseconds timeout;
};

}  // namespace qsdp::detail
