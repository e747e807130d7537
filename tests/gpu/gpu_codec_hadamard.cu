// SPDX-License-Identifier: Apache-2.0
// Device codec helpers for qsdp::hadamard<Inner> (the rotated kernels, hadamard_kernels.cuh).
#include "codec_helpers.cuh"

GPU_TEST_CODEC_INSTANCES(qsdp::hadamard<qsdp::stochastic<4>>)
GPU_TEST_CODEC_INSTANCES(qsdp::hadamard<qsdp::random_shift<2>>)
