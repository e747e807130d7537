// SPDX-License-Identifier: Apache-2.0
//
// qsdp::symmetric<bits> and qsdp::hadamard<qsdp::symmetric<bits>> for qsdp.torch (one family per
// file, so that the build runs the families side by side).
#include "policy_impl.hpp"

namespace qsdp::python {

std::unique_ptr<policy> make_symmetric(int bits, std::size_t bucket_size, std::uint64_t seed,
                                       bool rotated) {
  return make_family<policy_impl, qsdp::symmetric, 1>("symmetric", bits, bucket_size, seed,
                                                      rotated);
}

}  // namespace qsdp::python
