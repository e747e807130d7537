// SPDX-License-Identifier: Apache-2.0
//
// AVX2 loops for the block-scaled float policies (qsdp::mx, qsdp::nvfp4): eight values per
// instruction through minifloat_encode and minifloat_value (detail/codec/minifloat.hpp), with the
// very same IEEE operations in the same order, so the codes and values are the scalar path's bit
// for bit; the tests compare both.
//
// A block's codes are minifloat_encode<F> of |x| * encode scale with x's sign, and its values
// element * decode scale: the scales are the policy's, computed once per block (the loops' caller,
// detail/host/loops.hpp, derives them). Every function here carries the avx2/fma target attribute
// and is only called when the CPU has both.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../codec/minifloat.hpp"
#include "avx2.hpp"

#define QSDP_AVX2_INLINE inline __attribute__((always_inline, target("avx2,fma")))
#define QSDP_AVX2_LOOP inline __attribute__((target("avx2,fma")))

namespace qsdp::detail::avx2 {

/// The largest finite magnitude among n floats (or bf16 values, Bf16 = true; any alignment), 0 if
/// there is none: finite magnitudes order as their bit patterns, so an unsigned maximum of the
/// magnitudes that are below infinity's.
template <bool Bf16>
QSDP_AVX2_LOOP float finite_abs_max(const void* src, std::size_t n) {
  const __m256i magnitude_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i infinity = _mm256_set1_epi32(0x7F800000);
  __m256i top0 = _mm256_setzero_si256(), top1 = top0;  // two chains: max has a one-cycle latency
  std::size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256i a = _mm256_and_si256(load8_float_bits<Bf16>(src, j), magnitude_mask);
    const __m256i b = _mm256_and_si256(load8_float_bits<Bf16>(src, j + 8), magnitude_mask);
    top0 = _mm256_max_epu32(top0, _mm256_and_si256(a, _mm256_cmpgt_epi32(infinity, a)));
    top1 = _mm256_max_epu32(top1, _mm256_and_si256(b, _mm256_cmpgt_epi32(infinity, b)));
  }
  alignas(32) std::uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_max_epu32(top0, top1));
  std::uint32_t top = 0;
  for (const std::uint32_t lane : lanes) top = lane > top ? lane : top;
  for (; j < n; ++j) {
    const std::uint32_t magnitude = load1_float_bits<Bf16>(src, j) & 0x7FFFFFFFu;
    top = magnitude < 0x7F800000u && magnitude > top ? magnitude : top;
  }
  return bit_cast<float>(top);
}

/// minifloat_encode<F, Stochastic> of eight values: `scaled` holds |x| times the block's encode
/// scale (the scalar function's y), `raw` the bits of x (its sign, and NaN and infinity where F
/// has codes for them), `u` the draws. Each step is the scalar one on eight lanes: the clamps of
/// the binade are integer min and max, vminps returns its second operand for NaN as fminf
/// returns the number, and the ceiling and round-to-nearest-even are the same instructions.
template <class F, bool Stochastic>
QSDP_AVX2_INLINE __m256i minifloat_codes8(__m256 scaled, __m256i raw, __m256 u) {
  constexpr int mbits = F::mantissa_bits;
  constexpr int bits = 1 + F::exponent_bits + F::mantissa_bits;
  constexpr int lowest_binade = 1 - F::bias;
  constexpr int highest_binade = element_emax<F>() + 1;
  constexpr float steps_limit = static_cast<float>(1u << (mbits + 2));
  const __m256i y_log2 =
      _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(scaled), 23), _mm256_set1_epi32(127));
  const __m256i binade =
      _mm256_min_epi32(_mm256_max_epi32(y_log2, _mm256_set1_epi32(lowest_binade)),
                       _mm256_set1_epi32(highest_binade));
  const __m256 inverse_gap = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(127 + mbits), binade), 23));
  const __m256 gaps =
      _mm256_min_ps(_mm256_mul_ps(scaled, inverse_gap), _mm256_set1_ps(steps_limit));
  __m256i steps;
  if constexpr (Stochastic) {
    const __m256 up =
        _mm256_round_ps(_mm256_sub_ps(gaps, u), _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
    steps = _mm256_cvttps_epi32(_mm256_max_ps(up, _mm256_setzero_ps()));
  } else {
    (void)u;
    steps = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(gaps, _mm256_set1_ps(0x1p23f))),
                             _mm256_castps_si256(_mm256_set1_ps(0x1p23f)));
  }
  const __m256i code = _mm256_add_epi32(
      _mm256_slli_epi32(_mm256_add_epi32(binade, _mm256_set1_epi32(F::bias - 1)), mbits), steps);
  __m256i out = _mm256_min_epu32(code, _mm256_set1_epi32(F::max_code));
  const __m256i magnitude = _mm256_and_si256(raw, _mm256_set1_epi32(0x7FFFFFFF));
  if constexpr (F::nan_code >= 0) {
    const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7F800000));
    out = _mm256_blendv_epi8(out, _mm256_set1_epi32(F::nan_code), is_nan);
  }
  if constexpr (F::inf_code >= 0) {
    const __m256i is_inf = _mm256_cmpeq_epi32(magnitude, _mm256_set1_epi32(0x7F800000));
    out = _mm256_blendv_epi8(out, _mm256_set1_epi32(F::inf_code), is_inf);
  }
  return _mm256_or_si256(_mm256_slli_epi32(_mm256_srli_epi32(raw, 31), bits - 1), out);
}

/// Codes of the eight floats at x (any alignment) in a block with encode scale `scale`.
template <class F, bool Stochastic>
QSDP_AVX2_INLINE __m256i minifloat_encode8(const float* x, __m256 scale, __m256 u) {
  const __m256 v = _mm256_loadu_ps(x);
  const __m256 magnitude = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
  return minifloat_codes8<F, Stochastic>(_mm256_mul_ps(magnitude, scale), _mm256_castps_si256(v),
                                         u);
}

/// Stores 32 codes of at most 8 bits, four vectors of eight in order, as bytes.
QSDP_AVX2_INLINE void store_codes32(__m256i a, __m256i b, __m256i c, __m256i d, std::uint8_t* out) {
  // The packs work within 128-bit lanes: a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7, then
  // gathered back into order by 32-bit groups.
  const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(a, b), _mm256_packus_epi32(c, d));
  _mm256_storeu_si256(
      reinterpret_cast<__m256i*>(out),
      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/// Eight draws (h + 1/2) * 2^-16 (uniform_from_half) from eight consecutive 16-bit halves.
QSDP_AVX2_INLINE __m256 halves_to_uniform8(__m128i halves) {
  const __m256 h = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(halves));
  return _mm256_mul_ps(_mm256_add_ps(h, _mm256_set1_ps(0.5f)), _mm256_set1_ps(0x1p-16f));
}

/// The draws of eight values from their consecutive halves (Stochastic), else zeros.
template <bool Stochastic>
QSDP_AVX2_INLINE __m256 draws8(const std::uint16_t* halves, std::size_t j) {
  if constexpr (Stochastic)
    return halves_to_uniform8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(halves + j)));
  (void)halves;
  (void)j;
  return _mm256_setzero_ps();
}

/// Stores eight codes of at most 8 bits as bytes.
QSDP_AVX2_INLINE void store_codes8(__m256i codes, std::uint8_t* out) {
  const __m128i words =
      _mm_packus_epi32(_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(words, words));
}

/// Codes of n floats of one block with encode scale `scale`, rounded to nearest, or, with
/// Stochastic, each with its 16-bit draw halves[j]. Thirty-two values per step, then eight, then
/// the last few in a padded vector: the blocks are short (16 or 32 values by default).
template <class F, bool Stochastic>
QSDP_AVX2_LOOP void encode_minifloats(const float* x, std::size_t n, float scale,
                                      const std::uint16_t* halves, std::uint8_t* out) {
  const __m256 s = _mm256_set1_ps(scale);
  std::size_t j = 0;
  for (; j + 32 <= n; j += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(x + j + prefetch_distance), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(x + j + 16 + prefetch_distance), _MM_HINT_T0);
    store_codes32(
        minifloat_encode8<F, Stochastic>(x + j, s, draws8<Stochastic>(halves, j)),
        minifloat_encode8<F, Stochastic>(x + j + 8, s, draws8<Stochastic>(halves, j + 8)),
        minifloat_encode8<F, Stochastic>(x + j + 16, s, draws8<Stochastic>(halves, j + 16)),
        minifloat_encode8<F, Stochastic>(x + j + 24, s, draws8<Stochastic>(halves, j + 24)),
        out + j);
  }
  for (; j + 8 <= n; j += 8)
    store_codes8(minifloat_encode8<F, Stochastic>(x + j, s, draws8<Stochastic>(halves, j)),
                 out + j);
  if (j < n) {
    const std::size_t rest = n - j;
    float lanes[8] = {};
    std::uint16_t lane_halves[8] = {};
    std::memcpy(lanes, x + j, rest * sizeof(float));
    if constexpr (Stochastic) std::memcpy(lane_halves, halves + j, rest * sizeof(std::uint16_t));
    std::uint8_t codes[8];
    store_codes8(minifloat_encode8<F, Stochastic>(lanes, s, draws8<Stochastic>(lane_halves, 0)),
                 codes);
    std::memcpy(out + j, codes, rest);
  }
}

/// minifloat_value<F> of eight codes: the normal elements' fields moved into a float's, the
/// subnormal ones mantissa * 2^(1 - bias - mbits), one select, then F's NaN and infinity codes.
template <class F>
QSDP_AVX2_INLINE __m256 minifloat_values8(__m256i code) {
  constexpr int mbits = F::mantissa_bits;
  constexpr int bits = 1 + F::exponent_bits + F::mantissa_bits;
  constexpr float subnormal_unit = 1.0f / static_cast<float>(1u << (F::bias + mbits - 1));
  const __m256i magnitude = _mm256_and_si256(code, _mm256_set1_epi32((1 << (bits - 1)) - 1));
  const __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(code, bits - 1), 31);
  const __m256i mantissa = _mm256_and_si256(magnitude, _mm256_set1_epi32((1 << mbits) - 1));
  const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(magnitude, 23 - mbits),
                                          _mm256_set1_epi32((127 - F::bias) << 23));
  const __m256i subnormal = _mm256_castps_si256(
      _mm256_mul_ps(_mm256_cvtepi32_ps(mantissa), _mm256_set1_ps(subnormal_unit)));
  const __m256i is_subnormal =
      _mm256_cmpeq_epi32(_mm256_srli_epi32(magnitude, mbits), _mm256_setzero_si256());
  __m256i value = _mm256_or_si256(sign, _mm256_blendv_epi8(normal, subnormal, is_subnormal));
  const __m256i nan = _mm256_set1_epi32(static_cast<int>(bit_cast<std::uint32_t>(quiet_nan())));
  if constexpr (F::inf_code >= 0) {
    const __m256i inf_code = _mm256_set1_epi32(F::inf_code);
    value = _mm256_blendv_epi8(value, _mm256_or_si256(sign, _mm256_set1_epi32(0x7F800000)),
                               _mm256_cmpeq_epi32(magnitude, inf_code));
    value = _mm256_blendv_epi8(value, nan, _mm256_cmpgt_epi32(magnitude, inf_code));
  } else if constexpr (F::nan_code >= 0) {
    value = _mm256_blendv_epi8(value, nan,
                               _mm256_cmpeq_epi32(magnitude, _mm256_set1_epi32(F::nan_code)));
  }
  return _mm256_castsi256_ps(value);
}

/// A block-scaled float block's decode: element times `scale`.
template <class F>
struct minifloat_block {
  float scale;
};

/// The values of the eight codes at `codes` in a block with decode scale `scale`. Each product is
/// rounded once and made opaque, so that g++ does not fuse it with decode_accumulate's addition
/// into a multiply-add (it fuses intrinsics too), as unfused_product for one value.
template <class F>
QSDP_AVX2_INLINE __m256 minifloat_decode8(const std::uint8_t* codes, __m256 scale) {
  const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  __m256 product = _mm256_mul_ps(minifloat_values8<F>(c), scale);
  asm("" : "+x"(product));
  return product;
}

/// out[j] = the value of codes[j] (Accumulate: out[j] += it) for n codes of a block; Stream: out
/// 32-byte aligned, stored with non-temporal stores (the caller fences).
template <bool Accumulate, bool Stream, class F>
QSDP_AVX2_LOOP void decode_minifloats(const std::uint8_t* codes, std::size_t n,
                                      minifloat_block<F> block, float* out) {
  const __m256 s = _mm256_set1_ps(block.scale);
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = minifloat_decode8<F>(codes + j, s);
    if constexpr (Accumulate) v = _mm256_add_ps(_mm256_loadu_ps(out + j), v);
    if constexpr (Stream) {
      _mm256_stream_ps(out + j, v);
    } else {
      _mm256_storeu_ps(out + j, v);
    }
  }
  if (j < n) {  // the last few in a padded vector
    const std::size_t rest = n - j;
    std::uint8_t lane_codes[8] = {};
    std::memcpy(lane_codes, codes + j, rest);
    float lanes[8] = {};
    __m256 v = minifloat_decode8<F>(lane_codes, s);
    if constexpr (Accumulate) {
      std::memcpy(lanes, out + j, rest * sizeof(float));
      v = _mm256_add_ps(_mm256_loadu_ps(lanes), v);
    }
    _mm256_storeu_ps(lanes, v);
    std::memcpy(out + j, lanes, rest * sizeof(float));
  }
}

}  // namespace qsdp::detail::avx2

#undef QSDP_AVX2_INLINE
#undef QSDP_AVX2_LOOP

#endif
