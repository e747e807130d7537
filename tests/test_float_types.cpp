// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <qsdp/detail/codec/float_types.hpp>

TEST_SUITE_BEGIN("float_types");

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
    if (std::isnan(f))
      REQUIRE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(f))));
    else
      REQUIRE(float_to_bf16_bits(f) == b);
  }
}

// A slow but obviously correct reference: the nearest representable value, ties to the even
// mantissa.
static float round_to_grid(float f, const std::vector<float>& sorted_grid,
                           const std::vector<int>& lsb) {
  auto it = std::lower_bound(sorted_grid.begin(), sorted_grid.end(), f);
  if (it == sorted_grid.begin()) return *it;
  if (it == sorted_grid.end()) return sorted_grid.back();
  const auto hi = it - sorted_grid.begin(), lo = hi - 1;
  const double dlo = double(f) - sorted_grid[lo], dhi = double(sorted_grid[hi]) - f;
  if (dlo < dhi) return sorted_grid[lo];
  if (dhi < dlo) return sorted_grid[hi];
  return lsb[lo] == 0 ? sorted_grid[lo] : sorted_grid[hi];
}

TEST_CASE(
    "float -> half and float -> bf16 round to nearest even, denormals and overflow included") {
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

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && QSDP_HAS_CUDA_HALF
#include <qsdp/detail/host/loops.hpp>

namespace {

/// Awkward floats for bf16 narrowing: NaNs with payloads and signs, infinities, the largest floats,
/// values between bf16's largest finite value and float's, rounding ties either way, subnormals,
/// zeros; then random bit patterns.
std::vector<float> narrowing_cases() {
  std::vector<std::uint32_t> bits = {
      0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0xFF812345u, 0x7F800000u, 0xFF800000u,
      0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F7F8000u, 0x7F7F7FFFu, 0x7F7F0000u, 0xFF7F8001u,
      0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x00000001u, 0x80008000u, 0x00018000u,
      0x00000000u, 0x80000000u, 0x3F800000u, 0xC0490FDBu};
  std::mt19937 rng(5);
  for (int i = 0; i < 4093; ++i) bits.push_back(rng());  // odd count: exercises the scalar tail
  std::vector<float> out;
  for (std::uint32_t b : bits) out.push_back(std::bit_cast<float>(b));
  return out;
}

}  // namespace

TEST_CASE("AVX2 bf16 conversions give the scalar conversions' bits") {
  if (!qsdp::detail::host_cpu_has_avx2_fma()) {
    MESSAGE("no AVX2+FMA on this CPU: the vectorized bf16 loops are not used here");
    return;
  }
  const std::vector<float> x = narrowing_cases();
  std::vector<std::uint16_t> plain(x.size()), saturated(x.size());
  avx2::f32_to_bf16<false>(x.data(), x.size(), plain.data());
  avx2::f32_to_bf16<true>(x.data(), x.size(), saturated.data());
  for (std::size_t i = 0; i < x.size(); ++i) {
    CAPTURE(std::bit_cast<std::uint32_t>(x[i]));
    REQUIRE(plain[i] == float_to_bf16_bits(x[i]));
    const __nv_bfloat16 s = saturating_from_float<__nv_bfloat16>(x[i]);
    REQUIRE(saturated[i] == static_cast<__nv_bfloat16_raw>(s).x);
  }
  // Widening is exact, and the scan sees the widened values.
  std::vector<float> widened(x.size());
  avx2::bf16_to_f32(plain.data(), plain.size(), widened.data());
  for (std::size_t i = 0; i < x.size(); ++i)
    REQUIRE(std::bit_cast<std::uint32_t>(widened[i]) == static_cast<std::uint32_t>(plain[i]) << 16);
  std::vector<std::uint16_t> finite;
  for (std::uint16_t h : plain)
    if ((h & 0x7F80) != 0x7F80) finite.push_back(h);
  const auto scanned = avx2::scan_values<true>(finite.data(), finite.size());
  float lo = INFINITY, hi = -INFINITY;
  for (std::uint16_t h : finite) {
    lo = std::min(lo, bf16_bits_to_float(h));
    hi = std::max(hi, bf16_bits_to_float(h));
  }
  CHECK(scanned.finite());
  CHECK(scanned.min() == lo);
  CHECK(scanned.max() == hi);
  CHECK_FALSE(avx2::scan_values<true>(plain.data(), plain.size()).finite());
  // narrow_store (the end of a reduction) rounds without saturating.
  std::vector<__nv_bfloat16> stored(x.size());
  narrow_store(x.data(), x.size(), stored.data());
  for (std::size_t i = 0; i < x.size(); ++i)
    REQUIRE(static_cast<__nv_bfloat16_raw>(stored[i]).x == plain[i]);
}
#endif

TEST_SUITE_END();
