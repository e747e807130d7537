// SPDX-License-Identifier: Apache-2.0
//
// A bucket's statistics, computed once for every path: the host loops (scalar and AVX2) and the
// CUDA kernels all accumulate partial_stats and turn them into a policy's metadata with fit_bucket,
// so the metadata a packet carries cannot depend on who computed it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../config.hpp"
#include "../../quantizers.hpp"
#include "philox.hpp"

namespace qsdp::detail {

/// Maps a float's bits to an int32 with the same order (for finite values), so that min and max
/// become integer reductions; non-finite values are flagged separately. It is its own inverse.
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::int32_t ordered_key(std::uint32_t bits) {
  const auto sbits = static_cast<std::int32_t>(bits);
  return sbits ^ ((sbits >> 31) & 0x7FFFFFFF);
}

/// Ordered keys of +inf and -inf: every NaN and infinity has a key at or above the first or at or
/// below the second (NaN payloads order beyond the infinities of their sign), every finite value
/// one strictly between. So the extremes alone say whether a non-finite value was seen.
inline constexpr std::int32_t positive_infinity_key = 0x7F800000;
inline constexpr std::int32_t negative_infinity_key = -0x7F800001;  // ordered_key(0xFF800000)

/// Partial statistics of some values of a bucket. Merging is associative and commutative (integer
/// min/max and or), so any reduction tree gives the bits the host's sequential scan gives.
struct partial_stats {
  std::int32_t lo = INT32_MAX;  // macros, not numeric_limits: usable in device code without flags
  std::int32_t hi = INT32_MIN;
  std::uint32_t non_finite = 0;  // may be set by a scan that finds one first (the AVX2 loops)

  QSDP_HOST_DEVICE QSDP_FORCE_INLINE void add(float v) {
    const std::int32_t key = ordered_key(detail::bit_cast<std::uint32_t>(v));
    lo = key < lo ? key : lo;
    hi = key > hi ? key : hi;
  }
  QSDP_HOST_DEVICE QSDP_FORCE_INLINE void merge(const partial_stats& o) {
    lo = o.lo < lo ? o.lo : lo;
    hi = o.hi > hi ? o.hi : hi;
    non_finite |= o.non_finite;
  }
  QSDP_HOST_DEVICE QSDP_FORCE_INLINE bool finite() const {
    return non_finite == 0 && hi < positive_infinity_key && lo > negative_infinity_key;
  }
  QSDP_HOST_DEVICE QSDP_FORCE_INLINE float min() const {
    return detail::bit_cast<float>(
        static_cast<std::uint32_t>(ordered_key(static_cast<std::uint32_t>(lo))));
  }
  QSDP_HOST_DEVICE QSDP_FORCE_INLINE float max() const {
    return detail::bit_cast<float>(
        static_cast<std::uint32_t>(ordered_key(static_cast<std::uint32_t>(hi))));
  }
};

/// A finite bucket's metadata, exactly as the host codec computes it (same abs_max, same draw).
template <class Q>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE typename Q::meta_type fit_bucket(
    const Q& q, const partial_stats& p, std::size_t n, const rng_key& key, std::uint64_t bucket) {
  bucket_stats s;
  s.min = p.min();
  s.max = p.max();
  s.abs_max = -s.min < s.max ? s.max : -s.min;  // std::max(-min, max), as on the host
  s.count = n;
  if constexpr (randomized_buckets<Q>()) s.u = key.uniform(draw_domain::bucket, bucket);
  return q.fit(s);
}

}  // namespace qsdp::detail
