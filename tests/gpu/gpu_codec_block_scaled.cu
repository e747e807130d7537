// SPDX-License-Identifier: Apache-2.0
// Device codec helpers for the block-scaled float policies: MX and NVFP4 (whose tensor record the
// device writes before the blocks).
#include "codec_helpers.cuh"

GPU_TEST_CODEC_INSTANCES(qsdp::mxfp8<qsdp::e4m3>)
GPU_TEST_CODEC_INSTANCES(qsdp::mxfp4<qsdp::rounding::stochastic>)
GPU_TEST_CODEC_INSTANCES(qsdp::nvfp4<>)
GPU_TEST_CODEC_INSTANCES(qsdp::nvfp4<qsdp::rounding::stochastic>)
GPU_TEST_CODEC_INSTANCES(qsdp::hadamard<qsdp::nvfp4<qsdp::rounding::stochastic>>)
