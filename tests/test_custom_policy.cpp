// SPDX-License-Identifier: Apache-2.0
// A user-written policy goes through the concept and the whole codec.
#include <doctest/doctest.h>

#include <cmath>

#include "policies.hpp"
#include "support.hpp"

TEST_SUITE_BEGIN("custom_policy");

namespace {

using qsdp_test::power_of_two_quantizer;
using qsdp_test::stochastic_sign;

/// Every member but decode (policy_without_bits' decode is hidden by a member of another kind).
struct missing_decode : qsdp_test::policy_without_bits {
  static constexpr int bits = 4;
  static constexpr int decode = 0;
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
      if (ax < abs_max * std::pow(2.0, -6.5))
        REQUIRE(ay <= abs_max / 64.0 + 1e-12);
      else
        REQUIRE((ay >= ax / std::sqrt(2.0) * 0.999 && ay <= ax * std::sqrt(2.0) * 1.001));
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
  for (std::size_t i = 0; i < x.size(); ++i)
    CHECK(std::abs(mean[i] - x[i]) < 5 * 1.0 / std::sqrt(calls));
}

TEST_SUITE_END();
