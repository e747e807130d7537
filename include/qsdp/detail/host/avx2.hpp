// SPDX-License-Identifier: Apache-2.0
//
// Hand-vectorized AVX2+FMA loops for the built-in policies on x86-64. Compilers vectorize the
// generic loops poorly here: without -ffast-math they will not turn the clamps into min/max
// instructions, and the double-precision arithmetic the built-ins need for exactness spills
// registers. These loops evaluate the policies' own grids (detail/codec/grid.hpp: code_grid_for,
// value_grid_for) with the very same IEEE operations in the same order as grid_code and grid_value
// (convert, subtract, fma, max, min, truncate), so results are bit-identical to the baseline path;
// the tests compare both.
//
// Every function here carries the avx2/fma target attribute and is only called when the CPU has
// both.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "../../quantizers.hpp"
#include "../codec/float_types.hpp"
#include "../codec/grid.hpp"
#include "../codec/philox.hpp"
#include "../codec/statistics.hpp"

// Small helpers are force-inlined into the loops; the loops themselves are ordinary (out-of-line)
// functions, so that the generic codec templates, compiled for the baseline ISA, may call them.
#define QSDP_AVX2_INLINE inline __attribute__((always_inline, target("avx2,fma")))
#define QSDP_AVX2_LOOP inline __attribute__((target("avx2,fma")))

namespace qsdp::detail::avx2 {

/// Eight values as float bits: floats as they are, bf16 (raw 16-bit patterns) widened exactly (a
/// bf16 is the upper half of the float it stands for).
template <bool Bf16>
QSDP_AVX2_INLINE __m256i load8_float_bits(const void* src, std::size_t j) {
  if constexpr (Bf16) {
    const __m128i halves = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(src) + j));
    return _mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16);
  } else {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const float*>(src) + j));
  }
}

template <bool Bf16>
QSDP_AVX2_INLINE std::uint32_t load1_float_bits(const void* src, std::size_t j) {
  if constexpr (Bf16) {
    std::uint16_t h;
    std::memcpy(&h, static_cast<const unsigned char*>(src) + 2 * j, 2);
    return static_cast<std::uint32_t>(h) << 16;
  } else {
    std::uint32_t b;
    std::memcpy(&b, static_cast<const unsigned char*>(src) + 4 * j, 4);
    return b;
  }
}

/// The statistics of n floats (or bf16 values, Bf16 = true; any alignment): partial_stats::add's
/// order-preserving integer key, min and max, eight lanes at a time.
template <bool Bf16>
QSDP_AVX2_LOOP partial_stats scan_values(const void* src, std::size_t n) {
  const __m256i sign_clear = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i exponent = _mm256_set1_epi32(0x7F800000);
  __m256i lo = _mm256_set1_epi32(std::numeric_limits<std::int32_t>::max());
  __m256i hi = _mm256_set1_epi32(std::numeric_limits<std::int32_t>::min());
  __m256i bad = _mm256_setzero_si256();
  const std::size_t vector_end = n - n % 8;
  for (std::size_t j = 0; j < vector_end; j += 8) {
    const __m256i bits = load8_float_bits<Bf16>(src, j);
    const __m256i key =
        _mm256_xor_si256(bits, _mm256_and_si256(_mm256_srai_epi32(bits, 31), sign_clear));
    lo = _mm256_min_epi32(lo, key);
    hi = _mm256_max_epi32(hi, key);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(bits, exponent), exponent));
  }
  alignas(32) std::int32_t lo_lanes[8], hi_lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lo_lanes), lo);
  _mm256_store_si256(reinterpret_cast<__m256i*>(hi_lanes), hi);
  partial_stats p;
  for (int k = 0; k < 8; ++k) p.merge({lo_lanes[k], hi_lanes[k], 0});
  p.non_finite = _mm256_testz_si256(bad, bad) ? 0u : 1u;
  for (std::size_t j = vector_end; j < n; ++j)
    p.add(bit_cast<float>(load1_float_bits<Bf16>(src, j)));
  return p;
}

/// n bf16 values (raw 16-bit patterns) to floats, exactly.
QSDP_AVX2_LOOP void bf16_to_f32(const void* src, std::size_t n, float* dst) {
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), load8_float_bits<true>(src, j));
  for (; j < n; ++j) {
    const std::uint32_t b = load1_float_bits<true>(src, j);
    std::memcpy(dst + j, &b, 4);
  }
}

/// n floats to bf16 bit patterns, round to nearest even, NaN kept quiet: the same integer steps as
/// float_to_bf16_bits. With Saturate, first the clamps of saturating_from_float: a finite value
/// beyond bf16's largest finite one becomes that value instead of inf (infinities pass).
template <bool Saturate>
QSDP_AVX2_LOOP void f32_to_bf16(const float* src, std::size_t n, void* dst) {
  auto* out = static_cast<unsigned char*>(dst);
  const __m256 limit = _mm256_set1_ps(3.38953139e38f), neg_limit = _mm256_set1_ps(-3.38953139e38f);
  const __m256 float_max = _mm256_set1_ps(3.40282347e38f),
               neg_float_max = _mm256_set1_ps(-3.40282347e38f);
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF), infinity = _mm256_set1_epi32(0x7F800000);
  const __m256i quiet = _mm256_set1_epi32(0x40), round = _mm256_set1_epi32(0x7FFF),
                one = _mm256_set1_epi32(1);
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_loadu_ps(src + j);
    if constexpr (Saturate) {
      // (v > limit && v <= float_max) ? limit : v, then the same below -limit (ordered compares:
      // NaN stays).
      const __m256 above = _mm256_and_ps(_mm256_cmp_ps(v, limit, _CMP_GT_OQ),
                                         _mm256_cmp_ps(v, float_max, _CMP_LE_OQ));
      v = _mm256_blendv_ps(v, limit, above);
      const __m256 below = _mm256_and_ps(_mm256_cmp_ps(v, neg_limit, _CMP_LT_OQ),
                                         _mm256_cmp_ps(v, neg_float_max, _CMP_GE_OQ));
      v = _mm256_blendv_ps(v, neg_limit, below);
    }
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i upper = _mm256_srli_epi32(bits, 16);
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, magnitude), infinity);
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(bits, round), _mm256_and_si256(upper, one)), 16);
    const __m256i result = _mm256_blendv_epi8(rounded, _mm256_or_si256(upper, quiet), is_nan);
    // Every lane holds at most 0xFFFF, a positive 32-bit value: the unsigned-saturating pack is
    // exact.
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(result), _mm256_extracti128_si256(result, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * j), packed);
  }
  for (; j < n; ++j) {
    float v = src[j];
    if constexpr (Saturate) {
      v = (v > 3.38953139e38f && v <= 3.40282347e38f) ? 3.38953139e38f : v;
      v = (v < -3.38953139e38f && v >= -3.40282347e38f) ? -3.38953139e38f : v;
    }
    const std::uint16_t h = float_to_bf16_bits(v);
    std::memcpy(out + 2 * j, &h, 2);
  }
}

/// Four Philox states, one block per 64-bit lane. Each 32-bit state word sits in the low half of
/// its lane: _mm256_mul_epu32 then yields the full 64-bit product in place (high half = Philox's
/// "hi", low half = "lo"), and the garbage the high halves collect is never read, since the
/// multiply and the final store only look at the low halves.
struct philox_lanes {
  __m256i c0, c1, c2, c3;
};

QSDP_AVX2_INLINE philox_lanes philox_start(const rng_key& key, draw_domain domain,
                                           std::uint64_t first_block) {
  const __m256i block = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<long long>(first_block)),
                                         _mm256_setr_epi64x(0, 1, 2, 3));
  return {block, _mm256_srli_epi64(block, 32),
          _mm256_set1_epi64x(static_cast<long long>(static_cast<std::uint32_t>(key.call))),
          _mm256_set1_epi64x(static_cast<long long>((key.stream & 0x7FFFFFFFu) |
                                                    (static_cast<std::uint32_t>(domain) << 31)))};
}

QSDP_AVX2_INLINE void philox_round(philox_lanes& s, __m256i k0, __m256i k1) {
  const __m256i m0 = _mm256_set1_epi64x(philox_m0);
  const __m256i m1 = _mm256_set1_epi64x(philox_m1);
  const __m256i p0 = _mm256_mul_epu32(s.c0, m0);
  const __m256i p1 = _mm256_mul_epu32(s.c2, m1);
  s.c0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), s.c1), k0);
  s.c1 = p1;
  s.c2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), s.c3), k1);
  s.c3 = p0;
}

/// Stores the four blocks' 16 words in index order (block 0 words 0..3, block 1 words 0..3, ...).
QSDP_AVX2_INLINE void philox_store(const philox_lanes& s, std::uint32_t* words) {
  const __m256i w01 =
      _mm256_blend_epi32(s.c0, _mm256_slli_epi64(s.c1, 32), 0xAA);  // b w0 w1 per lane
  const __m256i w23 =
      _mm256_blend_epi32(s.c2, _mm256_slli_epi64(s.c3, 32), 0xAA);  // b w2 w3 per lane
  const __m256i even = _mm256_unpacklo_epi64(w01, w23);             // block 0 | block 2
  const __m256i odd = _mm256_unpackhi_epi64(w01, w23);              // block 1 | block 3
  auto* out = reinterpret_cast<__m256i*>(words);
  _mm256_storeu_si256(out + 0, _mm256_permute2x128_si256(even, odd, 0x20));
  _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(even, odd, 0x31));
}

/// The ten rounds' keys, broadcast once per call rather than once per round.
struct philox_schedule {
  __m256i k0[10], k1[10];
};

QSDP_AVX2_INLINE philox_schedule philox_keys(const rng_key& key) {
  philox_schedule s;
  std::uint32_t k0 = static_cast<std::uint32_t>(key.seed),
                k1 = static_cast<std::uint32_t>(key.seed >> 32);
  for (int round = 0; round < 10; ++round) {
    s.k0[round] = _mm256_set1_epi64x(k0);
    s.k1[round] = _mm256_set1_epi64x(k1);
    k0 += philox_w0;
    k1 += philox_w1;
  }
  return s;
}

/// Philox-4x32-10 on 4 * Groups consecutive blocks: independent groups, so that one group's
/// multiplies run while another's wait (a single chain of ten rounds is latency-bound).
template <int Groups>
QSDP_AVX2_INLINE void philox_groups(const rng_key& key, const philox_schedule& keys,
                                    draw_domain domain, std::uint64_t first_block,
                                    std::uint32_t* words) {
  philox_lanes g[Groups];
  for (int i = 0; i < Groups; ++i) g[i] = philox_start(key, domain, first_block + 4 * i);
#if defined(__CUDACC__)  // nvcc's front end parses this header too and does not know GCC's spelling
#pragma nv_diagnostic push
#pragma nv_diag_suppress 1675
#endif
#pragma GCC unroll 10
#if defined(__CUDACC__)
#pragma nv_diagnostic pop
#endif
  for (int round = 0; round < 10; ++round)
    for (int i = 0; i < Groups; ++i) philox_round(g[i], keys.k0[round], keys.k1[round]);
  for (int i = 0; i < Groups; ++i) philox_store(g[i], words + 16 * i);
}

inline constexpr int philox_group_count = 4;

/// The 16-bit per-value draws of values first .. first + n - 1 (see rng_key::value_uniform): the
/// element domain's words read as a stream of little-endian 16-bit halves. Returns where the halves
/// of value `first` start. `words` needs room for (n + 7) / 2 + 16 * philox_group_count words:
/// whole groups of blocks are generated.
QSDP_AVX2_LOOP const std::uint16_t* value_halves(const rng_key& key, std::uint64_t first,
                                                 std::size_t n, std::uint32_t* words) {
  const std::uint64_t first_block = first / 8;
  const std::size_t blocks = (first % 8 + n + 7) / 8;
  const philox_schedule keys = philox_keys(key);
  for (std::size_t b = 0; b < blocks; b += 4 * philox_group_count)
    philox_groups<philox_group_count>(key, keys, draw_domain::element, first_block + b,
                                      words + 4 * b);
  return reinterpret_cast<const std::uint16_t*>(words) + first % 8;
}

/// U[0,1) from a 16-bit draw, in double: (h + 1/2) * 2^-16 = fma(h, 2^-16, 2^-17), exact, so it
/// equals the float that uniform_from_half gives the scalar path.
QSDP_AVX2_INLINE __m256d halves_to_uniform(const std::uint16_t* h) {
  const __m128i h32 = _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(h)));
  return _mm256_fmadd_pd(_mm256_cvtepi32_pd(h32), _mm256_set1_pd(0x1p-16), _mm256_set1_pd(0x1p-17));
}

/// code_grid's formula (grid_code) for four values: the same IEEE operations in the same order.
QSDP_AVX2_INLINE __m128i encode4(__m128 x4, const code_grid& g, __m256d offset) {
  const __m256d d = _mm256_sub_pd(_mm256_cvtps_pd(x4), _mm256_set1_pd(g.origin));
  __m256d t = _mm256_fmadd_pd(d, _mm256_set1_pd(g.inverse_step), offset);
  t = _mm256_max_pd(t, _mm256_setzero_pd());    // t > 0 ? t : 0   (NaN -> 0, as in clamp_d)
  t = _mm256_min_pd(t, _mm256_set1_pd(g.top));  // t < top ? t : top
  return _mm256_cvttpd_epi32(t);
}

inline constexpr std::size_t prefetch_distance = 1024;  // values ahead

/// Codes of n floats on grid g; DrawnOffset: value j's offset is its 16-bit draw halves[j].
template <bool DrawnOffset>
QSDP_AVX2_LOOP void encode_codes(const float* x, std::size_t n, const code_grid& g,
                                 const std::uint16_t* halves, std::uint8_t* out) {
  const __m256d constant_offset = _mm256_set1_pd(g.offset);
  const std::size_t vector_end = n - n % 16;
  for (std::size_t j = 0; j < vector_end; j += 16) {
    // The values were just scanned, so they sit in L1; meanwhile pull in what comes next (the next
    // bucket, at the default size), so the memory reads overlap this arithmetic.
    _mm_prefetch(reinterpret_cast<const char*>(x + j + prefetch_distance), _MM_HINT_T0);
    __m128i q[4];
    for (int h = 0; h < 4; ++h) {
      const __m128 x4 = _mm_loadu_ps(x + j + 4 * h);
      const __m256d offset = DrawnOffset ? halves_to_uniform(halves + j + 4 * h) : constant_offset;
      q[h] = encode4(x4, g, offset);
    }
    const __m128i words01 = _mm_packs_epi32(q[0], q[1]);  // codes <= 255: no saturation happens
    const __m128i words23 = _mm_packs_epi32(q[2], q[3]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), _mm_packus_epi16(words01, words23));
  }
  for (std::size_t j = vector_end; j < n; ++j) {
    float value;  // the caller's buffer may sit at any byte offset: x[j] would be a misaligned load
    std::memcpy(&value, x + j, sizeof value);
    const float u = DrawnOffset ? uniform_from_half(halves[j]) : 0.0f;
    out[j] = static_cast<std::uint8_t>(grid_code<DrawnOffset>(g, value, u));
  }
}

/// value_grid's formula (grid_value) for four codes, rounded to float.
QSDP_AVX2_INLINE __m128 decode4(__m128i codes32, const value_grid& g) {
  const __m256d c =
      _mm256_add_pd(_mm256_add_pd(_mm256_cvtepi32_pd(codes32), _mm256_set1_pd(g.shift)),
                    _mm256_set1_pd(g.fraction));
  __m256d v = g.product ? _mm256_mul_pd(c, _mm256_set1_pd(g.step))
                        : _mm256_fmadd_pd(c, _mm256_set1_pd(g.step), _mm256_set1_pd(g.base));
  if (g.clamp) {
    v = _mm256_max_pd(v, _mm256_set1_pd(g.lo));
    v = _mm256_min_pd(v, _mm256_set1_pd(g.hi));
  }
  return _mm256_cvtpd_ps(v);
}

/// out[j] = value (Accumulate: out[j] += value), float output at any alignment.
template <bool Accumulate>
QSDP_AVX2_LOOP void decode_values(const std::uint8_t* codes, std::size_t n, const value_grid& g,
                                  float* out) {
  const std::size_t vector_end = n - n % 8;
  for (std::size_t j = 0; j < vector_end; j += 8) {
    const __m256i c32 =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + j)));
    const __m128 lo = decode4(_mm256_castsi256_si128(c32), g);
    const __m128 hi = decode4(_mm256_extracti128_si256(c32, 1), g);
    __m256 v = _mm256_set_m128(hi, lo);
    if constexpr (Accumulate) v = _mm256_add_ps(_mm256_loadu_ps(out + j), v);
    _mm256_storeu_ps(out + j, v);
  }
  for (std::size_t j = vector_end; j < n; ++j) {
    float v = static_cast<float>(grid_value(g, codes[j]));
    if constexpr (Accumulate) {
      float a;
      std::memcpy(&a, out + j, 4);
      v = a + v;
    }
    std::memcpy(out + j, &v, 4);
  }
}

/// Whether these loops serve policy Q: the built-in policies, which state their math as grids. A
/// user policy runs the generic loops, whatever members it has: its encode and decode are the
/// contract.
template <class Q>
inline constexpr bool has_grids = wire_id<Q>() >= 1 && wire_id<Q>() <= 4 &&
                                  requires(const Q& q, const typename Q::meta_type& m) {
  { q.code_grid_for(m) } -> std::same_as<code_grid>;
  { q.value_grid_for(m) } -> std::same_as<value_grid>;
};

}  // namespace qsdp::detail::avx2

#undef QSDP_AVX2_INLINE
#undef QSDP_AVX2_LOOP

#endif
