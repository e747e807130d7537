// SPDX-License-Identifier: Apache-2.0
//
// The argument and packet checks every codec call makes, host or device, and the random-stream
// position an encode takes from its policy: stated once, so the two codecs refuse the same inputs
// with the same messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "../../config.hpp"
#include "../../policy.hpp"
#include "float_types.hpp"
#include "format.hpp"
#include "philox.hpp"

namespace qsdp::detail {

template <class T>
consteval void require_element() {
  static_assert(element<T>,
                "qsdp codec: element type must be float, double, __half or __nv_bfloat16"
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
    if (rotated<Q>() && !hadamard_bucket_ok(q.bucket_size))
      throw qsdp::error(std::string(where) + ": bucket_size is " + std::to_string(q.bucket_size) +
                        "; " + policy_name<Q>() +
                        " needs a power of two from 16 to 4096 (the Walsh-Hadamard transform's "
                        "length)");
  }
}

inline void check_count(std::size_t count, const char* where) {
  if (count > max_packet_count)
    throw qsdp::error(std::string(where) + ": count is " + std::to_string(count) +
                      "; expected at most 2^56");
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
  check_header(h, expectation_for(q, count, element), where);
  const packet_layout l =
      is_identity<Q> ? make_layout(h.bits, 0, 0, count)
                     : make_layout(h.bits, h.meta_size, static_cast<std::size_t>(h.bucket_size),
                                   count, records_bytes<Q>());
  if (available < l.total)
    throw qsdp::error(std::string(where) + ": packet buffer holds " + std::to_string(available) +
                      " bytes, but a packet of " + std::to_string(count) + " values needs " +
                      std::to_string(l.total));
  return l;
}

inline constexpr std::size_t unknown_size = ~std::size_t{0};

template <class Q>
rng_key next_key(const Q& q) {
  if constexpr (randomized_elements<Q>() || randomized_buckets<Q>() || rotated<Q>()) {
    static_assert(
        requires { q.calls.advance(); },
        "qsdp::encode: a randomized policy needs a member `qsdp::call_counter calls` so that "
        "every call draws fresh numbers; or pass a qsdp::rng_position explicitly");
    return {seed_of(q), q.calls.advance(), 0};
  } else {
    return {seed_of(q), 0, 0};
  }
}

}  // namespace qsdp::detail
