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

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "../../quantizers.hpp"
#include "../codec/bit_packing.hpp"
#include "../codec/float_types.hpp"
#include "../codec/grid.hpp"
#include "../codec/group.hpp"
#include "../codec/hadamard.hpp"
#include "../codec/philox.hpp"
#include "../codec/statistics.hpp"

// Small helpers are force-inlined into the loops; the loops themselves are ordinary (out-of-line)
// functions, so that the generic codec templates, compiled for the baseline ISA, may call them.
#define QSDP_AVX2_INLINE inline __attribute__((always_inline, target("avx2,fma")))
// `#pragma GCC unroll 8`; nvcc's front end parses this header too and does not know GCC's spelling,
// so its warning about it is silenced around it.
#if defined(__CUDACC__)
#define QSDP_AVX2_UNROLL_8                                                               \
  _Pragma("nv_diagnostic push") _Pragma("nv_diag_suppress 1675") _Pragma("GCC unroll 8") \
      _Pragma("nv_diagnostic pop")
#else
#define QSDP_AVX2_UNROLL_8 _Pragma("GCC unroll 8")
#endif
#define QSDP_AVX2_LOOP inline __attribute__((target("avx2,fma")))

namespace qsdp::detail::avx2 {

/// Emits nothing; tells the compiler that the vectors stay where they are. In the scans' loops
/// g++ 12 otherwise gives each accumulator a new register every iteration and copies it back, one
/// vector move per reduction: as many instructions again as the reductions themselves.
/// (One statement for all of them: one per vector lets g++ route each through the same register.)
QSDP_AVX2_INLINE void keep_in_registers(__m256i& a, __m256i& b, __m256i& c, __m256i& d, __m256i& e,
                                        __m256i& f) {
  asm("" : "+v"(a), "+v"(b), "+v"(c), "+v"(d), "+v"(e), "+v"(f));
}

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

/// The statistics of a run of floats from three reductions of their raw bits (see scan_values):
/// s, the signed maximum; lo_bits and hi_bits, the unsigned minimum and maximum.
inline partial_stats stats_from_extremes(std::int32_t s, std::uint32_t lo_bits,
                                         std::uint32_t hi_bits) {
  partial_stats p;
  p.hi = s >= 0 ? s : ordered_key(lo_bits);
  p.lo = hi_bits >= 0x80000000u ? ordered_key(hi_bits) : static_cast<std::int32_t>(lo_bits);
  p.non_finite = (s >= 0x7F800000 || hi_bits >= 0xFF800000u) ? 1u : 0u;
  return p;
}

/// The statistics of n floats (or bf16 values, Bf16 = true; any alignment): what partial_stats::add
/// would give, in three integer reductions of the raw bits per vector instead of the
/// order-preserving key's eight operations: the signed maximum, the unsigned minimum and the
/// unsigned maximum. Signed, positive floats (sign bit clear) sort above negative ones and among
/// themselves as their keys, so if any value is positive the largest key is the signed maximum; if
/// none is, the largest key is the negative value of least magnitude, the unsigned minimum.
/// Likewise the smallest key is the unsigned maximum (the negative value of greatest magnitude) if
/// any value is negative, else the unsigned minimum. A non-finite positive value has bits >=
/// 0x7F800000 and so makes the signed maximum at least that; a non-finite negative one has bits >=
/// 0xFF800000 and makes the unsigned maximum at least that. The keys map order-preservingly to the
/// bits, so lo and hi are exactly the keys' minimum and maximum, whatever the values (NaN
/// included).
template <bool Bf16>
QSDP_AVX2_LOOP partial_stats scan_values(const void* src, std::size_t n) {
  // Two accumulators per reduction: one-cycle dependency chains would otherwise bound the loop.
  // (Named variables, not arrays: g++ 12 copies arrays of vectors between registers every
  // iteration.)
  __m256i smax0 = _mm256_set1_epi32(std::numeric_limits<std::int32_t>::min()), smax1 = smax0;
  __m256i umin0 = _mm256_set1_epi32(-1), umin1 = umin0;
  __m256i umax0 = _mm256_setzero_si256(), umax1 = umax0;
  const std::size_t vector_end = n - n % 8;
  std::size_t j = 0;
  if (vector_end % 16 != 0) {  // an odd eight first: a loop with no remainder after it
    const __m256i a = load8_float_bits<Bf16>(src, 0);
    smax0 = _mm256_max_epi32(smax0, a);
    umin0 = _mm256_min_epu32(umin0, a);
    umax0 = _mm256_max_epu32(umax0, a);
    j = 8;
  }
  for (; j < vector_end; j += 16) {
    const __m256i a = load8_float_bits<Bf16>(src, j), b = load8_float_bits<Bf16>(src, j + 8);
    smax0 = _mm256_max_epi32(smax0, a);
    umin0 = _mm256_min_epu32(umin0, a);
    umax0 = _mm256_max_epu32(umax0, a);
    smax1 = _mm256_max_epi32(smax1, b);
    umin1 = _mm256_min_epu32(umin1, b);
    umax1 = _mm256_max_epu32(umax1, b);
    keep_in_registers(smax0, umin0, umax0, smax1, umin1, umax1);
  }
  partial_stats p;
  if (vector_end > 0) {
    alignas(32) std::int32_t smax_lanes[8];
    alignas(32) std::uint32_t umin_lanes[8], umax_lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(smax_lanes), _mm256_max_epi32(smax0, smax1));
    _mm256_store_si256(reinterpret_cast<__m256i*>(umin_lanes), _mm256_min_epu32(umin0, umin1));
    _mm256_store_si256(reinterpret_cast<__m256i*>(umax_lanes), _mm256_max_epu32(umax0, umax1));
    std::int32_t s = smax_lanes[0];
    std::uint32_t lo_bits = umin_lanes[0], hi_bits = umax_lanes[0];
    for (int k = 1; k < 8; ++k) {
      s = smax_lanes[k] > s ? smax_lanes[k] : s;
      lo_bits = umin_lanes[k] < lo_bits ? umin_lanes[k] : lo_bits;
      hi_bits = umax_lanes[k] > hi_bits ? umax_lanes[k] : hi_bits;
    }
    p = stats_from_extremes(s, lo_bits, hi_bits);
  }
  for (j = vector_end; j < n; ++j) p.add(bit_cast<float>(load1_float_bits<Bf16>(src, j)));
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

/// Codes [start, start + n) of a 6-bit code stream into out[0, n), as unpack_codes<6>: whole groups
/// of eight codes (six bytes) eight at a time, each code's two bytes moved into a 16-bit lane and
/// shifted into place by a multiply. Reads only bytes that hold the codes.
QSDP_AVX2_LOOP void unpack_codes6(const std::byte* stream, std::size_t start, std::size_t n,
                                  std::uint8_t* out) {
  std::size_t j = 0;
  for (; j < n && (start + j) % 8 != 0; ++j) out[j] = read_code<6>(stream, start + j);
  const std::size_t groups = (n - j) / 8;
  const std::byte* in = stream + (start + j) / 8 * 6;
  // Code k of a group starts at bit 6k: byte 6k / 8, bit 6k % 8 of it (0, 6, 4, 2, ...).
  const __m128i spread = _mm_setr_epi8(0, 1, 0, 1, 1, 2, 2, 3, 3, 4, 3, 4, 4, 5, 5, -1);
  const __m128i lift = _mm_setr_epi16(256, 4, 16, 64, 256, 4, 16, 64);  // 2^(8 - bit)
  // A group's eight-byte load reads two bytes past it: the last group goes through the scalar
  // loop below, so nothing past the stream is read.
  const std::size_t vector_groups = groups > 0 ? groups - 1 : 0;
  for (std::size_t g = 0; g < vector_groups; ++g) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + 6 * g));
    const __m128i lanes = _mm_mullo_epi16(_mm_shuffle_epi8(bytes, spread), lift);
    const __m128i codes = _mm_and_si128(_mm_srli_epi16(lanes, 8), _mm_set1_epi16(63));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + j + 8 * g), _mm_packus_epi16(codes, codes));
  }
  for (j += vector_groups * 8; j < n; ++j) out[j] = read_code<6>(stream, start + j);
}

/// Four Philox states, one block per 64-bit lane. Each 32-bit state word sits in the low half of
/// its lane: _mm256_mul_epu32 then yields the full 64-bit product in place (high half = Philox's
/// "hi", low half = "lo"), and the garbage the high halves collect is never read, since the
/// multiply and the final store only look at the low halves.
struct philox_lanes {
  __m256i c0, c1, c2, c3;
};

/// One round. The word and key are xored first, off the chain from one round's multiply to the
/// next.
QSDP_AVX2_INLINE void philox_round(philox_lanes& s, __m256i k0, __m256i k1) {
  const __m256i p0 = _mm256_mul_epu32(s.c0, _mm256_set1_epi64x(philox_m0));
  const __m256i p1 = _mm256_mul_epu32(s.c2, _mm256_set1_epi64x(philox_m1));
  s.c0 = _mm256_xor_si256(_mm256_srli_epi64(p1, 32), _mm256_xor_si256(s.c1, k0));
  s.c1 = p1;
  s.c2 = _mm256_xor_si256(_mm256_srli_epi64(p0, 32), _mm256_xor_si256(s.c3, k1));
  s.c3 = p0;
}

/// The element domain's Philox constants of one call (philox_schedule holds them broadcast): the
/// ten rounds' keys, and the parts of the first two rounds that only involve counter words 2 and 3
/// (call, stream), which are the same for every block: word 2's first product and the xors of
/// constants with constants.
struct philox_call_constants {
  std::uint32_t k0[10], k1[10];
  std::uint64_t first_p1;       // m1 * word 2, the full product: round 0's "lo" is its low half
  std::uint32_t first_c0_key;   // hi(m1 * word 2) ^ k0[0]
  std::uint32_t first_c2_key;   // word 3 ^ k1[0]
  std::uint32_t second_c0_key;  // lo(m1 * word 2) ^ k0[1]
};

inline philox_call_constants element_call_constants(const rng_key& key) {
  philox_call_constants c;
  std::uint32_t k0 = static_cast<std::uint32_t>(key.seed),
                k1 = static_cast<std::uint32_t>(key.seed >> 32);
  for (int round = 0; round < 10; ++round) {
    c.k0[round] = k0;
    c.k1[round] = k1;
    k0 += philox_w0;
    k1 += philox_w1;
  }
  const std::uint32_t word2 = static_cast<std::uint32_t>(key.call);
  const std::uint32_t word3 =
      (key.stream & 0x7FFFFFFFu) | (static_cast<std::uint32_t>(draw_domain::element) << 31);
  c.first_p1 = static_cast<std::uint64_t>(philox_m1) * word2;
  c.first_c0_key = static_cast<std::uint32_t>(c.first_p1 >> 32) ^ c.k0[0];
  c.first_c2_key = word3 ^ c.k1[0];
  c.second_c0_key = static_cast<std::uint32_t>(c.first_p1) ^ c.k0[1];
  return c;
}

/// philox_call_constants, each broadcast to the four lanes once per call.
struct philox_schedule {
  __m256i k0[10], k1[10];
  __m256i first_p1, first_c0_key, first_c2_key, second_c0_key;
};

QSDP_AVX2_INLINE philox_schedule philox_element_schedule(const rng_key& key) {
  const philox_call_constants c = element_call_constants(key);
  philox_schedule s;
  for (int round = 0; round < 10; ++round) {
    s.k0[round] = _mm256_set1_epi64x(c.k0[round]);
    s.k1[round] = _mm256_set1_epi64x(c.k1[round]);
  }
  s.first_p1 = _mm256_set1_epi64x(static_cast<long long>(c.first_p1));
  s.first_c0_key = _mm256_set1_epi64x(c.first_c0_key);
  s.first_c2_key = _mm256_set1_epi64x(c.first_c2_key);
  s.second_c0_key = _mm256_set1_epi64x(c.second_c0_key);
  return s;
}

/// The first two rounds of Philox-4x32-10 for the four element-domain blocks whose indices
/// `blocks` holds, one per lane: philox4x32_10's rounds without the operations whose operands are
/// all constant.
QSDP_AVX2_INLINE philox_lanes philox_first_rounds(const philox_schedule& s, __m256i blocks) {
  // Round 0: word 0 is the index's low half, word 1 its high half, words 2 and 3 constants.
  __m256i p0 = _mm256_mul_epu32(blocks, _mm256_set1_epi64x(philox_m0));
  philox_lanes r{_mm256_xor_si256(_mm256_srli_epi64(blocks, 32), s.first_c0_key), s.first_p1,
                 _mm256_xor_si256(_mm256_srli_epi64(p0, 32), s.first_c2_key), p0};
  // Round 1: word 1 is round 0's constant "lo".
  p0 = _mm256_mul_epu32(r.c0, _mm256_set1_epi64x(philox_m0));
  const __m256i p1 = _mm256_mul_epu32(r.c2, _mm256_set1_epi64x(philox_m1));
  r.c0 = _mm256_xor_si256(_mm256_srli_epi64(p1, 32), s.second_c0_key);
  r.c1 = p1;
  r.c2 = _mm256_xor_si256(_mm256_srli_epi64(p0, 32), _mm256_xor_si256(r.c3, s.k1[1]));
  r.c3 = p0;
  return r;
}

/// Philox-4x32-10 of the four element-domain blocks whose indices `blocks` holds.
/// Rounds 0 .. last - 1 of the blocks whose indices `blocks` holds, one per lane.
QSDP_AVX2_INLINE philox_lanes philox_four(const philox_schedule& s, __m256i blocks, int last = 10) {
  philox_lanes r = philox_first_rounds(s, blocks);
  QSDP_AVX2_UNROLL_8
  for (int round = 2; round < last; ++round) philox_round(r, s.k0[round], s.k1[round]);
  return r;
}

/// Block indices first .. first + 3, one per lane.
QSDP_AVX2_INLINE __m256i block_lanes(std::uint64_t first) {
  return _mm256_add_epi64(_mm256_set1_epi64x(static_cast<long long>(first)),
                          _mm256_setr_epi64x(0, 1, 2, 3));
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

inline constexpr int philox_group_count = 4;

/// The 16-bit per-value draws of values first .. first + n - 1 (see rng_key::value_uniform): the
/// element domain's words read as a stream of little-endian 16-bit halves. Returns where the halves
/// of value `first` start. `words` needs room for (n + 7) / 2 + 16 * philox_group_count words:
/// whole groups of blocks are generated. (encode_drawn_codes generates its draws itself; this
/// serves segments that do not start on a block boundary.)
QSDP_AVX2_LOOP const std::uint16_t* value_halves(const rng_key& key, std::uint64_t first,
                                                 std::size_t n, std::uint32_t* words) {
  const std::uint64_t first_block = first / 8;
  const std::size_t blocks = (first % 8 + n + 7) / 8;
  const philox_schedule s = philox_element_schedule(key);
  // Independent groups, so that one group's multiplies run while another's wait.
  for (std::size_t b = 0; b < blocks; b += 4 * philox_group_count)
    for (int i = 0; i < philox_group_count; ++i)
      philox_store(philox_four(s, block_lanes(first_block + b + 4 * i)), words + 4 * b + 16 * i);
  return reinterpret_cast<const std::uint16_t*>(words) + first % 8;
}

/// U[0,1) from four 16-bit draws, in double, equal to the floats uniform_from_half gives the scalar
/// path: (h + 1/2) * 2^-16. Built from bits rather than converted: h zero-extended into the low
/// bits of 2^52's pattern is the double 2^52 + h exactly, and fma(2^52 + h, 2^-16, 2^-17 - 2^36) is
/// exactly (h + 1/2) * 2^-16 (the addend takes 53 bits, and the exact sum is representable, so the
/// fma does not round). Three operations instead of a widening, a two-part int-to-double conversion
/// and an fma.
QSDP_AVX2_INLINE __m256d halves_to_uniform(const std::uint16_t* h) {
  const __m256i wide = _mm256_cvtepu16_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(h)));
  const __m256d shifted =
      _mm256_castsi256_pd(_mm256_or_si256(wide, _mm256_set1_epi64x(0x4330000000000000)));
  return _mm256_fmadd_pd(shifted, _mm256_set1_pd(0x1p-16), _mm256_set1_pd(0x1p-17 - 0x1p36));
}

/// code_grid's formula (grid_code) for four values: the same IEEE operations in the same order,
/// except that the clamp to 0 is left to the caller's saturating packs. trunc(min(top, t)) is
/// trunc(t) for t below 0 (negative, or -2^31 for t <= -2^31 and for NaN, which vminpd passes on
/// since it is the second operand), and these saturate to the 0 that clamp_d's t > 0 ? t : 0 gives
/// them; elsewhere it is what grid_code truncates. Codes above 255 do not occur (top <= 255).
/// Without Clamp the min is left out too, for values where grid_clamp_is_idle has shown that the
/// clamp changes no code (t in [0, floor(top) + 1) truncates to a code <= top by itself).
template <bool Clamp = true>
QSDP_AVX2_INLINE __m128i encode4(__m128 x4, const code_grid& g, __m256d offset) {
  const __m256d d = _mm256_sub_pd(_mm256_cvtps_pd(x4), _mm256_set1_pd(g.origin));
  const __m256d t = _mm256_fmadd_pd(d, _mm256_set1_pd(g.inverse_step), offset);
  // t < top ? t : top
  return _mm256_cvttpd_epi32(Clamp ? _mm256_min_pd(_mm256_set1_pd(g.top), t) : t);
}

/// How far ahead of the values being encoded the loops prefetch: two buckets at the default size,
/// so that a bucket is in L1 by the time its statistics are scanned (one bucket ahead was ~10%
/// slower on large inputs; four, no faster than two).
inline constexpr std::size_t prefetch_distance = 2048;  // values

/// Codes of n floats on grid g; DrawnOffset: value j's offset is its 16-bit draw halves[j].
/// Clamp: false where grid_clamp_is_idle has shown that the clamp to the top changes no code.
template <bool DrawnOffset, bool Clamp = true>
QSDP_AVX2_LOOP void encode_codes(const float* x, std::size_t n, const code_grid& g,
                                 const std::uint16_t* halves, std::uint8_t* out) {
  const __m256d constant_offset = _mm256_set1_pd(g.offset);
  const std::size_t vector_end = n - n % 16;
  for (std::size_t j = 0; j < vector_end; j += 16) {
    // The values were just scanned, so they sit in L1; meanwhile pull in what comes next (the
    // bucket after next, at the default size), so the memory reads overlap this arithmetic.
    _mm_prefetch(reinterpret_cast<const char*>(x + j + prefetch_distance), _MM_HINT_T0);
    __m128i q[4];
    for (int h = 0; h < 4; ++h) {
      const __m128 x4 = _mm_loadu_ps(x + j + 4 * h);
      const __m256d offset = DrawnOffset ? halves_to_uniform(halves + j + 4 * h) : constant_offset;
      q[h] = encode4<Clamp>(x4, g, offset);
    }
    // Signed saturation, then unsigned: codes <= 255 pass, anything negative becomes 0 (encode4).
    const __m128i words01 = _mm_packs_epi32(q[0], q[1]);
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

/// Stores four blocks' words so that every four consecutive values' 16-bit draws sit together,
/// without a transpose: per lane (block j), words 0-1 are values 8j .. 8j + 3 and words 2-3 values
/// 8j + 4 .. 8j + 7. The draws of values 4q .. 4q + 3 of the 32 then start at half
/// drawn_chunk_half(q).
QSDP_AVX2_INLINE void philox_store_chunks(const philox_lanes& s, std::uint32_t* words) {
  auto* out = reinterpret_cast<__m256i*>(words);
  _mm256_store_si256(out + 0, _mm256_blend_epi32(s.c0, _mm256_slli_epi64(s.c1, 32), 0xAA));
  _mm256_store_si256(out + 1, _mm256_blend_epi32(s.c2, _mm256_slli_epi64(s.c3, 32), 0xAA));
}

constexpr int drawn_chunk_half(int q) { return 16 * (q % 2) + 4 * (q / 2); }

/// Codes of 32 values whose draws philox_store_chunks laid out in `halves`; meanwhile, one round
/// per four values, rounds 5-9 of `next` (the group two ahead) and rounds 2-4 of `started` (the
/// group three ahead, rounds 0-1 done): the rounds are a chain of dependent multiplies, and the
/// values' arithmetic, which does not depend on them, fills the gaps. A whole group's rounds in
/// one step made a chain about as long as the step's work, which the out-of-order window could
/// not hide; two groups in flight halve it (avx512::encode_drawn_groups).
template <bool Clamp>
QSDP_AVX2_INLINE void encode32_drawn(const float* x, const code_grid& g,
                                     const std::uint16_t* halves, std::uint8_t* out,
                                     philox_lanes& next, philox_lanes& started,
                                     const philox_schedule& s) {
  _mm_prefetch(reinterpret_cast<const char*>(x + prefetch_distance), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(x + 16 + prefetch_distance), _MM_HINT_T0);
  __m128i q[8];
  QSDP_AVX2_UNROLL_8
  for (int h = 0; h < 8; ++h) {
    if (h < 5) {
      philox_round(next, s.k0[h + 5], s.k1[h + 5]);
    } else {
      philox_round(started, s.k0[h - 3], s.k1[h - 3]);
    }
    q[h] =
        encode4<Clamp>(_mm_loadu_ps(x + 4 * h), g, halves_to_uniform(halves + drawn_chunk_half(h)));
  }
  const __m128i lo = _mm_packus_epi16(_mm_packs_epi32(q[0], q[1]), _mm_packs_epi32(q[2], q[3]));
  const __m128i hi = _mm_packus_epi16(_mm_packs_epi32(q[4], q[5]), _mm_packs_epi32(q[6], q[7]));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), lo);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), hi);
}

/// The per-value draws of one encode call, generated two groups of four Philox blocks (32 values)
/// ahead of the values being encoded: a group's rounds are a chain of dependent multiplies (about
/// 70 cycles), and generating it while an earlier group's values are encoded, which do not depend
/// on it, keeps the vector units busy. The stream runs on across segments and buckets as long as
/// each one starts where the last ended, so the two groups of lead are generated once per call
/// rather than once per bucket.
struct draw_stream {
  philox_schedule schedule;
  alignas(32) std::uint32_t words[2][16];   // two groups, as philox_store_chunks lays them out
  std::uint64_t block = ~std::uint64_t{0};  // the first block of the group in words[slot]; ~0: none
  unsigned slot = 0;
};

QSDP_AVX2_LOOP void start_draw_stream(const rng_key& key, draw_stream& d) {
  d.schedule = philox_element_schedule(key);
  d.block = ~std::uint64_t{0};
}

/// Codes of n floats on grid g, each value rounded with its own 16-bit draw, from `d`: the values
/// start at value index 8 * first_block, a block boundary.
/// clamp_idle: grid_clamp_is_idle holds for these values and their draws, so the clamp to the top
/// may be left out.
QSDP_AVX2_LOOP void encode_drawn_codes(const float* x, std::size_t n, const code_grid& g,
                                       bool clamp_idle, std::uint64_t first_block, draw_stream& d,
                                       std::uint8_t* out) {
  if (n == 0) return;
  if (d.block != first_block) {
    philox_store_chunks(philox_four(d.schedule, block_lanes(first_block)), d.words[0]);
    philox_store_chunks(philox_four(d.schedule, block_lanes(first_block + 4)), d.words[1]);
    d.slot = 0;
  }
  const std::size_t whole = n / 32;
  unsigned slot = d.slot;
  philox_lanes started = philox_four(d.schedule, block_lanes(first_block + 8), 5);  // two ahead
  __m256i blocks = block_lanes(first_block + 12);                                   // three ahead
  for (std::size_t c = 0; c < whole; ++c, slot ^= 1u) {
    philox_lanes next = started;
    started = philox_first_rounds(d.schedule, blocks);
    const auto* halves = reinterpret_cast<const std::uint16_t*>(d.words[slot]);
    if (clamp_idle) {
      encode32_drawn<false>(x + 32 * c, g, halves, out + 32 * c, next, started, d.schedule);
    } else {
      encode32_drawn<true>(x + 32 * c, g, halves, out + 32 * c, next, started, d.schedule);
    }
    philox_store_chunks(next, d.words[slot]);
    blocks = _mm256_add_epi64(blocks, _mm256_set1_epi64x(4));
  }
  const std::size_t last = 32 * whole;
  if (last == n) {  // the stream goes on at the next block
    d.block = first_block + 4 * whole;
    d.slot = slot;
    return;
  }
  // A part of a group: its other values are not the next segment's, so the stream stops here.
  const auto* halves = reinterpret_cast<const std::uint16_t*>(d.words[slot]);
  for (std::size_t v = 0; v < n - last; ++v) {
    float value;  // the caller's buffer may sit at any byte offset: x[j] would be a misaligned load
    std::memcpy(&value, x + last + v, sizeof value);
    const std::size_t half = 16 * ((v % 8) / 4) + 4 * (v / 8) + v % 4;
    out[last + v] =
        static_cast<std::uint8_t>(grid_code<true>(g, value, uniform_from_half(halves[half])));
  }
  d.block = ~std::uint64_t{0};
}

/// value_grid's formula (grid_value) for four codes, rounded to float. IntegerShift: g.shift is an
/// integer (|shift| < 2^30), added to the codes in integers, which gives the same double as the
/// formula's addition (both are exact); Fraction: g.fraction is added, as grid_value does where
/// g.fractional (adding a zero fraction changes nothing, value_grid::fractional).
template <bool IntegerShift = false, bool Fraction = true, bool Clamp = true>
QSDP_AVX2_INLINE __m128 decode4(__m128i codes32, const value_grid& g) {
  __m256d c;
  if constexpr (IntegerShift) {
    c = _mm256_cvtepi32_pd(_mm_add_epi32(codes32, _mm_set1_epi32(static_cast<int>(g.shift))));
  } else {
    c = _mm256_add_pd(_mm256_cvtepi32_pd(codes32), _mm256_set1_pd(g.shift));
  }
  if constexpr (Fraction) c = _mm256_add_pd(c, _mm256_set1_pd(g.fraction));
  __m256d v = g.product ? _mm256_mul_pd(c, _mm256_set1_pd(g.step))
                        : _mm256_fmadd_pd(c, _mm256_set1_pd(g.step), _mm256_set1_pd(g.base));
  if (Clamp && g.clamp) {
    v = _mm256_max_pd(v, _mm256_set1_pd(g.lo));
    v = _mm256_min_pd(v, _mm256_set1_pd(g.hi));
  }
  return _mm256_cvtpd_ps(v);
}

/// Values 0 .. end - 1 (end a multiple of 8) into out, eight at a time: stored or (Accumulate)
/// added; Stream: stored with non-temporal stores (out 32-byte aligned).
template <bool Accumulate, bool Stream, bool IntegerShift, bool Fraction, bool Clamp>
QSDP_AVX2_INLINE void decode_vectors(const std::uint8_t* codes, std::size_t end,
                                     const value_grid& g, float* out) {
  // A copy the stores cannot reach: the vector types may alias anything, so through the reference
  // every store would force the grid's constants to be loaded and broadcast again.
  const value_grid grid = g;
  for (std::size_t j = 0; j < end; j += 8) {
    const __m256i c32 =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + j)));
    const __m128 lo = decode4<IntegerShift, Fraction, Clamp>(_mm256_castsi256_si128(c32), grid);
    const __m128 hi =
        decode4<IntegerShift, Fraction, Clamp>(_mm256_extracti128_si256(c32, 1), grid);
    __m256 v = _mm256_set_m128(hi, lo);
    if constexpr (Accumulate) v = _mm256_add_ps(_mm256_loadu_ps(out + j), v);
    if constexpr (Stream)
      _mm256_stream_ps(out + j, v);
    else
      _mm256_storeu_ps(out + j, v);
  }
}

/// Which of the decode loops serves grid g: one per way of adding the shift, and grids with a
/// clamp (random_shift's) take the general one, so the two others carry no clamp test.
enum class decode_form { general, integer_shift_fraction, integer_shift };
inline decode_form decode_form_for(const value_grid& g) {
  if (g.clamp || g.shift != std::trunc(g.shift) || !(std::abs(g.shift) < 0x1p30))
    return decode_form::general;
  return g.fractional ? decode_form::integer_shift_fraction : decode_form::integer_shift;
}

/// The values of codes[vector_end, n) (the tail the vector loops leave), one at a time.
template <bool Accumulate>
QSDP_AVX2_INLINE void decode_tail(const std::uint8_t* codes, std::size_t vector_end, std::size_t n,
                                  const value_grid& g, float* out) {
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

/// out[j] = value (Accumulate: out[j] += value), float output at any alignment; Stream: the
/// vectors with non-temporal stores, out 64-byte aligned (the caller fences).
template <bool Accumulate, bool Stream = false>
QSDP_AVX2_LOOP void decode_values(const std::uint8_t* codes, std::size_t n, const value_grid& g,
                                  float* out) {
  const std::size_t vector_end = n - n % 8;
  switch (decode_form_for(g)) {
    case decode_form::general:
      decode_vectors<Accumulate, Stream, false, true, true>(codes, vector_end, g, out);
      break;
    case decode_form::integer_shift_fraction:
      decode_vectors<Accumulate, Stream, true, true, false>(codes, vector_end, g, out);
      break;
    case decode_form::integer_shift:
      decode_vectors<Accumulate, Stream, true, false, false>(codes, vector_end, g, out);
      break;
  }
  decode_tail<Accumulate>(codes, vector_end, n, g, out);
}

// ---- hadamard<Inner>'s rotation (detail/codec/hadamard.hpp states it; these loops perform the
// same IEEE operations in the same order, eight values per instruction) ----

/// Eight sign masks (0x80000000 where the value is negative) from a byte of sign bits, bit j for
/// lane j.
QSDP_AVX2_INLINE __m256 sign_masks8(std::uint64_t byte) {
  const __m256i lanes = _mm256_sllv_epi32(_mm256_set1_epi32(static_cast<int>(byte & 0xFF)),
                                          _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24));
  return _mm256_castsi256_ps(
      _mm256_and_si256(lanes, _mm256_set1_epi32(static_cast<std::int32_t>(0x80000000u))));
}

/// The butterfly stages of stride 1, 2 and 4 within eight values (hadamard_butterflies' first
/// three stages). In each, a lane's partner is brought alongside by a permute, and
/// fma(v, +-1, partner) is the lower lane's v + partner and the upper lane's partner - v, the
/// scalar stage's a + b and a - b with their one rounding.
QSDP_AVX2_INLINE __m256 butterflies8(__m256 v) {
  v = _mm256_fmadd_ps(v, _mm256_setr_ps(1, -1, 1, -1, 1, -1, 1, -1), _mm256_permute_ps(v, 0xB1));
  v = _mm256_fmadd_ps(v, _mm256_setr_ps(1, 1, -1, -1, 1, 1, -1, -1), _mm256_permute_ps(v, 0x4E));
  return _mm256_fmadd_ps(v, _mm256_setr_ps(1, 1, 1, 1, -1, -1, -1, -1),
                         _mm256_permute2f128_ps(v, v, 0x01));
}

/// The sign bits of a bucket's values (at most 4096) as 64-bit words, value i's at bit i % 64 of
/// word i / 64 (sign_bits' low and high halves in turn), fetched once per bucket.
struct bucket_signs {
  // Room for the bucket's blocks (33 at most: one more where it does not start on a block)
  // rounded up to fetch_signs' groups of eight.
  alignas(32) std::uint64_t words[hadamard_max_bucket / 64 + 16];
  std::uint64_t first_word;
  /// The masks of values i .. i + 7 (i % 8 == 0): their bits are one byte of the words (x86 is
  /// little-endian), loaded as such, without shifting a word.
  QSDP_AVX2_INLINE __m256 masks8(std::uint64_t i) const {
    return sign_masks8(reinterpret_cast<const unsigned char*>(words)[i / 8 - first_word * 8]);
  }
};

/// The signs of values first .. first + n - 1: signs_of_block's blocks, eight per step as two
/// independent groups of four (a round is a chain of a multiply, a shift and a xor; one block at a
/// time left that chain's latency exposed at every bucket's start). A block's words 0..3 in order
/// are its low and high sign words, which philox_store lays out.
QSDP_AVX2_INLINE void fetch_signs(bucket_signs& s, std::size_t n, std::uint64_t first,
                                  const rotation_record& r) {
  s.first_word = first / 128 * 2;
  const std::uint64_t first_block = first / 128;
  const std::uint64_t blocks = (first + n - 1) / 128 - first_block + 1;
  const philox_schedule k = philox_element_schedule(rng_key{r.seed, r.call, 0});
  auto* words = reinterpret_cast<std::uint32_t*>(s.words);
  for (std::uint64_t b = 0; b < blocks; b += 8) {
    const std::uint64_t index = sign_block_base + first_block + b;
    const philox_lanes low = philox_four(k, block_lanes(index));
    const philox_lanes high = philox_four(k, block_lanes(index + 4));
    philox_store(low, words + 4 * b);
    philox_store(high, words + 4 * b + 16);
  }
}

/// The butterfly stages of strides h, 2h, ..., 2^(S-1) h on the 2^S vectors x[t] (values t * h
/// apart), each stage as the scalar one: the lower vector of a pair gets a + b, the upper a - b.
template <int S>
QSDP_AVX2_INLINE void vector_stages(__m256 (&x)[8]) {
  QSDP_AVX2_UNROLL_8
  for (int level = 0; level < S; ++level) {
    const int d = 1 << level;
    QSDP_AVX2_UNROLL_8
    for (int t = 0; t < (1 << S); ++t) {
      if (t & d) continue;
      const __m256 a = x[t], b = x[t + d];
      x[t] = _mm256_add_ps(a, b);
      x[t + d] = _mm256_sub_ps(a, b);
    }
  }
}

/// One pass over a piece of p values: the first pass (FirstPass) loads 2^S consecutive vectors,
/// applies `prologue` to each and the stages of strides 1, 2, 4 within it (butterflies8), then
/// strides 8 .. 2^(S-1) 8 across them; a later pass runs strides h .. 2^(S-1) h (h >= 64) on
/// vectors h apart. `epilogue` is applied to every vector before it is stored (the last pass of
/// an inverse). Both get the vector and the index of its first value in the piece.
template <int S, bool FirstPass, class Prologue, class Epilogue>
QSDP_AVX2_INLINE void rotation_pass(const float* from, float* v, std::size_t p, std::size_t h,
                                    const Prologue& prologue, const Epilogue& epilogue) {
  constexpr int vectors = 1 << S;
  const std::size_t stride = FirstPass ? 8 : h, span = stride * vectors;
  for (std::size_t block = 0; block < p; block += span) {
    if constexpr (FirstPass)  // the input stream, as the encode loops prefetch theirs
      for (std::size_t line = 0; line < span; line += 16)
        _mm_prefetch(reinterpret_cast<const char*>(from + block + line + prefetch_distance),
                     _MM_HINT_T0);
    for (std::size_t o = 0; o < stride; o += 8) {
      __m256 x[8];
      QSDP_AVX2_UNROLL_8
      for (int t = 0; t < vectors; ++t) {
        const std::size_t j = block + o + static_cast<std::size_t>(t) * stride;
        if constexpr (FirstPass)
          x[t] = butterflies8(prologue(_mm256_loadu_ps(from + j), j));
        else
          x[t] = _mm256_load_ps(v + j);
      }
      vector_stages<S>(x);
      QSDP_AVX2_UNROLL_8
      for (int t = 0; t < vectors; ++t) {
        const std::size_t j = block + o + static_cast<std::size_t>(t) * stride;
        _mm256_store_ps(v + j, epilogue(x[t], j));
      }
    }
  }
}

/// rotation_pass with its number of strides chosen at run time.
template <class Prologue, class Epilogue>
QSDP_AVX2_INLINE void rotation_pass(int stages, const float* from, float* v, std::size_t p,
                                    std::size_t h, bool first_pass, const Prologue& prologue,
                                    const Epilogue& epilogue) {
  if (first_pass) {
    switch (stages) {
      case 0: return rotation_pass<0, true>(from, v, p, h, prologue, epilogue);
      case 1: return rotation_pass<1, true>(from, v, p, h, prologue, epilogue);
      case 2: return rotation_pass<2, true>(from, v, p, h, prologue, epilogue);
      default: return rotation_pass<3, true>(from, v, p, h, prologue, epilogue);
    }
  }
  switch (stages) {
    case 1: return rotation_pass<1, false>(from, v, p, h, prologue, epilogue);
    case 2: return rotation_pass<2, false>(from, v, p, h, prologue, epilogue);
    default: return rotation_pass<3, false>(from, v, p, h, prologue, epilogue);
  }
}

/// What a pass does to a vector as it loads or stores it (lambdas would not carry the loops'
/// target attribute).
struct pass_through {
  QSDP_AVX2_INLINE __m256 operator()(__m256 x, std::size_t) const { return x; }
};
struct scale_by {
  __m256 scale;
  QSDP_AVX2_INLINE __m256 operator()(__m256 x, std::size_t) const {
    return _mm256_mul_ps(x, scale);
  }
};
/// x * scale with value `at + j`'s sign: the forward's first step, and the inverse's last (Inverse:
/// NaN made quiet_nan(), then saturated where Saturate).
template <bool Inverse, bool Saturate>
struct scale_and_sign {
  __m256 scale;
  const bucket_signs* signs;
  std::uint64_t at;
  QSDP_AVX2_INLINE __m256 operator()(__m256 x, std::size_t j) const {
    x = _mm256_xor_ps(_mm256_mul_ps(x, scale), signs->masks8(at + j));
    if constexpr (Inverse)  // the XOR flips a NaN's sign, which the scalar multiply keeps
      x = _mm256_blendv_ps(x, _mm256_set1_ps(quiet_nan()), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    // saturate_infinite: MAXPS and MINPS return their second operand when one is NaN, so NaN
    // passes as in the scalar statement.
    if constexpr (Saturate)
      x = _mm256_min_ps(_mm256_set1_ps(3.40282346638528859812e+38f),
                        _mm256_max_ps(_mm256_set1_ps(-3.40282346638528859812e+38f), x));
    return x;
  }
};

/// Every stage of a piece of p >= 8 values in passes of up to three strides: the first pass with
/// the in-vector strides, reading `from` (which may be v itself, or unaligned), each later one on
/// vectors further apart; `epilogue` on the last pass.
template <class Prologue, class Epilogue>
QSDP_AVX2_INLINE void rotate_piece(const float* from, float* v, std::size_t p,
                                   const Prologue& prologue, const Epilogue& epilogue) {
  std::size_t h = 8;  // the next stride to run
  bool first_pass = true;
  while (first_pass || h < p) {
    const std::size_t left = first_pass ? p / 8 : p / h;  // vectors a full run would combine
    const int stages = left >= 8 ? 3 : left >= 4 ? 2 : left >= 2 ? 1 : 0;
    if ((h << stages) >= p)
      rotation_pass(stages, from, v, p, h, first_pass, prologue, epilogue);
    else
      rotation_pass(stages, from, v, p, h, first_pass, prologue, pass_through{});
    h <<= stages;
    first_pass = false;
  }
}

/// hadamard_forward of a bucket of n values read from `from` (any alignment; may be v) into v
/// (32-byte aligned), first % 8 == 0: the pieces of 8 values and more here, the smaller ones of a
/// short bucket's tail by the scalar statement.
QSDP_AVX2_LOOP void hadamard_forward(const float* from, float* v, std::size_t n,
                                     std::uint64_t first, const rotation_record& r) {
  bucket_signs signs;
  fetch_signs(signs, n, first, r);
  std::size_t start = 0;
  for (; start < n && hadamard_piece(n - start) >= 8;) {
    const std::size_t p = hadamard_piece(n - start);
    const scale_and_sign<false, false> prologue{_mm256_set1_ps(1.0f / static_cast<float>(p)),
                                                &signs, first + start};
    rotate_piece(from + start, v + start, p, prologue, pass_through{});
    start += p;
  }
  if (start < n) {
    if (from != v) std::memcpy(v + start, from + start, (n - start) * sizeof(float));
    detail::hadamard_forward(v + start, n - start, first + start, r);
  }
}

/// hadamard_inverse<Saturate> of a bucket (hadamard_forward's conditions).
template <bool Saturate>
QSDP_AVX2_LOOP void hadamard_inverse(float* v, std::size_t n, std::uint64_t first,
                                     const rotation_record& r) {
  bucket_signs signs;
  fetch_signs(signs, n, first, r);
  std::size_t start = 0;
  for (; start < n && hadamard_piece(n - start) >= 8;) {
    const std::size_t p = hadamard_piece(n - start);
    const scale_and_sign<true, Saturate> epilogue{_mm256_set1_ps(static_cast<float>(p)), &signs,
                                                  first + start};
    rotate_piece(v + start, v + start, p, scale_by{_mm256_set1_ps(1.0f / static_cast<float>(p))},
                 epilogue);
    start += p;
  }
  if (start < n) detail::hadamard_inverse<Saturate>(v + start, n - start, first + start, r);
}

/// Whether these loops serve policy Q: the built-in policies (alone or inside hadamard<>), which
/// state their math as grids. A user policy runs the generic loops, whatever members it has: its
/// encode and decode are the contract.
template <class Q>
inline constexpr bool has_grids = encodes_on_grid<Q>&& decodes_on_grid<Q>;

}  // namespace qsdp::detail::avx2

#undef QSDP_AVX2_INLINE
#undef QSDP_AVX2_LOOP
#undef QSDP_AVX2_UNROLL_8

#endif
