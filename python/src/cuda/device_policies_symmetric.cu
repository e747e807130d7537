// SPDX-License-Identifier: Apache-2.0
//
// qsdp::symmetric<bits> and qsdp::hadamard<qsdp::symmetric<bits>> on the device, for qsdp.torch's
// CUDA tensors (one family per file, so that the build runs the families side by side).
#include "device_policy_impl.cuh"

namespace qsdp::python {

std::unique_ptr<device_policy> make_device_symmetric(int bits, std::size_t bucket_size,
                                                     std::uint64_t seed, bool rotated) {
  return make_family<device_policy_impl, qsdp::symmetric, 1>("symmetric", bits, bucket_size, seed,
                                                             rotated);
}

}  // namespace qsdp::python
