// SPDX-License-Identifier: Apache-2.0
//
// The ZeRO-1 step of examples/ports/zero1_llmc.cpp on device buffers, as llm.c runs it on GPUs:
// GPT-2's tensors (12 layers of width 768 by default: qkv, attention projection, MLP up and down,
// with their biases) in one bf16 parameter buffer and one bf16 gradient buffer, each layer's
// gradients reduce-scattered in place in one qsdp group on the rank's stream as soon as they are
// produced (last layer first), AdamW kernels on each rank's fp32 master slices, and the updated
// slices all-gathered in place in one group. The ranks are run_local_cuda's (in-process ranks
// sharing one GPU); with NCCL the same calls take a qsdp::nccl_communicator.
//
// The objective is synthetic, so that the program measures the step and not a model: rank r pulls
// the weights towards its own target (a common target plus rank noise), so the ranks' average
// gradient pulls them to the common target, and the loss is the mean squared distance to it. The
// uncompressed run of the same seed (qsdp::identity) runs first; the program prints both runs'
// losses, the bytes each rank sent and the median step time. Without a usable GPU it exits with 77
// (reported as skipped by ctest).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <qsdp/collectives.hpp>
#include <qsdp/cuda_local.hpp>

#include "adamw.hpp"
#include "zero1.hpp"

namespace {

constexpr const char* program = "qsdp_zero1_llmc_cuda";

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(program) + ": " + what + ": " + cudaGetErrorString(e));
}

struct options {
  int ranks = 2, layers = 12, width = 768, bits = 8;
  long steps = 50, eval_every = 10;
};

/// A value of the common target, and rank r's noise around it: fixed functions of the index.
__device__ float hash_unit(std::uint64_t i, std::uint64_t salt) {
  std::uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (salt * 0xBF58476D1CE4E5B9ull);
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<float>(x >> 40) / 16777216.0f - 0.5f;  // [-0.5, 0.5)
}
__device__ float target_of(std::uint64_t i) { return 0.1f * hash_unit(i, 1); }

/// grads = bf16(params - (target + rank noise)) over [first, first + n).
__global__ void gradient_kernel(const __nv_bfloat16* params, __nv_bfloat16* grads,
                                std::size_t first, std::size_t n, int rank) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t at = first + i;
    const float want = target_of(at) + 0.05f * hash_unit(at, 100 + static_cast<unsigned>(rank));
    grads[at] = __float2bfloat16(__bfloat162float(params[at]) - want);
  }
}

/// AdamW on one tensor's slice: master[k + i] from grads[at + i], then params[at + i] in bf16.
__global__ void adamw_kernel(ports::adamw opt, bool decay, float* master, float* m, float* v,
                             const __nv_bfloat16* grads, __nv_bfloat16* params, std::size_t at,
                             std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    opt.update(master[i], m[i], v[i], __bfloat162float(grads[at + i]), decay);
    params[at + i] = __float2bfloat16(master[i]);
  }
}

/// sum += 0.5 (params - target)^2 over [0, n), in double.
__global__ void loss_kernel(const __nv_bfloat16* params, std::size_t n, double* sum) {
  double local = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const double d = __bfloat162float(params[i]) - target_of(i);
    local += 0.5 * d * d;
  }
  atomicAdd(sum, local);
}

unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 4096));
}

struct tensor {
  std::size_t offset, size, padded;
  int layer;
  bool decay;
};

std::vector<tensor> gpt2_tensors(const options& o) {
  const auto w = static_cast<std::size_t>(o.width), r = static_cast<std::size_t>(o.ranks);
  std::vector<tensor> out;
  std::size_t offset = 0;
  auto add = [&](int layer, std::size_t n, bool decay) {
    const std::size_t padded = (n + r - 1) / r * r;
    out.push_back({offset, n, padded, layer, decay});
    offset += padded;
  };
  for (int l = 0; l < o.layers; ++l) {
    add(l, w * 3 * w, true);  // qkv weight
    add(l, 3 * w, false);
    add(l, w * w, true);  // attention projection
    add(l, w, false);
    add(l, w * 4 * w, true);  // MLP up
    add(l, 4 * w, false);
    add(l, 4 * w * w, true);  // MLP down
    add(l, w, false);
  }
  return out;
}

struct run_result {
  std::vector<double> losses;  // at the evaluations
  double wire = 0, values = 0, step_ms = 0;
};

template <class Weights, class Grads>
run_result train(const options& o, const Weights& weights_policy, const Grads& grads_policy) {
  const std::vector<tensor> tensors = gpt2_tensors(o);
  std::vector<ports::shard_span> spans;
  for (const auto& t : tensors) spans.push_back({t.offset, t.padded, t.layer});
  const std::size_t total = tensors.back().offset + tensors.back().padded;
  run_result result;
  std::mutex guard;
  qsdp::run_local_cuda(o.ranks, [&](qsdp::cuda_local_communicator& comm) {
    const Weights wq = weights_policy;
    const Grads gq = grads_policy;
    const cudaStream_t stream = comm.stream();
    const auto rank = static_cast<std::size_t>(comm.rank());
    const auto world = static_cast<std::size_t>(comm.size());
    const std::size_t shard_total = ports::shard_values(spans, comm.size());
    __nv_bfloat16 *params = nullptr, *grads = nullptr;
    float *master = nullptr, *m = nullptr, *v = nullptr;
    double* loss = nullptr;
    cuda_ok(cudaMalloc(&params, total * sizeof(__nv_bfloat16)), "cudaMalloc");
    cuda_ok(cudaMalloc(&grads, total * sizeof(__nv_bfloat16)), "cudaMalloc");
    cuda_ok(cudaMalloc(&master, 3 * shard_total * sizeof(float)), "cudaMalloc");
    cuda_ok(cudaMalloc(&loss, sizeof(double)), "cudaMalloc");
    m = master + shard_total;
    v = m + shard_total;
    cuda_ok(cudaMemsetAsync(params, 0, total * sizeof(__nv_bfloat16), stream), "memset");
    cuda_ok(cudaMemsetAsync(grads, 0, total * sizeof(__nv_bfloat16), stream), "memset");
    cuda_ok(cudaMemsetAsync(master, 0, 3 * shard_total * sizeof(float), stream), "memset");
    std::vector<double> step_ms;
    for (long step = 0; step < o.steps; ++step) {
      cuda_ok(cudaStreamSynchronize(stream), "sync");
      const auto started = std::chrono::steady_clock::now();
      // "Backward": each layer's gradients, last layer first, each reduce-scattered at once.
      for (int l = o.layers - 1; l >= 0; --l) {
        for (const auto& t : tensors)
          if (t.layer == l)
            gradient_kernel<<<blocks_for(t.size), 256, 0, stream>>>(params, grads, t.offset, t.size,
                                                                    comm.rank());
        cuda_ok(cudaGetLastError(), "gradient_kernel");
        ports::reduce_scatter_layer(comm, gq, spans, l, grads, stream);
      }
      const float lr =
          0.01f * (1.0f - 0.9f * static_cast<float>(step) / static_cast<float>(o.steps));
      const ports::adamw opt{.lr = lr, .step = static_cast<int>(step + 1)};
      std::size_t k = 0;
      for (const auto& t : tensors) {
        const std::size_t shard = t.padded / world;
        adamw_kernel<<<blocks_for(shard), 256, 0, stream>>>(
            opt, t.decay, master + k, m + k, v + k, grads, params, t.offset + rank * shard, shard);
        k += shard;
      }
      cuda_ok(cudaGetLastError(), "adamw_kernel");
      ports::all_gather_shards(comm, wq, spans, params, stream);
      cuda_ok(cudaStreamSynchronize(stream), "sync");
      step_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
              .count());
      if ((step + 1) % o.eval_every == 0 || step + 1 == o.steps) {
        cuda_ok(cudaMemsetAsync(loss, 0, sizeof(double), stream), "memset");
        loss_kernel<<<blocks_for(total), 256, 0, stream>>>(params, total, loss);
        double value = 0;
        cuda_ok(cudaMemcpyAsync(&value, loss, sizeof value, cudaMemcpyDeviceToHost, stream),
                "copy");
        cuda_ok(cudaStreamSynchronize(stream), "sync");
        if (rank == 0) result.losses.push_back(value / static_cast<double>(total));
      }
    }
    comm.state().failures.poll(program, "the packet from rank");
    if (rank == 0) {
      std::lock_guard lock(guard);
      std::sort(step_ms.begin(), step_ms.end());
      result.step_ms = step_ms[step_ms.size() / 2];
      for (const auto& t : tensors) {
        const std::size_t shard = t.padded / world;
        result.wire += static_cast<double>(world - 1) *
                       static_cast<double>(qsdp::compressed_size<__nv_bfloat16>(gq, shard) +
                                           qsdp::compressed_size<__nv_bfloat16>(wq, shard));
        result.values += 2.0 * static_cast<double>((world - 1) * shard * 2);
      }
    }
    (void)cudaFree(params);
    (void)cudaFree(grads);
    (void)cudaFree(master);
    (void)cudaFree(loss);
  });
  return result;
}

long number(const std::string& flag, const char* text, long lo, long hi) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > hi)
    throw std::invalid_argument(std::string(program) + ": " + flag + " " + text +
                                ": expected an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    options o;
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--help" || flag == "-h") {
        std::printf(
            "%s: llm.c's ZeRO-1 step on device buffers with qsdp's groups (run_local_cuda)\n"
            "  --ranks N (2)  --layers N (12)  --width N (768)  --bits 8|4 (8)  --steps N (50)\n"
            "  --eval-every N (10)\n",
            program);
        return 0;
      }
      if (i + 1 >= argc)
        throw std::invalid_argument(std::string(program) + ": " + flag + " needs a value");
      const char* v = argv[++i];
      if (flag == "--ranks")
        o.ranks = static_cast<int>(number(flag, v, 1, 16));
      else if (flag == "--layers")
        o.layers = static_cast<int>(number(flag, v, 1, 256));
      else if (flag == "--width")
        o.width = static_cast<int>(number(flag, v, 1, 1 << 14));
      else if (flag == "--bits")
        o.bits = static_cast<int>(number(flag, v, 4, 8));
      else if (flag == "--steps")
        o.steps = number(flag, v, 1, 1000000);
      else if (flag == "--eval-every")
        o.eval_every = number(flag, v, 1, 1000000);
      else
        throw std::invalid_argument(std::string(program) + ": unknown option " + flag);
    }
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::printf("%s: no CUDA device here: skipped\n", program);
      return 77;
    }
    std::printf("%s: %d layers of width %d, %d ranks on one GPU, %ld steps\n", program, o.layers,
                o.width, o.ranks, o.steps);
    const run_result ref = train(o, qsdp::identity{}, qsdp::identity{});
    const run_result run =
        o.bits == 8 ? train(o, qsdp::random_shift<8>{.bucket_size = 1024, .seed = 11},
                            qsdp::stochastic<8>{.bucket_size = 1024, .seed = 12})
                    : train(o, qsdp::random_shift<4>{.bucket_size = 1024, .seed = 11},
                            qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = 256, .seed = 12}});
    std::printf("%8s %14s %14s\n", "eval", "loss", "uncompressed");
    for (std::size_t i = 0; i < run.losses.size(); ++i)
      std::printf("%8zu %14.6g %14.6g\n", i + 1, run.losses[i], ref.losses[i]);
    std::printf(
        "wire: %.1f MiB of %.1f MiB of values per rank and step (%.3f); median step %.2f ms, "
        "uncompressed %.2f ms\n",
        run.wire / 1048576.0, run.values / 1048576.0, run.wire / run.values, run.step_ms,
        ref.step_ms);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
