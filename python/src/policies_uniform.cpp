// SPDX-License-Identifier: Apache-2.0
//
// qsdp::uniform<bits> and qsdp::hadamard<qsdp::uniform<bits>> for qsdp.torch (one family per file,
// so that the build runs the families side by side).
#include "policy_impl.hpp"

namespace qsdp::python {

std::unique_ptr<policy> make_uniform(int bits, std::size_t bucket_size, std::uint64_t seed,
                                     bool rotated) {
  return make_family<policy_impl, qsdp::uniform, 1>("uniform", bits, bucket_size, seed, rotated);
}

}  // namespace qsdp::python
