// SPDX-License-Identifier: Apache-2.0
//
// qsdp::mxfp8 and qsdp::mxfp6 (both element formats, both roundings), plain and under
// qsdp::hadamard, on the device for qsdp.torch's CUDA tensors (families.hpp's mx_policies, in a
// translation unit of their own).
#include "device_policy_impl.cuh"

namespace qsdp::python {

std::unique_ptr<device_policy> make_device_mx(const std::string& name, std::size_t bucket_size,
                                              std::uint64_t seed, bool rotated) {
  return make_by_name<device_policy_impl>(mx_policies{}, name, bucket_size, seed, rotated);
}

}  // namespace qsdp::python
