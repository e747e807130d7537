// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstring>

#include "support.hpp"

TEST_SUITE_BEGIN("codec");

using namespace qsdp_test;

namespace {
std::size_t up16(std::size_t n) { return (n + 15) / 16 * 16; }
}  // namespace

TEST_CASE("compressed_size follows docs/reference/wire-format.md") {
  // header 32 | metadata buckets*meta | flags ceil(buckets/8) | codes ceil(count*bits/8), each
  // 16-aligned
  auto expected = [](std::size_t count, std::size_t bucket, std::size_t meta, std::size_t bits) {
    const std::size_t buckets = (count + bucket - 1) / bucket;
    return 32 + up16(buckets * meta) + up16((buckets + 7) / 8) + up16((count * bits + 7) / 8);
  };
  for (std::size_t count : {0, 1, 5, 1023, 1024, 1025, 1 << 20}) {
    CHECK(qsdp::compressed_size<float>(qsdp::uniform<8>{}, count) == expected(count, 1024, 8, 8));
    CHECK(qsdp::compressed_size<float>(qsdp::stochastic<3>{.bucket_size = 100}, count) ==
          expected(count, 100, 8, 3));
    CHECK(qsdp::compressed_size<double>(qsdp::symmetric<1>{.bucket_size = 7}, count) ==
          expected(count, 7, 4, 1));
    CHECK(qsdp::compressed_size<float>(qsdp::random_shift<5>{}, count) ==
          expected(count, 1024, 12, 5));
    CHECK(qsdp::compressed_size<float>(qsdp::identity{}, count) == 32 + up16(count * 4));
    CHECK(qsdp::compressed_size<double>(qsdp::identity{}, count) == 32 + up16(count * 8));
  }
  // The README's figure: 8 bits, bucket 1024, two fp32 of metadata -> 8.0625 bits per value.
  const std::size_t n = std::size_t{1} << 26;
  const double bits_per_value = 8.0 * qsdp::compressed_size<float>(qsdp::uniform<8>{}, n) / n;
  CHECK(bits_per_value ==
        doctest::Approx(8.0625 + 1.0 / 1024).epsilon(1e-4));  // + 1 flag bit/bucket
}

TEST_CASE("the header carries what docs/reference/wire-format.md says") {
  const std::vector<float> x = make_data(distribution::normal, 3000, 1);
  qsdp::stochastic<5> q{.bucket_size = 256, .seed = 3};
  std::vector<std::byte> p(qsdp::compressed_size<float>(q, x.size()));
  qsdp::encode(q, x.data(), x.size(), p.data());
  const auto u8 = [&](std::size_t i) { return static_cast<unsigned>(p[i]); };
  CHECK(std::memcmp(p.data(), "QSDP", 4) == 0);
  CHECK(u8(4) == 1);  // version, little-endian u16
  CHECK(u8(5) == 0);
  CHECK(u8(6) == 2);  // stochastic
  CHECK(u8(7) == 5);  // bits
  CHECK(u8(8) == 1);  // float
  CHECK(u8(9) == 8);  // metadata bytes per bucket
  std::uint64_t bucket = 0, count = 0;
  std::memcpy(&bucket, p.data() + 16, 8);
  std::memcpy(&count, p.data() + 24, 8);
  CHECK(bucket == 256);
  CHECK(count == 3000);
  // First bucket's metadata is its min and max, as floats.
  float meta[2];
  std::memcpy(meta, p.data() + 32, 8);
  CHECK(meta[0] == *std::min_element(x.begin(), x.begin() + 256));
  CHECK(meta[1] == *std::max_element(x.begin(), x.begin() + 256));
}

TEST_CASE("identity is bit-exact for every element type, NaN payloads and signed zeros included") {
  std::vector<float> x = make_data(distribution::mixed_scale, 1001, 2);
  x[3] = std::bit_cast<float>(0x7FC12345u);
  x[4] = -0.0f;
  x[5] = -INFINITY;
  auto check = [&](const auto& values) {
    using T = typename std::decay_t<decltype(values)>::value_type;
    const auto y = round_trip(qsdp::identity{}, values);
    CHECK(std::memcmp(y.data(), values.data(), values.size() * sizeof(T)) == 0);
  };
  check(x);
  check(std::vector<double>(x.begin(), x.end()));
#if QSDP_HAS_CUDA_HALF
  check(convert<__half>(x));
  check(convert<__nv_bfloat16>(x));
#endif
}

TEST_CASE("decode_accumulate adds decoded values to the accumulator, packet after packet") {
  const std::size_t n = 10007, packets = 5;
  for_each_policy(1000, 21, [&](auto q) {
    using Q = decltype(q);
    const std::size_t size = qsdp::compressed_size<float>(q, n);
    std::vector<std::byte> all(size * packets);
    std::vector<float> expected(n, 0.5f);
    std::vector<float> decoded(n);
    for (std::size_t p = 0; p < packets; ++p) {
      const auto x = make_data(distribution::normal, n, static_cast<std::uint32_t>(100 + p));
      Q local = q;
      qsdp::encode(local, x.data(), n, all.data() + p * size);
      qsdp::decode(local, all.data() + p * size, n, decoded.data());
      for (std::size_t i = 0; i < n; ++i) expected[i] += decoded[i];  // same order as the library
    }
    std::vector<float> fused(n, 0.5f), one_by_one(n, 0.5f);
    qsdp::decode_accumulate(q, all.data(), packets, n, fused.data());
    for (std::size_t p = 0; p < packets; ++p)
      qsdp::decode_accumulate(q, all.data() + p * size, n, one_by_one.data());
    INFO(describe(q));
    REQUIRE(std::memcmp(fused.data(), expected.data(), n * sizeof(float)) == 0);
    REQUIRE(std::memcmp(one_by_one.data(), expected.data(), n * sizeof(float)) == 0);
  });
}

TEST_CASE("decode_accumulate reads identity packets of every element type into fp32") {
  const std::vector<float> x = make_data(distribution::uniform, 777, 3);
  std::vector<float> acc(x.size(), 1.0f);
  std::vector<std::byte> p(qsdp::compressed_size<double>(qsdp::identity{}, x.size()));
  const std::vector<double> xd(x.begin(), x.end());
  qsdp::encode(qsdp::identity{}, xd.data(), xd.size(), p.data());
  qsdp::decode_accumulate(qsdp::identity{}, p.data(), x.size(), acc.data());
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(acc[i] == 1.0f + x[i]);
#if QSDP_HAS_CUDA_HALF
  const auto xb = convert<__nv_bfloat16>(x);
  std::vector<std::byte> pb(qsdp::compressed_size<__nv_bfloat16>(qsdp::identity{}, x.size()) * 2);
  const std::size_t stride = pb.size() / 2;
  qsdp::encode(qsdp::identity{}, xb.data(), xb.size(), pb.data());
  qsdp::encode(qsdp::identity{}, xb.data(), xb.size(), pb.data() + stride);
  std::vector<float> acc2(x.size(), 0.0f);
  qsdp::decode_accumulate(qsdp::identity{}, pb.data(), 2, x.size(), acc2.data());
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(acc2[i] == 2.0f * to_f(xb[i]));
#endif
}

TEST_CASE("quantized packets decode into any element type") {
  const auto x = make_data(distribution::normal, 2000, 4);
  qsdp::uniform<8> q{.bucket_size = 128};
  std::vector<std::byte> p(qsdp::compressed_size<float>(q, x.size()));
  qsdp::encode(q, x.data(), x.size(), p.data());
  std::vector<float> as_float(x.size());
  std::vector<double> as_double(x.size());
  qsdp::decode(q, p.data(), x.size(), as_float.data());
  qsdp::decode(q, p.data(), x.size(), as_double.data());
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(as_double[i] == double(as_float[i]));
}

TEST_CASE("span overloads check both buffers' sizes") {
  const auto x = make_data(distribution::normal, 500, 5);
  qsdp::symmetric<4> q{.bucket_size = 64};
  std::vector<std::byte> p(qsdp::compressed_size<float>(q, x.size()));
  qsdp::encode(q, std::span<const float>(x), std::span<std::byte>(p));
  std::vector<float> y(x.size());
  qsdp::decode(q, std::span<const std::byte>(p), std::span<float>(y));
  CHECK(check_bounds(q, x, y) == "");
}

TEST_SUITE_END();
