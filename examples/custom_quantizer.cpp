// SPDX-License-Identifier: Apache-2.0
//
// Writing your own quantizer: a mu-law (logarithmic companding) policy, as used in telephony, which
// spends its codes where gradients live: many small values, few large ones. qsdp computes the
// bucket statistics, packs the codes, lays out metadata and handles tails and NaN/inf; the policy
// only says how one value maps to a code and back.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <qsdp/codec.hpp>

/// Sign and magnitude on a logarithmic scale relative to the bucket's largest magnitude:
/// y = ln(1 + mu |x| / a) / ln(1 + mu) in [0, 1], rounded to one of 2^(B-1) - 1 levels, plus a sign
/// bit.
template <int B>
struct mu_law {
  static constexpr int bits = B;                     // code width (1..8): required
  static constexpr bool randomized = false;          // no random draws needed: required
  static constexpr std::uint32_t wire_tag = 0x6d75;  // optional: tells packets of this policy apart
  static constexpr double mu = 255.0;
  static constexpr int levels = (1 << (B - 1)) - 1;

  std::size_t bucket_size = 512;  // required: values per bucket
  using meta_type = float;        // required: per-bucket metadata, here the largest magnitude

  QSDP_HOST_DEVICE meta_type fit(const qsdp::bucket_stats& s) const { return s.abs_max; }

  QSDP_HOST_DEVICE std::uint32_t encode(float x, const meta_type& a, float /*u*/) const {
    if (a == 0.0f) return 0;
    const double y = std::log1p(mu * std::fabs(double(x)) / a) / std::log1p(mu);  // [0, 1]
    const auto level = static_cast<std::uint32_t>(std::lround(y * levels));
    return (x < 0 ? 1u << (B - 1) : 0u) | (level > std::uint32_t(levels) ? levels : level);
  }

  QSDP_HOST_DEVICE float decode(std::uint32_t code, const meta_type& a) const {
    const double y = double(code & ((1u << (B - 1)) - 1)) / levels;
    const double magnitude = a * std::expm1(y * std::log1p(mu)) / mu;
    return static_cast<float>(code >> (B - 1) ? -magnitude : magnitude);
  }
};

static_assert(qsdp::quantizer<mu_law<8>>, "mu_law satisfies the plug-in contract");

int main() {
  // Gradient-like data: mostly tiny values, one in a thousand a large outlier.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> grad(1 << 20);
  for (auto& g : grad) g = (rng() % 1000 == 0) ? 10.0f * normal(rng) : 1e-3f * normal(rng);

  auto report = [&](const char* name, const auto& q) {
    std::vector<std::byte> packet(qsdp::compressed_size<float>(q, grad.size()));
    qsdp::encode(q, grad.data(), grad.size(), packet.data());
    std::vector<float> back(grad.size());
    qsdp::decode(q, packet.data(), grad.size(), back.data());
    double err2 = 0, norm2 = 0, small_err2 = 0, small_norm2 = 0;
    for (std::size_t i = 0; i < grad.size(); ++i) {
      const double e = double(grad[i]) - back[i];
      err2 += e * e;
      norm2 += double(grad[i]) * grad[i];
      if (std::fabs(grad[i]) < 0.01f) small_err2 += e * e, small_norm2 += double(grad[i]) * grad[i];
    }
    std::printf("%-14s %9zu bytes (%.2fx smaller)  rel. L2 error %.3e  on the small values %.3e\n",
                name, packet.size(), 4.0 * grad.size() / packet.size(), std::sqrt(err2 / norm2),
                std::sqrt(small_err2 / small_norm2));
    return std::sqrt(small_err2 / small_norm2);
  };
  std::printf("1 Mi gradient values, bucket 512\n");
  const double mu_err = report("mu_law<8>", mu_law<8>{});
  const double sym_err = report("symmetric<8>", qsdp::symmetric<8>{.bucket_size = 512});
  report("mu_law<4>", mu_law<4>{});
  report("symmetric<4>", qsdp::symmetric<4>{.bucket_size = 512});
  // The point of the custom policy: small gradients survive where a linear grid flushes them to
  // zero.
  if (!(mu_err < sym_err)) {
    std::printf("unexpected: mu-law should keep small values better than a linear grid\n");
    return 1;
  }
  return 0;
}
