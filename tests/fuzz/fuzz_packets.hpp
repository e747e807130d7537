// SPDX-License-Identifier: Apache-2.0
//
// The packet fuzzer's entry points (tests/fuzz/fuzz_packets.cpp describes the input layout), shared
// by the libFuzzer target and the replay program that runs the corpus in the ordinary test suite.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qsdp_fuzz {

/// Runs one input; aborts with a message when a property breaks. Always returns 0 (libFuzzer's
/// convention for "input processed").
int run_one_input(const std::uint8_t* data, std::size_t size);

/// Valid inputs for every policy, element type and operation: the seed corpus.
std::vector<std::vector<std::uint8_t>> seed_inputs();

}  // namespace qsdp_fuzz
