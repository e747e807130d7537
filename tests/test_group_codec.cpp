// SPDX-License-Identifier: Apache-2.0
// The CUDA kernels are built from the steps in detail/group_codec.hpp (bucket statistics merged in
// any order, one group of eight values per thread). These tests run those very steps on the host,
// the way the kernels split the work, and require the host codec's packet byte for byte and its
// decoded values bit for bit. They run everywhere; the GPU tests (tests/gpu) then check the kernels
// themselves.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <qsdp/codec.hpp>
#include <qsdp/detail/codec/group.hpp>

#include "support.hpp"

TEST_SUITE_BEGIN("group_codec");

namespace {

using qsdp::detail::group_values;
using qsdp::detail::packet_layout;
using qsdp::detail::partial_stats;
using qsdp::detail::rng_key;

/// Which kernel split to imitate.
enum class split {
  one_bucket_per_block,  // fast path: bucket statistics reduced by a tree of threads, groups inside
                         // one bucket
  general                // stats per bucket first, then each group looks up each value's bucket
};

/// Packet built the way the device kernels build it: header and zeroed padding first (the frame
/// kernel), then metadata and flags, then codes group by group.
template <class Q, class T>
std::vector<std::byte> kernel_style_encode(const Q& q, const std::vector<T>& x, const rng_key& key,
                                           split how) {
  const std::size_t count = x.size();
  const packet_layout l = qsdp::detail::layout_for<Q, T>(q, count);
  std::vector<std::byte> packet(l.total,
                                std::byte{0xAB});  // garbage that every byte must overwrite
  const qsdp::detail::packet_header h = qsdp::detail::make_header<Q, T>(q, count);
  std::memcpy(packet.data(), &h, sizeof h);
  const std::size_t meta_end = l.meta_offset + l.buckets * sizeof(typename Q::meta_type);
  std::memset(packet.data() + meta_end, 0, l.codes_offset - meta_end);
  std::memset(packet.data() + l.codes_offset + l.code_bytes, 0,
              l.total - l.codes_offset - l.code_bytes);
  auto* flags = reinterpret_cast<std::uint8_t*>(packet.data() + l.flags_offset);

  for (std::size_t b = 0; b < l.buckets; ++b) {
    const std::size_t begin = b * q.bucket_size;
    const std::size_t n = std::min(q.bucket_size, count - begin);
    // A reduction tree as the threads do it: per-group partials, merged pairwise.
    std::vector<partial_stats> partials;
    for (std::size_t g = 0; g < n; g += group_values) {
      partial_stats p;
      for (std::size_t k = g; k < std::min(n, g + group_values); ++k)
        p.add(qsdp::detail::load_value(x.data(), begin + k));
      partials.push_back(p);
    }
    while (partials.size() > 1) {
      std::vector<partial_stats> next;
      for (std::size_t i = 0; i < partials.size(); i += 2) {
        partial_stats p = partials[i];
        if (i + 1 < partials.size()) p.merge(partials[i + 1]);
        next.push_back(p);
      }
      partials.swap(next);
    }
    if (qsdp::detail::store_bucket_meta(q, packet.data(), l, b, partials[0], n, key))
      flags[b / 8] |= static_cast<std::uint8_t>(1u << (b % 8));
  }

  const std::size_t groups = (count + group_values - 1) / group_values;
  for (std::size_t g = 0; g < groups; ++g) {
    if (how == split::general) {
      qsdp::detail::encode_group_general(q, x.data(), count, packet.data(), l, key, g);
      continue;
    }
    // Fast path: the whole group lies in one bucket (bucket sizes are multiples of 8 there).
    REQUIRE(q.bucket_size % group_values == 0);
    const std::size_t first = g * group_values;
    const std::size_t b = first / q.bucket_size;
    const unsigned n = static_cast<unsigned>(std::min<std::size_t>(group_values, count - first));
    std::uint64_t word = 0;
    if (!qsdp::detail::bucket_flagged(flags, b)) {
      float v[group_values];
      for (unsigned k = 0; k < n; ++k) v[k] = qsdp::detail::load_value(x.data(), first + k);
      const auto m = qsdp::detail::load_meta<typename Q::meta_type>(packet.data(), l, b);
      word = qsdp::detail::encode_group(q, v, n, m, key, g);
    }
    qsdp::detail::store_group_bytes(packet.data() + l.codes_offset + g * Q::bits, word,
                                    qsdp::detail::group_bytes(Q::bits, g, l.code_bytes));
  }
  return packet;
}

template <class Q>
std::vector<float> kernel_style_decode(const Q& q, const std::vector<std::byte>& packet,
                                       std::size_t count) {
  const packet_layout l = qsdp::detail::layout_for<Q, float>(q, count);
  std::vector<float> out(count);
  float v[group_values];
  for (std::size_t g = 0; g * group_values < count; ++g) {
    const unsigned n = qsdp::detail::decode_group(q, packet.data(), l, count, g, v);
    for (unsigned k = 0; k < n; ++k) out[g * group_values + k] = v[k];
  }
  return out;
}

template <class Q, class T>
void check_kernel_steps(const Q& q, std::size_t count, split how, bool with_non_finite) {
  std::vector<float> values = qsdp_test::make_data(qsdp_test::distribution::mixed_scale, count, 7);
  if (with_non_finite && count > 3) {
    values[count / 3] = NAN;
    values[count - 1] = -INFINITY;
  }
  const std::vector<T> x = qsdp_test::convert<T>(values);
  const qsdp::rng_position position{.call = 5, .stream = 3};
  std::vector<std::byte> expected(qsdp::compressed_size<T>(q, count));
  qsdp::encode(q, x.data(), count, expected.data(), position);
  const rng_key key{qsdp::detail::seed_of(q), position.call, position.stream};
  const std::vector<std::byte> got = kernel_style_encode(q, x, key, how);
  REQUIRE(got.size() == expected.size());
  const auto diff = std::mismatch(got.begin(), got.end(), expected.begin());
  INFO("policy " << qsdp::policy_name<Q>() << "<" << Q::bits << ">, bucket " << q.bucket_size
                 << ", count " << count << ", first differing byte " << (diff.first - got.begin())
                 << " of " << got.size());
  CHECK(diff.first == got.end());

  std::vector<float> host(count);
  qsdp::decode(q, expected.data(), count, host.data());
  const std::vector<float> device_style = kernel_style_decode(q, expected, count);
  std::size_t differing = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const bool same = std::isnan(host[i]) ? std::isnan(device_style[i])
                                          : std::memcmp(&host[i], &device_style[i], 4) == 0;
    differing += !same;
  }
  CHECK(differing == 0);
}

template <class Q>
void sweep(Q q) {
  for (const std::size_t bucket : {64u, 1024u}) {
    q.bucket_size = bucket;
    for (const std::size_t count : {0u, 1u, 8u, 63u, 1000u, 4099u})
      for (const bool non_finite : {false, true}) {
        check_kernel_steps<Q, float>(q, count, split::one_bucket_per_block, non_finite);
        check_kernel_steps<Q, float>(q, count, split::general, non_finite);
#if QSDP_HAS_CUDA_HALF
        check_kernel_steps<Q, __nv_bfloat16>(q, count, split::one_bucket_per_block, non_finite);
        check_kernel_steps<Q, __half>(q, count, split::general, non_finite);
#endif
      }
  }
  // Bucket sizes that are not multiples of 8: groups straddle buckets, only the general split
  // applies.
  for (const std::size_t bucket : {1u, 3u, 7u, 100u, 1001u}) {
    q.bucket_size = bucket;
    for (const std::size_t count : {1u, 9u, 257u, 3003u})
      check_kernel_steps<Q, float>(q, count, split::general, count > 100);
  }
}

template <template <int> class P, int... Bits>
void sweep_bits(std::integer_sequence<int, Bits...>) {
  (sweep(P<Bits>{}), ...);
}

}  // namespace

TEST_CASE("kernel steps rebuild the host packet byte for byte: uniform, every bit width") {
  sweep_bits<qsdp::uniform>(std::integer_sequence<int, 1, 2, 3, 4, 5, 6, 7, 8>{});
}

TEST_CASE("kernel steps rebuild the host packet byte for byte: stochastic, every bit width") {
  sweep_bits<qsdp::stochastic>(std::integer_sequence<int, 1, 2, 3, 4, 5, 6, 7, 8>{});
}

TEST_CASE("kernel steps rebuild the host packet byte for byte: symmetric and random_shift") {
  sweep_bits<qsdp::symmetric>(std::integer_sequence<int, 1, 2, 4, 5, 8>{});
  sweep_bits<qsdp::random_shift>(std::integer_sequence<int, 2, 3, 4, 8>{});
}

TEST_CASE("partial statistics merge in any order to the host scan's min and max") {
  const std::vector<float> x =
      qsdp_test::make_data(qsdp_test::distribution::gradient_with_outliers, 999, 3);
  partial_stats forward, backward, halves_a, halves_b;
  for (float v : x) forward.add(v);
  for (auto it = x.rbegin(); it != x.rend(); ++it) backward.add(*it);
  for (std::size_t i = 0; i < x.size(); ++i) (i % 2 ? halves_a : halves_b).add(x[i]);
  halves_a.merge(halves_b);
  const float lo = *std::min_element(x.begin(), x.end()),
              hi = *std::max_element(x.begin(), x.end());
  for (const partial_stats& p : {forward, backward, halves_a}) {
    CHECK(p.min() == lo);
    CHECK(p.max() == hi);
    CHECK(p.finite());
  }
  partial_stats with_inf = forward;
  with_inf.add(INFINITY);
  CHECK_FALSE(with_inf.finite());
}

TEST_SUITE_END();
