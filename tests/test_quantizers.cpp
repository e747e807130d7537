// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include "spelling_checks.hpp"
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
      REQUIRE(std::memcmp(avx2_out.data(), base_out.data(), x.size() * sizeof(T)) == 0);
      REQUIRE(std::memcmp(fast_acc.data(), base_acc.data(), x.size() * sizeof(float)) == 0);
      REQUIRE(std::memcmp(avx2_acc.data(), base_acc.data(), x.size() * sizeof(float)) == 0);
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

TEST_CASE("decode's non-temporal stores give the plain stores' bits at every alignment") {
  // Data with non-finite buckets too, so the flagged buckets' NaN fill runs between streamed ones.
  auto x = make_data(distribution::mixed_scale, 5003, 21);
  x[1500] = std::numeric_limits<float>::infinity();
  const std::size_t default_threshold = qsdp::detail::host_streaming_bytes.load();
  for (const std::size_t count : {std::size_t{5003}, std::size_t{40}, std::size_t{7}}) {
    for_each_policy(256, 5, [&](auto q) {
      std::vector<std::byte> packet(qsdp::compressed_size<float>(q, count));
      qsdp::encode(q, x.data(), count, packet.data());
      // Outputs at every offset within a 64-byte line, and one that is not float-aligned (then
      // nothing streams). Bytes around each output must stay untouched.
      for (std::size_t offset = 0; offset <= 68; offset += offset < 64 ? 4 : 1) {
        std::vector<unsigned char> plain(count * sizeof(float) + 136, 0xA5), streamed(plain);
        // 64-byte aligned bases: std::vector's own alignment is only the allocator's 16.
        const std::size_t lead_plain =
            (64 - reinterpret_cast<std::uintptr_t>(plain.data()) % 64) % 64;
        const std::size_t lead_streamed =
            (64 - reinterpret_cast<std::uintptr_t>(streamed.data()) % 64) % 64;
        auto* plain_out = reinterpret_cast<float*>(plain.data() + lead_plain + offset);
        auto* streamed_out = reinterpret_cast<float*>(streamed.data() + lead_streamed + offset);
        qsdp::detail::host_streaming_bytes = std::numeric_limits<std::size_t>::max();
        qsdp::decode(q, packet.data(), count, plain_out);
        qsdp::detail::host_streaming_bytes = 0;
        qsdp::decode(q, packet.data(), count, streamed_out);
        qsdp::detail::host_streaming_bytes = default_threshold;
        INFO(describe(q) << " count " << count << " offset " << offset);
        REQUIRE(std::memcmp(plain.data() + lead_plain, streamed.data() + lead_streamed,
                            count * sizeof(float) + 68) == 0);
      }
    });
  }
}

namespace {

/// grid_code without its clamp: what a loop computes where grid_clamp_is_idle lets it.
std::uint32_t unclamped_code(const qsdp::detail::code_grid& g, float x, double u) {
  const double t = qsdp::detail::fma_d(static_cast<double>(x) - g.origin, g.inverse_step, u);
  return t >= 0.0 && t < 4294967296.0 ? static_cast<std::uint32_t>(t) : 0xFFFFFFFFu;
}

}  // namespace

TEST_CASE(
    "grid_clamp_is_idle: where it says so, the unclamped code is grid_code's, edges included") {
  using namespace qsdp::detail;
  const double u_lo = uniform_from_half(0), u_hi = uniform_from_half(0xFFFF);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int idle_fitted = 0, idle = 0, busy = 0, busy_seen_acting = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    // A bucket's range at scales from denormal to near FLT_MAX, and sometimes a single value.
    const float scale = std::ldexp(1.0f, static_cast<int>(unit(rng) * 250.0) - 140);
    float lo = static_cast<float>((unit(rng) - 0.7) * scale);
    float hi = trial % 10 == 0 ? lo : static_cast<float>(lo + unit(rng) * scale);
    if (!(hi >= lo) || !std::isfinite(hi)) continue;
    const int bits = trial % 3 == 0 ? 8 : trial % 3 == 1 ? 4 : 2;
    const double levels = double((1u << bits) - 1u);
    code_grid g = range_code_grid(lo, hi, levels, 0.5, levels);
    const bool fitted = trial % 2 == 0;
    if (!fitted) {  // the grid of a neighbouring range: clips, or leaves room, by a little or a lot
      const double nudge = std::ldexp(unit(rng) - 0.5, -static_cast<int>(unit(rng) * 50.0));
      if (trial % 4 == 1)
        g.inverse_step *= 1.0 + nudge;
      else
        g.origin += nudge * (static_cast<double>(hi) - lo + 1e-30);
    }
    const bool says_idle = grid_clamp_is_idle(g, lo, hi, u_lo, u_hi);
    if (fitted) {
      INFO("lo " << lo << " hi " << hi << " bits " << bits);
      CHECK(says_idle);  // the codec's own grids take the fast loops
      idle_fitted += says_idle;
    }
    // The values that decide it: the ends, their neighbours inside, and some in between.
    std::vector<float> xs = {lo, hi, std::nextafter(lo, hi), std::nextafter(hi, lo)};
    for (int k = 0; k < 6; ++k)
      xs.push_back(static_cast<float>(lo + unit(rng) * (double(hi) - lo)));
    bool acted = false;
    for (float x : xs) {
      if (x < lo || x > hi) continue;
      for (double u : {u_lo, u_hi, double(uniform_from_half(rng() & 0xFFFF))}) {
        const std::uint32_t clamped = grid_code<true>(g, x, static_cast<float>(u));
        const std::uint32_t bare = unclamped_code(g, x, u);
        acted |= bare != clamped;
        if (says_idle) {
          INFO("grid origin " << g.origin << " inverse_step " << g.inverse_step << " top " << g.top
                              << "; x " << x << " u " << u);
          REQUIRE(bare == clamped);
        }
      }
    }
    if (says_idle)
      ++idle;
    else
      ++busy, busy_seen_acting += acted;
  }
  MESSAGE("idle " << idle << " (" << idle_fitted << " fitted), busy " << busy
                  << " (the clamp acted in " << busy_seen_acting << " of them)");
  // Both answers occur, and a refusal is usually for cause: the test has power both ways.
  CHECK(idle > 1000);
  CHECK(busy > 200);
  CHECK(busy_seen_acting * 2 > busy);
  // What it must refuse outright.
  const code_grid g = range_code_grid(-1.0f, 1.0f, 255.0, 0.5, 255.0);
  CHECK(grid_clamp_is_idle(g, -1.0f, 1.0f, u_lo, u_hi));
  CHECK_FALSE(grid_clamp_is_idle(g, -1.5f, 1.0f, u_lo, u_hi));   // below the origin
  CHECK_FALSE(grid_clamp_is_idle(g, -1.0f, 1.01f, u_lo, u_hi));  // beyond the top
  CHECK_FALSE(grid_clamp_is_idle(g, -1.0f, std::numeric_limits<float>::quiet_NaN(), u_lo, u_hi));
  code_grid flipped = g;
  flipped.inverse_step = -flipped.inverse_step;
  CHECK_FALSE(grid_clamp_is_idle(flipped, -1.0f, 1.0f, u_lo, u_hi));
  code_grid infinite = g;
  infinite.inverse_step = std::numeric_limits<double>::infinity();
  CHECK_FALSE(grid_clamp_is_idle(infinite, 0.0f, 0.0f, u_lo, u_hi));
}

#if QSDP_HOST_X86_DISPATCH
TEST_CASE(
    "the vector scans give partial_stats::add's statistics: one sign or both, zeros, NaN, inf") {
  using namespace qsdp::detail;
  const bool avx512 = host_cpu_has_avx512();
  if (!avx512) MESSAGE("this CPU has no AVX-512: only the AVX2 scan is compared");
  if (!host_cpu_has_avx2_fma()) {
    MESSAGE("skipped: this CPU has no AVX2");
    return;
  }
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(),
                            INFINITY,
                            -INFINITY,
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            3.0e38f,
                            -3.0e38f};
  int one_sign = 0, both = 0, non_finite = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t n = trial < 2000 ? static_cast<std::size_t>(trial % 100) : 1024 + trial % 37;
    // Signs: all positive, all negative, or mixed; sometimes a special value or two.
    const int signs = trial % 3;
    std::vector<float> x(n);
    for (float& v : x) {
      v = std::ldexp(unit(rng), static_cast<int>(unit(rng) * 40.0f) - 20);
      if (signs == 1 || (signs == 2 && unit(rng) < 0.5f)) v = -v;
    }
    if (n > 0 && trial % 5 == 0) x[rng() % n] = specials[rng() % std::size(specials)];
    if (n > 0 && trial % 7 == 0) x[rng() % n] = specials[rng() % std::size(specials)];
    partial_stats expected;
    bool pos = false, neg = false;
    for (float v : x) {
      expected.add(v);
      (std::signbit(v) ? neg : pos) = true;
    }
    one_sign += pos != neg;
    both += pos && neg;
    non_finite += !expected.finite();
    std::vector<std::uint16_t> bf16(n);
    avx2::f32_to_bf16<false>(x.data(), n, bf16.data());
    partial_stats expected_bf16;
    for (std::uint16_t h : bf16) expected_bf16.add(std::bit_cast<float>(std::uint32_t{h} << 16));
    auto check = [&](const partial_stats& got, const partial_stats& want, const char* which) {
      INFO(which << " trial " << trial << " n " << n);
      CHECK(got.finite() == want.finite());
      if (want.finite()) {  // lo and hi of a non-finite bucket are not used
        CHECK(got.lo == want.lo);
        CHECK(got.hi == want.hi);
      }
    };
    check(avx2::scan_values<false>(x.data(), n), expected, "avx2 float");
    check(avx2::scan_values<true>(bf16.data(), n), expected_bf16, "avx2 bf16");
    if (avx512) {
      check(avx512::scan_values<false>(x.data(), n), expected, "avx512 float");
      check(avx512::scan_values<true>(bf16.data(), n), expected_bf16, "avx512 bf16");
    }
  }
  CHECK(one_sign > 500);
  CHECK(both > 500);
  CHECK(non_finite > 300);
}

TEST_CASE("the AVX-512 and AVX2 encode loops, clamp kept and left out, give grid_code's codes") {
  using namespace qsdp::detail;
  if (!host_cpu_has_avx2_fma()) {
    MESSAGE("skipped: this CPU has no AVX2");
    return;
  }
  const bool avx512 = host_cpu_has_avx512();
  if (!avx512) MESSAGE("this CPU has no AVX-512: only the AVX2 loops are compared");
  // 640 values: ten groups of 64 (AVX-512) and twenty of 32 (AVX2), so the rounds of the groups
  // two and three ahead run in every position; 23 more: a part group at the end.
  const auto data = make_data(distribution::normal, 663, 3);
  const float lo = *std::min_element(data.begin(), data.end());
  const float hi = *std::max_element(data.begin(), data.end());
  rng_key key{};
  key.seed = 5;
  for (int bits : {8, 4, 2}) {
    const double levels = double((1u << bits) - 1u);
    const code_grid fitted = range_code_grid(lo, hi, levels, 0.5, levels);
    // A grid over the middle quarter of the range: the clamp acts at both ends.
    const code_grid clipping = range_code_grid(lo / 4, hi / 4, levels, 0.5, levels);
    REQUIRE(grid_clamp_is_idle(fitted, lo, hi, uniform_from_half(0), uniform_from_half(0xFFFF)));
    REQUIRE_FALSE(
        grid_clamp_is_idle(clipping, lo, hi, uniform_from_half(0), uniform_from_half(0xFFFF)));
    for (const auto& entry :
         {std::pair{fitted, true}, std::pair{fitted, false}, std::pair{clipping, false}}) {
      // Named copies, not a structured binding: doctest's INFO captures them in a lambda, which
      // clang before 16 refuses for bindings.
      const code_grid grid = entry.first;
      const bool clamp_idle = entry.second;
      for (const bool wide : {false, true}) {
        if (wide && !avx512) continue;
        std::vector<std::uint8_t> codes(data.size());
        if (wide) {
          avx512::draw_stream d;
          avx512::start_draw_stream(key, d);
          avx512::encode_drawn_codes(data.data(), data.size(), grid, clamp_idle, 0, d,
                                     codes.data());
        } else {
          avx2::draw_stream d;
          avx2::start_draw_stream(key, d);
          avx2::encode_drawn_codes(data.data(), data.size(), grid, clamp_idle, 0, d, codes.data());
        }
        int clipped = 0;
        for (std::size_t j = 0; j < data.size(); ++j) {
          const std::uint32_t expected = grid_code<true>(grid, data[j], key.value_uniform(j));
          clipped += expected == 0 || expected == levels;
          INFO((wide ? "AVX-512" : "AVX2")
               << " bits " << bits << " clamp_idle " << clamp_idle << " value " << j);
          REQUIRE(codes[j] == expected);
        }
        if (!clamp_idle && grid.origin != fitted.origin) CHECK(clipped > 100);
      }
      // The round-to-nearest loop (uniform, symmetric, random_shift), with its constant offset.
      REQUIRE(grid_clamp_is_idle(fitted, lo, hi, fitted.offset, fitted.offset));
      std::vector<std::uint8_t> nearest(data.size());
      if (clamp_idle) {
        avx2::encode_codes<false, false>(data.data(), data.size(), grid, nullptr, nearest.data());
      } else {
        avx2::encode_codes<false, true>(data.data(), data.size(), grid, nullptr, nearest.data());
      }
      for (std::size_t j = 0; j < data.size(); ++j) {
        INFO("nearest bits " << bits << " clamp_idle " << clamp_idle << " value " << j);
        REQUIRE(nearest[j] == grid_code<false>(grid, data[j], 0.0f));
      }
    }
  }
}
#endif

TEST_CASE("16-bit values' statistics in packed pairs are partial_stats' (host spelling)") {
  qsdp_test::check_paired_stats16<true>();
  qsdp_test::check_paired_stats16<false>();
}

TEST_CASE("random_shift's grids from packed codes are grid_decode's floats (host spelling)") {
  qsdp_test::check_packed_fraction_decode<8>();
  qsdp_test::check_packed_fraction_decode<4>();
}

TEST_CASE("block-scaled policies' encode in integer steps is encode (host spelling)") {
  qsdp_test::check_encode_drawn_of_every_policy();
  qsdp_test::check_encode_nearest_of_every_policy();
}

TEST_CASE("element codes decode to minifloat_value (host spelling)") {
  qsdp_test::check_minifloat_decode_is_value();
}

TEST_CASE("packed element codes read as scaled floats, NaN and infinity codes found") {
  qsdp_test::check_packed_element_bits();
}

TEST_SUITE_END();
