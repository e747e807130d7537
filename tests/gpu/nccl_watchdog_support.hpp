// SPDX-License-Identifier: Apache-2.0
// Device work for tests/gpu/test_gpu_nccl_watchdog.cpp, defined in gpu_nccl_watchdog.cu (nvcc):
// a stream held up by a kernel until the host lets it go, and a compressed all-gather over an
// nccl_communicator.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#if QSDP_TEST_NCCL
#include <qsdp/nccl.hpp>
#endif

namespace gpu_test {

/// Holds `stream` up: enqueues a kernel that spins until open() sets a flag in mapped pinned
/// memory, so that work queued before a synchronize() does not complete until the test says so. The
/// destructor opens the gate and waits for the kernel.
class stream_gate {
 public:
  explicit stream_gate(cudaStream_t stream);
  stream_gate(const stream_gate&) = delete;
  stream_gate& operator=(const stream_gate&) = delete;
  ~stream_gate();
  void open();

 private:
  cudaStream_t stream_;
  unsigned int* flag_ = nullptr;
};

#if QSDP_TEST_NCCL
/// qsdp::all_gather (uniform<8>) of `count` floats per rank through `comm` on `stream` (a stream of
/// comm.device()); rank r sends r + 1 in every element, which the quantizer carries exactly. With
/// `wait`, then comm.synchronize(stream) and returns the gathered count * comm.size() values;
/// without, returns nothing once the work is enqueued (its buffers are freed stream-ordered).
std::vector<float> nccl_all_gather(qsdp::nccl_communicator& comm, std::size_t count,
                                   cudaStream_t stream, bool wait);
#endif

}  // namespace gpu_test
