// SPDX-License-Identifier: Apache-2.0
// Groups of device collectives (qsdp::group_start / qsdp::group_end on run_local_cuda's ranks)
// against the same calls made one by one on the device and grouped on the host.
#include <thrust/device_vector.h>

#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include <qsdp/collectives.hpp>
#include <qsdp/cuda_local.hpp>

#include "codec_helpers.cuh"
#include "gpu_support.hpp"
#include "group_mix.hpp"

namespace gpu_test {

namespace {

using namespace mix;

/// Device copies of one rank's host buffers; copy_back fills the host vectors again.
class mix_device {
 public:
  template <class T>
  T* operator()(std::vector<T>& v) {
    for (auto& e : entries_)
      if (e.host == static_cast<void*>(&v)) return static_cast<T*>(e.device);
    entry e{&v, nullptr, {}};
    const std::size_t bytes = v.size() * sizeof(T);
    cuda_ok(cudaMalloc(&e.device, bytes + 1), "cudaMalloc");
    cuda_ok(cudaMemcpy(e.device, v.data(), bytes, cudaMemcpyHostToDevice), "to device");
    e.copy_back = [&v, device = e.device, bytes] {
      cuda_ok(cudaMemcpy(v.data(), device, bytes, cudaMemcpyDeviceToHost), "to host");
    };
    entries_.push_back(e);
    return static_cast<T*>(e.device);
  }
  void copy_back() {
    for (auto& e : entries_) e.copy_back();
  }
  mix_device() = default;
  mix_device(const mix_device&) = delete;
  mix_device& operator=(const mix_device&) = delete;
  ~mix_device() {
    for (auto& e : entries_) (void)cudaFree(e.device);
  }

 private:
  struct entry {
    void* host;
    void* device;
    std::function<void()> copy_back;
  };
  std::vector<entry> entries_;
};

}  // namespace

std::vector<std::vector<std::vector<std::byte>>> device_group_mix(int world, bool grouped,
                                                                  std::size_t min_compressed_bytes,
                                                                  int repeats) {
  const auto w = static_cast<std::size_t>(world);
  const qsdp::call_options options{.min_compressed_bytes = min_compressed_bytes};
  std::vector<std::vector<std::vector<std::byte>>> outputs(w);
  qsdp::run_local_cuda(world, [&](qsdp::cuda_local_communicator& comm) {
    mix_host b = make_mix(comm.rank(), world);
    {
      mix_device at;
      for (int g = 0; g < repeats; ++g) {
        if (g > 0) {  // the in-place buffers start over
          cuda_ok(cudaStreamSynchronize(comm.stream()), "sync");
          const mix_host fresh = make_mix(comm.rank(), world);
          cuda_ok(cudaMemcpy(at(b.inplace), fresh.inplace.data(),
                             fresh.inplace.size() * sizeof(float), cudaMemcpyHostToDevice),
                  "reset");
          cuda_ok(cudaMemcpy(at(b.inplace_rs), fresh.inplace_rs.data(),
                             fresh.inplace_rs.size() * sizeof(float), cudaMemcpyHostToDevice),
                  "reset");
        }
        if (grouped) qsdp::group_start(comm);
        issue_mix(comm, b, at, options, comm.stream());
        if (grouped) qsdp::group_end(comm);
      }
      issue_after(comm, b, at, comm.stream());
      cuda_ok(cudaStreamSynchronize(comm.stream()), "sync");
      comm.state().failures.poll("gpu_test::group_mix", "the packet from rank");
      at.copy_back();
    }
    outputs[static_cast<std::size_t>(comm.rank())] = outputs_of(b, comm.rank());
  });
  return outputs;
}

std::vector<std::string> device_group_misuse(int world, const std::string& which) {
  const auto w = static_cast<std::size_t>(world);
  std::vector<std::string> errors(w);
  qsdp::run_local_cuda(world, [&](qsdp::cuda_local_communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    thrust::device_vector<float> send(4096 * w, 1.0f), recv(4096 * w);
    float* s = thrust::raw_pointer_cast(send.data());
    float* d = thrust::raw_pointer_cast(recv.data());
    const qsdp::stochastic<8> q{.bucket_size = 128, .seed = 1};
    cudaStream_t other = nullptr;
    cuda_ok(cudaStreamCreate(&other), "stream");
    try {
      if (which == "shorter group") {  // rank 0 records one call fewer
        qsdp::group_start(comm);
        qsdp::all_gather(comm, q, s, d, 1024, comm.stream());
        if (r != 0) qsdp::reduce_scatter(comm, q, s, d, 512, qsdp::reduce_op::sum, comm.stream());
        qsdp::group_end(comm);
      } else if (which == "empty group") {  // rank 0 records nothing
        qsdp::group_start(comm);
        if (r != 0) qsdp::all_gather(comm, q, s, d, 1024, comm.stream());
        qsdp::group_end(comm);
      } else if (which == "other count") {  // the last rank's second call has another count
        qsdp::group_start(comm);
        qsdp::all_gather(comm, q, s, d, 1024, comm.stream());
        qsdp::all_gather(comm, q, s, d, r + 1 == w ? 1000 : 1024, comm.stream());
        qsdp::group_end(comm);
      } else if (which == "other stream") {
        qsdp::group_start(comm);
        qsdp::all_gather(comm, q, s, d, 1024, comm.stream());
        try {
          qsdp::all_gather(comm, q, s, d, 1024, other);
        } catch (...) {
          qsdp::group_end(comm);  // the group still runs its first call on every rank
          throw;
        }
        qsdp::group_end(comm);
      } else if (which == "all_reduce in group") {
        qsdp::group_start(comm);
        try {
          qsdp::all_reduce(comm, q, d, 1024, qsdp::reduce_op::sum, comm.stream());
        } catch (...) {
          qsdp::group_end(comm);
          throw;
        }
        qsdp::group_end(comm);
      } else if (which == "group_end without start") {
        qsdp::group_end(comm);
      } else {
        throw std::runtime_error("device_group_misuse: unknown case " + which);
      }
      cuda_ok(cudaStreamSynchronize(comm.stream()), "sync");
    } catch (const qsdp::error& e) {
      errors[r] = e.what();
    }
    (void)cudaStreamDestroy(other);
  });
  return errors;
}

}  // namespace gpu_test
