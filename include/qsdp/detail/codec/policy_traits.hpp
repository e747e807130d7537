// SPDX-License-Identifier: Apache-2.0
//
// What the library needs to know about a policy type, and the pieces of the qsdp::quantizer concept
// (policy.hpp): one trait per optional member (randomized buckets, wire id and tag, seed), one
// concept per required member, and require_policy, which turns a type that is not a policy into one
// compiler message naming the missing member. Also the metadata types of the built-in policies.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../config.hpp"

namespace qsdp {
struct bucket_stats;  // policy.hpp
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

// Each required member once: the concept that tests it and the message that names it when it is
// missing. A requirement is a struct so that require_policy can walk them in order and instantiate
// only the first unmet one's static_assert: one readable diagnostic instead of a wall of
// unsatisfied constraints (C++20 static_assert messages must be literals, hence the macro).
#define QSDP_DETAIL_POLICY_REQUIREMENT(concept_name, message, ...)                       \
  template <class Q>                                                                     \
  concept concept_name = __VA_ARGS__;                                                    \
  struct concept_name##_requirement {                                                    \
    template <class Q>                                                                   \
    static constexpr bool holds = concept_name<Q>;                                       \
    template <class Q>                                                                   \
    static consteval void fail() {                                                       \
      static_assert(concept_name<Q>, "type does not satisfy qsdp::quantizer: " message); \
    }                                                                                    \
  }

QSDP_DETAIL_POLICY_REQUIREMENT(
    has_bits, "missing member `static constexpr int bits` (code width, 1..8)", requires {
      { Q::bits } -> std::convertible_to<int>;
    });
QSDP_DETAIL_POLICY_REQUIREMENT(valid_bits, "`bits` must be 1..8", Q::bits >= 1 && Q::bits <= 8);
QSDP_DETAIL_POLICY_REQUIREMENT(
    has_randomized, "missing member `static constexpr bool randomized`", requires {
      { Q::randomized } -> std::convertible_to<bool>;
    });
QSDP_DETAIL_POLICY_REQUIREMENT(
    has_bucket_size, "missing member `std::size_t bucket_size`", requires(const Q& q) {
      { q.bucket_size } -> std::convertible_to<std::size_t>;
    });
QSDP_DETAIL_POLICY_REQUIREMENT(
    has_meta_type, "missing member type `meta_type` (per-bucket metadata)",
    requires { typename Q::meta_type; });
QSDP_DETAIL_POLICY_REQUIREMENT(valid_meta,
                               "`meta_type` must be trivially copyable and at most 16 bytes",
                               std::is_trivially_copyable_v<typename Q::meta_type> &&
                                   sizeof(typename Q::meta_type) <= 16 &&
                                   alignof(typename Q::meta_type) <= 16);
QSDP_DETAIL_POLICY_REQUIREMENT(
    has_fit, "missing member `meta_type fit(const qsdp::bucket_stats&) const`",
    requires(const Q& q, const bucket_stats& s) {
      { q.fit(s) } -> std::same_as<typename Q::meta_type>;
    });
QSDP_DETAIL_POLICY_REQUIREMENT(
    has_encode, "missing member `std::uint32_t encode(float x, const meta_type&, float u) const`",
    requires(const Q& q, const typename Q::meta_type& m) {
      { q.encode(0.0f, m, 0.0f) } -> std::convertible_to<std::uint32_t>;
    });
QSDP_DETAIL_POLICY_REQUIREMENT(
    has_decode, "missing member `float decode(std::uint32_t code, const meta_type&) const`",
    requires(const Q& q, const typename Q::meta_type& m) {
      { q.decode(std::uint32_t{}, m) } -> std::convertible_to<float>;
    });
#undef QSDP_DETAIL_POLICY_REQUIREMENT

template <class Q, class Requirement, class... Later>
consteval void require_in_order() {
  if constexpr (!Requirement::template holds<Q>)
    Requirement::template fail<Q>();
  else if constexpr (sizeof...(Later) > 0)
    require_in_order<Q, Later...>();
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

/// Whether Q rotates its buckets before quantizing (qsdp::hadamard<Inner>).
template <class Q>
consteval bool rotated() {
  if constexpr (requires { Q::hadamard_rotated; })
    return Q::hadamard_rotated;
  else
    return false;
}

/// Whether Q's fit reads bucket_stats::abs_max alone (Q::fit_reads_abs_max: the block-scaled float
/// policies): the kernels then gather only the largest magnitude.
template <class Q>
consteval bool fit_reads_abs_max() {
  if constexpr (requires { Q::fit_reads_abs_max; })
    return Q::fit_reads_abs_max;
  else
    return false;
}

/// Whether Q's wire id is that of a built-in grid policy (uniform, stochastic, symmetric,
/// random_shift), alone or inside hadamard<>: the codec's fast paths evaluate those grids.
template <class Q>
consteval bool builtin_grid_id() {
  const unsigned id = wire_id<Q>() & 0x7Fu;
  return id >= 1 && id <= 4;
}

/// The metadata written for a bucket holding NaN or inf, whose values decode to NaN from its flag
/// alone: Q::non_finite_meta where the format has a NaN encoding of its own (MX: E8M0's NaN
/// byte, so the block stays NaN to a reader of the scales alone), else zero bytes.
template <class Q>
QSDP_HOST_DEVICE constexpr typename Q::meta_type non_finite_meta() {
  if constexpr (requires { Q::non_finite_meta; })
    return Q::non_finite_meta;
  else
    return typename Q::meta_type{};
}

/// The significant bits of every finite value Q decodes to: Q::decoded_significant_bits where the
/// policy bounds them (MX: an element's 1 + mantissa bits, which the power-of-two scale keeps),
/// else 24 (any float). A rotated policy's decoded values are sums: 24.
template <class Q>
consteval int decoded_significant_bits() {
  if constexpr (!rotated<Q>() && requires { Q::decoded_significant_bits; })
    return Q::decoded_significant_bits;
  else
    return 24;
}

/// Whether Q carries metadata for a whole packet besides its buckets' (qsdp::nvfp4's tensor
/// scale): the optional members `tensor_meta_type` (trivially copyable, at most 16 bytes), the data
/// member `tensor_meta` that fit, encode and decode read, and `tensor_meta_type fit_tensor(float
/// abs_max) const`, given the largest finite magnitude among the packet's values (0 if none). The
/// codec fits it before the buckets, writes it after the header and sets it on a copy of the policy
/// for every bucket of that packet, on both sides.
template <class Q>
consteval bool tensor_scaled() {
  if constexpr (is_identity<Q>)
    return false;
  else
    return requires { typename Q::tensor_meta_type; };
}

/// The checks on a tensor-scaled policy's members, one message each.
template <class Q>
consteval void require_tensor_members() {
  if constexpr (tensor_scaled<Q>()) {
    using M = typename Q::tensor_meta_type;
    static_assert(std::is_trivially_copyable_v<M> && sizeof(M) <= 16,
                  "type does not satisfy qsdp::quantizer: `tensor_meta_type` must be trivially "
                  "copyable and at most 16 bytes");
    static_assert(
        requires(Q & q, const M& m) { q.tensor_meta = m; },
        "type does not satisfy qsdp::quantizer: a policy with `tensor_meta_type` needs a data "
        "member `tensor_meta_type tensor_meta` (the codec sets it for each packet)");
    static_assert(
        requires(const Q& q, float abs_max) {
          { q.fit_tensor(abs_max) } -> std::same_as<M>;
        },
        "type does not satisfy qsdp::quantizer: a policy with `tensor_meta_type` needs "
        "`tensor_meta_type fit_tensor(float abs_max) const`");
  }
}

/// Turns a type that is not a policy into one compiler message naming its first missing member.
template <class Q>
consteval void require_policy() {
  if constexpr (!is_identity<Q>) {
    require_in_order<Q, has_bits_requirement, valid_bits_requirement, has_randomized_requirement,
                     has_bucket_size_requirement, has_meta_type_requirement, valid_meta_requirement,
                     has_fit_requirement, has_encode_requirement, has_decode_requirement>();
    require_tensor_members<Q>();
  }
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
