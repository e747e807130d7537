// SPDX-License-Identifier: Apache-2.0
// Device codec helpers for symmetric, random_shift, identity and a user-written policy (sqrt_law).
#include "codec_helpers.cuh"
#include "gpu_policies.hpp"

GPU_TEST_CODEC_INSTANCES(qsdp::symmetric<1>)
GPU_TEST_CODEC_INSTANCES(qsdp::symmetric<4>)
GPU_TEST_CODEC_INSTANCES(qsdp::symmetric<8>)
GPU_TEST_CODEC_INSTANCES(qsdp::random_shift<2>)
GPU_TEST_CODEC_INSTANCES(qsdp::random_shift<5>)
GPU_TEST_CODEC_INSTANCES(qsdp::random_shift<8>)
GPU_TEST_CODEC_INSTANCES(qsdp::identity)
GPU_TEST_CODEC_INSTANCES(gpu_test::sqrt_law<6>)
