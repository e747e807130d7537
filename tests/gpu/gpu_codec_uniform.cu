// SPDX-License-Identifier: Apache-2.0
// Device codec helpers for uniform<B>, every bit width (split from the other policies so that the
// kernels compile in parallel).
#include "codec_helpers.cuh"

GPU_TEST_CODEC_INSTANCES(qsdp::uniform<1>)
GPU_TEST_CODEC_INSTANCES(qsdp::uniform<2>)
GPU_TEST_CODEC_INSTANCES(qsdp::uniform<3>)
GPU_TEST_CODEC_INSTANCES(qsdp::uniform<4>)
GPU_TEST_CODEC_INSTANCES(qsdp::uniform<5>)
GPU_TEST_CODEC_INSTANCES(qsdp::uniform<6>)
GPU_TEST_CODEC_INSTANCES(qsdp::uniform<7>)
GPU_TEST_CODEC_INSTANCES(qsdp::uniform<8>)
