// SPDX-License-Identifier: Apache-2.0
//
// qsdp-bench --backend nccl: the GPU check and --dtype's choice of qsdp_bench_nccl_<type>.cu
// (bench/qsdp_bench_nccl.cuh has the backend).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "qsdp_bench.hpp"

namespace qsdp_bench {

void run_nccl(const options& o, const process_group& group) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0)
    throw std::runtime_error(
        std::string("qsdp-bench --backend nccl: no usable GPU here (cudaGetDeviceCount: ") +
        (e == cudaSuccess ? "0 devices" : cudaGetErrorName(e)) + ")");
#if QSDP_BENCH_DTYPE_FLOAT
  if (o.dtype == "float") return run_nccl_float(o, group, devices);
#endif
#if QSDP_BENCH_DTYPE_BF16
  if (o.dtype == "bf16") return run_nccl_bf16(o, group, devices);
#endif
#if QSDP_BENCH_DTYPE_HALF
  if (o.dtype == "half") return run_nccl_half(o, group, devices);
#endif
  dtype_not_built(o.dtype);
}

}  // namespace qsdp_bench
