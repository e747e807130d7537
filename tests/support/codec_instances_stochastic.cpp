// SPDX-License-Identifier: Apache-2.0
// The host codec's loops of qsdp::stochastic, compiled once for all test files
// (codec_instances.hpp).
#include "codec_instances.hpp"

QSDP_TEST_WIDTHS_1_TO_8(QSDP_TEST_DEFINE_LOOPS, qsdp::stochastic)
