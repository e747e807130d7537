// SPDX-License-Identifier: Apache-2.0
// qsdp::hadamard<Inner>: the transform against its definition, round trips within the inner
// policy's bound carried through the rotation, unbiasedness, non-finite buckets, the packet's
// identity and size, the host paths against each other, the rotated-domain sum of
// decode_accumulate, and the error on gradient-like data with outliers against plain stochastic<4>.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "policies.hpp"
#include "support.hpp"

TEST_SUITE_BEGIN("hadamard");

using namespace qsdp_test;
using qsdp::detail::rotation_record;

namespace {

/// The rotation a packet carries (the 16 bytes after its header).
rotation_record rotation_of(const std::vector<std::byte>& packet) {
  rotation_record r;
  std::memcpy(&r, packet.data() + sizeof(qsdp::detail::packet_header), sizeof r);
  return r;
}

/// The forward rotation of a bucket by its definition, in double: each power-of-two piece p of
/// the bucket (largest first) gives y_i = sum_j (-1)^popcount(i & j) s_j x_j / p.
std::vector<double> rotate_by_definition(const std::vector<float>& x, std::uint64_t first,
                                         const rotation_record& r) {
  std::vector<double> y(x.size());
  for (std::size_t start = 0; start < x.size();) {
    const std::size_t p = qsdp::detail::hadamard_piece(x.size() - start);
    for (std::size_t i = 0; i < p; ++i) {
      double sum = 0;
      for (std::size_t j = 0; j < p; ++j) {
        const std::uint64_t index = first + start + j;
        const bool negative = qsdp::detail::signs_of_block(r, index / 128).negative(index % 128);
        const double term = (negative ? -1.0 : 1.0) * x[start + j];
        sum += std::popcount(i & j) % 2 ? -term : term;
      }
      y[start + i] = sum / static_cast<double>(p);
    }
    start += p;
  }
  return y;
}

}  // namespace

TEST_CASE("the rotation is the signed Walsh-Hadamard transform of its definition, and inverts") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const rotation_record r{11, 5};
  for (std::size_t n : {1, 2, 3, 7, 16, 100, 256, 1000, 4096}) {
    for (std::uint64_t first : {std::uint64_t{0}, std::uint64_t{4096}, std::uint64_t{123456}}) {
      std::vector<float> x(n);
      for (float& v : x) v = normal(rng) * (rng() % 50 == 0 ? 100.0f : 1.0f);
      std::vector<float> v = x;
      qsdp::detail::hadamard_forward(v.data(), n, first, r);
      const std::vector<double> want = rotate_by_definition(x, first, r);
      double scale = 0;
      for (float a : x) scale = std::max(scale, std::abs(double(a)));
      INFO("n " << n << " first " << first);
      for (std::size_t i = 0; i < n; ++i) REQUIRE(std::abs(v[i] - want[i]) <= 1e-6 * scale);
      qsdp::detail::hadamard_inverse<true>(v.data(), n, first, r);
      for (std::size_t i = 0; i < n; ++i) REQUIRE(std::abs(v[i] - x[i]) <= 4e-6 * scale);
    }
  }
}

TEST_CASE("the inverse of values decoded to inf: NaN results are quiet_nan() on both paths") {
  // inf - inf in the butterflies gives a NaN whose sign depends on the operand order, and the
  // vector loops apply the signs with an XOR, the scalar statement with a multiply; both must write
  // the one NaN (found by the fuzzer: tests/fuzz/corpus/crash-hadamard-nan-sign).
  const rotation_record r{3, 1};
  constexpr std::size_t n = 64;
  alignas(32) float scalar[n], vector[n];  // the vector loops' alignment
  for (std::size_t i = 0; i < n; ++i) scalar[i] = i % 5 ? 1.0f : i % 2 ? INFINITY : -INFINITY;
  std::memcpy(vector, scalar, sizeof scalar);
  qsdp::detail::rotate_back<false, true>(scalar, n, 0, r);
  if (qsdp::detail::host_cpu_has_avx2_fma())
    qsdp::detail::rotate_back<true, true>(vector, n, 0, r);
  else
    std::memcpy(vector, scalar, sizeof scalar);  // no AVX2 here: the scalar path alone
  std::size_t nans = 0;
  for (std::size_t i = 0; i < n; ++i) {
    INFO("value " << i);
    CHECK(std::bit_cast<std::uint32_t>(vector[i]) == std::bit_cast<std::uint32_t>(scalar[i]));
    if (std::isnan(scalar[i])) {
      CHECK(std::bit_cast<std::uint32_t>(scalar[i]) == 0x7FC00000u);
      ++nans;
    }
  }
  CHECK(nans > 0);
}

TEST_CASE("the signs: half of them negative, fresh per call, the same for the same seed and call") {
  const rotation_record a{7, 0}, b{7, 1}, c{8, 0};
  int negative = 0, differ_call = 0, differ_seed = 0;
  for (std::uint64_t i = 0; i < 128 * 64; ++i) {
    const bool s = qsdp::detail::signs_of_block(a, i / 128).negative(i % 128);
    negative += s;
    differ_call += s != qsdp::detail::signs_of_block(b, i / 128).negative(i % 128);
    differ_seed += s != qsdp::detail::signs_of_block(c, i / 128).negative(i % 128);
    REQUIRE(s == qsdp::detail::signs_of_block(a, i / 128).negative(i % 128));
  }
  // 8192 fair bits: the counts lie within 5 standard deviations (45) of 4096.
  CHECK(std::abs(negative - 4096) < 230);
  CHECK(std::abs(differ_call - 4096) < 230);
  CHECK(std::abs(differ_seed - 4096) < 230);
}

namespace {

/// Checks a hadamard<Inner> round trip: per bucket piece, the decoded error's L2 norm is at most
/// sqrt(p) times the L2 norm of Inner's per-value bound on the rotated values (the inverse
/// multiplies norms by sqrt(p)), plus T's rounding of the output. Returns the first violation.
template <class Q, class T>
std::string check_rotated_round_trip(const Q& q, const std::vector<T>& x) {
  using Inner = typename Q::inner_policy;
  std::vector<std::byte> packet(qsdp::compressed_size<T>(q, x.size()));
  qsdp::encode(q, x.data(), x.size(), packet.data());
  std::vector<T> y(x.size());
  qsdp::decode(q, packet.data(), x.size(), y.data());
  const rotation_record r = rotation_of(packet);
  for (std::size_t begin = 0; begin < x.size(); begin += q.bucket_size) {
    const std::size_t n = std::min(q.bucket_size, x.size() - begin);
    std::vector<float> v(n);
    for (std::size_t j = 0; j < n; ++j) v[j] = to_f(x[begin + j]);
    const std::vector<float> original = v;
    qsdp::detail::hadamard_forward(v.data(), n, begin, r);
    double lo = INFINITY, hi = -INFINITY;
    for (float a : v) lo = std::min<double>(lo, a), hi = std::max<double>(hi, a);
    double bound2 = 0, err2 = 0, norm2 = 0;
    for (std::size_t start = 0; start < n;) {
      const std::size_t p = qsdp::detail::hadamard_piece(n - start);
      const double b = error_bound<Inner, float>(lo, hi);
      bound2 += static_cast<double>(p) * static_cast<double>(p) * b * b;
      start += p;
    }
    for (std::size_t j = 0; j < n; ++j) {
      const double e = double(original[j]) - to_f(y[begin + j]);
      err2 += e * e;
      norm2 += double(original[j]) * original[j];
      if (!std::isfinite(to_f(y[begin + j])))
        return "value " + std::to_string(begin + j) + " decoded to a non-finite value";
    }
    // T's rounding of every output (up to a step beyond the data) and the transforms' float
    // rounding (a few ulps per stage).
    const double slack =
        (2 * output_epsilon<T>() + 64 * 0x1p-24) * std::sqrt(norm2 + bound2) + 1e-30;
    if (std::sqrt(err2) > std::sqrt(bound2) + slack)
      return "bucket at " + std::to_string(begin) + ": error norm " +
             std::to_string(std::sqrt(err2)) + " > bound " + std::to_string(std::sqrt(bound2)) +
             " + " + std::to_string(slack);
  }
  return "";
}

/// Calls fn(policy) for hadamard over each inner family at a spread of widths: four policies, each
/// of which instantiates the codec's loops for three ISAs and two element types (the build's cost).
template <class Fn>
void for_each_rotated(std::size_t bucket, std::uint64_t seed, Fn&& fn) {
  fn(qsdp::hadamard<qsdp::uniform<1>>{{.bucket_size = bucket}, seed});
  fn(qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = bucket, .seed = seed}});
  fn(qsdp::hadamard<qsdp::symmetric<8>>{{.bucket_size = bucket}, seed});
  fn(qsdp::hadamard<qsdp::random_shift<2>>{{.bucket_size = bucket, .seed = seed}});
}

template <class T>
void check_round_trips(const char* type_name) {
  for (distribution d : all_distributions) {
    for (std::size_t bucket : {std::size_t{16}, std::size_t{256}, std::size_t{4096}}) {
      for (std::size_t n :
           {std::size_t{1}, std::size_t{15}, std::size_t{1000}, std::size_t{8291}}) {
        const auto x = convert<T>(make_data(d, n, static_cast<std::uint32_t>(n + bucket)));
        for_each_rotated(bucket, 5, [&](auto q) {
          const std::string failure = check_rotated_round_trip(q, x);
          INFO(std::string(type_name) << " " << describe(q) << " bucket " << bucket << " count "
                                      << n << " data " << std::string(name(d)));
          REQUIRE(failure == "");
        });
      }
    }
  }
}

}  // namespace

TEST_CASE("hadamard<Inner> round trips keep Inner's bound through the rotation: float") {
  check_round_trips<float>("float");
}
#if QSDP_HAS_CUDA_HALF
TEST_CASE("hadamard<Inner> round trips keep Inner's bound through the rotation: bf16") {
  check_round_trips<__nv_bfloat16>("__nv_bfloat16");
}
#endif
TEST_CASE("hadamard round trips in double and half: the values are rotated as floats") {
  for (std::size_t n : {std::size_t{7}, std::size_t{3000}}) {
    const auto x = make_data(distribution::mixed_scale, n, 6);
    const qsdp::hadamard<qsdp::stochastic<4>> q{{.bucket_size = 64, .seed = 1}};
    CHECK(check_rotated_round_trip(q, convert<double>(x)) == "");
#if QSDP_HAS_CUDA_HALF
    CHECK(check_rotated_round_trip(q, convert<__half>(x)) == "");
#endif
  }
}

TEST_CASE("the round-trip check has power: a wrong inverse sign fails it") {
  // Decode a packet with a rotation record for another call: the signs no longer match.
  qsdp::hadamard<qsdp::stochastic<8>> q{{.bucket_size = 64, .seed = 3}};
  const auto x = make_data(distribution::normal, 640, 1);
  std::vector<std::byte> packet(qsdp::compressed_size<float>(q, x.size()));
  qsdp::encode(q, x.data(), x.size(), packet.data());
  packet[sizeof(qsdp::detail::packet_header) + 8] ^= std::byte{1};  // the call index
  std::vector<float> y(x.size());
  qsdp::decode(q, packet.data(), x.size(), y.data());
  double err2 = 0, norm2 = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    err2 += (x[i] - y[i]) * (x[i] - y[i]), norm2 += x[i] * x[i];
  CHECK(std::sqrt(err2 / norm2) > 0.5);  // 8-bit's error is about 0.01
}

TEST_CASE("hadamard over user policies: a deterministic one and a randomized one") {
  const auto x = make_data(distribution::gradient_with_outliers, 3000, 4);
  for (std::size_t bucket : {std::size_t{64}, std::size_t{128}}) {
    qsdp::hadamard<power_of_two_quantizer> a{{.bucket_size = bucket}, 9};
    qsdp::hadamard<stochastic_sign> b{{.bucket_size = bucket, .seed = 2}};
    CHECK(decltype(a)::wire_id == 0x80);
    CHECK(decltype(a)::wire_tag == power_of_two_quantizer::wire_tag);
    CHECK(std::string(qsdp::policy_name<decltype(b)>()) == "hadamard<user-defined>");
    for (const auto& y : {round_trip(a, x), round_trip(b, x)})
      for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(std::isfinite(y[i]));
    // A power-of-two grid keeps the rotated values' relative error under 1/3; rotated back, the
    // error's norm keeps that share of the data's.
    const auto y = round_trip(a, x);
    double err2 = 0, norm2 = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      err2 += (x[i] - y[i]) * (x[i] - y[i]), norm2 += x[i] * x[i];
    CHECK(std::sqrt(err2 / norm2) < 0.35);
    // A packet of the inner policy is refused, and the other way round.
    std::vector<std::byte> packet(qsdp::compressed_size<float>(a, x.size()));
    qsdp::encode(a, x.data(), x.size(), packet.data());
    std::vector<float> out(x.size());
    CHECK_THROWS_WITH_AS(qsdp::decode(power_of_two_quantizer{.bucket_size = bucket}, packet.data(),
                                      x.size(), out.data()),
                         doctest::Contains("'hadamard<user-defined>' (id 128"), qsdp::error);
  }
}

namespace {

struct bias {
  double
      worst_in_standard_errors;  // max over values of |mean - x| / (its sample std / sqrt(calls))
  double largest_deviation;      // max over values of |mean - x|
  double mean_standard_error;
};

/// Means of decode(encode(x)) over `calls` encodes, each value's standard error estimated from
/// its own sample variance (the rotation mixes every rounding error of a piece into every value,
/// so no per-value bound on the spread is simple to state). `fixed_call`: every encode at call 0.
template <class Q>
bias measure_bias(Q q, const std::vector<float>& x, int calls, bool fixed_call = false) {
  std::vector<double> sum(x.size(), 0.0), sum2(x.size(), 0.0);
  std::vector<std::byte> packet(qsdp::compressed_size<float>(q, x.size()));
  std::vector<float> y(x.size());
  for (int c = 0; c < calls; ++c) {
    if (fixed_call)
      qsdp::encode(q, x.data(), x.size(), packet.data(), qsdp::rng_position{});
    else
      qsdp::encode(q, x.data(), x.size(), packet.data());
    qsdp::decode(q, packet.data(), x.size(), y.data());
    for (std::size_t i = 0; i < x.size(); ++i) sum[i] += y[i], sum2[i] += double(y[i]) * y[i];
  }
  bias b{0, 0, 0};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double mean = sum[i] / calls;
    const double variance = std::max(0.0, (sum2[i] - calls * mean * mean) / (calls - 1));
    const double standard_error = std::sqrt(variance / calls);
    const double deviation = std::abs(mean - x[i]);
    b.largest_deviation = std::max(b.largest_deviation, deviation);
    b.mean_standard_error += standard_error / static_cast<double>(x.size());
    b.worst_in_standard_errors =
        std::max(b.worst_in_standard_errors, deviation / std::max(standard_error, 1e-30));
  }
  return b;
}

}  // namespace

TEST_CASE("hadamard over an unbiased policy is unbiased; the check sees a biased one") {
  std::vector<float> x;
  for (int i = 0; i < 64; ++i) x.push_back(std::fmod(0.618034f * float(i + 1), 1.0f));
  // 64 values, 4000 calls: the largest of 64 |t|-statistics stays well under 5 when unbiased.
  const bias s4 =
      measure_bias(qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = 64, .seed = 1}}, x, 4000);
  const bias s2 =
      measure_bias(qsdp::hadamard<qsdp::stochastic<2>>{{.bucket_size = 32, .seed = 2}}, x, 4000);
  const bias r4 =
      measure_bias(qsdp::hadamard<qsdp::random_shift<4>>{{.bucket_size = 64, .seed = 3}}, x, 4000);
  CHECK(s4.worst_in_standard_errors < 5.0);
  CHECK(s2.worst_in_standard_errors < 5.0);
  CHECK(r4.worst_in_standard_errors < 5.0);
  // Power: round to nearest with the same rotation every time has a fixed error per value, many
  // times the standard error of the unbiased 2-bit means above.
  const bias rtn = measure_bias(qsdp::hadamard<qsdp::uniform<2>>{{.bucket_size = 32}, 4}, x, 400,
                                /*fixed_call=*/true);
  CHECK(rtn.largest_deviation > 20 * s2.mean_standard_error);
}

TEST_CASE("a bucket holding NaN or inf decodes to NaN, all of it; the others stay finite") {
  qsdp::hadamard<qsdp::stochastic<4>> q{{.bucket_size = 64, .seed = 1}};
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (std::size_t at :
         {std::size_t{5}, std::size_t{64 * 3 + 40}}) {  // a whole bucket, the short last
      auto x = make_data(distribution::normal, 64 * 3 + 50, 2);
      x[at] = bad;
      const auto y = round_trip(q, x);
      const std::size_t bucket = at / 64;
      for (std::size_t i = 0; i < x.size(); ++i) {
        INFO("value " << i << " bad value at " << at);
        if (i / 64 == bucket)
          REQUIRE(std::isnan(y[i]));
        else
          REQUIRE(std::isfinite(y[i]));
      }
    }
  }
  // Finite data at the edge of float stay finite: the forward transform scales first, the
  // inverse saturates.
  std::vector<float> big(256);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = (i % 3 ? 1.0f : -1.0f) * 3.4e38f;
  for (const auto& y :
       {round_trip(qsdp::hadamard<qsdp::uniform<2>>{{.bucket_size = 256}, 1}, big),
        round_trip(qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = 64, .seed = 1}}, big)})
    for (float v : y) REQUIRE(std::isfinite(v));
}

TEST_CASE("hadamard packets: their own id, Inner's size plus 16 bytes, bucket sizes checked") {
  using H = qsdp::hadamard<qsdp::stochastic<4>>;
  H g{{.bucket_size = 256, .seed = 7}};  // the contract's spelling
  static_assert(qsdp::quantizer<H>);
  CHECK(H::wire_id == 0x82);
  CHECK(std::string(qsdp::policy_name<H>()) == "hadamard<stochastic>");
  CHECK(std::string(qsdp::policy_name<qsdp::hadamard<qsdp::random_shift<3>>>()) ==
        "hadamard<random_shift>");
  CHECK(g.seed == 7);
  const qsdp::stochastic<4> inner{.bucket_size = 256, .seed = 7};
  for (std::size_t n : {0, 1, 255, 256, 1000, 100000}) {
    CHECK(qsdp::compressed_size<float>(g, n) <= qsdp::compressed_size<float>(inner, n) + 16);
    CHECK(qsdp::compressed_size<float>(g, n) >= qsdp::compressed_size<float>(inner, n));
  }
  const auto x = make_data(distribution::normal, 1000, 3);
  std::vector<std::byte> packet(qsdp::compressed_size<float>(g, x.size()));
  qsdp::encode(g, x.data(), x.size(), packet.data(), qsdp::rng_position{.call = 42, .stream = 9});
  const rotation_record r = rotation_of(packet);
  CHECK(r.seed == 7);
  CHECK(r.call == 42);
  CHECK(std::to_integer<int>(packet[6]) == 0x82);  // the header's quantizer id
  std::vector<float> y(x.size());
  CHECK_THROWS_WITH_AS(qsdp::decode(inner, packet.data(), x.size(), y.data()),
                       doctest::Contains("encoded by quantizer 'hadamard<stochastic>' (id 130"),
                       qsdp::error);
  std::vector<std::byte> plain(qsdp::compressed_size<float>(inner, x.size()));
  qsdp::encode(inner, x.data(), x.size(), plain.data());
  CHECK_THROWS_WITH_AS(qsdp::decode(g, plain.data(), x.size(), y.data()),
                       doctest::Contains("decoder uses 'hadamard<stochastic>' (id 130"),
                       qsdp::error);
  // Same seed and position: same bytes, whatever the stream's owner does with its counter.
  std::vector<std::byte> again(packet.size());
  qsdp::encode(g, x.data(), x.size(), again.data(), qsdp::rng_position{.call = 42, .stream = 9});
  CHECK(again == packet);
  for (std::size_t bad : {0, 1, 8, 15, 17, 100, 255, 8192}) {
    H h{{.bucket_size = bad}};
    INFO("bucket_size " << bad);
    CHECK_THROWS_WITH_AS(qsdp::encode(h, x.data(), x.size(), packet.data()),
                         doctest::Contains(bad == 0 ? "bucket_size is 0; expected >= 1"
                                                    : "needs a power of two from 16 to 4096"),
                         qsdp::error);
    CHECK_THROWS_AS((void)qsdp::compressed_size<float>(h, x.size()), qsdp::error);
  }
  for (std::size_t good : {16, 32, 4096}) {
    H h{{.bucket_size = good}};
    CHECK_NOTHROW((void)qsdp::compressed_size<float>(h, x.size()));
  }
  // Every encode through the policy takes the next call: fresh signs each time.
  qsdp::hadamard<qsdp::uniform<8>> u{{.bucket_size = 64}, 1};
  std::vector<std::byte> first(qsdp::compressed_size<float>(u, x.size())), second(first.size());
  qsdp::encode(u, x.data(), x.size(), first.data());
  qsdp::encode(u, x.data(), x.size(), second.data());
  CHECK(rotation_of(first).call + 1 == rotation_of(second).call);
  CHECK(first != second);
}

namespace {

template <class T, class Q>
void check_paths(const Q& q, const std::vector<float>& data, const char* type_name) {
  const auto x = convert<T>(data);
  auto run = [&](std::vector<std::byte>& packet, std::vector<T>& out, std::vector<float>& acc) {
    packet.assign(qsdp::compressed_size<T>(q, x.size()), std::byte{0});
    qsdp::encode(q, x.data(), x.size(), packet.data(), qsdp::rng_position{.call = 2, .stream = 3});
    out.assign(x.size(), T{});
    qsdp::decode(q, packet.data(), x.size(), out.data());
    acc.assign(x.size(), 0.5f);
    qsdp::decode_accumulate(q, packet.data(), x.size(), acc.data());
  };
  std::vector<std::byte> fast, avx2, base;
  std::vector<T> fast_out, avx2_out, base_out;
  std::vector<float> fast_acc, avx2_acc, base_acc;
  run(fast, fast_out, fast_acc);
  qsdp::detail::host_allow_avx512 = false;
  run(avx2, avx2_out, avx2_acc);
  qsdp::detail::host_allow_avx512 = true;
  qsdp::detail::host_force_baseline = true;
  run(base, base_out, base_acc);
  qsdp::detail::host_force_baseline = false;
  INFO(type_name << " " << describe(q) << " bucket " << q.bucket_size << " count " << x.size());
  REQUIRE(avx2 == base);
  REQUIRE(fast == base);
  REQUIRE(std::memcmp(fast_out.data(), base_out.data(), x.size() * sizeof(T)) == 0);
  REQUIRE(std::memcmp(avx2_out.data(), base_out.data(), x.size() * sizeof(T)) == 0);
  REQUIRE(std::memcmp(fast_acc.data(), base_acc.data(), x.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("hadamard: the AVX-512, AVX2 and baseline host paths give bit-identical bytes") {
  INFO("host path: " << qsdp::detail::host_codec_isa());
  for (std::size_t n : {std::size_t{1}, std::size_t{77}, std::size_t{4096}, std::size_t{10000}}) {
    for (distribution d : all_distributions) {
      const auto data = make_data(d, n, static_cast<std::uint32_t>(n));
      for (std::size_t bucket :
           {std::size_t{16}, std::size_t{64}, std::size_t{1024}, std::size_t{4096}}) {
        for_each_rotated(bucket, 8, [&](auto q) {
          check_paths<float>(q, data, "float");
#if QSDP_HAS_CUDA_HALF
          check_paths<__nv_bfloat16>(q, data, "bf16");
#endif
        });
      }
    }
  }
}

TEST_CASE("decode_accumulate sums packets rotated alike before transforming back once") {
  using H = qsdp::hadamard<qsdp::stochastic<4>>;
  const H q{{.bucket_size = 256, .seed = 4}};
  const std::size_t n = 256 * 5 + 77, world = 5;
  const std::size_t bytes = qsdp::compressed_size<float>(q, n);
  std::vector<std::byte> packets(world * bytes);
  std::vector<std::vector<float>> xs;
  for (std::size_t r = 0; r < world; ++r) {
    xs.push_back(make_data(distribution::gradient_with_outliers, n, static_cast<std::uint32_t>(r)));
    // A reduce-scatter's packets: one call index, each rank its own stream.
    qsdp::encode(q, xs[r].data(), n, packets.data() + r * bytes,
                 qsdp::rng_position{.call = 6, .stream = static_cast<std::uint32_t>(r)});
  }
  // The reference: every packet decoded (rotated back) on its own, summed in double.
  std::vector<double> want(n, 0.0);
  for (std::size_t r = 0; r < world; ++r) {
    std::vector<float> y(n);
    qsdp::decode(q, packets.data() + r * bytes, n, y.data());
    for (std::size_t i = 0; i < n; ++i) want[i] += y[i];
  }
  std::vector<float> acc(n, 1.0f);
  qsdp::decode_accumulate(q, packets.data(), world, n, acc.data());
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < n; ++i) REQUIRE(std::abs(acc[i] - 1.0 - want[i]) <= 1e-5 * scale);
  // The per-packet path gives the same sum to float rounding, and it is taken where the packets'
  // rotations differ: then the result is the plain sum of the packets' values, bit for bit.
  std::vector<std::byte> mixed = packets;
  qsdp::encode(q, xs[2].data(), n, mixed.data() + 2 * bytes, qsdp::rng_position{.call = 7});
  std::vector<float> each(n, 0.0f), summed(n, 0.0f);
  for (std::size_t r = 0; r < world; ++r) {
    std::vector<float> y(n);
    qsdp::decode(q, mixed.data() + r * bytes, n, y.data());
    for (std::size_t i = 0; i < n; ++i) each[i] += y[i];
  }
  qsdp::decode_accumulate(q, mixed.data(), world, n, summed.data());
  CHECK(std::memcmp(each.data(), summed.data(), n * sizeof(float)) == 0);
  // A bucket flagged in one packet is NaN in the sum; its neighbours are not.
  auto bad = xs;
  bad[3][300] = std::numeric_limits<float>::infinity();
  qsdp::encode(q, bad[3].data(), n, packets.data() + 3 * bytes,
               qsdp::rng_position{.call = 6, .stream = 3});
  std::fill(acc.begin(), acc.end(), 0.0f);
  qsdp::decode_accumulate(q, packets.data(), world, n, acc.data());
  for (std::size_t i = 0; i < n; ++i) REQUIRE(std::isnan(acc[i]) == (i / 256 == 1));
}

TEST_CASE("4-bit on gradient-like data with outliers: hadamard's error at least 3x below plain") {
  // The demo's gradients (examples/collectives_demo.cpp): N(0, 1e-3), one value in 1000 a 100x
  // outlier.
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal;
  std::vector<float> x(1 << 18);
  for (float& v : x) {
    const float f = normal(rng);
    v = rng() % 1000 == 0 ? 0.1f * f : 1e-3f * f;
  }
  auto rel_l2 = [&](const auto& q) {
    const auto y = round_trip(q, x);
    double e = 0, t = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      e += (x[i] - y[i]) * double(x[i] - y[i]), t += x[i] * double(x[i]);
    return std::sqrt(e / t);
  };
  for (std::size_t bucket : {std::size_t{256}, std::size_t{1024}}) {
    const double plain = rel_l2(qsdp::stochastic<4>{.bucket_size = bucket, .seed = 1});
    const double rotated =
        rel_l2(qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = bucket, .seed = 1}});
    MESSAGE("bucket " << bucket << ": stochastic<4> rel. L2 " << plain
                      << ", hadamard<stochastic<4>> " << rotated << " (" << plain / rotated
                      << "x)");
    CHECK(plain / rotated >= 3.0);
  }
}

TEST_CASE("hadamard_piece_log2 names the piece hadamard_forward rotates each value in") {
  // The device kernels rotate a bucket's values in parallel and find each value's piece from its
  // offset alone; the host walks the pieces in order. Every bucket length, every offset.
  std::size_t wrong = 0, checked = 0;
  for (std::uint32_t n = 1; n <= qsdp::detail::hadamard_max_bucket; ++n) {
    for (std::uint32_t start = 0; start < n;) {
      const auto p = static_cast<std::uint32_t>(qsdp::detail::hadamard_piece(n - start));
      unsigned log = 0;
      while ((1u << log) < p) ++log;
      for (std::uint32_t offset = start; offset < start + p; ++offset, ++checked)
        wrong += qsdp::detail::hadamard_piece_log2(offset, n) != log;
      start += p;
    }
  }
  CHECK(checked == std::size_t{4096} * 4097 / 2);
  CHECK(wrong == 0);
}
