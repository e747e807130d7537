// SPDX-License-Identifier: Apache-2.0
// qsdp-bench's NCCL backend for bf16 values (qsdp_bench_nccl.cuh).
#include "qsdp_bench_nccl.cuh"

void qsdp_bench::run_nccl_bf16(const options& o, const process_group& group, int devices) {
  run_typed<__nv_bfloat16>(o, group, devices);
}
