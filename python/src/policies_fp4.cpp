// SPDX-License-Identifier: Apache-2.0
//
// qsdp::mxfp4 and qsdp::nvfp4 (both roundings), plain and under qsdp::hadamard, for qsdp.torch
// (families.hpp's fp4_policies, in a translation unit of their own).
#include "policy_impl.hpp"

namespace qsdp::python {

std::unique_ptr<policy> make_fp4(const std::string& name, std::size_t bucket_size,
                                 std::uint64_t seed, bool rotated) {
  return make_by_name<policy_impl>(fp4_policies{}, name, bucket_size, seed, rotated);
}

}  // namespace qsdp::python
