// SPDX-License-Identifier: Apache-2.0
// The host codec's loops of qsdp::random_shift, compiled once for all test files
// (codec_instances.hpp).
#include "codec_instances.hpp"

QSDP_TEST_WIDTHS_2_TO_8(QSDP_TEST_DEFINE_LOOPS, qsdp::random_shift)
