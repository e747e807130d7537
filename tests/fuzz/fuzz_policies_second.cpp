// SPDX-License-Identifier: Apache-2.0
//
// The second half of the fuzzer's policies (tests/fuzz/fuzz_properties.hpp).
#include "fuzz_properties.hpp"

namespace qsdp_fuzz {

void run_second_policies(std::size_t index, const std::uint8_t* data, std::size_t size) {
  run_policies<first_half_end, policy_count>(index, data, size);
}

void seed_second_policies(std::vector<std::vector<std::uint8_t>>& seeds) {
  seed_policies<first_half_end, policy_count>(seeds);
}

}  // namespace qsdp_fuzz
