// SPDX-License-Identifier: Apache-2.0
//
// Checks of shared math that has a device spelling (QSDP_DEVICE_SPELLING): included by the host
// tests (tests/test_quantizers.cpp, host spelling) and by the SIMT emulation's tests
// (tests/simt/test_simt_kernels.cpp, device spelling), so both spellings meet the same checks.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <qsdp/codec.hpp>

namespace qsdp_test {

inline std::uint64_t double_bits(double d) {
  std::uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

/// detail::quotient(x, d) is x / d rounded once, bit for bit, for every divisor a built-in grid
/// uses and x a float or the difference of two floats (its documented domain), at every exponent;
/// -0, the infinities and NaN included.
inline void check_quotient_is_the_division() {
  std::mt19937_64 rng(20261201);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  const auto random_float = [&] {
    float f;
    const std::uint32_t b = any_bits(rng);
    std::memcpy(&f, &b, sizeof f);
    return f;
  };
  // uniform/stochastic levels 2^B - 1, random_shift intervals 2^B - 2, symmetric centers.
  const double divisors[] = {1, 3, 7, 15, 31, 63, 127, 255, 2, 6, 14, 30, 62, 126, 254, 0.5};
  const double specials[] = {0.0,
                             -0.0,
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN(),
                             0x1p-149,
                             -0x1p-149,
                             2.0 * 3.40282347e38,
                             -2.0 * 3.40282347e38};
  std::size_t checked = 0, mismatches = 0;
  for (const double d : divisors) {
    const auto agree = [&](double x) {
      const double want = x / d, got = qsdp::detail::quotient(x, d);
      const bool same = std::isnan(want) ? std::isnan(got) : double_bits(want) == double_bits(got);
      if (!same && ++mismatches <= 5)
        FAIL_CHECK("quotient(" << x << ", " << d << ") = " << got << ", x / d = " << want);
      ++checked;
    };
    for (const double x : specials) agree(x);
    for (int i = 0; i < 60000; ++i) {
      const float a = random_float(), b = random_float();
      if (std::isnan(a) || std::isnan(b)) continue;
      agree(static_cast<double>(a));
      agree(static_cast<double>(a) - static_cast<double>(b));
      // Near neighbours: a difference with few significant bits, and one of nearby magnitudes.
      agree(static_cast<double>(a) - static_cast<double>(std::nextafter(a, 0.0f)));
      agree(static_cast<double>(a) - static_cast<double>(a * 0.75f));
    }
  }
  INFO(checked << " quotients checked");
  CHECK(mismatches == 0);
  CHECK(checked > 3'000'000);
}

/// paired_stats16 gives partial_stats::add's statistics for the same 16-bit values (bf16 or half):
/// random patterns (every exponent, NaN and inf included), one sign, ties, and -0 / +0.
template <bool Bf16>
void check_paired_stats16() {
  using qsdp::detail::partial_stats;
  std::mt19937 rng(Bf16 ? 16 : 17);
  std::uniform_int_distribution<std::uint32_t> any_bits(0, 0xFFFF);
  const auto to_float = [](std::uint16_t bits) {
    return Bf16 ? qsdp::detail::bf16_bits_to_float(bits) : qsdp::detail::half_bits_to_float(bits);
  };
  const std::uint16_t inf = Bf16 ? 0x7F80 : 0x7C00;
  std::size_t compared = 0;
  for (int trial = 0; trial < 6000; ++trial) {
    const int kind = trial % 6;
    std::vector<std::uint16_t> bits(4 * (1 + trial % 9));  // whole pairs of words
    for (auto& b : bits) {
      b = static_cast<std::uint16_t>(any_bits(rng));
      if (kind == 1) b &= 0x7FFF;  // positive only
      if (kind == 2) b |= 0x8000;  // negative only
      if (kind >= 3 && (b & 0x7FFF) >= inf) b = static_cast<std::uint16_t>(b & 0x83FF);  // finite
      if (kind == 4) b = static_cast<std::uint16_t>(b % 3 == 0 ? 0x8000 : b % 3 == 1 ? 0 : b);
      if (kind == 5) b = bits[0];  // all equal
    }
    qsdp::detail::paired_stats16<Bf16> paired;
    partial_stats scalar;
    for (std::size_t i = 0; i < bits.size(); i += 4) {
      paired.add(bits[i] | static_cast<std::uint32_t>(bits[i + 1]) << 16,
                 bits[i + 2] | static_cast<std::uint32_t>(bits[i + 3]) << 16);
      for (std::size_t k = i; k < i + 4; ++k) scalar.add(to_float(bits[k]));
    }
    const partial_stats got = paired.stats();
    if (got.lo != scalar.lo || got.hi != scalar.hi || got.finite() != scalar.finite()) {
      FAIL_CHECK("trial " << trial << ": paired lo " << got.lo << " hi " << got.hi << ", scalar lo "
                          << scalar.lo << " hi " << scalar.hi);
      break;
    }
    ++compared;
  }
  CHECK(compared == 6000);
  // Nothing added: the empty statistics.
  const partial_stats empty = qsdp::detail::paired_stats16<Bf16>{}.stats();
  CHECK(empty.lo == partial_stats{}.lo);
  CHECK(empty.hi == partial_stats{}.hi);
}

/// packed_fraction_decode is grid_decode, bit for bit, for every code of every random_shift<B> grid
/// where packed_fraction_applies: encoder-drawn fractions (k * 2^-24) over ranges at every
/// exponent, near FLT_MAX and of denormals; and it refuses what it cannot take (fractions off
/// the 2^-24 grid, outside [0, 1) or NaN, grids that reach float's limit), which keep grid_decode.
template <int B>
void check_packed_fraction_decode() {
  using namespace qsdp::detail;
  std::mt19937_64 rng(2026120100 + B);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  const auto random_float = [&] {
    float f;
    std::uint32_t b = any_bits(rng);
    if ((b & 0x7F800000u) == 0x7F800000u) b &= 0xBFFFFFFFu;  // finite
    std::memcpy(&f, &b, sizeof f);
    return f;
  };
  const qsdp::random_shift<B> q;
  std::size_t applied = 0, refused = 0, values = 0, mismatches = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    float lo = random_float(), hi = random_float();
    if (trial % 4 == 1) hi = lo + std::ldexp(static_cast<float>(any_bits(rng) % 1000 + 1), -10);
    if (lo > hi) std::swap(lo, hi);
    if (trial % 8 == 2) lo = -3.0e38f, hi = 3.0e38f;  // reaches FLT_MAX: refused
    if (trial % 8 == 3) lo = hi;                      // no range
    const std::uint32_t k = any_bits(rng) >> 8;       // an encoder's draw
    float shift = uniform_from_bits(k << 8);
    bool hostile = false;
    switch (trial % 16) {
      case 5: shift = 1e-38f, hostile = true; break;  // not a multiple of 2^-24 (vanishes in -1)
      case 6: shift = 0.1f, hostile = true; break;    // 13421773 * 2^-27
      case 7: shift = 1.0f, hostile = true; break;
      case 8: shift = -0.5f, hostile = true; break;
      case 9: shift = std::numeric_limits<float>::quiet_NaN(), hostile = true; break;
      case 11: shift = 1.0f - 0x1p-24f; break;  // the largest draw
      case 10: shift = 0.0f; break;
      default: break;
    }
    const value_grid g = q.value_grid_for({lo, hi, shift});
    std::uint32_t units = 0;
    const bool applies = packed_fraction_applies(g, units);
    if (hostile || trial % 8 == 2) {
      if (applies) FAIL_CHECK("applies to shift " << shift << ", range " << lo << " .. " << hi);
      ++refused;
      continue;
    }
    if (!applies) {
      // Only data near float's limit may be refused.
      if (std::fabs(lo) < 1e36f && std::fabs(hi) < 1e36f)
        FAIL_CHECK("refused shift " << shift << ", range " << lo << " .. " << hi);
      continue;
    }
    ++applied;
    for (std::uint32_t code = 0; code < (1u << B); ++code, ++values) {
      const float want = grid_decode(g, code), got = packed_fraction_decode(g, code << 24 | units);
      std::uint32_t want_bits, got_bits;
      std::memcpy(&want_bits, &want, 4);
      std::memcpy(&got_bits, &got, 4);
      if (want_bits != got_bits && ++mismatches <= 5)
        FAIL_CHECK("code " << code << " of range " << lo << " .. " << hi << ", shift " << shift
                           << ": packed " << got << ", grid_decode " << want);
    }
  }
  CHECK(mismatches == 0);
  CHECK(applied > 1500);
  CHECK(refused > 1000);
  CHECK(values == applied << B);
}

}  // namespace qsdp_test
