// SPDX-License-Identifier: Apache-2.0
//
// The host codec's calls (declared and documented in qsdp/codec.hpp, which includes this file after
// its declarations): argument and header checks, then the loops of loops.hpp. Identity packets are
// copied as they are.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "../../policy.hpp"
#include "../../rng_position.hpp"
#include "../codec/block_layout.hpp"
#include "../codec/checks.hpp"
#include "../codec/float_types.hpp"
#include "../codec/format.hpp"
#include "loops.hpp"

namespace qsdp::detail {

template <class Q, class T>
void encode_packet(const Q& q, const T* src, std::size_t count, std::byte* packet,
                   const rng_key& key, const char* where) {
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
  if constexpr (rotated<Q>()) {
    const rotation_record r{key.seed, key.call};
    std::memcpy(packet + sizeof h, &r, sizeof r);
  }
  if constexpr (is_identity<Q>) {
    if (count) std::memcpy(packet + l.codes_offset, src, count * sizeof(T));
    std::memset(packet + l.codes_offset + l.code_bytes, 0, l.total - l.codes_offset - l.code_bytes);
  } else if constexpr (tensor_scaled<Q>()) {
    // The packet-wide metadata first, from all of its values; every bucket then reads it.
    Q bound = q;
    bound.tensor_meta = q.fit_tensor(finite_abs_max(src, count));
    write_tensor_record<Q>(packet, bound.tensor_meta);
    run_encode(bound, src, count, packet, l, key);
  } else {
    run_encode(q, src, count, packet, l, key);
  }
}

/// Adds the values of one validated packet (of any element type for identity) to acc[begin, end).
template <class Q>
void accumulate_range(const Q& q, const std::byte* packet, const packet_layout& l,
                      std::size_t count, std::size_t begin, std::size_t end, float* acc) {
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
        throw qsdp::error(
            "qsdp::decode_accumulate: packet holds " +
            std::string(element_type_name(static_cast<element_type>(read_header(packet).element))) +
            " values, which this build cannot read (no CUDA half headers)");
    }
  } else {
    run_decode(q, packet, l, count, begin, end, accumulate_sink{acc});
  }
}

/// acc[i] += the value i of each of `packet_count` packets, `stride` bytes apart, in packet order
/// (qsdp::decode_accumulate's packets lie one after another; a group's lie in the ranks' blocks).
template <class Q>
void accumulate_packets(const Q& q, const std::byte* packets, std::size_t packet_count,
                        std::size_t stride, std::size_t count, float* acc) {
  if (packet_count == 0) return;
  if (count > 0 && acc == nullptr)
    throw qsdp::error("qsdp::decode_accumulate: acc is null with count " + std::to_string(count));
  const packet_layout first =
      validated_layout(q, packets, count, -1, unknown_size, "qsdp::decode_accumulate");
  const int element = read_header(packets).element;
  for (std::size_t p = 1; p < packet_count; ++p) {
    const std::string where = "qsdp::decode_accumulate (packet " + std::to_string(p) + ")";
    validated_layout(q, packets + p * stride, count, element, unknown_size, where.c_str());
  }
  if constexpr (rotated<Q>()) {
    // Packets rotated alike (a reduce-scatter's: same seed and call) are summed before the inverse
    // transform, which then runs once per bucket instead of once per packet.
    bool alike = true;
    for (std::size_t p = 1; p < packet_count; ++p)
      alike = alike && std::memcmp(packets + sizeof(packet_header),
                                   packets + p * stride + sizeof(packet_header),
                                   sizeof(rotation_record)) == 0;
    if (alike) {
      run_accumulate_rotated(q, packets, packet_count, stride, first, count, acc);
      return;
    }
  }
  constexpr std::size_t chunk = 4 * host_segment;
  for (std::size_t begin = 0; begin < count; begin += chunk) {
    const std::size_t end = std::min(count, begin + chunk);
    for (std::size_t p = 0; p < packet_count; ++p)
      accumulate_range(q, packets + p * stride, first, count, begin, end, acc);
  }
}

}  // namespace qsdp::detail

namespace qsdp {

template <class T, class Q>
std::size_t compressed_size(const Q& q, std::size_t count) {
  detail::require_policy<Q>();
  detail::require_element<T>();
  detail::check_bucket_size(q, "qsdp::compressed_size");
  detail::check_count(count, "qsdp::compressed_size");
  return detail::layout_for<Q, T>(q, count).total;
}

template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet) {
  detail::encode_packet(q, src, count, packet, detail::next_key(q), "qsdp::encode");
}

template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet, rng_position position) {
  if (position.stream >= (1u << 31))
    throw qsdp::error("qsdp::encode: rng_position.stream is " + std::to_string(position.stream) +
                      "; expected < 2^31");
  detail::encode_packet(q, src, count, packet,
                        detail::rng_key{detail::seed_of(q), position.call, position.stream},
                        "qsdp::encode");
}

template <class Q, class T>
void encode(const Q& q, std::span<const T> src, std::span<std::byte> packet) {
  const std::size_t need = compressed_size<T>(q, src.size());
  if (packet.size() < need)
    throw qsdp::error("qsdp::encode: packet buffer holds " + std::to_string(packet.size()) +
                      " bytes, but compressed_size for " + std::to_string(src.size()) +
                      " values is " + std::to_string(need));
  encode(q, src.data(), src.size(), packet.data());
}

template <class Q, class T>
void decode(const Q& q, const std::byte* packet, std::size_t count, T* dst) {
  detail::require_element<T>();
  const detail::packet_layout l =
      detail::validated_layout(q, packet, count, static_cast<int>(detail::element_traits<T>::tag),
                               detail::unknown_size, "qsdp::decode");
  if (count > 0 && dst == nullptr)
    throw qsdp::error("qsdp::decode: dst is null with count " + std::to_string(count));
  if constexpr (detail::is_identity<Q>) {
    // The header was checked to hold `count` values of T: l.code_bytes == count * sizeof(T).
    if (count) std::memcpy(static_cast<void*>(dst), packet + l.codes_offset, l.code_bytes);
  } else {
    const bool streaming = std::is_same_v<T, float> && detail::streaming_output(count * sizeof(T));
    detail::run_decode(q, packet, l, count, 0, count, detail::store_sink<T>{dst, streaming});
    if (streaming) detail::streaming_fence();
  }
}

template <class Q, class T>
void decode(const Q& q, std::span<const std::byte> packet, std::span<T> dst) {
  detail::require_element<T>();
  detail::validated_layout(q, packet.data(), dst.size(),
                           static_cast<int>(detail::element_traits<T>::tag), packet.size(),
                           "qsdp::decode");
  decode(q, packet.data(), dst.size(), dst.data());
}

template <class Q>
void decode_accumulate(const Q& q, const std::byte* packet, std::size_t count, float* acc) {
  const detail::packet_layout l = detail::validated_layout(
      q, packet, count, -1, detail::unknown_size, "qsdp::decode_accumulate");
  if (count > 0 && acc == nullptr)
    throw qsdp::error("qsdp::decode_accumulate: acc is null with count " + std::to_string(count));
  detail::accumulate_range(q, packet, l, count, 0, count, acc);
}

template <class Q>
void decode_accumulate(const Q& q, std::span<const std::byte> packet, std::span<float> acc) {
  const detail::packet_layout l = detail::validated_layout(
      q, packet.data(), acc.size(), -1, packet.size(), "qsdp::decode_accumulate");
  detail::accumulate_range(q, packet.data(), l, acc.size(), 0, acc.size(), acc.data());
}

template <class Q>
void decode_accumulate(const Q& q, const std::byte* packets, std::size_t packet_count,
                       std::size_t count, float* acc) {
  if (packet_count == 0) return;
  if (packets == nullptr) throw qsdp::error("qsdp::decode_accumulate: packets is null");
  const detail::packet_layout first = detail::validated_layout(
      q, packets, count, -1, detail::unknown_size, "qsdp::decode_accumulate");
  detail::accumulate_packets(q, packets, packet_count, first.total, count, acc);
}

template <class Q>
std::size_t block_scaled_element_bytes(const Q& q, std::size_t count) {
  static_assert(detail::block_scaled_layout_policy<Q>,
                "qsdp::block_scaled_element_bytes: Q must be an MX policy (mxfp8, mxfp6, mxfp4)");
  (void)q;
  return detail::layout_element_bytes(Q::bits, count);
}

template <class Q>
void unpack_block_scaled(const Q& q, const std::byte* packet, std::size_t count,
                         block_scaled_buffers out) {
  static_assert(detail::block_scaled_layout_policy<Q>,
                "qsdp::unpack_block_scaled: Q must be an MX policy (mxfp8, mxfp6, mxfp4; not "
                "rotated, not nvfp4, whose tensor scale is per packet)");
  constexpr const char* where = "qsdp::unpack_block_scaled";
  const detail::packet_layout l =
      detail::validated_layout(q, packet, count, -1, detail::unknown_size, where);
  detail::check_block_scaled_count(q, count, where);
  if (count > 0 && (out.elements == nullptr || out.scales == nullptr))
    throw qsdp::error(std::string(where) + ": out." +
                      (out.elements == nullptr ? "elements" : "scales") + " is null with count " +
                      std::to_string(count));
  detail::copy_block_scaled(packet, l, Q::bits, count, out.elements, out.scales);
}

inline std::size_t tiled_block_scales_size(std::size_t rows, std::size_t cols) {
  return (rows + 127) / 128 * 128 * ((cols + 3) / 4 * 4);
}

inline void tile_block_scales(const std::uint8_t* scales, std::size_t rows, std::size_t cols,
                              std::uint8_t* tiled) {
  if (rows == 0 || cols == 0) return;
  if (scales == nullptr || tiled == nullptr)
    throw qsdp::error(std::string("qsdp::tile_block_scales: ") +
                      (scales == nullptr ? "scales" : "tiled") + " is null with " +
                      std::to_string(rows) + " x " + std::to_string(cols) + " scales");
  std::memset(tiled, 0, tiled_block_scales_size(rows, cols));
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c)
      tiled[detail::tiled_scale_offset(r, c, cols)] = scales[r * cols + c];
}

template <class T>
float to_float(T value) {
  detail::require_element<T>();
  return detail::element_traits<T>::to_float(value);
}

template <class T>
T from_float(float value) {
  detail::require_element<T>();
  return detail::element_traits<T>::from_float(value);
}

inline const char* host_codec_isa() { return detail::host_codec_isa(); }

}  // namespace qsdp
