// SPDX-License-Identifier: Apache-2.0
//
// What the library needs to know about a policy type, and the pieces of the qsdp::quantizer concept
// (quantizers.hpp): one trait per optional member (randomized buckets, wire id and tag, seed), one
// concept per required member, and require_policy, which turns a type that is not a policy into one
// compiler message naming the missing member. Also the metadata types of the built-in policies.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../config.hpp"

namespace qsdp {
struct bucket_stats;  // quantizers.hpp
struct identity;
}  // namespace qsdp

namespace qsdp::detail {

/// Metadata of the asymmetric policies: the bucket's range. Decoding recomputes the step from it in
/// double, which stays finite even when max - min exceeds FLT_MAX.
struct range_meta {
  float min;
  float max;
};

/// random_shift's metadata: the range and the bucket's random grid offset.
struct shifted_range_meta {
  float min;
  float max;
  float shift;
};

template <class Q>
concept has_bits = requires {
  { Q::bits } -> std::convertible_to<int>;
};
template <class Q>
concept has_randomized = requires {
  { Q::randomized } -> std::convertible_to<bool>;
};
template <class Q>
concept has_bucket_size = requires(const Q& q) {
  { q.bucket_size } -> std::convertible_to<std::size_t>;
};
template <class Q>
concept has_meta_type = requires {
  typename Q::meta_type;
};
template <class Q>
concept has_fit = requires(const Q& q, const bucket_stats& s) {
  { q.fit(s) } -> std::same_as<typename Q::meta_type>;
};
template <class Q>
concept has_encode = requires(const Q& q, const typename Q::meta_type& m) {
  { q.encode(0.0f, m, 0.0f) } -> std::convertible_to<std::uint32_t>;
};
template <class Q>
concept has_decode = requires(const Q& q, const typename Q::meta_type& m) {
  { q.decode(std::uint32_t{}, m) } -> std::convertible_to<float>;
};
template <class Q>
concept valid_bits = Q::bits >= 1 && Q::bits <= 8;
template <class Q>
concept valid_meta = std::is_trivially_copyable_v<typename Q::meta_type> &&
                         sizeof(typename Q::meta_type) <= 16 &&
                     alignof(typename Q::meta_type) <= 16;

/// One readable diagnostic per missing member, instead of a wall of unsatisfied constraints.
template <class Q>
consteval void require_policy() {
  if constexpr (std::same_as<std::remove_cv_t<Q>, identity>) {
    return;
  } else if constexpr (!has_bits<Q>) {
    static_assert(has_bits<Q>,
                  "type does not satisfy qsdp::quantizer: missing member "
                  "`static constexpr int bits` (code width, 1..8)");
  } else if constexpr (!valid_bits<Q>) {
    static_assert(valid_bits<Q>, "type does not satisfy qsdp::quantizer: `bits` must be 1..8");
  } else if constexpr (!has_randomized<Q>) {
    static_assert(has_randomized<Q>,
                  "type does not satisfy qsdp::quantizer: missing member "
                  "`static constexpr bool randomized`");
  } else if constexpr (!has_bucket_size<Q>) {
    static_assert(has_bucket_size<Q>,
                  "type does not satisfy qsdp::quantizer: missing member "
                  "`std::size_t bucket_size`");
  } else if constexpr (!has_meta_type<Q>) {
    static_assert(has_meta_type<Q>,
                  "type does not satisfy qsdp::quantizer: missing member type "
                  "`meta_type` (per-bucket metadata)");
  } else if constexpr (!valid_meta<Q>) {
    static_assert(valid_meta<Q>,
                  "type does not satisfy qsdp::quantizer: `meta_type` must be "
                  "trivially copyable and at most 16 bytes");
  } else if constexpr (!has_fit<Q>) {
    static_assert(has_fit<Q>,
                  "type does not satisfy qsdp::quantizer: missing member "
                  "`meta_type fit(const qsdp::bucket_stats&) const`");
  } else if constexpr (!has_encode<Q>) {
    static_assert(has_encode<Q>,
                  "type does not satisfy qsdp::quantizer: missing member "
                  "`std::uint32_t encode(float x, const meta_type&, float u) const`");
  } else if constexpr (!has_decode<Q>) {
    static_assert(has_decode<Q>,
                  "type does not satisfy qsdp::quantizer: missing member "
                  "`float decode(std::uint32_t code, const meta_type&) const`");
  }
}

template <class Q>
inline constexpr bool is_identity = std::same_as<std::remove_cv_t<Q>, identity>;

template <class Q>
consteval bool randomized_elements() {
  if constexpr (is_identity<Q>)
    return false;
  else
    return Q::randomized;
}

template <class Q>
consteval bool randomized_buckets() {
  if constexpr (requires { Q::randomized_buckets; })
    return Q::randomized_buckets;
  else
    return false;
}

template <class Q>
consteval std::uint8_t wire_id() {
  if constexpr (requires { Q::wire_id; })
    return Q::wire_id;
  else
    return 0;  // user-defined
}

template <class Q>
consteval std::uint32_t wire_tag() {
  if constexpr (requires { Q::wire_tag; })
    return static_cast<std::uint32_t>(Q::wire_tag);
  else
    return 0;
}

template <class Q>
std::uint64_t seed_of(const Q& q) {
  if constexpr (requires { q.seed; })
    return static_cast<std::uint64_t>(q.seed);
  else
    return 0;
}

}  // namespace qsdp::detail
