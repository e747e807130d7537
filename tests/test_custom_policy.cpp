// SPDX-License-Identifier: Apache-2.0
// A user-written policy goes through the concept and the whole codec.
#include <doctest/doctest.h>

#include <cmath>

#include "test_support.hpp"

namespace {

/// Sign + 3-bit exponent relative to the bucket's abs-max: values snap to abs_max * 2^-k, k = 0..6, or 0.
struct power_of_two_quantizer {
  static constexpr int bits = 4;
  static constexpr bool randomized = false;
  static constexpr std::uint32_t wire_tag = 0x506f7732;  // "Pow2": tells it apart from other user types
  std::size_t bucket_size = 128;
  using meta_type = float;
  QSDP_HOST_DEVICE meta_type fit(const qsdp::bucket_stats& s) const { return s.abs_max; }
  QSDP_HOST_DEVICE std::uint32_t encode(float x, const meta_type& m, float) const {
    if (m == 0.0f || x == 0.0f) return 0;
    const double ratio = std::abs(double(x)) / m;  // (0, 1]
    int k = static_cast<int>(std::lround(-std::log2(ratio)));
    if (k > 6) return 0;
    k = k < 0 ? 0 : k;
    return (x < 0 ? 8u : 0u) | static_cast<std::uint32_t>(k + 1);
  }
  QSDP_HOST_DEVICE float decode(std::uint32_t code, const meta_type& m) const {
    if ((code & 7u) == 0) return 0.0f;
    const float magnitude = std::ldexp(m, -static_cast<int>((code & 7u) - 1));
    return code & 8u ? -magnitude : magnitude;
  }
};

/// A randomized user policy: 1-bit stochastic sign with the bucket's mean magnitude.
struct stochastic_sign {
  static constexpr int bits = 1;
  static constexpr bool randomized = true;
  std::size_t bucket_size = 64;
  std::uint64_t seed = 5;
  qsdp::call_counter calls{};
  using meta_type = float;
  QSDP_HOST_DEVICE meta_type fit(const qsdp::bucket_stats& s) const { return s.abs_max; }
  QSDP_HOST_DEVICE std::uint32_t encode(float x, const meta_type& m, float u) const {
    const float p_up = m > 0 ? (x / m + 1) / 2 : 0.5f;  // P(+m) so that E = x
    return u < p_up ? 1u : 0u;
  }
  QSDP_HOST_DEVICE float decode(std::uint32_t code, const meta_type& m) const { return code ? m : -m; }
};

struct missing_decode {
  static constexpr int bits = 4;
  static constexpr bool randomized = false;
  std::size_t bucket_size = 128;
  using meta_type = float;
  meta_type fit(const qsdp::bucket_stats& s) const { return s.abs_max; }
  std::uint32_t encode(float, const meta_type&, float) const { return 0; }
};

struct too_many_bits : power_of_two_quantizer {
  static constexpr int bits = 9;
};

}  // namespace

static_assert(qsdp::quantizer<power_of_two_quantizer>);
static_assert(qsdp::quantizer<stochastic_sign>);
static_assert(qsdp::quantizer<qsdp::uniform<8>>);
static_assert(qsdp::quantizer<qsdp::random_shift<2>>);
static_assert(!qsdp::quantizer<qsdp::identity>);
static_assert(qsdp::codec_policy<qsdp::identity>);
static_assert(!qsdp::quantizer<missing_decode>);
static_assert(!qsdp::quantizer<too_many_bits>);
static_assert(!qsdp::quantizer<int>);

TEST_CASE("a user-defined policy encodes and decodes through the codec") {
  const auto x = qsdp_test::make_data(qsdp_test::distribution::normal, 1000, 3);
  power_of_two_quantizer q;
  const auto y = qsdp_test::round_trip(q, x);
  for (std::size_t b = 0; b < x.size(); b += q.bucket_size) {
    float abs_max = 0;
    for (std::size_t i = b; i < std::min(x.size(), b + q.bucket_size); ++i)
      abs_max = std::max(abs_max, std::abs(x[i]));
    for (std::size_t i = b; i < std::min(x.size(), b + q.bucket_size); ++i) {
      // Nearest power-of-two step in log space: within a factor sqrt(2), or flushed below 2^-6.5.
      const double ax = std::abs(x[i]), ay = std::abs(y[i]);
      if (ax < abs_max * std::pow(2.0, -6.5)) REQUIRE(ay <= abs_max / 64.0 + 1e-12);
      else REQUIRE((ay >= ax / std::sqrt(2.0) * 0.999 && ay <= ax * std::sqrt(2.0) * 1.001));
      if (ay != 0) REQUIRE(std::signbit(x[i]) == std::signbit(y[i]));
    }
  }
}

TEST_CASE("the user policy's wire tag tells it apart from another user policy") {
  const auto x = qsdp_test::make_data(qsdp_test::distribution::normal, 100, 4);
  power_of_two_quantizer q;
  std::vector<std::byte> p(qsdp::compressed_size<float>(q, x.size()));
  qsdp::encode(q, x.data(), x.size(), p.data());
  std::vector<float> y(x.size());
  stochastic_sign other{.bucket_size = 128};
  CHECK_THROWS_WITH_AS(qsdp::decode(other, p.data(), x.size(), y.data()),
                       doctest::Contains("tag 1349482290"), qsdp::error);
}

TEST_CASE("a randomized user policy gets fresh, reproducible draws and stays unbiased") {
  std::vector<float> x(64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = -1.0f + 2.0f * float(i) / 63;
  stochastic_sign q;
  std::vector<double> mean(x.size(), 0.0);
  std::vector<float> y(x.size());
  std::vector<std::byte> p(qsdp::compressed_size<float>(q, x.size())), first(p.size());
  const int calls = 4000;
  for (int c = 0; c < calls; ++c) {
    qsdp::encode(q, x.data(), x.size(), p.data());
    if (c == 0) first = p;
    if (c == 1) CHECK(p != first);
    qsdp::decode(q, p.data(), x.size(), y.data());
    for (std::size_t i = 0; i < x.size(); ++i) mean[i] += y[i] / calls;
  }
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(std::abs(mean[i] - x[i]) < 5 * 1.0 / std::sqrt(calls));
}
