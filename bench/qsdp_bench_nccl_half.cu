// SPDX-License-Identifier: Apache-2.0
// qsdp-bench's NCCL backend for half values (qsdp_bench_nccl.cuh).
#include "qsdp_bench_nccl.cuh"

void qsdp_bench::run_nccl_half(const options& o, const process_group& group, int devices) {
  run_typed<__half>(o, group, devices);
}
