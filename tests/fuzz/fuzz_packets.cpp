// SPDX-License-Identifier: Apache-2.0
//
// The packet fuzzer's entry (tests/fuzz/fuzz_properties.hpp holds the properties and describes the
// input layout): byte 0 picks the policy, whose run lives in fuzz_policies_first.cpp or
// fuzz_policies_second.cpp.
#include "fuzz_packets.hpp"

namespace qsdp_fuzz {

int run_one_input(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t prefix_bytes = 10;  // fuzz_properties.hpp's layout
  if (size < prefix_bytes) return 0;
  const std::size_t index = data[0] % policy_list_length;
  if (index < first_half_end)
    run_first_policies(index, data, size);
  else
    run_second_policies(index, data, size);
  return 0;
}

std::vector<std::vector<std::uint8_t>> seed_inputs() {
  std::vector<std::vector<std::uint8_t>> seeds;
  seed_first_policies(seeds);
  seed_second_policies(seeds);
  return seeds;
}

}  // namespace qsdp_fuzz
