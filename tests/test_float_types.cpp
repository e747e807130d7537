// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <qsdp/detail/float_types.hpp>

using namespace qsdp::detail;

TEST_CASE("half <-> float: every half survives the round trip") {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_bits_to_float(static_cast<std::uint16_t>(h));
    const bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    if (is_nan) {
      REQUIRE(std::isnan(f));
      const std::uint16_t back = float_to_half_bits(f);
      REQUIRE(((back & 0x7C00) == 0x7C00 && (back & 0x3FF) != 0));
    } else {
      REQUIRE(float_to_half_bits(f) == h);
    }
  }
}

TEST_CASE("bf16 <-> float: every bf16 survives the round trip") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_bits_to_float(static_cast<std::uint16_t>(b));
    if (std::isnan(f)) REQUIRE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(f))));
    else REQUIRE(float_to_bf16_bits(f) == b);
  }
}

// A slow but obviously correct reference: the nearest representable value, ties to the even mantissa.
static float round_to_grid(float f, const std::vector<float>& sorted_grid, const std::vector<int>& lsb) {
  auto it = std::lower_bound(sorted_grid.begin(), sorted_grid.end(), f);
  if (it == sorted_grid.begin()) return *it;
  if (it == sorted_grid.end()) return sorted_grid.back();
  const auto hi = it - sorted_grid.begin(), lo = hi - 1;
  const double dlo = double(f) - sorted_grid[lo], dhi = double(sorted_grid[hi]) - f;
  if (dlo < dhi) return sorted_grid[lo];
  if (dhi < dlo) return sorted_grid[hi];
  return lsb[lo] == 0 ? sorted_grid[lo] : sorted_grid[hi];
}

TEST_CASE("float -> half and float -> bf16 round to nearest even, denormals and overflow included") {
  for (int which = 0; which < 2; ++which) {
    // All finite non-negative values of the format, in order, with their mantissa parity.
    std::vector<float> grid;
    std::vector<int> lsb;
    for (std::uint32_t b = 0; b < 0x7C00 || (which == 1 && b < 0x7F80); ++b) {
      grid.push_back(which == 0 ? half_bits_to_float(static_cast<std::uint16_t>(b))
                                : bf16_bits_to_float(static_cast<std::uint16_t>(b)));
      lsb.push_back(b & 1);
    }
    const float largest = grid.back();
    const float overflow_threshold =  // halfway between the largest finite value and the next power
        which == 0 ? 65520.0f : std::bit_cast<float>(0x7F7F8000u);
    std::mt19937 rng(1);
    std::uniform_int_distribution<std::uint32_t> bits(0, 0x7F7FFFFFu);
    for (int i = 0; i < 300000; ++i) {
      float f = std::bit_cast<float>(bits(rng));
      if (i % 3 == 0) f = std::ldexp(f, -std::ilogb(f) + (i % 40) - 25);  // concentrate near 1
      if (!std::isfinite(f)) continue;
      const std::uint16_t out = which == 0 ? float_to_half_bits(f) : float_to_bf16_bits(f);
      const std::uint16_t out_neg = which == 0 ? float_to_half_bits(-f) : float_to_bf16_bits(-f);
      const float got = which == 0 ? half_bits_to_float(out) : bf16_bits_to_float(out);
      const float got_neg = which == 0 ? half_bits_to_float(out_neg) : bf16_bits_to_float(out_neg);
      const float want = f >= overflow_threshold ? INFINITY : round_to_grid(f, grid, lsb);
      INFO("format " << which << " input " << f);
      REQUIRE(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want));
      REQUIRE(std::bit_cast<std::uint32_t>(got_neg) == std::bit_cast<std::uint32_t>(-want));
      (void)largest;
    }
  }
}

#if QSDP_HAS_CUDA_HALF
TEST_CASE("conversions agree with the CUDA headers' host implementations") {
  std::mt19937 rng(2);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(bits(rng));
    if (std::isnan(f)) continue;
    const __half h = __float2half_rn(f);
    const __nv_bfloat16 b = __float2bfloat16_rn(f);
    INFO("input " << f);
    REQUIRE(float_to_half_bits(f) == static_cast<__half_raw>(h).x);
    REQUIRE(float_to_bf16_bits(f) == static_cast<__nv_bfloat16_raw>(b).x);
    REQUIRE(std::bit_cast<std::uint32_t>(element_traits<__half>::to_float(h)) ==
            std::bit_cast<std::uint32_t>(__half2float(h)));
    REQUIRE(std::bit_cast<std::uint32_t>(element_traits<__nv_bfloat16>::to_float(b)) ==
            std::bit_cast<std::uint32_t>(__bfloat162float(b)));
  }
}

TEST_CASE("saturating narrowing keeps finite values finite and non-finite values non-finite") {
  CHECK(half_bits_to_float(static_cast<__half_raw>(saturating_from_float<__half>(70000.0f)).x) ==
        65504.0f);
  CHECK(half_bits_to_float(static_cast<__half_raw>(saturating_from_float<__half>(-1e30f)).x) ==
        -65504.0f);
  CHECK(std::isinf(element_traits<__half>::to_float(saturating_from_float<__half>(INFINITY))));
  CHECK(std::isnan(element_traits<__half>::to_float(saturating_from_float<__half>(NAN))));
  CHECK(std::isfinite(
      element_traits<__nv_bfloat16>::to_float(saturating_from_float<__nv_bfloat16>(3.4e38f))));
  CHECK(std::isinf(
      element_traits<__nv_bfloat16>::to_float(saturating_from_float<__nv_bfloat16>(-INFINITY))));
  CHECK(element_traits<__half>::to_float(saturating_from_float<__half>(1.5f)) == 1.5f);
}
#endif
