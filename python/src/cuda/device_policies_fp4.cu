// SPDX-License-Identifier: Apache-2.0
//
// qsdp::mxfp4 and qsdp::nvfp4 (both roundings), plain and under qsdp::hadamard, on the device for
// qsdp.torch's CUDA tensors (families.hpp's fp4_policies, in a translation unit of their own).
#include "device_policy_impl.cuh"

namespace qsdp::python {

std::unique_ptr<device_policy> make_device_fp4(const std::string& name, std::size_t bucket_size,
                                               std::uint64_t seed, bool rotated) {
  return make_by_name<device_policy_impl>(fp4_policies{}, name, bucket_size, seed, rotated);
}

}  // namespace qsdp::python
