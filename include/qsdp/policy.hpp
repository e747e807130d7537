// SPDX-License-Identifier: Apache-2.0
/// @file
/// The policy vocabulary, shared by the policies (quantizers.hpp), the codec and its definitions in
/// detail/: what the codec tells a policy about a bucket (bucket_stats), the call counter of a
/// randomized policy, qsdp::identity, the quantizer and codec_policy concepts, and policy_name.
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "config.hpp"
#include "detail/codec/policy_traits.hpp"

namespace qsdp {

/// What the codec tells a policy about one bucket (finite values only; see codec.hpp for the rest).
struct bucket_stats {
  float min = 0.0f;       ///< smallest value of the bucket
  float max = 0.0f;       ///< largest value
  float abs_max = 0.0f;   ///< max(|min|, |max|)
  std::size_t count = 0;  ///< values in the bucket (the last bucket may be short)
  float u = 0.0f;         ///< U[0,1) draw for this bucket when the policy sets randomized_buckets
};

/// Call index of a randomized policy: every encode through the policy object takes the next index,
/// so each call draws fresh random numbers, and a run is reproducible from the seed and the call
/// sequence. Copies carry the current index; advancing is atomic, so sharing one policy between
/// threads is safe (though then the order of calls between threads decides who gets which index).
class call_counter {
 public:
  /// Starts at index 0.
  call_counter() noexcept = default;
  /// A counter at other's current index.
  /// @param other the counter to copy
  call_counter(const call_counter& other) noexcept : next_(other.next()) {}
  /// Sets this counter to other's current index.
  /// @param other the counter to copy
  /// @return this counter
  call_counter& operator=(const call_counter& other) noexcept {
    next_.store(other.next(), std::memory_order_relaxed);
    return *this;
  }
  /// Index the next call will use.
  /// @return the index, without taking it
  std::uint64_t next() const noexcept { return next_.load(std::memory_order_relaxed); }
  /// Takes the next index (the codec calls this once per encode).
  /// @return the index taken
  std::uint64_t advance() const noexcept { return next_.fetch_add(1, std::memory_order_relaxed); }
  /// Rewinds (or forwards) the sequence, e.g. to replay a run.
  /// @param next_index the index the next call will use
  void reset(std::uint64_t next_index = 0) noexcept {
    next_.store(next_index, std::memory_order_relaxed);
  }

 private:
  mutable std::atomic<std::uint64_t> next_{0};
};

/// No quantization: the codec copies the values into the packet unchanged (bit-exact), through the
/// same code path as the quantizers, for baselines.
struct identity {
  static constexpr std::uint8_t wire_id = 5;       ///< the policy's id in packet headers
  static constexpr const char* name = "identity";  ///< the name policy_name() returns
};

// The plug-in point: any type with these members is a quantizer (docs/guides/custom-policy.md).

/// A quantizer policy: the plug-in point of the codec (docs/guides/custom-policy.md). Members:
/// - `static constexpr int bits`: the code width, 1..8;
/// - `static constexpr bool randomized`: true: the codec passes u ~ U[0,1) per element;
/// - `std::size_t bucket_size`: values per bucket, >= 1;
/// - `meta_type`: the per-bucket metadata, trivially copyable, at most 16 bytes;
/// - `meta_type fit(const bucket_stats&) const`: the bucket's metadata;
/// - `std::uint32_t encode(float x, const meta_type&, float u) const`: a code below 2^bits;
/// - `float decode(std::uint32_t code, const meta_type&) const`: the value of a code.
///
/// fit, encode and decode carry QSDP_HOST_DEVICE to run in the device codec too.
/// @tparam Q the policy type
template <class Q>
concept quantizer =
    detail::has_bits<Q> && detail::has_randomized<Q> && detail::has_bucket_size<Q> &&
    detail::has_meta_type<Q> && detail::has_fit<Q> && detail::has_encode<Q> &&
    detail::has_decode<Q> && detail::valid_bits<Q> && detail::valid_meta<Q>;

/// Any policy the codec accepts: a quantizer or qsdp::identity.
/// @tparam Q the policy type
template <class Q>
concept codec_policy = quantizer<Q> || std::same_as<std::remove_cv_t<Q>, identity>;

/// Name of a policy for tables and messages ("uniform", "stochastic", ..., or "user-defined").
/// @tparam Q the policy type
/// @return Q::name where Q has one, else "user-defined"
template <class Q>
constexpr const char* policy_name() {
  if constexpr (requires { Q::name; })
    return Q::name;
  else
    return "user-defined";
}

}  // namespace qsdp
