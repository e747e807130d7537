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
  if (o.dtype == "float")
    run_nccl_float(o, group, devices);
  else if (o.dtype == "bf16")
    run_nccl_bf16(o, group, devices);
  else
    run_nccl_half(o, group, devices);
}

}  // namespace qsdp_bench
