// SPDX-License-Identifier: Apache-2.0
//
// A bucket's statistics, computed once for every path: the host loops (scalar and AVX2) and the
// CUDA kernels all accumulate partial_stats and turn them into a policy's metadata with fit_bucket,
// so the metadata a packet carries cannot depend on who computed it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "../../config.hpp"
#include "../../policy.hpp"
#include "float_types.hpp"
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

/// Two 16-bit floats (bf16 or half) packed in a word, each half's bit pattern mapped as
/// ordered_key maps a float's: x ^ 0x7FFF where the half's sign is set, so that as int16 the halves
/// order as their values do (-0 below +0, NaN payloads beyond the infinities of their sign).
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t ordered_key_pair(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  // PRMT's generic mode: result bytes 0-1 are byte 1's sign replicated, bytes 2-3 byte 3's.
  std::uint32_t signs;
  asm("prmt.b32 %0, %1, 0, 0xBB99;" : "=r"(signs) : "r"(bits));
#else
  const std::uint32_t signs = (bits >> 15 & 1u) * 0xFFFFu | (bits >> 31) * 0xFFFF0000u;
#endif
  return bits ^ (signs & 0x7FFF7FFFu);
}

/// Per 16-bit half, as int16: the least (or, Greatest, the greatest) of a, b and c; the host
/// spelling of sm_90's VIMNMX3.S16x2.
template <bool Greatest>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t extreme3_s16x2(std::uint32_t a, std::uint32_t b,
                                                                std::uint32_t c) {
  std::uint32_t r = 0;
  for (unsigned shift = 0; shift < 32; shift += 16) {
    std::int16_t m = static_cast<std::int16_t>(a >> shift);
    for (const std::uint32_t w : {b, c}) {
      const auto v = static_cast<std::int16_t>(w >> shift);
      m = (Greatest ? v > m : v < m) ? v : m;
    }
    r |= static_cast<std::uint32_t>(static_cast<std::uint16_t>(m)) << shift;
  }
  return r;
}

/// Per 16-bit half, as int16: min(a, min(b, c)) and max(a, max(b, c)) (one instruction on sm_90).
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t min3_s16x2(std::uint32_t a, std::uint32_t b,
                                                            std::uint32_t c) {
#if QSDP_DEVICE_SPELLING
  return __vimin3_s16x2(a, b, c);
#else
  return extreme3_s16x2<false>(a, b, c);
#endif
}
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t max3_s16x2(std::uint32_t a, std::uint32_t b,
                                                            std::uint32_t c) {
#if QSDP_DEVICE_SPELLING
  return __vimax3_s16x2(a, b, c);
#else
  return extreme3_s16x2<true>(a, b, c);
#endif
}

/// partial_stats of 16-bit floats read as packed pairs of bit patterns: the extremes of their
/// ordered_key_pair keys, two values per integer instruction, where partial_stats::add spends a
/// conversion, a key and two comparisons on each. Every map on the way is increasing and one to
/// one (half bits -> key16 -> value -> ordered_key), so the extremes are the same values, and
/// stats() gives the bits partial_stats::add gives for the same values. Bf16: a 16-bit float.
template <bool Bf16>
struct paired_stats16 {
  std::uint32_t lo = 0x7FFF7FFFu;  // per half, as int16
  std::uint32_t hi = 0x80008000u;

  /// Four values: two words of two.
  QSDP_HOST_DEVICE QSDP_FORCE_INLINE void add(std::uint32_t a, std::uint32_t b) {
    const std::uint32_t ka = ordered_key_pair(a), kb = ordered_key_pair(b);
    lo = min3_s16x2(lo, ka, kb);
    hi = max3_s16x2(hi, ka, kb);
  }
  /// The same statistics as partial_stats (empty when nothing was added).
  QSDP_HOST_DEVICE QSDP_FORCE_INLINE partial_stats stats() const {
    partial_stats p;
    if (static_cast<std::int16_t>(hi) < static_cast<std::int16_t>(lo)) return p;  // none added
    const auto key = [](std::uint32_t key16) {  // key16 -> the value's ordered_key (an involution)
      const auto k = static_cast<std::uint16_t>(key16);
      const auto bits = static_cast<std::uint16_t>(k & 0x8000u ? k ^ 0x7FFFu : k);
      const float v = Bf16 ? bf16_bits_to_float(bits) : half_bits_to_float(bits);
      return ordered_key(detail::bit_cast<std::uint32_t>(v));
    };
    const std::int32_t lo0 = key(lo), lo1 = key(lo >> 16), hi0 = key(hi), hi1 = key(hi >> 16);
    p.lo = lo0 < lo1 ? lo0 : lo1;
    p.hi = hi0 > hi1 ? hi0 : hi1;
    return p;
  }
};

/// Per 16-bit half, unsigned: the greatest of a, b and c (VIMNMX3.U16x2 on sm_90).
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t max3_u16x2(std::uint32_t a, std::uint32_t b,
                                                            std::uint32_t c) {
#if QSDP_DEVICE_SPELLING
  return __vimax3_u16x2(a, b, c);
#else
  std::uint32_t r = 0;
  for (unsigned shift = 0; shift < 32; shift += 16) {
    std::uint32_t m = (a >> shift) & 0xFFFFu;
    for (const std::uint32_t w : {b, c})
      m = ((w >> shift) & 0xFFFFu) > m ? (w >> shift) & 0xFFFFu : m;
    r |= m << shift;
  }
  return r;
#endif
}

/// For a policy whose fit reads abs_max alone (fit_reads_abs_max): the largest magnitude M of
/// 16-bit floats read as packed pairs of bit patterns (magnitudes order as their patterns, NaN and
/// infinity above every finite one), one instruction per two values after the mask. stats() gives
/// the statistics of -M and M: the abs_max and finiteness partial_stats::add gives the values
/// themselves, not their least and greatest.
template <bool Bf16>
struct paired_abs_max16 {
  std::uint32_t top = 0;  // per half

  /// Four values: two words of two.
  QSDP_HOST_DEVICE QSDP_FORCE_INLINE void add(std::uint32_t a, std::uint32_t b) {
    top = max3_u16x2(top, a & 0x7FFF7FFFu, b & 0x7FFF7FFFu);
  }
  QSDP_HOST_DEVICE QSDP_FORCE_INLINE partial_stats stats() const {
    const std::uint32_t low = top & 0xFFFFu, high = top >> 16;
    const auto bits = static_cast<std::uint16_t>(low > high ? low : high);
    const float m = Bf16 ? bf16_bits_to_float(bits) : half_bits_to_float(bits);
    partial_stats p;
    p.add(m);
    p.add(-m);
    return p;
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
