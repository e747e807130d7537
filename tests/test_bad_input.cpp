// SPDX-License-Identifier: Apache-2.0
// Bad and extreme input: what each case gets is listed in README.md ("Bad input").
#include <doctest/doctest.h>

#include <cfloat>
#include <cstring>
#include <limits>

#include "support.hpp"

TEST_SUITE_BEGIN("bad_input");

using namespace qsdp_test;

TEST_CASE("NaN or inf in a bucket: that bucket decodes to NaN, the others are untouched") {
  const std::size_t bucket = 100, n = 1000;
  const auto clean = make_data(distribution::normal, n, 1);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY}) {
    auto dirty = clean;
    dirty[250] = bad;  // bucket 2
    for_each_policy(bucket, 7, [&](auto q) {
      using Q = decltype(q);
      Q q1 = q, q2 = q;  // same call index for both encodes
      const auto y_clean = round_trip(q1, clean);
      const auto y_dirty = round_trip(q2, dirty);
      INFO(describe(q) << " bad value " << bad);
      for (std::size_t i = 0; i < n; ++i) {
        if (i / bucket == 2)
          REQUIRE(std::isnan(y_dirty[i]));
        else
          REQUIRE(std::bit_cast<std::uint32_t>(y_dirty[i]) ==
                  std::bit_cast<std::uint32_t>(y_clean[i]));
      }
      std::vector<float> acc(n, 0.0f);
      std::vector<std::byte> p(qsdp::compressed_size<float>(q, n));
      Q q3 = q;
      qsdp::encode(q3, dirty.data(), n, p.data());
      qsdp::decode_accumulate(q3, p.data(), n, acc.data());
      for (std::size_t i = 200; i < 300; ++i) REQUIRE(std::isnan(acc[i]));
      REQUIRE(std::isfinite(acc[199]));
    });
  }
#if QSDP_HAS_CUDA_HALF
  auto half_data = convert<__half>(clean);
  half_data[5] = from_f<__half>(INFINITY);
  const auto y = round_trip(qsdp::uniform<4>{.bucket_size = bucket}, half_data);
  CHECK(std::isnan(to_f(y[0])));
  CHECK(std::isfinite(to_f(y[100])));
#endif
}

TEST_CASE("a double beyond float's range marks its bucket non-finite instead of being clamped") {
  std::vector<double> x(64, 1.0);
  x[3] = 1e300;
  const auto y = round_trip(qsdp::uniform<8>{.bucket_size = 32}, x);
  CHECK(std::isnan(y[0]));
  CHECK(y[40] == 1.0);
}

TEST_CASE("all-equal buckets decode exactly") {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 3.14159f, 1e-40f, -FLT_MAX, FLT_MAX, FLT_MIN}) {
    const std::vector<float> x(300, v);
    for_each_policy(64, 3, [&](auto q) {
      const auto y = round_trip(q, x);
      INFO(describe(q) << " value " << v);
      for (float got : y) REQUIRE(got == v);
    });
  }
}

TEST_CASE("values near +-FLT_MAX: finite in, finite out, within the bound") {
  std::vector<std::vector<float>> cases = {
      {FLT_MAX, -FLT_MAX, 0.0f, FLT_MAX / 3, -FLT_MAX / 7},
      {FLT_MAX, FLT_MAX * 0.999f, FLT_MAX * 0.5f},
      {-FLT_MAX, -FLT_MAX * 0.75f, 1.0f},
  };
  for (auto& base : cases) {
    std::vector<float> x;
    for (int r = 0; r < 20; ++r) x.insert(x.end(), base.begin(), base.end());
    for_each_policy(17, 5, [&](auto q) {
      const auto y = round_trip(q, x);
      INFO(describe(q));
      for (float v : y) REQUIRE(std::isfinite(v));
      REQUIRE(check_bounds(q, x, y) == "");
    });
  }
#if QSDP_HAS_CUDA_HALF
  // The grid of random_shift reaches past the data; half's narrow range must still not overflow.
  std::vector<__half> h(256);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = from_f<__half>(i % 2 ? 65504.0f : -65504.0f);
  for (int call = 0; call < 20; ++call) {
    const auto y =
        round_trip(qsdp::random_shift<2>{.bucket_size = 256, .seed = std::uint64_t(call)}, h);
    for (auto v : y) REQUIRE(std::isfinite(to_f(v)));
  }
#endif
}

TEST_CASE("denormals: finite, exact when all equal, within the bound") {
  std::vector<float> x(500);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = std::bit_cast<float>(static_cast<std::uint32_t>(1 + i * 7919 % 0x7FFFFF)) *
           (i % 3 ? 1 : -1);
  for_each_policy(50, 9, [&](auto q) {
    const auto y = round_trip(q, x);
    INFO(describe(q));
    REQUIRE(check_bounds(q, x, y) == "");
  });
}

TEST_CASE("count 0 and counts that do not fill the last bucket") {
  std::vector<float> none;
  for_each_policy(64, 1, [&](auto q) {
    std::vector<std::byte> p(qsdp::compressed_size<float>(q, 0));
    CHECK(p.size() == 32);
    qsdp::encode(q, none.data(), 0, p.data());
    qsdp::decode(q, p.data(), 0, static_cast<float*>(nullptr));
    qsdp::decode_accumulate(q, p.data(), 0, static_cast<float*>(nullptr));
  });
  for (std::size_t n : {1, 63, 65, 127, 129}) {
    const auto x = make_data(distribution::uniform, n, 2);
    for_each_policy(64, 1, [&](auto q) {
      INFO(describe(q) << " count " << n);
      CHECK(check_bounds(q, x, round_trip(q, x)) == "");
    });
  }
}

TEST_CASE("bucket_size 0 is refused with a qsdp::error") {
  const std::vector<float> x(10, 1.0f);
  std::vector<std::byte> p(1024);
  std::vector<float> y(10);
  qsdp::uniform<8> q{.bucket_size = 0};
  CHECK_THROWS_WITH_AS(qsdp::compressed_size<float>(q, 10),
                       doctest::Contains("bucket_size is 0; expected >= 1"), qsdp::error);
  CHECK_THROWS_WITH_AS(qsdp::encode(q, x.data(), x.size(), p.data()),
                       doctest::Contains("bucket_size is 0"), qsdp::error);
  CHECK_THROWS_WITH_AS(qsdp::decode(q, p.data(), y.size(), y.data()),
                       doctest::Contains("bucket_size is 0"), qsdp::error);
}

TEST_CASE("null pointers are refused with a qsdp::error naming them") {
  std::vector<std::byte> p(1024);
  qsdp::uniform<8> q;
  CHECK_THROWS_WITH_AS(qsdp::encode(q, static_cast<const float*>(nullptr), 5, p.data()),
                       doctest::Contains("src is null with count 5"), qsdp::error);
  CHECK_THROWS_WITH_AS(qsdp::encode(q, static_cast<const float*>(nullptr), 0, nullptr),
                       doctest::Contains("packet is null"), qsdp::error);
  const std::vector<float> x(5, 1.0f);
  qsdp::encode(q, x.data(), 5, p.data());
  CHECK_THROWS_WITH_AS(qsdp::decode(q, p.data(), 5, static_cast<float*>(nullptr)),
                       doctest::Contains("dst is null with count 5"), qsdp::error);
}

TEST_CASE("buffers at any byte offset work and give the same results") {
  const auto x = make_data(distribution::normal, 1001, 3);
  for_each_policy(100, 4, [&](auto q) {
    using Q = decltype(q);
    Q reference_policy = q;
    const std::size_t size = qsdp::compressed_size<float>(q, x.size());
    std::vector<std::byte> reference(size);
    qsdp::encode(reference_policy, x.data(), x.size(), reference.data());
    std::vector<float> reference_out(x.size());
    qsdp::decode(q, reference.data(), x.size(), reference_out.data());
    for (std::size_t offset = 1; offset < 16; offset += 3) {
      std::vector<std::byte> src_storage(x.size() * 4 + 16), packet_storage(size + 16),
          dst_storage(x.size() * 4 + 16);
      auto* src = reinterpret_cast<float*>(src_storage.data() + offset);
      std::memcpy(static_cast<void*>(src), x.data(), x.size() * 4);
      std::byte* packet = packet_storage.data() + offset;
      auto* dst = reinterpret_cast<float*>(dst_storage.data() + (16 - offset));
      Q local = q;
      qsdp::encode(local, src, x.size(), packet);
      qsdp::decode(local, packet, x.size(), dst);
      INFO(describe(q) << " offset " << offset);
      REQUIRE(std::memcmp(packet, reference.data(), size) == 0);
      REQUIRE(std::memcmp(static_cast<const void*>(dst), reference_out.data(), x.size() * 4) == 0);
      std::vector<std::byte> acc_storage(x.size() * 4 + 16, std::byte{0});
      auto* acc = reinterpret_cast<float*>(acc_storage.data() + offset);
      qsdp::decode_accumulate(local, packet, x.size(), acc);
      REQUIRE(std::memcmp(static_cast<const void*>(acc), reference_out.data(), x.size() * 4) == 0);
    }
  });
}

TEST_CASE("a packet buffer that is too small is refused, naming both sizes") {
  const auto x = make_data(distribution::normal, 1000, 5);
  qsdp::uniform<8> q{.bucket_size = 100};
  const std::size_t need = qsdp::compressed_size<float>(q, x.size());
  std::vector<std::byte> p(need);
  CHECK_THROWS_WITH_AS(
      qsdp::encode(q, std::span<const float>(x), std::span<std::byte>(p.data(), need - 1)),
      doctest::Contains(("holds " + std::to_string(need - 1) +
                         " bytes, but compressed_size for 1000 values is " + std::to_string(need))
                            .c_str()),
      qsdp::error);
  qsdp::encode(q, std::span<const float>(x), std::span<std::byte>(p));
  std::vector<float> y(x.size());
  CHECK_THROWS_WITH_AS(
      qsdp::decode(q, std::span<const std::byte>(p.data(), need - 16), std::span<float>(y)),
      doctest::Contains(("holds " + std::to_string(need - 16) +
                         " bytes, but a packet of 1000 values needs " + std::to_string(need))
                            .c_str()),
      qsdp::error);
  CHECK_THROWS_WITH_AS(
      qsdp::decode(q, std::span<const std::byte>(p.data(), 20), std::span<float>(y)),
      doctest::Contains("less than the 32-byte header"), qsdp::error);
}

TEST_CASE("header messages name every wire id's policy family, and unknown ids as unknown") {
  using qsdp::detail::hadamard_id_bit;
  using qsdp::detail::quantizer_id_name;
  CHECK(std::string(quantizer_id_name(1)) == "uniform");
  CHECK(std::string(quantizer_id_name(5)) == "identity");
  CHECK(std::string(quantizer_id_name(6)) == "mxfp8<e4m3>");
  CHECK(std::string(quantizer_id_name(11)) == "nvfp4");
  CHECK(std::string(quantizer_id_name(12)) == "unknown");
  CHECK(std::string(quantizer_id_name(hadamard_id_bit | 2)) == "hadamard<stochastic>");
  CHECK(std::string(quantizer_id_name(hadamard_id_bit | 5)) == "unknown");  // never rotated
  CHECK(std::string(quantizer_id_name(hadamard_id_bit | 10)) == "hadamard<mxfp4>");
  CHECK(std::string(quantizer_id_name(hadamard_id_bit | 12)) == "unknown");
}

TEST_CASE("a header that does not match the decoder is refused, naming both values") {
  const auto x = make_data(distribution::normal, 1000, 6);
  qsdp::uniform<8> q{.bucket_size = 100};
  std::vector<std::byte> p(qsdp::compressed_size<float>(q, x.size()));
  qsdp::encode(q, x.data(), x.size(), p.data());
  std::vector<float> y(x.size());
  CHECK_THROWS_WITH_AS(
      qsdp::decode(qsdp::uniform<8>{.bucket_size = 128}, p.data(), x.size(), y.data()),
      doctest::Contains("packet bucket_size 100, decoder expects 128"), qsdp::error);
  CHECK_THROWS_WITH_AS(
      qsdp::decode(qsdp::uniform<4>{.bucket_size = 100}, p.data(), x.size(), y.data()),
      doctest::Contains("packet has 8 bits per value, decoder expects 4"), qsdp::error);
  CHECK_THROWS_WITH_AS(
      qsdp::decode(qsdp::stochastic<8>{.bucket_size = 100}, p.data(), x.size(), y.data()),
      doctest::Contains("encoded by quantizer 'uniform' (id 1, tag 0), decoder uses 'stochastic'"),
      qsdp::error);
  CHECK_THROWS_WITH_AS(qsdp::decode(q, p.data(), 999, y.data()),
                       doctest::Contains("packet holds 1000 values, decoder was asked for 999"),
                       qsdp::error);
  CHECK_THROWS_WITH_AS(qsdp::decode_accumulate(q, p.data(), 1001, y.data()),
                       doctest::Contains("packet holds 1000 values, decoder was asked for 1001"),
                       qsdp::error);
  auto corrupt = p;
  corrupt[0] = std::byte{0};
  CHECK_THROWS_WITH_AS(
      qsdp::decode(q, corrupt.data(), x.size(), y.data()),
      doctest::Contains("not a qsdp packet: magic 0x50445300, expected 0x50445351"), qsdp::error);
  corrupt = p;
  corrupt[4] = std::byte{9};
  CHECK_THROWS_WITH_AS(qsdp::decode(q, corrupt.data(), x.size(), y.data()),
                       doctest::Contains("format version 9, this build reads version 1"),
                       qsdp::error);
  // Identity packets hold raw values: the element type must match.
  std::vector<std::byte> raw(qsdp::compressed_size<float>(qsdp::identity{}, x.size()));
  qsdp::encode(qsdp::identity{}, x.data(), x.size(), raw.data());
  std::vector<double> yd(x.size());
  CHECK_THROWS_WITH_AS(
      qsdp::decode(qsdp::identity{}, raw.data(), x.size(), yd.data()),
      doctest::Contains("packet holds float values (type 1), decoder expects double"), qsdp::error);
  // A later packet of a contiguous list that disagrees is named by its index.
  std::vector<std::byte> two(p.size() * 2);
  std::memcpy(two.data(), p.data(), p.size());
  qsdp::uniform<8> other{.bucket_size = 50};
  std::vector<std::byte> p2(qsdp::compressed_size<float>(other, x.size()));
  qsdp::encode(other, x.data(), x.size(), p2.data());
  std::memcpy(two.data() + p.size(), p2.data(), std::min(p.size(), p2.size()));
  std::vector<float> acc(x.size());
  CHECK_THROWS_WITH_AS(qsdp::decode_accumulate(q, two.data(), 2, x.size(), acc.data()),
                       doctest::Contains("(packet 1): packet bucket_size 50, decoder expects 100"),
                       qsdp::error);
}

TEST_CASE("rng_position.stream out of range is refused") {
  const std::vector<float> x(10, 1.0f);
  std::vector<std::byte> p(1024);
  CHECK_THROWS_WITH_AS(qsdp::encode(qsdp::stochastic<8>{}, x.data(), x.size(), p.data(),
                                    qsdp::rng_position{.call = 0, .stream = 1u << 31}),
                       doctest::Contains("rng_position.stream is 2147483648; expected < 2^31"),
                       qsdp::error);
}

TEST_SUITE_END();
