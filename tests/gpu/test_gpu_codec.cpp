// SPDX-License-Identifier: Apache-2.0
// The device codec against the host codec: for the same inputs, seed and position, the GPU's packet
// is byte-identical to the host's, and the GPU decodes every packet to the host's values bit for
// bit (NaN payloads aside). Sizes cover the fast path (power-of-two buckets 64..4096, aligned
// pointers), the general path (other bucket sizes, pointers at odd byte offsets), short last
// buckets and count 0.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gpu_policies.hpp"
#include "gpu_support.hpp"
#include "support.hpp"

namespace {

template <class T>
bool same_value(T a, T b) {
  const float fa = qsdp_test::to_f(a), fb = qsdp_test::to_f(b);
  if (std::isnan(fa) || std::isnan(fb)) return std::isnan(fa) && std::isnan(fb);
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

struct layout_case {
  std::size_t count;
  std::size_t src_offset;
  std::size_t packet_offset;
};

template <class Q, class T>
void check_against_host(const Q& q, const layout_case& c, bool non_finite) {
  std::vector<float> values =
      qsdp_test::make_data(qsdp_test::distribution::mixed_scale, c.count, 11);
  if (non_finite && c.count > 10) {
    values[c.count / 2] = NAN;
    values[c.count / 5] = INFINITY;
  }
  const std::vector<T> x = qsdp_test::convert<T>(values);
  const qsdp::rng_position position{.call = 9, .stream = 2};
  std::vector<std::byte> host(qsdp::compressed_size<T>(q, c.count));
  qsdp::encode(q, x.data(), c.count, host.data(), position);
  const std::vector<std::byte> device =
      gpu_test::device_encode(q, x, c.src_offset, c.packet_offset, position);
  INFO(qsdp::policy_name<Q>()
       << " " << qsdp::detail::element_type_name(qsdp::detail::element_traits<T>::tag) << " count "
       << c.count << " offsets " << c.src_offset << "/" << c.packet_offset);
  REQUIRE(device.size() == host.size());
  const auto diff = std::mismatch(device.begin(), device.end(), host.begin());
  INFO("first differing byte " << (diff.first - device.begin()) << " of " << device.size());
  CHECK(diff.first == device.end());

  std::vector<T> expected(c.count);
  qsdp::decode(q, host.data(), c.count, expected.data());
  const std::vector<T> decoded =
      gpu_test::device_decode<Q, T>(q, host, c.count, c.packet_offset, c.src_offset);
  std::size_t differing = 0;
  for (std::size_t i = 0; i < c.count; ++i) differing += !same_value(expected[i], decoded[i]);
  CHECK(differing == 0);
}

template <class Q>
void check_accumulate(const Q& q, std::size_t count, std::size_t packets, std::size_t acc_offset) {
  std::vector<std::byte> all;
  std::vector<float> expected(count, 0.25f);
  for (std::size_t p = 0; p < packets; ++p) {
    const std::vector<float> x = qsdp_test::make_data(qsdp_test::distribution::normal, count,
                                                      100 + static_cast<std::uint32_t>(p));
    std::vector<std::byte> packet(qsdp::compressed_size<float>(q, count));
    qsdp::encode(q, x.data(), count, packet.data(),
                 qsdp::rng_position{.call = 1, .stream = static_cast<std::uint32_t>(p)});
    all.insert(all.end(), packet.begin(), packet.end());
  }
  const std::vector<float> start(count, 0.25f);
  qsdp::decode_accumulate(q, all.data(), packets, count, expected.data());
  const std::vector<float> got =
      gpu_test::device_decode_accumulate(q, all, packets, count, start, acc_offset);
  std::size_t differing = 0;
  for (std::size_t i = 0; i < count; ++i) differing += !same_value(expected[i], got[i]);
  INFO(qsdp::policy_name<Q>() << " count " << count << " packets " << packets << " acc offset "
                              << acc_offset);
  CHECK(differing == 0);
}

const layout_case fast_cases[] = {
    {0, 0, 0}, {1, 0, 0}, {4096, 0, 0}, {100003, 0, 0}, {1 << 20, 0, 0}};
const layout_case general_cases[] = {{7, 2, 1}, {1000, 6, 3}, {100003, 1, 9}};

template <class Q>
void sweep_policy(Q q) {
  for (const std::size_t bucket : {64u, 1024u, 4096u}) {
    q.bucket_size = bucket;
    for (const layout_case& c : fast_cases) {
      check_against_host<Q, float>(q, c, c.count > 1000);
      check_against_host<Q, __nv_bfloat16>(q, c, c.count > 1000);
      check_against_host<Q, __half>(q, c, false);
    }
  }
  for (const std::size_t bucket : {1u, 7u, 100u, 1000u, 8192u}) {
    q.bucket_size = bucket;
    for (const layout_case& c : general_cases) {
      check_against_host<Q, float>(q, c, true);
      check_against_host<Q, __nv_bfloat16>(q, c, false);
    }
  }
  // Aligned pointers, power-of-two bucket, but an unaligned element pointer: the general path.
  q.bucket_size = 1024;
  check_against_host<Q, __half>(q, {5000, 2, 0}, true);
  check_against_host<Q, float>(q, {5000, 4, 16}, false);
}

/// qsdp::hadamard<Inner>: every bucket size class of the rotated kernels (16 .. 4096), short last
/// buckets of several pieces, count 0, unaligned source and packet, NaN and inf.
template <class Q>
void sweep_rotated(Q q) {
  for (const std::size_t bucket : {16u, 128u, 1024u, 4096u}) {
    q.bucket_size = bucket;
    for (const layout_case& c : fast_cases) {
      check_against_host<Q, float>(q, c, c.count > 1000);
      check_against_host<Q, __nv_bfloat16>(q, c, c.count > 1000);
    }
    for (const layout_case& c : general_cases) check_against_host<Q, __half>(q, c, true);
  }
  q.bucket_size = 256;
  check_accumulate(q, 100003, 4, 0);  // one rotation: summed, then transformed back once
}

template <template <int> class P, int... Bits>
void sweep_bits(std::integer_sequence<int, Bits...>) {
  (sweep_policy(P<Bits>{}), ...);
}

}  // namespace

TEST_CASE("device uniform packets equal the host's, every bit width") {
  sweep_bits<qsdp::uniform>(std::integer_sequence<int, 1, 2, 3, 4, 5, 6, 7, 8>{});
}

TEST_CASE("device stochastic packets equal the host's, every bit width") {
  sweep_bits<qsdp::stochastic>(std::integer_sequence<int, 1, 2, 3, 4, 5, 6, 7, 8>{});
}

TEST_CASE("device symmetric, random_shift and user-policy packets equal the host's") {
  sweep_bits<qsdp::symmetric>(std::integer_sequence<int, 1, 4, 8>{});
  sweep_bits<qsdp::random_shift>(std::integer_sequence<int, 2, 5, 8>{});
  sweep_policy(gpu_test::sqrt_law<6>{});
}

TEST_CASE("device hadamard<Inner> packets equal the host's, and decode to its values") {
  sweep_rotated(qsdp::hadamard<qsdp::stochastic<4>>{});
  sweep_rotated(qsdp::hadamard<qsdp::random_shift<2>>{});
}

TEST_CASE("device MX and NVFP4 packets equal the host's, tensor records included") {
  sweep_policy(qsdp::mxfp8<qsdp::e4m3>{});
  sweep_policy(qsdp::mxfp4<qsdp::rounding::stochastic>{.seed = 3});
  sweep_policy(qsdp::nvfp4<>{});
  sweep_policy(qsdp::nvfp4<qsdp::rounding::stochastic>{.seed = 3});
  sweep_rotated(qsdp::hadamard<qsdp::nvfp4<qsdp::rounding::stochastic>>{{.seed = 3}});
}

TEST_CASE("device identity packets are the raw values") {
  for (const layout_case& c :
       {layout_case{0, 0, 0}, layout_case{33, 1, 3}, layout_case{100000, 0, 0}}) {
    check_against_host<qsdp::identity, float>(qsdp::identity{}, c, true);
    check_against_host<qsdp::identity, __nv_bfloat16>(qsdp::identity{}, c, false);
  }
}

TEST_CASE("device decode_accumulate sums packets in order like the host") {
  check_accumulate(qsdp::stochastic<8>{}, 100000, 4, 0);
  check_accumulate(qsdp::uniform<3>{.bucket_size = 100}, 5001, 3, 4);
  check_accumulate(qsdp::random_shift<5>{}, 4096, 8, 0);
  check_accumulate(qsdp::identity{}, 777, 2, 8);
  check_accumulate(qsdp::symmetric<1>{}, 0, 2, 0);
}

TEST_CASE("a device encode captured in a CUDA graph draws fresh numbers at every replay") {
  // Replay k finds the device counter at first + k: its packet is the host's at that call index.
  const std::uint64_t first = (std::uint64_t{1} << 32) - 1;  // the counter crosses 2^32
  const std::vector<float> x = qsdp_test::make_data(qsdp_test::distribution::normal, 50000, 4);
  std::uint64_t final_call = 0;
  const auto packets =
      gpu_test::graph_encode_replays(qsdp::stochastic<4>{}, x, first, 3, &final_call);
  REQUIRE(packets.size() == 3);
  for (std::size_t k = 0; k < packets.size(); ++k) {
    std::vector<std::byte> want(packets[k].size());
    qsdp::encode(qsdp::stochastic<4>{}, x.data(), x.size(), want.data(),
                 qsdp::rng_position{.call = first + k, .stream = 3});
    INFO("replay " << k);
    CHECK(packets[k] == want);
  }
  CHECK(packets[0] != packets[1]);
  CHECK(final_call == first + 3);
  const std::vector<__nv_bfloat16> b = qsdp_test::convert<__nv_bfloat16>(x);
  const auto shifted =
      gpu_test::graph_encode_replays(qsdp::random_shift<8>{}, b, 0, 2, &final_call);
  std::vector<std::byte> want(shifted[1].size());
  qsdp::encode(qsdp::random_shift<8>{}, b.data(), b.size(), want.data(),
               qsdp::rng_position{.call = 1, .stream = 3});
  CHECK(shifted[1] == want);
}
