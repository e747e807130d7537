// SPDX-License-Identifier: Apache-2.0
// A user-written policy for the GPU tests: the plug-in point must work on the device as written,
// with only QSDP_HOST_DEVICE on its members.
#pragma once

#include <cmath>
#include <cstdint>

#include <qsdp/quantizers.hpp>

namespace gpu_test {

/// Square-root companding over [-abs_max, abs_max], B bits, round to nearest in the companded
/// domain (finer steps near zero). Only correctly rounded operations (+ - * / sqrt, explicit fma),
/// in double, so host and device agree to the bit; a policy calling log or exp would not (libm and
/// CUDA's math library may differ in the last place).
template <int B>
struct sqrt_law {
  static constexpr int bits = B;
  static constexpr bool randomized = false;
  static constexpr std::uint32_t wire_tag = 0x5351;  // "SQ"
  static constexpr double top = double((1u << B) - 1u);
  std::size_t bucket_size = 512;

  using meta_type = float;
  QSDP_HOST_DEVICE meta_type fit(const qsdp::bucket_stats& s) const { return s.abs_max; }
  QSDP_HOST_DEVICE std::uint32_t encode(float x, const meta_type& abs_max, float) const {
    if (!(abs_max > 0.0f)) return 0;
    const double t = static_cast<double>(x) / static_cast<double>(abs_max);  // [-1, 1]
    const double c = t < 0 ? -sqrt(-t) : sqrt(t);
    const double position = qsdp::detail::fma_d(c + 1.0, 0.5 * top, 0.5);
    return qsdp::detail::floor_nonnegative(qsdp::detail::clamp_d(position, 0.0, top));
  }
  QSDP_HOST_DEVICE float decode(std::uint32_t code, const meta_type& abs_max) const {
    const double c = qsdp::detail::fma_d(static_cast<double>(code) / top, 2.0,
                                         -1.0);  // no a*b+c left to contract
    return static_cast<float>((c < 0 ? -c * c : c * c) * static_cast<double>(abs_max));
  }
};

}  // namespace gpu_test
