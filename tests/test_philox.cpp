// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include <qsdp/detail/codec/philox.hpp>

TEST_SUITE_BEGIN("philox");

using qsdp::detail::draw_domain;
using qsdp::detail::philox4x32_10;
using qsdp::detail::rng_key;

TEST_CASE("philox4x32_10 matches Random123's known-answer vectors") {
  const auto zero = philox4x32_10(0, 0, 0, 0, 0, 0);
  CHECK(zero.v[0] == 0x6627e8d5u);
  CHECK(zero.v[1] == 0xe169c58du);
  CHECK(zero.v[2] == 0xbc57ac4cu);
  CHECK(zero.v[3] == 0x9b00dbd8u);
  const auto ones = philox4x32_10(~0u, ~0u, ~0u, ~0u, ~0u, ~0u);
  CHECK(ones.v[0] == 0x408f276du);
  CHECK(ones.v[1] == 0x41c83b0eu);
  CHECK(ones.v[2] == 0xa20bc7c6u);
  CHECK(ones.v[3] == 0x6d5451fdu);
  const auto pi =
      philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  CHECK(pi.v[0] == 0xd16cfe09u);
  CHECK(pi.v[1] == 0x94fdccebu);
  CHECK(pi.v[2] == 0x5001e420u);
  CHECK(pi.v[3] == 0x24126ea1u);
}

TEST_CASE("philox is usable at compile time") {
  static_assert(philox4x32_10(0, 0, 0, 0, 0, 0).v[0] == 0x6627e8d5u);
}

TEST_CASE("uniform draws u satisfy 0 <= u < 1 and look uniform") {
  const rng_key key{.seed = 42, .call = 3, .stream = 1};
  constexpr int n = 200000, bins = 20;
  int histogram[bins] = {};
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const float u = key.uniform(draw_domain::element, i);
    REQUIRE(u >= 0.0f);
    REQUIRE(u < 1.0f);
    sum += u;
    ++histogram[static_cast<int>(u * bins)];
  }
  CHECK(std::abs(sum / n - 0.5) < 5 * std::sqrt(1.0 / 12 / n));
  double chi2 = 0;
  for (int b = 0; b < bins; ++b) {
    const double expected = double(n) / bins;
    chi2 += (histogram[b] - expected) * (histogram[b] - expected) / expected;
  }
  CHECK(chi2 < 45.3);  // 99.9th percentile of chi^2 with 19 degrees of freedom
  CHECK(qsdp::detail::uniform_from_bits(0xFFFFFFFFu) < 1.0f);
  CHECK(qsdp::detail::uniform_from_bits(0) == 0.0f);
}

TEST_CASE("seed, call, stream and domain each select a different stream") {
  const rng_key base{.seed = 7, .call = 0, .stream = 0};
  auto first_words = [](const rng_key& k, draw_domain d) {
    std::set<std::uint32_t> words;
    for (std::uint64_t b = 0; b < 4; ++b)
      for (auto w : k.block(d, b).v) words.insert(w);
    return words;
  };
  const auto reference = first_words(base, draw_domain::element);
  CHECK(first_words(base, draw_domain::element) == reference);  // reproducible
  CHECK(first_words({8, 0, 0}, draw_domain::element) != reference);
  CHECK(first_words({7, 1, 0}, draw_domain::element) != reference);
  CHECK(first_words({7, 0, 1}, draw_domain::element) != reference);
  CHECK(first_words(base, draw_domain::bucket) != reference);
  // The high half of the seed matters too.
  CHECK(first_words({7 + (std::uint64_t{1} << 32), 0, 0}, draw_domain::element) != reference);
}

TEST_CASE("per-value draws are the element domain's words read as 16-bit halves") {
  const rng_key key{.seed = 3, .call = 9, .stream = 2};
  double sum = 0;
  constexpr int n = 100000;
  for (std::uint64_t i = 0; i < n; ++i) {
    const auto block = key.block(draw_domain::element, i / 8);
    const std::uint32_t word = block.v[(i / 2) % 4];
    const std::uint32_t half = i % 2 ? word >> 16 : word & 0xFFFF;
    const float u = key.value_uniform(i);
    REQUIRE(u == (static_cast<float>(half) + 0.5f) / 65536.0f);
    REQUIRE(u > 0.0f);
    REQUIRE(u < 1.0f);
    sum += u;
  }
  CHECK(std::abs(sum / n - 0.5) < 5 * std::sqrt(1.0 / 12 / n));
}

TEST_SUITE_END();
