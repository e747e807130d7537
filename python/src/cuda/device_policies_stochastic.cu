// SPDX-License-Identifier: Apache-2.0
//
// qsdp::stochastic<bits> and qsdp::hadamard<qsdp::stochastic<bits>> on the device, for qsdp.torch's
// CUDA tensors (one family per file, so that the build runs the families side by side).
#include "device_policy_impl.cuh"

namespace qsdp::python {

std::unique_ptr<device_policy> make_device_stochastic(int bits, std::size_t bucket_size,
                                                      std::uint64_t seed, bool rotated) {
  return make_family<device_policy_impl, qsdp::stochastic, 1>("stochastic", bits, bucket_size, seed,
                                                              rotated);
}

}  // namespace qsdp::python
