// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstring>

#include "support.hpp"

TEST_SUITE_BEGIN("quantizers");

using namespace qsdp_test;

namespace {

template <class T>
void check_all_policies_on(const char* type_name) {
  for (distribution d : all_distributions) {
    for (std::size_t bucket :
         {std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{1000}, std::size_t{1024}}) {
      for (std::size_t n : {std::size_t{1}, std::size_t{1023}, std::size_t{3001}}) {
        const auto x = convert<T>(make_data(d, n, static_cast<std::uint32_t>(n + bucket)));
        for_each_policy(bucket, 11, [&](auto q) {
          const auto y = round_trip(q, x);
          const std::string failure = check_bounds(q, x, y);
          INFO(std::string(type_name) << " " << describe(q) << " bucket " << bucket << " count "
                                      << n << " data " << std::string(name(d)));
          REQUIRE(failure == "");
        });
      }
    }
  }
}

}  // namespace

TEST_CASE("every policy at every width stays within its error bound: float") {
  check_all_policies_on<float>("float");
}
TEST_CASE("every policy at every width stays within its error bound: double") {
  check_all_policies_on<double>("double");
}
#if QSDP_HAS_CUDA_HALF
TEST_CASE("every policy at every width stays within its error bound: __half") {
  check_all_policies_on<__half>("__half");
}
TEST_CASE("every policy at every width stays within its error bound: __nv_bfloat16") {
  check_all_policies_on<__nv_bfloat16>("__nv_bfloat16");
}
#endif

TEST_CASE("round to nearest is as good as its bound claims, not better by accident") {
  // The bound must be tight: on dense data the largest error comes close to half a step.
  const auto x = make_data(distribution::uniform, 4096, 5);
  qsdp::uniform<4> q{.bucket_size = 4096};
  const auto y = round_trip(q, x);
  double lo = 1e9, hi = -1e9, worst = 0;
  for (float v : x) lo = std::min<double>(lo, v), hi = std::max<double>(hi, v);
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(double(x[i]) - y[i]));
  const double half_step = (hi - lo) / 15 / 2;
  CHECK(worst <= half_step * (1 + 1e-6));
  CHECK(worst > 0.95 * half_step);
}

namespace {

/// Mean of decode(encode(x)) over `calls` encodes with fresh randomness; returns the largest
/// deviation from x in units of the standard error allowed by the rounding's variance (<= step^2 /
/// 4).
template <class Q>
double worst_bias_in_standard_errors(Q q, const std::vector<float>& x, int calls, double step) {
  std::vector<double> sum(x.size(), 0.0);
  std::vector<std::byte> packet(qsdp::compressed_size<float>(q, x.size()));
  std::vector<float> y(x.size());
  for (int c = 0; c < calls; ++c) {
    qsdp::encode(q, x.data(), x.size(), packet.data());
    qsdp::decode(q, packet.data(), x.size(), y.data());
    for (std::size_t i = 0; i < x.size(); ++i) sum[i] += y[i];
  }
  const double standard_error = step / 2 / std::sqrt(double(calls));
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::abs(sum[i] / calls - x[i]) / standard_error);
  return worst;
}

std::vector<float> bias_probe() {
  // Values at awkward fractions of a step, plus the range ends so every bucket has range [0, 1].
  std::vector<float> x = {0.0f, 1.0f};
  for (int i = 0; i < 62; ++i) x.push_back(std::fmod(0.618034f * (i + 1), 1.0f));
  return x;
}

}  // namespace

TEST_CASE("stochastic rounding is unbiased: the mean over calls converges to x") {
  const auto x = bias_probe();
  // 64 values * 4000 calls: the maximum of 64 |N(0,1)|-like deviations stays well under 5.
  CHECK(worst_bias_in_standard_errors(qsdp::stochastic<2>{.bucket_size = 64, .seed = 1}, x, 4000,
                                      1.0 / 3) < 5.0);
  CHECK(worst_bias_in_standard_errors(qsdp::stochastic<4>{.bucket_size = 64, .seed = 2}, x, 4000,
                                      1.0 / 15) < 5.0);
  CHECK(worst_bias_in_standard_errors(qsdp::stochastic<1>{.bucket_size = 64, .seed = 3}, x, 4000,
                                      1.0) < 5.0);
}

TEST_CASE("random_shift is unbiased over its per-bucket offsets") {
  const auto x = bias_probe();
  CHECK(worst_bias_in_standard_errors(qsdp::random_shift<2>{.bucket_size = 64, .seed = 4}, x, 4000,
                                      1.0 / 2) < 5.0);
  CHECK(worst_bias_in_standard_errors(qsdp::random_shift<4>{.bucket_size = 64, .seed = 5}, x, 4000,
                                      1.0 / 14) < 5.0);
}

TEST_CASE("the unbiasedness check has power: it flags round-to-nearest") {
  // Same harness, deterministic rounding: the error no longer averages out.
  const auto x = bias_probe();
  CHECK(worst_bias_in_standard_errors(qsdp::uniform<2>{.bucket_size = 64}, x, 4000, 1.0 / 3) >
        20.0);
}

TEST_CASE(
    "randomized policies: same seed and call sequence give the same bytes, the next call others") {
  const auto x = make_data(distribution::normal, 5000, 9);
  auto bytes_of = [&](const auto& q) {
    std::vector<std::byte> p(qsdp::compressed_size<float>(q, x.size()));
    qsdp::encode(q, x.data(), x.size(), p.data());
    return p;
  };
  auto check_policy = [&](auto q) {
    auto replay = q;  // copies carry the call index (0 here)
    const auto first = bytes_of(q);
    const auto second = bytes_of(q);
    CHECK(first != second);  // fresh randomness on every call
    CHECK(q.calls.next() == 2);
    CHECK(bytes_of(replay) == first);
    CHECK(bytes_of(replay) == second);
    q.calls.reset(1);
    CHECK(bytes_of(q) == second);
    auto other_seed = replay;
    other_seed.seed += 1;
    other_seed.calls.reset(0);
    CHECK(bytes_of(other_seed) != first);

    // An explicit position leaves the counter alone and reproduces the same bytes.
    std::vector<std::byte> at(first.size());
    qsdp::encode(q, x.data(), x.size(), at.data(), qsdp::rng_position{.call = 0});
    CHECK(at == first);
    CHECK(q.calls.next() == 2);
    qsdp::encode(q, x.data(), x.size(), at.data(), qsdp::rng_position{.call = 0, .stream = 3});
    CHECK(at != first);
  };
  check_policy(qsdp::stochastic<4>{.bucket_size = 100, .seed = 1});
  check_policy(qsdp::random_shift<4>{.bucket_size = 100, .seed = 1});
}

TEST_CASE("deterministic policies give the same bytes on every call") {
  const auto x = make_data(distribution::lognormal, 3000, 10);
  for_each_policy(256, 0, [&](auto q) {
    if constexpr (!q.randomized && !qsdp::detail::randomized_buckets<decltype(q)>()) {
      std::vector<std::byte> a(qsdp::compressed_size<float>(q, x.size())), b(a.size());
      qsdp::encode(q, x.data(), x.size(), a.data());
      qsdp::encode(q, x.data(), x.size(), b.data());
      CHECK(a == b);
    }
  });
}

namespace {

template <class T>
void check_paths_agree(const char* type_name) {
  const auto x = convert<T>(make_data(distribution::mixed_scale, 5003, 12));
  // Buckets of 64 and its multiples take the AVX-512 stochastic encode where the CPU has it (3:
  // not a whole Philox block; 4096: two segments per bucket, and a short last bucket).
  for (std::size_t bucket :
       {std::size_t{3}, std::size_t{64}, std::size_t{512}, std::size_t{1024}, std::size_t{4096}}) {
    for_each_policy(bucket, 99, [&](auto q) {
      using Q = decltype(q);
      const std::size_t size = qsdp::compressed_size<T>(q, x.size());
      std::vector<std::byte> fast(size), avx2(size), base(size);
      std::vector<T> fast_out(x.size()), avx2_out(x.size()), base_out(x.size());
      std::vector<float> fast_acc(x.size(), 1.0f), avx2_acc(x.size(), 1.0f),
          base_acc(x.size(), 1.0f);
      auto run = [&](std::vector<std::byte>& p, std::vector<T>& out, std::vector<float>& acc) {
        Q local = q;
        qsdp::encode(local, x.data(), x.size(), p.data());
        qsdp::decode(local, p.data(), x.size(), out.data());
        qsdp::decode_accumulate(local, p.data(), x.size(), acc.data());
      };
      run(fast, fast_out, fast_acc);
      qsdp::detail::host_allow_avx512 = false;
      run(avx2, avx2_out, avx2_acc);
      qsdp::detail::host_allow_avx512 = true;
      qsdp::detail::host_force_baseline = true;
      run(base, base_out, base_acc);
      qsdp::detail::host_force_baseline = false;
      INFO(std::string(type_name) << " " << describe(q) << " bucket " << bucket);
      REQUIRE(avx2 == base);
      REQUIRE(fast == base);
      REQUIRE(std::memcmp(fast_out.data(), base_out.data(), x.size() * sizeof(T)) == 0);
      REQUIRE(std::memcmp(fast_acc.data(), base_acc.data(), x.size() * sizeof(float)) == 0);
    });
  }
}

}  // namespace

TEST_CASE(
    "the vectorized (AVX-512, AVX2+FMA) and baseline host paths give bit-identical packets and "
    "values") {
#if QSDP_HOST_X86_DISPATCH
  if (!qsdp::detail::host_cpu_has_avx512())
    MESSAGE("this CPU has no AVX-512: its stochastic encode is not compared here");
#endif
  INFO("host path: " << qsdp::detail::host_codec_isa());
  check_paths_agree<float>("float");
  check_paths_agree<double>("double");
#if QSDP_HAS_CUDA_HALF
  check_paths_agree<__half>("__half");
  check_paths_agree<__nv_bfloat16>("__nv_bfloat16");
#endif
}

TEST_SUITE_END();
