// SPDX-License-Identifier: Apache-2.0
//
// The drop-in on the CUDA path: one FSDP-style step of a program that calls NCCL on its own device
// buffers, with the two collectives replaced by qsdp's. The whole change is:
//
//   #include <qsdp/collectives.hpp>
//   #include <qsdp/nccl.hpp>
//   qsdp::nccl_communicator qcomm(comm);                         // wraps, does not own
//   qsdp::random_shift<8> weights;                               // QSDP's weight quantizer
//   qsdp::stochastic<8> grads;                                   // unbiased gradient quantizer
//
//   ncclAllGather(d_shard, d_full, count, ncclBfloat16, comm, stream);
//     -> qsdp::all_gather(qcomm, weights, d_shard, d_full, count, stream);
//   ncclReduceScatter(d_grad, d_grad_shard, count, ncclBfloat16, ncclAvg, comm, stream);
//     -> qsdp::reduce_scatter(qcomm, grads, d_grad, d_grad_shard, count, qsdp::reduce_op::avg,
//     stream);
//
// One process drives every visible GPU (ncclCommInitAll), one thread per GPU. Both versions run on
// the same data; the program prints bytes per rank on the wire, the relative L2 error of qsdp's
// results against NCCL's, and the median time of each. Exits with 77 (skipped) where there is no
// GPU.
//
//   qsdp_nccl_drop_in [--count N] [--repeats R]     (N bf16 values per rank, default 64 Mi)
#include <cuda_bf16.h>
#include <nccl.h>
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <qsdp/collectives.hpp>
#include <qsdp/nccl.hpp>

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void nccl_ok(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}

double relative_l2(const thrust::host_vector<__nv_bfloat16>& got,
                   const thrust::host_vector<__nv_bfloat16>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double r = __bfloat162float(ref[i]), g = __bfloat162float(got[i]);
    num += (g - r) * (g - r);
    den += r * r;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct rank_report {
  double nccl_gather_ms = 0, qsdp_gather_ms = 0, nccl_scatter_ms = 0, qsdp_scatter_ms = 0;
  double gather_error = 0, scatter_error = 0;
  std::size_t packet_bytes = 0;
};

/// Median milliseconds of `repeats` runs of body() on `stream`.
template <class Body>
double median_ms(int repeats, cudaStream_t stream, Body&& body) {
  cudaEvent_t a, b;
  cuda_ok(cudaEventCreate(&a), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<float> times;
  for (int i = 0; i < repeats; ++i) {
    cuda_ok(cudaEventRecord(a, stream), "cudaEventRecord");
    body();
    cuda_ok(cudaEventRecord(b, stream), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  return times[times.size() / 2];
}

void run_rank(int device, ncclComm_t comm, int world, std::size_t count, int repeats,
              rank_report& report) {
  cuda_ok(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t stream;
  cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
  const std::size_t full = count * static_cast<std::size_t>(world);

  // This rank's weight shard and full gradient (normal values; gradients with rare outliers).
  std::mt19937 rng(1234 + device);
  std::normal_distribution<float> normal;
  thrust::host_vector<__nv_bfloat16> shard_h(count), grad_h(full);
  for (auto& v : shard_h) v = __float2bfloat16(0.02f * normal(rng));
  for (auto& v : grad_h) v = __float2bfloat16((rng() % 101 == 0 ? 50.0f : 1e-3f) * normal(rng));
  thrust::device_vector<__nv_bfloat16> d_shard = shard_h, d_grad = grad_h;
  thrust::device_vector<__nv_bfloat16> d_full_nccl(full), d_full_qsdp(full), d_out_nccl(count),
      d_out_qsdp(count);
  auto* shard = thrust::raw_pointer_cast(d_shard.data());
  auto* grad = thrust::raw_pointer_cast(d_grad.data());

  // --- before: plain NCCL ---
  report.nccl_gather_ms = median_ms(repeats, stream, [&] {
    nccl_ok(ncclAllGather(shard, thrust::raw_pointer_cast(d_full_nccl.data()), count, ncclBfloat16,
                          comm, stream),
            "ncclAllGather");
  });
  report.nccl_scatter_ms = median_ms(repeats, stream, [&] {
    nccl_ok(ncclReduceScatter(grad, thrust::raw_pointer_cast(d_out_nccl.data()), count,
                              ncclBfloat16, ncclAvg, comm, stream),
            "ncclReduceScatter");
  });

  // --- after: qsdp over the same communicator ---
  qsdp::nccl_communicator qcomm(comm);
  qsdp::random_shift<8> weights;
  qsdp::stochastic<8> grads;
  report.qsdp_gather_ms = median_ms(repeats, stream, [&] {
    qsdp::all_gather(qcomm, weights, shard, thrust::raw_pointer_cast(d_full_qsdp.data()), count,
                     stream);
  });
  report.qsdp_scatter_ms = median_ms(repeats, stream, [&] {
    qsdp::reduce_scatter(qcomm, grads, grad, thrust::raw_pointer_cast(d_out_qsdp.data()), count,
                         qsdp::reduce_op::avg, stream);
  });
  cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  qcomm.check_async_error();

  report.packet_bytes = qsdp::compressed_size<__nv_bfloat16>(weights, count);
  report.gather_error = relative_l2(thrust::host_vector<__nv_bfloat16>(d_full_qsdp),
                                    thrust::host_vector<__nv_bfloat16>(d_full_nccl));
  report.scatter_error = relative_l2(thrust::host_vector<__nv_bfloat16>(d_out_qsdp),
                                     thrust::host_vector<__nv_bfloat16>(d_out_nccl));
  cuda_ok(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t count = std::size_t{1} << 26;
  int repeats = 5;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--count") == 0)
      count = std::strtoull(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--repeats") == 0)
      repeats = std::max(1, std::atoi(argv[++i]));
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts(
        "qsdp_nccl_drop_in: no usable CUDA device here (no GPU or no driver); skipped. "
        "The host path: scripts/demo.sh");
    return 77;
  }
  try {
    std::vector<ncclComm_t> comms(static_cast<std::size_t>(devices));
    std::vector<int> ids(static_cast<std::size_t>(devices));
    for (int d = 0; d < devices; ++d) ids[static_cast<std::size_t>(d)] = d;
    nccl_ok(ncclCommInitAll(comms.data(), devices, ids.data()), "ncclCommInitAll");
    std::vector<rank_report> reports(static_cast<std::size_t>(devices));
    std::vector<std::thread> threads;
    std::vector<std::string> failures(static_cast<std::size_t>(devices));
    for (int d = 0; d < devices; ++d)
      threads.emplace_back([&, d] {
        try {
          run_rank(d, comms[static_cast<std::size_t>(d)], devices, count, repeats,
                   reports[static_cast<std::size_t>(d)]);
        } catch (const std::exception& e) {
          failures[static_cast<std::size_t>(d)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (ncclComm_t c : comms) (void)ncclCommDestroy(c);
    for (int d = 0; d < devices; ++d)
      if (!failures[static_cast<std::size_t>(d)].empty()) {
        std::fprintf(stderr, "rank %d failed: %s\n", d,
                     failures[static_cast<std::size_t>(d)].c_str());
        return 1;
      }
    const rank_report& r = reports[0];
    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    std::printf("qsdp NCCL drop-in: %d rank(s) on %s, %zu bf16 values per rank, median of %d\n",
                devices, prop.name, count, repeats);
    std::printf("  bytes per rank on the wire: %zu instead of %zu (%.2fx less)\n", r.packet_bytes,
                count * 2, static_cast<double>(count * 2) / static_cast<double>(r.packet_bytes));
    std::printf(
        "  all_gather     NCCL %8.3f ms   qsdp random_shift<8> %8.3f ms   rel. L2 error %.2e\n",
        r.nccl_gather_ms, r.qsdp_gather_ms, r.gather_error);
    std::printf(
        "  reduce_scatter NCCL %8.3f ms   qsdp stochastic<8>   %8.3f ms   rel. L2 error %.2e\n",
        r.nccl_scatter_ms, r.qsdp_scatter_ms, r.scatter_error);
    if (devices == 1)
      std::puts(
          "  (one GPU: NCCL moves nothing over a network here, so the times show the codec's cost, "
          "not the gain, which comes where the links between nodes are slow)");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qsdp_nccl_drop_in: %s\n", e.what());
    return 1;
  }
}
