// SPDX-License-Identifier: Apache-2.0
//
// The codec on host memory: compressed_size, encode, decode and decode_accumulate. One packet holds one
// buffer of `count` values; docs/wire-format.md describes every byte of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "config.hpp"
#include "detail/float_types.hpp"
#include "detail/format.hpp"
#include "detail/group_codec.hpp"
#include "detail/host_codec.hpp"
#include "detail/philox.hpp"
#include "quantizers.hpp"

namespace qsdp {

/// An explicit position in a randomized policy's stream: `call` replaces the policy's own call counter
/// and `stream` (< 2^31) separates independent encoders that share a seed (the collectives pass the
/// rank). Encoding the same data with the same seed and position gives the same bytes.
struct rng_position {
  std::uint64_t call = 0;
  std::uint32_t stream = 0;
};

namespace detail {

template <class T>
consteval void require_element() {
  static_assert(element<T>, "qsdp codec: element type must be float, double, __half or __nv_bfloat16"
                            " (the last two need the CUDA toolkit's cuda_fp16.h / cuda_bf16.h)");
}

template <class Q>
void check_bucket_size(const Q& q, const char* where) {
  if constexpr (!is_identity<Q>) {
    if (q.bucket_size == 0)
      throw qsdp::error(std::string(where) + ": bucket_size is 0; expected >= 1");
    if (q.bucket_size > max_packet_count)
      throw qsdp::error(std::string(where) + ": bucket_size is " + std::to_string(q.bucket_size) +
                        "; expected at most 2^56");
  }
}

inline void check_count(std::size_t count, const char* where) {
  if (count > max_packet_count)
    throw qsdp::error(std::string(where) + ": count is " + std::to_string(count) +
                      "; expected at most 2^56");
}

template <class Q, class T>
packet_layout layout_for(const Q& q, std::size_t count) {
  if constexpr (is_identity<Q>) return make_layout(8 * sizeof(T), 0, 0, count);
  else return make_layout(Q::bits, sizeof(typename Q::meta_type), q.bucket_size, count);
}

/// What a decoder of policy Q expects in the header of a packet of `count` values. For identity the
/// element type must match (raw values); quantized packets decode into any element type.
template <class Q>
header_expectation expectation_for(const Q& q, std::size_t count, int element) {
  header_expectation e{};
  e.quantizer_id = wire_id<Q>();
  e.wire_tag = wire_tag<Q>();
  e.count = count;
  if constexpr (is_identity<Q>) {
    e.bits = 0;  // filled from the element type by the caller
    e.meta_size = 0;
    e.bucket_size = 0;
    e.element = element;
  } else {
    (void)element;
    e.bits = Q::bits;
    e.meta_size = sizeof(typename Q::meta_type);
    e.bucket_size = q.bucket_size;
  }
  return e;
}

inline std::size_t element_size(element_type t) {
  switch (t) {
    case element_type::f32: return 4;
    case element_type::f64: return 8;
    case element_type::f16:
    case element_type::bf16: return 2;
  }
  return 0;
}

template <class Q, class T>
void encode_packet(const Q& q, const T* src, std::size_t count, std::byte* packet, const rng_key& key,
                   const char* where) {
  require_policy<Q>();
  require_element<T>();
  check_bucket_size(q, where);
  check_count(count, where);
  if (packet == nullptr) throw qsdp::error(std::string(where) + ": packet is null");
  if (src == nullptr && count > 0)
    throw qsdp::error(std::string(where) + ": src is null with count " + std::to_string(count));
  const packet_layout l = layout_for<Q, T>(q, count);
  const packet_header h = make_header<Q, T>(q, count);
  std::memcpy(packet, &h, sizeof h);
  if constexpr (is_identity<Q>) {
    if (count) std::memcpy(packet + l.codes_offset, src, count * sizeof(T));
    std::memset(packet + l.codes_offset + l.code_bytes, 0, l.total - l.codes_offset - l.code_bytes);
  } else {
    run_encode(q, src, count, packet, l, key);
  }
}

/// Reads and checks the header of a packet that a decoder of Q will read as `count` values of T
/// (for accumulation T is the packet's own type: element < 0). Returns the packet's layout.
template <class Q>
packet_layout validated_layout(const Q& q, const std::byte* packet, std::size_t count, int element,
                               std::size_t available, const char* where) {
  require_policy<Q>();
  check_bucket_size(q, where);
  check_count(count, where);
  if (packet == nullptr) throw qsdp::error(std::string(where) + ": packet is null");
  if (available < sizeof(packet_header))
    throw qsdp::error(std::string(where) + ": packet buffer holds " + std::to_string(available) +
                      " bytes, less than the " + std::to_string(sizeof(packet_header)) +
                      "-byte header");
  const packet_header h = read_header(packet);
  header_expectation want = expectation_for(q, count, element);
  if constexpr (is_identity<Q>) {
    if (h.element < 1 || h.element > 4 || h.magic != packet_magic) {
      check_header(h, want, where);  // reports the magic or the type
      throw qsdp::error(std::string(where) + ": packet element type " + std::to_string(h.element) +
                        " is not one qsdp writes");
    }
    want.bits = static_cast<std::uint8_t>(8 * element_size(static_cast<element_type>(h.element)));
    if (element < 0) want.element = h.element;
  }
  check_header(h, want, where);
  const packet_layout l =
      is_identity<Q> ? make_layout(h.bits, 0, 0, count)
                     : make_layout(h.bits, h.meta_size, static_cast<std::size_t>(h.bucket_size), count);
  if (available < l.total)
    throw qsdp::error(std::string(where) + ": packet buffer holds " + std::to_string(available) +
                      " bytes, but a packet of " + std::to_string(count) + " values needs " +
                      std::to_string(l.total));
  return l;
}

inline constexpr std::size_t unknown_size = ~std::size_t{0};

template <class Q>
rng_key next_key(const Q& q) {
  if constexpr (randomized_elements<Q>() || randomized_buckets<Q>()) {
    static_assert(requires { q.calls.advance(); },
                  "qsdp::encode: a randomized policy needs a member `qsdp::call_counter calls` so that "
                  "every call draws fresh numbers; or pass a qsdp::rng_position explicitly");
    return {seed_of(q), q.calls.advance(), 0};
  } else {
    return {seed_of(q), 0, 0};
  }
}

/// Adds the values of one validated packet (of any element type for identity) to acc[begin, end).
template <class Q>
void accumulate_range(const Q& q, const std::byte* packet, const packet_layout& l, std::size_t count,
                      std::size_t begin, std::size_t end, float* acc) {
  if constexpr (is_identity<Q>) {
    const std::byte* values = packet + l.codes_offset;
    auto add = [&](auto tag) {
      using T = decltype(tag);
      const T* v = reinterpret_cast<const T*>(values);
      for (std::size_t i = begin; i < end; ++i)
        store_element(acc, i,
                      load_element(acc, i) + element_traits<T>::to_float(load_element(v, i)));
    };
    switch (static_cast<element_type>(read_header(packet).element)) {
      case element_type::f32: add(float{}); break;
      case element_type::f64: add(double{}); break;
#if QSDP_HAS_CUDA_HALF
      case element_type::f16: add(__half{}); break;
      case element_type::bf16: add(__nv_bfloat16{}); break;
#endif
      default:
        throw qsdp::error("qsdp::decode_accumulate: packet holds " +
                          std::string(element_type_name(
                              static_cast<element_type>(read_header(packet).element))) +
                          " values, which this build cannot read (no CUDA half headers)");
    }
  } else {
    run_decode(q, packet, l, count, begin, end, accumulate_sink{acc});
  }
}

}  // namespace detail

/// Bytes of one packet holding `count` values of T encoded with policy q (a multiple of 16).
template <class T, class Q>
std::size_t compressed_size(const Q& q, std::size_t count) {
  detail::require_policy<Q>();
  detail::require_element<T>();
  detail::check_bucket_size(q, "qsdp::compressed_size");
  detail::check_count(count, "qsdp::compressed_size");
  return detail::layout_for<Q, T>(q, count).total;
}

/// Encodes src[0, count) into `packet`, which must hold compressed_size<T>(q, count) bytes. A randomized
/// policy takes its next call index from q.calls, so every call draws fresh numbers.
template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet) {
  detail::encode_packet(q, src, count, packet, detail::next_key(q), "qsdp::encode");
}

/// Encodes at an explicit position of the random stream (q.calls is left alone).
template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet, rng_position position) {
  if (position.stream >= (1u << 31))
    throw qsdp::error("qsdp::encode: rng_position.stream is " + std::to_string(position.stream) +
                      "; expected < 2^31");
  detail::encode_packet(q, src, count, packet,
                        detail::rng_key{detail::seed_of(q), position.call, position.stream},
                        "qsdp::encode");
}

/// Encodes with the packet buffer's size checked first.
template <class Q, class T>
void encode(const Q& q, std::span<const T> src, std::span<std::byte> packet) {
  const std::size_t need = compressed_size<T>(q, src.size());
  if (packet.size() < need)
    throw qsdp::error("qsdp::encode: packet buffer holds " + std::to_string(packet.size()) +
                      " bytes, but compressed_size for " + std::to_string(src.size()) +
                      " values is " + std::to_string(need));
  encode(q, src.data(), src.size(), packet.data());
}

/// Decodes a packet of `count` values into dst. The header is checked against q and count; a mismatch
/// throws qsdp::error naming both values. Buckets that held NaN or inf decode to NaN.
template <class Q, class T>
void decode(const Q& q, const std::byte* packet, std::size_t count, T* dst) {
  detail::require_element<T>();
  const detail::packet_layout l = detail::validated_layout(
      q, packet, count, static_cast<int>(detail::element_traits<T>::tag), detail::unknown_size,
      "qsdp::decode");
  if (count > 0 && dst == nullptr)
    throw qsdp::error("qsdp::decode: dst is null with count " + std::to_string(count));
  if constexpr (detail::is_identity<Q>) {
    // The header was checked to hold `count` values of T: l.code_bytes == count * sizeof(T).
    if (count) std::memcpy(static_cast<void*>(dst), packet + l.codes_offset, l.code_bytes);
  } else {
    detail::run_decode(q, packet, l, count, 0, count, detail::store_sink<T>{dst});
  }
}

/// Decodes with the packet buffer's size checked too.
template <class Q, class T>
void decode(const Q& q, std::span<const std::byte> packet, std::span<T> dst) {
  detail::require_element<T>();
  detail::validated_layout(q, packet.data(), dst.size(),
                           static_cast<int>(detail::element_traits<T>::tag), packet.size(),
                           "qsdp::decode");
  decode(q, packet.data(), dst.size(), dst.data());
}

/// acc[i] += decoded value i, for one packet of `count` values.
template <class Q>
void decode_accumulate(const Q& q, const std::byte* packet, std::size_t count, float* acc) {
  const detail::packet_layout l =
      detail::validated_layout(q, packet, count, -1, detail::unknown_size, "qsdp::decode_accumulate");
  if (count > 0 && acc == nullptr)
    throw qsdp::error("qsdp::decode_accumulate: acc is null with count " + std::to_string(count));
  detail::accumulate_range(q, packet, l, count, 0, count, acc);
}

/// acc[i] += decoded value i, for a packet of acc.size() values, with the packet buffer's size checked
/// too: a truncated packet, or a header that claims more than the buffer holds, throws qsdp::error.
template <class Q>
void decode_accumulate(const Q& q, std::span<const std::byte> packet, std::span<float> acc) {
  const detail::packet_layout l = detail::validated_layout(q, packet.data(), acc.size(), -1,
                                                           packet.size(), "qsdp::decode_accumulate");
  detail::accumulate_range(q, packet.data(), l, acc.size(), 0, acc.size(), acc.data());
}

/// acc[i] += the sum over packets of decoded value i, for `packet_count` packets of `count` values each,
/// stored back to back (as all_to_all_bytes delivers them). Works through the output in L1-sized chunks,
/// reading each packet's chunk once and keeping the accumulator in cache; the sum runs in packet order.
template <class Q>
void decode_accumulate(const Q& q, const std::byte* packets, std::size_t packet_count,
                       std::size_t count, float* acc) {
  if (packet_count == 0) return;
  if (packets == nullptr) throw qsdp::error("qsdp::decode_accumulate: packets is null");
  if (count > 0 && acc == nullptr)
    throw qsdp::error("qsdp::decode_accumulate: acc is null with count " + std::to_string(count));
  const detail::packet_layout first = detail::validated_layout(q, packets, count, -1,
                                                               detail::unknown_size,
                                                               "qsdp::decode_accumulate");
  const int element = detail::read_header(packets).element;
  for (std::size_t p = 1; p < packet_count; ++p) {
    const std::string where = "qsdp::decode_accumulate (packet " + std::to_string(p) + ")";
    detail::validated_layout(q, packets + p * first.total, count, element, detail::unknown_size,
                             where.c_str());
  }
  constexpr std::size_t chunk = 4 * detail::host_segment;
  for (std::size_t begin = 0; begin < count; begin += chunk) {
    const std::size_t end = std::min(count, begin + chunk);
    for (std::size_t p = 0; p < packet_count; ++p)
      detail::accumulate_range(q, packets + p * first.total, first, count, begin, end, acc);
  }
}

}  // namespace qsdp

#if defined(__CUDACC__)
// Device buffers: the same calls with a trailing cudaStream_t (nvcc translation units only).
#include "detail/cuda/device_codec.cuh"
#endif
