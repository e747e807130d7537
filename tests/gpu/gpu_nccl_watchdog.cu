// SPDX-License-Identifier: Apache-2.0
// Device work of the NCCL watchdog tests (see nccl_watchdog_support.hpp).
#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include <qsdp/collectives.hpp>

#include "nccl_watchdog_support.hpp"

namespace gpu_test {

namespace {

void require_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// Spins until the host sets *open (mapped pinned memory: the host's store reaches the GPU without
/// a copy; volatile makes every iteration read it again).
__global__ void wait_until_open(const volatile unsigned int* open) {
  while (*open == 0) __nanosleep(1000);
}

}  // namespace

stream_gate::stream_gate(cudaStream_t stream) : stream_(stream) {
  void* flag = nullptr;
  require_cuda(cudaHostAlloc(&flag, sizeof(unsigned int), cudaHostAllocMapped), "cudaHostAlloc");
  flag_ = static_cast<unsigned int*>(flag);
  *flag_ = 0;
  void* device_flag = nullptr;
  require_cuda(cudaHostGetDevicePointer(&device_flag, flag, 0), "cudaHostGetDevicePointer");
  // clang-format off
  wait_until_open<<<1, 1, 0, stream_>>>(static_cast<const unsigned int*>(device_flag));
  // clang-format on
  require_cuda(cudaGetLastError(), "launch wait_until_open");
}

void stream_gate::open() {
  std::atomic_ref<unsigned int>(*flag_).store(1, std::memory_order_release);
}

stream_gate::~stream_gate() {
  open();
  (void)cudaStreamSynchronize(stream_);  // the kernel reads the flag until it sees it set
  (void)cudaFreeHost(flag_);
}

#if QSDP_TEST_NCCL
std::vector<float> nccl_all_gather(qsdp::nccl_communicator& comm, std::size_t count,
                                   cudaStream_t stream, bool wait) {
  const std::size_t world = static_cast<std::size_t>(comm.size());
  const std::vector<float> mine(count, static_cast<float>(comm.rank() + 1));
  /// Freed stream-ordered: after the collective, however long it takes (or until it is aborted).
  struct stream_buffer {
    void* data = nullptr;
    cudaStream_t stream;
    stream_buffer(std::size_t bytes, cudaStream_t s) : stream(s) {
      require_cuda(cudaMallocAsync(&data, bytes, stream), "cudaMallocAsync");
    }
    stream_buffer(const stream_buffer&) = delete;
    stream_buffer& operator=(const stream_buffer&) = delete;
    ~stream_buffer() { (void)cudaFreeAsync(data, stream); }
    float* get() const { return static_cast<float*>(data); }
  };
  stream_buffer send(count * sizeof(float), stream), recv(count * world * sizeof(float), stream);
  require_cuda(cudaMemcpyAsync(send.get(), mine.data(), count * sizeof(float),
                               cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync");
  qsdp::all_gather(comm, qsdp::uniform<8>{}, send.get(), recv.get(), count, stream);
  if (!wait) return {};
  comm.synchronize(stream);
  std::vector<float> gathered(count * world);
  require_cuda(cudaMemcpy(gathered.data(), recv.get(), gathered.size() * sizeof(float),
                          cudaMemcpyDeviceToHost),
               "cudaMemcpy");
  return gathered;
}
#endif

}  // namespace gpu_test
