// SPDX-License-Identifier: Apache-2.0
//
// The packet fuzzer's entry points (tests/fuzz/fuzz_properties.hpp describes the input layout),
// shared by the libFuzzer target and the replay program that runs the corpus in the ordinary test
// suite.
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

// The policies' runs, in two translation units (fuzz_policies_first.cpp: policies 0 ..
// first_half_end - 1 of fuzz_properties.hpp's policy_list; fuzz_policies_second.cpp the rest).
inline constexpr std::size_t policy_list_length = 38;
inline constexpr std::size_t first_half_end = 22;
void run_first_policies(std::size_t index, const std::uint8_t* data, std::size_t size);
void run_second_policies(std::size_t index, const std::uint8_t* data, std::size_t size);
void seed_first_policies(std::vector<std::vector<std::uint8_t>>& seeds);
void seed_second_policies(std::vector<std::vector<std::uint8_t>>& seeds);

}  // namespace qsdp_fuzz
