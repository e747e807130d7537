// SPDX-License-Identifier: Apache-2.0
// libFuzzer's entry point for the packet fuzzer (built only with clang -fsanitize=fuzzer).
#include <cstddef>
#include <cstdint>

#include "fuzz_packets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return qsdp_fuzz::run_one_input(data, size);
}
