// SPDX-License-Identifier: Apache-2.0
//
// Checks of shared math that has a device spelling (QSDP_DEVICE_SPELLING): included by the host
// tests (tests/test_quantizers.cpp, host spelling) and by the SIMT emulation's tests
// (tests/simt/test_simt_kernels.cpp, device spelling), so both spellings meet the same checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
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

/// paired_stats16 gives partial_stats::add's statistics for the same 16-bit values (bf16 or half),
/// and paired_abs_max16 their abs_max (as fit_bucket derives it) and finiteness: random patterns
/// (every exponent, NaN and inf included), one sign, ties, and -0 / +0.
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
    qsdp::detail::paired_abs_max16<Bf16> top;
    partial_stats scalar;
    for (std::size_t i = 0; i < bits.size(); i += 4) {
      const std::uint32_t a = bits[i] | static_cast<std::uint32_t>(bits[i + 1]) << 16;
      const std::uint32_t b = bits[i + 2] | static_cast<std::uint32_t>(bits[i + 3]) << 16;
      paired.add(a, b);
      top.add(a, b);
      for (std::size_t k = i; k < i + 4; ++k) scalar.add(to_float(bits[k]));
    }
    const partial_stats magnitudes = top.stats();
    const auto abs_max = [](const partial_stats& p) {
      return -p.min() < p.max() ? p.max() : -p.min();
    };
    if (magnitudes.finite() != scalar.finite() ||
        (scalar.finite() && qsdp::detail::bit_cast<std::uint32_t>(abs_max(magnitudes)) !=
                                qsdp::detail::bit_cast<std::uint32_t>(abs_max(scalar)))) {
      FAIL_CHECK("trial " << trial << ": paired_abs_max16 abs_max " << abs_max(magnitudes)
                          << " finite " << magnitudes.finite() << ", scalar " << abs_max(scalar)
                          << " finite " << scalar.finite());
      break;
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

/// A block-scaled policy's encode in integer steps (the kernels' path) is its encode, bit for bit:
/// encode_drawn of a stochastic one with the half's draw, encode_nearest of a round-to-nearest
/// one. Random finite floats of every exponent under every scale that fits them (MX: at or above
/// the exponent its fit gives, so round to nearest saturates too; NVFP4, which saturates: any of
/// its block scales), and values placed exactly on, just below and just above a draw's threshold
/// (round to nearest: the tie) between two neighbours, the one place two spellings could part, in
/// every binade, subnormal elements and the largest finite value included.
template <class Q>
void check_encode_in_steps_is_encode(Q q) {
  using namespace qsdp::detail;
  std::mt19937_64 rng(2026120700 + Q::bits);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  std::size_t checked = 0, mismatches = 0;
  const auto compare = [&](float x, std::uint8_t m, std::uint32_t half) {
    if (!std::isfinite(x)) return;
    ++checked;
    std::uint32_t want, got;
    if constexpr (Q::randomized) {
      want = q.encode(x, m, uniform_from_half(half));
      got = q.encode_drawn(x, m, half);
    } else {
      want = q.encode(x, m, 0.0f);
      got = q.encode_nearest(x, m);
    }
    if (want != got && ++mismatches <= 5)
      FAIL_CHECK(std::string(Q::name) << ": x " << x << " meta " << int{m} << " half " << half
                                      << ": encode " << want << ", in steps " << got);
  };
  const auto as_float = [](std::uint32_t b) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    return f;
  };
  // Every E8M0 byte but NaN's; NVFP4: the E4M3 block scales its fit gives, 2^-6 (0x08) .. 448.
  const bool e4m3_scales = tensor_scaled<Q>();
  const auto any_meta = [&] {
    const std::uint32_t r = any_bits(rng);
    return static_cast<std::uint8_t>(e4m3_scales ? 0x08 + r % (0x7F - 0x08) : r % 255);
  };
  for (int trial = 0; trial < 400000; ++trial) {
    const float x = as_float(any_bits(rng));
    std::uint8_t m = any_meta();
    if constexpr (requires { typename Q::element_format; }) {  // at or above the fit's exponent
      using F = typename Q::element_format;
      const float a = std::fabs(x);
      const int fit =
          (Q::randomized ? mx_ceil_exponent<F>(a) : mx_floor_exponent<F>(a)) + e8m0_bias;
      m = static_cast<std::uint8_t>(std::min(254, fit + static_cast<int>(any_bits(rng) % 4)));
    }
    compare(x, m, any_bits(rng) & 0xFFFFu);
  }
  if constexpr (requires { typename Q::element_format; }) {
    using F = typename Q::element_format;
    constexpr std::uint32_t max_code = F::max_code;
    for (int trial = 0; trial < 200000; ++trial) {
      // Code c's value and the next: y = value + gap * u sits exactly on the draw u of half k.
      const std::uint32_t c = any_bits(rng) % max_code;
      const float low = minifloat_value<F>(c), high = minifloat_value<F>(c + 1);
      const std::uint32_t k = any_bits(rng) & 0xFFFFu;
      const float y = low + (high - low) * (Q::randomized ? uniform_from_half(k) : 0.5f);
      const std::uint8_t m = any_meta();
      const float to_x = 1.0f / mx_element_scale(int{m} - e8m0_bias);
      std::uint32_t bits;
      std::memcpy(&bits, &y, sizeof bits);
      for (const std::uint32_t b : {bits - 1, bits, bits + 1}) {
        const float x = as_float(b) * to_x * (trial % 2 ? -1.0f : 1.0f);
        for (const std::uint32_t h : {k == 0 ? 0 : k - 1, k, k == 0xFFFF ? k : k + 1})
          compare(x, m, h);
      }
      compare(minifloat_value<F>(max_code) * to_x, m, k);  // the largest finite value
    }
  }
  INFO(checked << " codes compared");
  CHECK(mismatches == 0);
  CHECK(checked > 390000);
}

/// check_encode_in_steps_is_encode for every stochastic block-scaled policy (encode_drawn, which
/// has a device spelling of its own), NVFP4 at three tensor scales.
inline void check_encode_drawn_of_every_policy() {
  using qsdp::rounding;
  check_encode_in_steps_is_encode(qsdp::mxfp8<qsdp::e4m3, rounding::stochastic>{});
  check_encode_in_steps_is_encode(qsdp::mxfp8<qsdp::e5m2, rounding::stochastic>{});
  check_encode_in_steps_is_encode(qsdp::mxfp6<qsdp::e3m2, rounding::stochastic>{});
  check_encode_in_steps_is_encode(qsdp::mxfp6<qsdp::e2m3, rounding::stochastic>{});
  check_encode_in_steps_is_encode(qsdp::mxfp4<rounding::stochastic>{});
  check_encode_in_steps_is_encode(qsdp::nvfp4<rounding::stochastic>{});
  check_encode_in_steps_is_encode(qsdp::nvfp4<rounding::stochastic>{.tensor_meta = 0x1p-100f});
  check_encode_in_steps_is_encode(qsdp::nvfp4<rounding::stochastic>{.tensor_meta = 3.7e30f});
}

/// check_encode_in_steps_is_encode for every round-to-nearest block-scaled policy
/// (encode_nearest: the same operations on the host and the device), NVFP4 at three tensor scales.
inline void check_encode_nearest_of_every_policy() {
  check_encode_in_steps_is_encode(qsdp::mxfp8<qsdp::e4m3>{});
  check_encode_in_steps_is_encode(qsdp::mxfp8<qsdp::e5m2>{});
  check_encode_in_steps_is_encode(qsdp::mxfp6<qsdp::e3m2>{});
  check_encode_in_steps_is_encode(qsdp::mxfp6<qsdp::e2m3>{});
  check_encode_in_steps_is_encode(qsdp::mxfp4<>{});
  check_encode_in_steps_is_encode(qsdp::nvfp4<>{});
  check_encode_in_steps_is_encode(qsdp::nvfp4<>{.tensor_meta = 0x1p-100f});
  check_encode_in_steps_is_encode(qsdp::nvfp4<>{.tensor_meta = 3.7e30f});
}

/// minifloat_decode (the table on the host, minifloat_value_rescaled on the device) and
/// minifloat_value_rescaled on either are minifloat_value, bit for bit, for every code of every
/// element format (NaN as NaN).
inline void check_minifloat_decode_is_value() {
  using namespace qsdp::detail;
  std::size_t checked = 0;
  const auto same = [](float a, float b) {
    return (std::isnan(a) && std::isnan(b)) ||
           bit_cast<std::uint32_t>(a) == bit_cast<std::uint32_t>(b);
  };
  const auto check_format = [&](auto format) {
    using F = decltype(format);
    constexpr std::uint32_t codes = 1u << (1 + F::exponent_bits + F::mantissa_bits);
    for (std::uint32_t c = 0; c < codes; ++c) {
      const float want = minifloat_value<F>(c);
      INFO(F::name << " code " << c);
      CHECK(same(minifloat_decode<F>(c), want));
      CHECK(same(minifloat_value_rescaled<F>(c), want));
      ++checked;
    }
  };
  check_format(qsdp::e4m3{});
  check_format(qsdp::e5m2{});
  check_format(qsdp::e3m2{});
  check_format(qsdp::e2m3{});
  check_format(qsdp::e2m1{});
  CHECK(checked == 256 + 256 + 64 + 64 + 16);
}

/// packed_scaled_bits of every code position of random words (neighbours included) is the float
/// element * 2^(bias - 127): rescaled by scaled_bits_unit it is minifloat_value, wherever the code
/// is no NaN or infinity code; and packed_special_codes tells exactly whether a span holds one.
inline void check_packed_element_bits() {
  using namespace qsdp::detail;
  std::mt19937 rng(31);
  std::size_t checked = 0, spans_with_special = 0, mismatches = 0;
  const auto check_format = [&](auto format) {
    using F = decltype(format);
    constexpr unsigned bits = 1 + F::exponent_bits + F::mantissa_bits;
    constexpr std::uint32_t magnitude_mask = (1u << (bits - 1)) - 1u;
    for (int trial = 0; trial < 4000; ++trial) {
      std::uint32_t words[bits];
      for (auto& w : words) w = static_cast<std::uint32_t>(rng());
      if (trial % 2 == 0)  // mostly finite codes: clear the top exponent bit of each magnitude
        for (auto& w : words)
          for (unsigned shift = 0; shift < 32; shift += bits) w &= ~(1u << (shift + bits - 2));
      bool special = false;
      for (unsigned k = 0; k < 32; ++k) {
        const std::uint32_t word = words[k * bits / 32];
        const unsigned shift = k * bits % 32;
        const std::uint32_t code = (word >> shift) & ((1u << bits) - 1u);
        const float value = minifloat_value<F>(code);
        const bool finite = std::isfinite(value);
        special = special || !finite;
        const std::uint32_t in_place = packed_scaled_bits<F>(word, shift);
        const std::uint32_t alone = packed_scaled_bits<F>(code, 0);
        const float rescaled = bit_cast<float>(in_place) * scaled_bits_unit<F>;
        const bool wrong =
            (finite && bit_cast<std::uint32_t>(rescaled) != bit_cast<std::uint32_t>(value)) ||
            in_place != alone ||
            ((alone & 0x7FFFFFFFu) >> (23 - F::mantissa_bits)) != (code & magnitude_mask);
        if (wrong && ++mismatches <= 5)
          FAIL_CHECK(F::name << " word " << word << " shift " << shift << ": bits " << in_place);
        ++checked;
      }
      CHECK(packed_special_codes<F>(words) == special);
      spans_with_special += special;
    }
  };
  check_format(qsdp::e4m3{});
  check_format(qsdp::e5m2{});
  check_format(qsdp::e2m1{});
  CHECK(mismatches == 0);
  CHECK(checked == 3 * 4000 * 32);
  CHECK(spans_with_special > 1000);  // both answers of packed_special_codes are reached
  CHECK(spans_with_special < 8000);
}

}  // namespace qsdp_test
