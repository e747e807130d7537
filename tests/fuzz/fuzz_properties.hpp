// SPDX-License-Identifier: Apache-2.0
//
// The packet fuzzer's properties and its run of one input for one policy (tests/fuzz/
// fuzz_packets.cpp is the entry; fuzz_policies_first.cpp and fuzz_policies_second.cpp instantiate
// half of the policies each, so that this, the asan build's largest compilation, runs on two
// cores).
//
// The fuzzer feeds arbitrary bytes to the receiving side of the codec (header validation,
// decode, decode_accumulate) and arbitrary values to the sending side (encode), for every built-in
// policy at every bit width, identity, two user-defined policies and four rotated ones
// (qsdp::hadamard over three built-in widths and a user policy), into every element type.
//
// A packet comes from another process, so nothing in it may turn into a read or write outside the
// buffers (AddressSanitizer), undefined behaviour (UBSan), or a value the documented guarantees
// rule out. Beyond "no crash", every input checks properties that a bug would break:
//   - a packet is accepted only if its layout fits in the buffer it came in;
//   - a refused packet leaves the destination untouched;
//   - the AVX2 and the baseline loops decode (and encode) to the same bits;
//   - decode_accumulate into zeros equals decode, and the multi-packet decode_accumulate equals the
//     single-packet one applied packet by packet (same order, same bits; for rotated packets, which
//     it may sum in the rotated domain and transform once, up to float rounding);
//   - a bucket flagged non-finite decodes to NaN;
//   - encoding: a bucket holding NaN/inf decodes to NaN, a finite bucket of a built-in policy
//   decodes
//     to finite values, a bucket of equal values decodes exactly.
// A broken property prints what broke and aborts, which libFuzzer reports as a crash with the
// input.
//
// Input layout (so that the seed corpus and a reader of a crash file can make sense of it):
//   byte 0      policy (index into policy_list below, modulo its length)
//   byte 1      bits 0-1: element type (float, double, __half, __nv_bfloat16)
//               bits 2-3: operation (0, 3: decode + decode_accumulate of one packet;
//                         1: decode_accumulate of several packets; 2: encode then decode)
//               bits 4-5: packet count - 1 for operation 1
//               bit 6:    the decoder expects what the header says (count, bucket size);
//                         else bytes 2-9 say what it expects
//               bit 7:    operation 2 also encodes from a buffer one byte off alignment
//   bytes 2-5   expected count (little-endian uint32)
//   bytes 6-9   expected bucket size (little-endian uint32)
//   bytes 10-   the packet(s), or for operation 2 the values to encode
#pragma once

#include <qsdp/codec.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "codec_instances.hpp"
#include "fuzz_packets.hpp"
#include "policies.hpp"

namespace qsdp_fuzz {
namespace {

using power_of_two = qsdp_test::power_of_two_quantizer;
using qsdp_test::stochastic_sign;

/// A built-in policy, or a rotation of one: its decoded values are finite whenever the input's are.
template <class Q>
inline constexpr bool is_builtin = (qsdp::detail::wire_id<Q>() & ~qsdp::detail::hadamard_id_bit) !=
                                   0;

template <class Q>
inline constexpr bool is_rotated = qsdp::detail::rotated<Q>();

/// Every policy the fuzzer drives: 8 + 8 + 8 + 7 built-in widths, identity, two user policies, and
/// four rotated ones last (appended, so that the committed corpus keeps its policies).
template <int... B>
auto builtin_policies(std::integer_sequence<int, B...>) {
  return std::tuple_cat(std::tuple<qsdp::uniform<B + 1>...>{},
                        std::tuple<qsdp::stochastic<B + 1>...>{},
                        std::tuple<qsdp::symmetric<B + 1>...>{});
}
template <int... B>
auto shifted_policies(std::integer_sequence<int, B...>) {
  return std::tuple<qsdp::random_shift<B + 2>...>{};
}
using policy_list = decltype(std::tuple_cat(
    builtin_policies(std::make_integer_sequence<int, 8>{}),
    shifted_policies(std::make_integer_sequence<int, 7>{}),
    std::tuple<qsdp::identity, power_of_two, stochastic_sign>{},
    std::tuple<qsdp::hadamard<qsdp::stochastic<4>>, qsdp::hadamard<qsdp::uniform<8>>,
               qsdp::hadamard<qsdp::random_shift<2>>, qsdp::hadamard<power_of_two>>{}));
inline constexpr std::size_t policy_count = std::tuple_size_v<policy_list>;
static_assert(policy_count == policy_list_length, "fuzz_packets.hpp's policy_list_length is stale");

template <class Fn>
void with_element(unsigned selector, Fn&& fn) {
  switch (selector & 3u) {
    case 0: fn(float{}); break;
    case 1: fn(double{}); break;
#if QSDP_HAS_CUDA_HALF
    case 2: fn(__half{}); break;
    case 3: fn(__nv_bfloat16{}); break;
#else
    default: fn(float{}); break;
#endif
  }
}

[[noreturn]] void broken(const std::string& what) {
  std::fprintf(stderr, "qsdp fuzz: property broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

/// Largest number of values a decoder is asked for: bounds the fuzzer's allocations. 2^15 one-bit
/// values are 4 KiB, the longest input scripts/fuzz.sh allows, so every count a packet can hold
/// gets decoded; larger claims go through validation alone, which must refuse them.
constexpr std::size_t max_values = std::size_t{1} << 15;

std::uint32_t read_u32(const std::uint8_t* p) {
  return std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 |
         std::uint32_t(p[3]) << 24;
}

/// An exactly sized heap copy: one byte past it is outside any allocation, so AddressSanitizer sees
/// an over-read of a truncated packet.
struct exact_buffer {
  explicit exact_buffer(std::span<const std::uint8_t> bytes)
      : size(bytes.size()), data(std::make_unique<std::byte[]>(bytes.size())) {
    if (size) std::memcpy(data.get(), bytes.data(), size);
  }
  std::span<const std::byte> span() const { return {data.get(), size}; }
  std::size_t size;
  std::unique_ptr<std::byte[]> data;
};

template <class T>
std::uint64_t bits_of(T v) {
  if constexpr (sizeof(T) == 8)
    return std::bit_cast<std::uint64_t>(v);
  else if constexpr (sizeof(T) == 4)
    return std::bit_cast<std::uint32_t>(v);
  else
    return std::bit_cast<std::uint16_t>(v);
}

template <class T>
float to_f(T v) {
  return qsdp::detail::element_traits<T>::to_float(v);
}

/// "" when a and b hold the same bits, else where and how they first differ.
template <class T>
std::string bit_difference(const std::vector<T>& a, const std::vector<T>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (bits_of(a[i]) == bits_of(b[i])) continue;
    char text[160];
    std::snprintf(text, sizeof text, " at %zu of %zu: %.9g (bits %llx) against %.9g (bits %llx)", i,
                  a.size(), double(to_f(a[i])), static_cast<unsigned long long>(bits_of(a[i])),
                  double(to_f(b[i])), static_cast<unsigned long long>(bits_of(b[i])));
    return text;
  }
  return "";
}

/// Runs fn with the baseline loops forced, then restores the dispatch.
template <class Fn>
void on_baseline(Fn&& fn) {
  qsdp::detail::host_force_baseline = true;
  try {
    fn();
  } catch (...) {
    qsdp::detail::host_force_baseline = false;
    throw;
  }
  qsdp::detail::host_force_baseline = false;
}

/// A decoder of policy Q configured as the input says: bucket size from the header or from bytes
/// 6-9.
template <class Q>
Q decoder_for(const std::uint8_t* prefix, bool from_header, std::span<const std::uint8_t> packet) {
  Q q{};
  if constexpr (!qsdp::detail::is_identity<Q>) {
    std::uint64_t bucket = read_u32(prefix + 6);
    if (from_header && packet.size() >= sizeof(qsdp::detail::packet_header)) {
      std::memcpy(&bucket, packet.data() + offsetof(qsdp::detail::packet_header, bucket_size),
                  sizeof bucket);
    }
    // 0 and sizes beyond 2^56 are refused by the codec itself (checked below); keep them.
    q.bucket_size = static_cast<std::size_t>(bucket);
  }
  return q;
}

std::uint64_t expected_count(const std::uint8_t* prefix, bool from_header,
                             std::span<const std::uint8_t> packet) {
  if (from_header && packet.size() >= sizeof(qsdp::detail::packet_header)) {
    std::uint64_t count;
    std::memcpy(&count, packet.data() + offsetof(qsdp::detail::packet_header, count), sizeof count);
    return count;
  }
  return read_u32(prefix + 2);
}

/// Validation alone, for counts too large to allocate: whatever it accepts must fit in the buffer.
template <class Q, class T>
void validate_only(const Q& q, const exact_buffer& packet, std::uint64_t count) {
  try {
    const auto l = qsdp::detail::validated_layout(
        q, packet.data.get(), static_cast<std::size_t>(count),
        static_cast<int>(qsdp::detail::element_traits<T>::tag), packet.size, "fuzz");
    if (l.total > packet.size)
      broken("validated_layout accepted a packet of " + std::to_string(l.total) +
             " bytes in a buffer of " + std::to_string(packet.size));
  } catch (const qsdp::error&) {
  }
}

/// Operation 0: one packet through decode and decode_accumulate, on both code paths.
template <class Q, class T>
void decode_one(const Q& q, const exact_buffer& packet, std::size_t count) {
  const T sentinel = qsdp::detail::element_traits<T>::from_float(-12345.0f);
  std::vector<T> fast(count, sentinel);
  bool accepted = true;
  try {
    qsdp::decode(q, packet.span(), std::span<T>(fast));
  } catch (const qsdp::error&) {
    accepted = false;
  }
  if (!accepted) {
    for (const T& v : fast)
      if (bits_of(v) != bits_of(sentinel)) broken("a refused packet wrote into the destination");
  }
  std::vector<T> slow(count, sentinel);
  bool slow_accepted = true;
  try {
    on_baseline([&] { qsdp::decode(q, packet.span(), std::span<T>(slow)); });
  } catch (const qsdp::error&) {
    slow_accepted = false;
  }
  if (accepted != slow_accepted) broken("the AVX2 and baseline decoders disagree on validity");

  std::vector<float> acc(count, 0.0f);
  bool accumulated = true;
  try {
    qsdp::decode_accumulate(q, packet.span(), std::span<float>(acc));
  } catch (const qsdp::error&) {
    accumulated = false;
  }
  if (!accepted) return;
  if (const auto d = bit_difference(fast, slow); !d.empty())
    broken("the AVX2 and baseline decoders produce different values" + d);

  // The layout the decoder used: the buffer must hold it, and its non-finite flags must show as
  // NaN.
  const auto l = qsdp::detail::validated_layout(
      q, packet.data.get(), count, static_cast<int>(qsdp::detail::element_traits<T>::tag),
      packet.size, "fuzz");
  if (l.total > packet.size) broken("an accepted packet is larger than its buffer");
  if constexpr (!qsdp::detail::is_identity<Q>) {
    const auto* flags = reinterpret_cast<const std::uint8_t*>(packet.data.get() + l.flags_offset);
    for (std::size_t b = 0; b < l.buckets; ++b) {
      if (!(flags[b / 8] & (1u << (b % 8)))) continue;
      const std::size_t end = std::min(count, (b + 1) * q.bucket_size);
      for (std::size_t i = b * q.bucket_size; i < end; ++i)
        if (!std::isnan(to_f(fast[i]))) broken("a bucket flagged non-finite decoded to a number");
    }
  }
  // decode_accumulate reads the same packet (identity: only as its own element type).
  if (!accumulated) broken("decode accepted a packet that decode_accumulate refused");
  if constexpr (std::is_same_v<T, float>) {
    for (std::size_t i = 0; i < count; ++i) {
      const bool both_nan = std::isnan(acc[i]) && std::isnan(fast[i]);
      if (!both_nan && acc[i] != 0.0f + fast[i])
        broken("decode_accumulate into zeros differs from decode at " + std::to_string(i));
    }
  }
}

/// Rotated packets: the multi-packet decode_accumulate may sum the packets' rotated values and
/// transform once per bucket, which rounds differently from transforming each packet. Where every
/// packet decodes to finite values, the two sums must agree within float rounding of the bucket's
/// magnitude (the sum over packets of each one's decoded magnitudes there, plus the accumulator's
/// 1).
template <class Q>
void close_to_packet_by_packet(const Q& q, const exact_buffer& packets, std::size_t count,
                               std::size_t packet_count, std::size_t packet_bytes,
                               const std::vector<float>& together,
                               const std::vector<float>& one_by_one) {
  const std::size_t bucket = q.bucket_size;
  std::vector<double> magnitude((count + bucket - 1) / bucket, 1.0);
  std::vector<float> decoded(count);
  for (std::size_t p = 0; p < packet_count; ++p) {
    qsdp::decode(q, packets.span().subspan(p * packet_bytes, packet_bytes),
                 std::span<float>(decoded));
    for (std::size_t i = 0; i < count; ++i)
      magnitude[i / bucket] += std::isfinite(decoded[i]) ? std::abs(double(decoded[i])) : INFINITY;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const double a = together[i], b = one_by_one[i];
    // A rotated sum may overflow (and turn into NaN) where the per-packet one does not, or the
    // reverse, only near FLT_MAX: such buckets and those with non-finite values are not compared.
    const double limit = 1e-5 * magnitude[i / bucket];
    if (!(limit < 1e33)) continue;
    if (!(std::abs(a - b) <= limit))
      broken("multi-packet decode_accumulate of rotated packets is " + std::to_string(a) + " at " +
             std::to_string(i) + ", packet by packet " + std::to_string(b) +
             " (allowed difference " + std::to_string(limit) + ")");
  }
}

/// Operation 1: several packets through the multi-packet decode_accumulate, which must equal the
/// single-packet call applied packet by packet. Like a collective's receiver, the caller knows the
/// packet size from its own parameters and only calls with a buffer that holds them all.
template <class Q, class T>
void decode_many(const Q& q, const exact_buffer& packets, std::size_t count,
                 std::size_t packet_count) {
  std::size_t packet_bytes = 0;
  try {
    packet_bytes = qsdp::compressed_size<T>(q, count);
  } catch (const qsdp::error&) {
    return;  // the receiver's own parameters are invalid; nothing to receive
  }
  if (packets.size < packet_bytes * packet_count) return;
  std::vector<float> together(count, 1.0f);
  bool accepted = true;
  try {
    qsdp::decode_accumulate(q, packets.data.get(), packet_count, count, together.data());
  } catch (const qsdp::error&) {
    accepted = false;
  }
  std::vector<float> one_by_one(count, 1.0f);
  bool each_accepted = true;
  try {
    for (std::size_t p = 0; p < packet_count; ++p)
      qsdp::decode_accumulate(q, packets.span().subspan(p * packet_bytes, packet_bytes),
                              std::span<float>(one_by_one));
  } catch (const qsdp::error&) {
    each_accepted = false;
  }
  if constexpr (qsdp::detail::is_identity<Q>) {
    // Identity packets of different element types are each valid alone but not together.
    if (accepted && !each_accepted) broken("multi-packet decode_accumulate accepted a bad packet");
  } else {
    if (accepted != each_accepted)
      broken("multi-packet and single-packet decode_accumulate disagree on validity");
  }
  if (!accepted) {
    for (float v : together)
      if (v != 1.0f) broken("a refused packet list changed the accumulator");
    return;
  }
  if constexpr (is_rotated<Q>) {
    close_to_packet_by_packet(q, packets, count, packet_count, packet_bytes, together, one_by_one);
  } else {
    if (const auto d = bit_difference(together, one_by_one); !d.empty())
      broken("multi-packet decode_accumulate differs from packet-by-packet accumulation" + d);
  }
}

/// The bucket sizes the codec accepts for Q: any from 1; a power of two from 16 to 4096 rotated.
template <class Q>
bool valid_bucket(std::size_t bucket_size) {
  if constexpr (is_rotated<Q>)
    return qsdp::detail::hadamard_bucket_ok(bucket_size);
  else
    return bucket_size >= 1;
}

/// Operation 2: arbitrary values through encode and decode.
template <class Q, class T>
void round_trip(Q q, std::span<const std::uint8_t> bytes, std::size_t bucket_size,
                bool misaligned) {
  const std::size_t count = std::min(bytes.size() / sizeof(T), max_values);
  std::vector<T> values(count);
  if (count) std::memcpy(values.data(), bytes.data(), count * sizeof(T));
  if constexpr (!qsdp::detail::is_identity<Q>) q.bucket_size = bucket_size;
  std::size_t size = 0;
  try {
    size = qsdp::compressed_size<T>(q, count);
  } catch (const qsdp::error&) {
    if constexpr (!qsdp::detail::is_identity<Q>) {
      if (valid_bucket<Q>(bucket_size))
        broken("compressed_size refused bucket size " + std::to_string(bucket_size));
    }
    return;
  }
  if constexpr (!qsdp::detail::is_identity<Q>) {
    if (!valid_bucket<Q>(bucket_size))
      broken("compressed_size accepted bucket size " + std::to_string(bucket_size));
  }
  const qsdp::rng_position position{bytes.size(), 3};
  std::vector<std::byte> fast(size), slow(size);
  qsdp::encode(q, values.data(), count, fast.data(), position);
  on_baseline([&] { qsdp::encode(q, values.data(), count, slow.data(), position); });
  if (fast != slow) broken("the AVX2 and baseline encoders wrote different packets");
  if (misaligned && count > 0) {
    // The same values one byte off their alignment (buffers at any byte offset are supported): the
    // packet must not change, and UBSan reports any load that assumed alignment.
    std::vector<std::byte> shifted(count * sizeof(T) + 1), packet(size);
    std::memcpy(shifted.data() + 1, values.data(), count * sizeof(T));
    const T* odd = reinterpret_cast<const T*>(shifted.data() + 1);
    qsdp::encode(q, odd, count, packet.data(), position);
    if (packet != fast) broken("encoding from a misaligned buffer wrote a different packet");
    on_baseline([&] { qsdp::encode(q, odd, count, packet.data(), position); });
    if (packet != fast)
      broken("baseline encoding from a misaligned buffer wrote a different packet");
  }

  std::vector<T> decoded(count);
  qsdp::decode(q, std::span<const std::byte>(fast), std::span<T>(decoded));
  if constexpr (qsdp::detail::is_identity<Q>) {
    if (const auto d = bit_difference(values, decoded); !d.empty())
      broken("identity changed a value" + d);
  } else {
    for (std::size_t begin = 0; begin < count; begin += q.bucket_size) {
      const std::size_t end = std::min(count, begin + q.bucket_size);
      bool finite = true, equal = true;
      for (std::size_t i = begin; i < end; ++i) {
        finite = finite && std::isfinite(to_f(values[i]));
        equal = equal && to_f(values[i]) == to_f(values[begin]);
      }
      for (std::size_t i = begin; i < end; ++i) {
        const float y = to_f(decoded[i]);
        if (!finite && !std::isnan(y))
          broken("a bucket holding NaN or inf decoded to a number at " + std::to_string(i));
        if constexpr (is_builtin<Q>) {
          if (finite && !std::isfinite(y))
            broken("finite values decoded to " + std::to_string(y) + " at " + std::to_string(i));
          // A rotation rounds: equal values come back exactly only without one.
          if (!is_rotated<Q> && finite && equal && y != to_f(values[i]))
            broken("a bucket of equal values did not decode exactly at " + std::to_string(i));
        }
      }
    }
  }
}

/// Runs one input (run_one_input's layout) with policy Q, the policy its byte 0 selects.
template <class Q>
void run_policy(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t prefix_bytes = 10;
  const std::uint8_t* prefix = data;
  const unsigned mode = prefix[1];
  const unsigned operation = (mode >> 2) & 3u;
  const bool from_header = (mode & 0x40u) != 0;
  const std::span<const std::uint8_t> payload(data + prefix_bytes, size - prefix_bytes);

  const Q policy{};
  with_element(mode, [&](auto element) {
    using T = decltype(element);
    if (operation == 2) {
      const std::uint32_t bucket_bytes = read_u32(prefix + 6);
      const std::size_t bucket = is_rotated<Q> && (bucket_bytes >> 31) == 0
                                     ? qsdp::detail::hadamard_min_bucket << (bucket_bytes % 9)
                                     : bucket_bytes % 4097;
      round_trip<Q, T>(policy, payload, bucket, (mode & 0x80u) != 0);
      return;
    }
    const Q q = decoder_for<Q>(prefix, from_header, payload);
    const std::uint64_t count = expected_count(prefix, from_header, payload);
    const exact_buffer packets(payload);
    if (count > max_values) {
      validate_only<Q, T>(q, packets, count);
    } else if (operation == 1) {
      decode_many<Q, T>(q, packets, static_cast<std::size_t>(count), ((mode >> 4) & 3u) + 1);
    } else {
      decode_one<Q, T>(q, packets, static_cast<std::size_t>(count));
    }
  });
}

/// The seed inputs of the index-th policy, Q (seed_inputs' part for it).
template <class Q>
void add_seeds(std::size_t index, std::vector<std::vector<std::uint8_t>>& seeds) {
  const Q policy{};
  auto prefix = [](std::size_t policy, unsigned mode, std::uint32_t count, std::uint32_t bucket) {
    std::vector<std::uint8_t> p(10);
    p[0] = static_cast<std::uint8_t>(policy);
    p[1] = static_cast<std::uint8_t>(mode);
    for (int k = 0; k < 4; ++k) {
      p[2 + k] = static_cast<std::uint8_t>(count >> (8 * k));
      p[6 + k] = static_cast<std::uint8_t>(bucket >> (8 * k));
    }
    return p;
  };
  for (unsigned element = 0; element < 4; ++element) {
    with_element(element, [&](auto tag) {
      using T = decltype(tag);
      // Values with a spread, a NaN bucket and an all-equal bucket; 3 buckets of 16 and a tail.
      constexpr std::size_t count = 53, bucket = 16;
      std::vector<T> values(count);
      for (std::size_t i = 0; i < count; ++i)
        values[i] = qsdp::detail::element_traits<T>::from_float(
            std::sin(0.7f * static_cast<float>(i)) * 3.0f);
      values[20] = qsdp::detail::element_traits<T>::from_float(NAN);
      for (std::size_t i = 32; i < 48; ++i) values[i] = values[31];
      Q q = policy;
      if constexpr (!qsdp::detail::is_identity<Q>) q.bucket_size = bucket;
      std::vector<std::byte> packet(qsdp::compressed_size<T>(q, count));
      qsdp::encode(q, values.data(), count, packet.data(), qsdp::rng_position{1, 0});
      const auto* raw = reinterpret_cast<const std::uint8_t*>(packet.data());
      // Operation 0, expectation from the header; operation 1 with three packets; operation 2.
      auto single = prefix(index, element | 0x40u, count, bucket);
      single.insert(single.end(), raw, raw + packet.size());
      seeds.push_back(single);
      auto many = prefix(index, element | (1u << 2) | (2u << 4), count, bucket);
      for (int p = 0; p < 3; ++p) many.insert(many.end(), raw, raw + packet.size());
      seeds.push_back(many);
      auto encode = prefix(index, element | (2u << 2) | 0x80u, count, bucket);
      const auto* bytes = reinterpret_cast<const std::uint8_t*>(values.data());
      encode.insert(encode.end(), bytes, bytes + count * sizeof(T));
      seeds.push_back(encode);
    });
  }
}

/// run_policy and add_seeds for policies Begin .. End - 1 of policy_list (index: the policy's).
template <std::size_t Begin, std::size_t End>
void run_policies(std::size_t index, const std::uint8_t* data, std::size_t size) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((index == Begin + I ? (run_policy<std::tuple_element_t<Begin + I, policy_list>>(data, size), 0)
                         : 0),
     ...);
  }
  (std::make_index_sequence<End - Begin>{});
}
template <std::size_t Begin, std::size_t End>
void seed_policies(std::vector<std::vector<std::uint8_t>>& seeds) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (add_seeds<std::tuple_element_t<Begin + I, policy_list>>(Begin + I, seeds), ...);
  }
  (std::make_index_sequence<End - Begin>{});
}

}  // namespace
}  // namespace qsdp_fuzz
