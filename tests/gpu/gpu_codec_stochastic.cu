// SPDX-License-Identifier: Apache-2.0
// Device codec helpers for stochastic<B>, every bit width.
#include "codec_helpers.cuh"

GPU_TEST_CODEC_INSTANCES(qsdp::stochastic<1>)
GPU_TEST_CODEC_INSTANCES(qsdp::stochastic<2>)
GPU_TEST_CODEC_INSTANCES(qsdp::stochastic<3>)
GPU_TEST_CODEC_INSTANCES(qsdp::stochastic<4>)
GPU_TEST_CODEC_INSTANCES(qsdp::stochastic<5>)
GPU_TEST_CODEC_INSTANCES(qsdp::stochastic<6>)
GPU_TEST_CODEC_INSTANCES(qsdp::stochastic<7>)
GPU_TEST_CODEC_INSTANCES(qsdp::stochastic<8>)
