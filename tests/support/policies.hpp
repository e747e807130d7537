// SPDX-License-Identifier: Apache-2.0
//
// User-written policies the tests and the fuzzer drive through the codec: a deterministic one with
// a non-trivial decode and a wire tag, and a randomized one with the largest metadata allowed (16
// bytes). Both stay well defined on any metadata a damaged packet may carry (NaN, inf, negative),
// since the fuzzer decodes such packets with them.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include <qsdp/quantizers.hpp>

namespace qsdp_test {

/// Sign + 3-bit exponent relative to the bucket's abs-max: values snap to abs_max * 2^-k, k = 0..6,
/// or 0.
struct power_of_two_quantizer {
  static constexpr int bits = 4;
  static constexpr bool randomized = false;
  static constexpr std::uint32_t wire_tag =
      0x506f7732;  // "Pow2": tells it apart from other user types
  std::size_t bucket_size = 128;
  using meta_type = float;
  QSDP_HOST_DEVICE meta_type fit(const qsdp::bucket_stats& s) const { return s.abs_max; }
  QSDP_HOST_DEVICE std::uint32_t encode(float x, const meta_type& m, float) const {
    if (!(m > 0.0f) || x == 0.0f) return 0;
    const double ratio = std::abs(double(x)) / m;  // (0, 1] for a value of the bucket
    const double k = std::round(-std::log2(ratio));
    if (!(k <= 6.0)) return 0;
    const auto step = static_cast<std::uint32_t>(k < 0.0 ? 0.0 : k);
    return (x < 0 ? 8u : 0u) | (step + 1);
  }
  QSDP_HOST_DEVICE float decode(std::uint32_t code, const meta_type& m) const {
    if ((code & 7u) == 0) return 0.0f;
    const float magnitude = std::ldexp(m, -static_cast<int>((code & 7u) - 1));
    return code & 8u ? -magnitude : magnitude;
  }
};

/// A randomized user policy: 1-bit stochastic sign with the bucket's abs-max, unbiased, with
/// 16-byte metadata (the largest allowed).
struct stochastic_sign {
  static constexpr int bits = 1;
  static constexpr bool randomized = true;
  std::size_t bucket_size = 64;
  std::uint64_t seed = 5;
  qsdp::call_counter calls{};
  struct meta_type {
    float magnitude, unused[3];
  };
  QSDP_HOST_DEVICE meta_type fit(const qsdp::bucket_stats& s) const { return {s.abs_max, {}}; }
  QSDP_HOST_DEVICE std::uint32_t encode(float x, const meta_type& m, float u) const {
    const float p_up = m.magnitude > 0 ? (x / m.magnitude + 1) / 2 : 0.5f;  // P(+m) so that E = x
    return u < p_up ? 1u : 0u;
  }
  QSDP_HOST_DEVICE float decode(std::uint32_t code, const meta_type& m) const {
    return code ? m.magnitude : -m.magnitude;
  }
};

}  // namespace qsdp_test

namespace qsdp_test {

/// Every member a user policy needs but `bits`: the compile-fail tests add or break one member at a
/// time on top of it, so each shows one diagnostic.
struct policy_without_bits {
  static constexpr bool randomized = false;
  std::size_t bucket_size = 64;
  using meta_type = float;
  meta_type fit(const qsdp::bucket_stats& s) const { return s.abs_max; }
  std::uint32_t encode(float, const meta_type&, float) const { return 0; }
  float decode(std::uint32_t, const meta_type&) const { return 0; }
};

}  // namespace qsdp_test
