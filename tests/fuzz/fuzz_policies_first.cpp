// SPDX-License-Identifier: Apache-2.0
//
// The first half of the fuzzer's policies (tests/fuzz/fuzz_properties.hpp); the second half is
// fuzz_policies_second.cpp, so that the two compile side by side.
#include "fuzz_properties.hpp"

namespace qsdp_fuzz {

void run_first_policies(std::size_t index, const std::uint8_t* data, std::size_t size) {
  run_policies<0, first_half_end>(index, data, size);
}

void seed_first_policies(std::vector<std::vector<std::uint8_t>>& seeds) {
  seed_policies<0, first_half_end>(seeds);
}

}  // namespace qsdp_fuzz
