// SPDX-License-Identifier: Apache-2.0
//
// AVX-512 loops for the stochastic encode, and hadamard<Inner>'s forward rotation, on x86-64 CPUs
// that have AVX-512 F, BW, DQ and VL. With
// AVX2 that encode is bound by its vector instructions, not by memory (bench/results/
// 2026-12-01-host-codec.md: about 5.6 per value on three ports): Philox needs two 32-bit high
// multiplies per round and AVX2 has none, and the exact double-precision arithmetic runs four
// values per instruction. Here Philox runs eight blocks per instruction with the two xors of a
// round in one vpternlogq, the arithmetic eight values per instruction, and the truncation to a
// code is one addition of 2^52 rounded toward zero (embedded rounding) instead of a two-part
// conversion and the packs.
//
// The IEEE operations are the grids' (detail/codec/grid.hpp: grid_code), in the same order, so
// the packets are the AVX2 loops' and the baseline's bit for bit; tests/test_quantizers.cpp
// compares all three paths. Only the per-value draws and the codes are done here; the statistics,
// the fits and the packing stay with the caller (detail/host/loops.hpp).
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../codec/grid.hpp"
#include "../codec/hadamard.hpp"
#include "../codec/philox.hpp"
#include "../codec/statistics.hpp"
#include "avx2.hpp"

#define QSDP_AVX512_TARGET "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"
#define QSDP_AVX512_INLINE inline __attribute__((always_inline, target(QSDP_AVX512_TARGET)))
#define QSDP_AVX512_LOOP inline __attribute__((target(QSDP_AVX512_TARGET)))
#if defined(__CUDACC__)
#define QSDP_AVX512_UNROLL_8                                                             \
  _Pragma("nv_diagnostic push") _Pragma("nv_diag_suppress 1675") _Pragma("GCC unroll 8") \
      _Pragma("nv_diagnostic pop")
#else
#define QSDP_AVX512_UNROLL_8 _Pragma("GCC unroll 8")
#endif

// g++ 12's AVX-512 intrinsics pass an uninitialized vector as the unused merge source of their
// all-ones masks, which -Wmaybe-uninitialized reports wherever they are inlined (GCC bug 105593,
// fixed in g++ 13). The warning is about the compiler's header, not about this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace qsdp::detail::avx512 {

/// avx2::keep_in_registers for 512-bit vectors.
QSDP_AVX512_INLINE void keep_in_registers(__m512i& a, __m512i& b) { asm("" : "+v"(a), "+v"(b)); }
QSDP_AVX512_INLINE void keep_in_registers(__m512i& a, __m512i& b, __m512i& c, __m512i& d) {
  asm("" : "+v"(a), "+v"(b), "+v"(c), "+v"(d));
}

/// Sixteen values as float bits (bf16 widened exactly, as avx2::load8_float_bits).
template <bool Bf16>
QSDP_AVX512_INLINE __m512i load16_float_bits(const void* src, std::size_t j) {
  if constexpr (Bf16) {
    const __m256i halves = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(src) + j));
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(halves), 16);
  } else {
    return _mm512_loadu_si512(static_cast<const float*>(src) + j);
  }
}

/// avx2::scan_values sixteen values per instruction, in two reductions of the raw bits where the
/// bucket holds values of both signs (zero-mean gradients and weights: nearly every bucket) and
/// three where it does not. The signed maximum is then the largest key (some value is positive)
/// and the unsigned maximum the smallest (some value is negative), and the unsigned minimum,
/// which stats_from_extremes reads only when one sign is missing, is not needed; where it is, a
/// second pass over the bucket (in L1 by then) finds it.
template <bool Bf16>
QSDP_AVX512_LOOP partial_stats scan_values(const void* src, std::size_t n) {
  __m512i smax0 = _mm512_set1_epi32(-0x7FFFFFFF - 1), smax1 = smax0;
  __m512i umax0 = _mm512_setzero_si512(), umax1 = umax0;
  const std::size_t vector_end = n - n % 16;
  const std::size_t start = vector_end % 32;  // an odd sixteen first: no remainder after the loop
  if (start != 0) {
    const __m512i a = load16_float_bits<Bf16>(src, 0);
    smax0 = _mm512_max_epi32(smax0, a);
    umax0 = _mm512_max_epu32(umax0, a);
  }
  for (std::size_t j = start; j < vector_end; j += 32) {
    const __m512i a = load16_float_bits<Bf16>(src, j), b = load16_float_bits<Bf16>(src, j + 16);
    smax0 = _mm512_max_epi32(smax0, a);
    umax0 = _mm512_max_epu32(umax0, a);
    smax1 = _mm512_max_epi32(smax1, b);
    umax1 = _mm512_max_epu32(umax1, b);
    keep_in_registers(smax0, umax0, smax1, umax1);
  }
  partial_stats p;
  if (vector_end > 0) {
    const std::int32_t s = _mm512_reduce_max_epi32(_mm512_max_epi32(smax0, smax1));
    const auto hi_bits =
        static_cast<std::uint32_t>(_mm512_reduce_max_epu32(_mm512_max_epu32(umax0, umax1)));
    std::uint32_t lo_bits = 0;  // unread when both signs occur
    if (s < 0 || hi_bits < 0x80000000u) {
      __m512i umin0 = _mm512_set1_epi32(-1), umin1 = umin0;
      if (start != 0) umin0 = load16_float_bits<Bf16>(src, 0);
      for (std::size_t j = start; j < vector_end; j += 32) {
        umin0 = _mm512_min_epu32(umin0, load16_float_bits<Bf16>(src, j));
        umin1 = _mm512_min_epu32(umin1, load16_float_bits<Bf16>(src, j + 16));
        keep_in_registers(umin0, umin1);
      }
      lo_bits = static_cast<std::uint32_t>(_mm512_reduce_min_epu32(_mm512_min_epu32(umin0, umin1)));
    }
    p = avx2::stats_from_extremes(s, lo_bits, hi_bits);
  }
  for (std::size_t j = vector_end; j < n; ++j)
    p.add(bit_cast<float>(avx2::load1_float_bits<Bf16>(src, j)));
  return p;
}

/// Eight Philox states, one block per 64-bit lane, laid out as avx2::philox_lanes.
struct philox_lanes {
  __m512i c0, c1, c2, c3;
};

/// avx2::philox_call_constants, broadcast to eight lanes.
struct philox_schedule {
  __m512i k0[10], k1[10];
  __m512i first_p1, first_c0_key, first_c2_key, second_c0_key;
};

QSDP_AVX512_INLINE philox_schedule philox_element_schedule(const rng_key& key) {
  const avx2::philox_call_constants c = avx2::element_call_constants(key);
  philox_schedule s;
  for (int round = 0; round < 10; ++round) {
    s.k0[round] = _mm512_set1_epi64(c.k0[round]);
    s.k1[round] = _mm512_set1_epi64(c.k1[round]);
  }
  s.first_p1 = _mm512_set1_epi64(static_cast<long long>(c.first_p1));
  s.first_c0_key = _mm512_set1_epi64(c.first_c0_key);
  s.first_c2_key = _mm512_set1_epi64(c.first_c2_key);
  s.second_c0_key = _mm512_set1_epi64(c.second_c0_key);
  return s;
}

QSDP_AVX512_INLINE __m512i xor3(__m512i a, __m512i b, __m512i c) {
  return _mm512_ternarylogic_epi64(a, b, c, 0x96);
}

/// One round (avx2::philox_round), the two xors of each new word in one instruction.
QSDP_AVX512_INLINE void philox_round(philox_lanes& s, __m512i k0, __m512i k1) {
  const __m512i p0 = _mm512_mul_epu32(s.c0, _mm512_set1_epi64(philox_m0));
  const __m512i p1 = _mm512_mul_epu32(s.c2, _mm512_set1_epi64(philox_m1));
  s.c0 = xor3(_mm512_srli_epi64(p1, 32), s.c1, k0);
  s.c1 = p1;
  s.c2 = xor3(_mm512_srli_epi64(p0, 32), s.c3, k1);
  s.c3 = p0;
}

/// Rounds 0 and 1 of the element-domain blocks whose indices `blocks` holds, one per lane
/// (avx2::philox_first_rounds: the operations whose operands are all constant are left out).
QSDP_AVX512_INLINE philox_lanes philox_first_rounds(const philox_schedule& s, __m512i blocks) {
  __m512i p0 = _mm512_mul_epu32(blocks, _mm512_set1_epi64(philox_m0));
  philox_lanes r{_mm512_xor_si512(_mm512_srli_epi64(blocks, 32), s.first_c0_key), s.first_p1,
                 _mm512_xor_si512(_mm512_srli_epi64(p0, 32), s.first_c2_key), p0};
  p0 = _mm512_mul_epu32(r.c0, _mm512_set1_epi64(philox_m0));
  const __m512i p1 = _mm512_mul_epu32(r.c2, _mm512_set1_epi64(philox_m1));
  r.c0 = _mm512_xor_si512(_mm512_srli_epi64(p1, 32), s.second_c0_key);
  r.c1 = p1;
  r.c2 = xor3(_mm512_srli_epi64(p0, 32), r.c3, s.k1[1]);
  r.c3 = p0;
  return r;
}

/// Rounds 0 .. last - 1 of the blocks whose indices `blocks` holds, one per lane.
QSDP_AVX512_INLINE philox_lanes philox_eight(const philox_schedule& s, __m512i blocks,
                                             int last = 10) {
  philox_lanes r = philox_first_rounds(s, blocks);
  QSDP_AVX512_UNROLL_8
  for (int round = 2; round < last; ++round) philox_round(r, s.k0[round], s.k1[round]);
  return r;
}

/// Block indices first .. first + 7, one per lane.
QSDP_AVX512_INLINE __m512i block_lanes(std::uint64_t first) {
  return _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(first)),
                          _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
}

/// Stores the eight blocks' words in index order (block 0 words 0..3, block 1 words 0..3, ...):
/// then the 16-bit halves are the draws of the group's 64 values in value order, as
/// rng_key::value_uniform reads them.
QSDP_AVX512_INLINE void philox_store(const philox_lanes& s, std::uint16_t* halves) {
  // Each lane's word is its low half: pair words 0-1 and 2-3 of each block into one 64-bit lane...
  const __m512i low_halves =
      _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
  const __m512i w01 = _mm512_permutex2var_epi32(s.c0, low_halves, s.c1);
  const __m512i w23 = _mm512_permutex2var_epi32(s.c2, low_halves, s.c3);
  // ... and interleave the pairs: blocks 0-3, then 4-7.
  const __m512i first =
      _mm512_permutex2var_epi64(w01, _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), w23);
  const __m512i second =
      _mm512_permutex2var_epi64(w01, _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15), w23);
  _mm512_store_si512(halves, first);
  _mm512_store_si512(halves + 32, second);
}

/// The grid's constants, broadcast.
struct grid_lanes {
  __m512d origin, inverse_step, top;
};

/// The codes of eight floats (grid_code<true>), each in the low byte of its 64-bit lane (the rest
/// of the lane holds 2^52's bits). Same operations as avx2::encode4 and halves_to_uniform, then the
/// clamp as clamp_d spells it (max(t, 0) gives 0 for NaN, as t > 0 ? t : 0 does), and the
/// truncation as an addition of 2^52 rounded toward zero: for c in [0, top], top < 2^31, the sum
/// 2^52 + trunc(c) is exact and its low 32 bits are trunc(c). Without Clamp the clamp is left out,
/// for a bucket where grid_clamp_is_idle has shown it changes no code: then t itself lies in
/// [0, floor(top) + 1) and the same addition gives the same code.
template <bool Clamp>
QSDP_AVX512_INLINE __m512i encode8(const float* x, const grid_lanes& g, const std::uint16_t* h) {
  const __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x)), g.origin);
  const __m512i wide = _mm512_cvtepu16_epi64(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
  const __m512d shifted =
      _mm512_castsi512_pd(_mm512_or_si512(wide, _mm512_set1_epi64(0x4330000000000000)));
  const __m512d u =
      _mm512_fmadd_pd(shifted, _mm512_set1_pd(0x1p-16), _mm512_set1_pd(0x1p-17 - 0x1p36));
  const __m512d t = _mm512_fmadd_pd(d, g.inverse_step, u);
  const __m512d c = Clamp ? _mm512_min_pd(_mm512_max_pd(t, _mm512_setzero_pd()), g.top) : t;
  return _mm512_castpd_si512(
      _mm512_add_round_pd(c, _mm512_set1_pd(0x1p52), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
}

/// Sixty-four codes (the low bytes of z[0..7]'s lanes, values in order) as bytes. The packs work
/// within 128-bit lanes, so their output holds the values' groups of four transposed; one dword
/// permute puts them back.
QSDP_AVX512_INLINE void store64_codes(const __m512i (&z)[8], std::uint8_t* out) {
  const __m512i low_halves =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  __m512i d[4];  // d[k]: the codes of values 16k .. 16k + 15, one per dword
  for (int k = 0; k < 4; ++k) d[k] = _mm512_permutex2var_epi32(z[2 * k], low_halves, z[2 * k + 1]);
  // Codes are 0..255: the saturating packs are exact. Dword 4L + t of `bytes` then holds values
  // 16t + 4L .. 16t + 4L + 3, which belong in dword 4t + L.
  const __m512i bytes =
      _mm512_packus_epi16(_mm512_packus_epi32(d[0], d[1]), _mm512_packus_epi32(d[2], d[3]));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_si512(out, _mm512_permutexvar_epi32(order, bytes));
}

/// avx2::decode4 for eight codes: the same operations, eight doubles per instruction.
template <bool IntegerShift, bool Fraction, bool Clamp>
QSDP_AVX512_INLINE __m256 decode8(__m256i codes32, const value_grid& g) {
  __m512d c;
  if constexpr (IntegerShift) {
    c = _mm512_cvtepi32_pd(_mm256_add_epi32(codes32, _mm256_set1_epi32(static_cast<int>(g.shift))));
  } else {
    c = _mm512_add_pd(_mm512_cvtepi32_pd(codes32), _mm512_set1_pd(g.shift));
  }
  if constexpr (Fraction) c = _mm512_add_pd(c, _mm512_set1_pd(g.fraction));
  __m512d v = g.product ? _mm512_mul_pd(c, _mm512_set1_pd(g.step))
                        : _mm512_fmadd_pd(c, _mm512_set1_pd(g.step), _mm512_set1_pd(g.base));
  if (Clamp && g.clamp) {
    v = _mm512_max_pd(v, _mm512_set1_pd(g.lo));
    v = _mm512_min_pd(v, _mm512_set1_pd(g.hi));
  }
  return _mm512_cvtpd_ps(v);
}

/// avx2::decode_vectors sixteen values at a time (end a multiple of 16; Stream: out 64-byte
/// aligned): with 256-bit vectors the conversions to and from double, not memory, bound the decode.
template <bool Accumulate, bool Stream, bool IntegerShift, bool Fraction, bool Clamp>
QSDP_AVX512_INLINE void decode_vectors(const std::uint8_t* codes, std::size_t end,
                                       const value_grid& g, float* out) {
  // A copy the stores cannot reach: the vector types may alias anything, so through the reference
  // every store would force the grid's constants to be loaded and broadcast again.
  const value_grid grid = g;
  for (std::size_t j = 0; j < end; j += 16) {
    const __m512i c32 =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + j)));
    const __m256 lo = decode8<IntegerShift, Fraction, Clamp>(_mm512_castsi512_si256(c32), grid);
    const __m256 hi =
        decode8<IntegerShift, Fraction, Clamp>(_mm512_extracti64x4_epi64(c32, 1), grid);
    __m512 v = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    if constexpr (Accumulate) v = _mm512_add_ps(_mm512_loadu_ps(out + j), v);
    if constexpr (Stream)
      _mm512_stream_ps(out + j, v);
    else
      _mm512_storeu_ps(out + j, v);
  }
}

/// avx2::decode_values with the loops above. The grid comes by value: a caller's grid whose address
/// reached this (never inlined) call could no longer be constant-folded into the caller's AVX2
/// loops.
template <bool Accumulate, bool Stream = false>
QSDP_AVX512_LOOP void decode_values(const std::uint8_t* codes, std::size_t n, value_grid g,
                                    float* out) {
  const std::size_t vector_end = n - n % 16;
  switch (avx2::decode_form_for(g)) {
    case avx2::decode_form::general:
      decode_vectors<Accumulate, Stream, false, true, true>(codes, vector_end, g, out);
      break;
    case avx2::decode_form::integer_shift_fraction:
      decode_vectors<Accumulate, Stream, true, true, false>(codes, vector_end, g, out);
      break;
    case avx2::decode_form::integer_shift:
      decode_vectors<Accumulate, Stream, true, false, false>(codes, vector_end, g, out);
      break;
  }
  avx2::decode_tail<Accumulate>(codes, vector_end, n, g, out);
}

/// How far ahead the loop prefetches (avx2::prefetch_distance).
inline constexpr std::size_t prefetch_distance = avx2::prefetch_distance;

/// The per-value draws of one encode call, two groups of eight Philox blocks (64 values each)
/// ahead of the values being encoded, as avx2::draw_stream (encode_drawn_groups says how the
/// groups ahead are generated).
struct draw_stream {
  philox_schedule schedule;
  alignas(64) std::uint16_t halves[2][64];  // two groups, philox_store's layout
  // The first block of the group in halves[slot]; ~0: none.
  std::uint64_t block = ~std::uint64_t{0};
  unsigned slot = 0;
};

QSDP_AVX512_LOOP void start_draw_stream(const rng_key& key, draw_stream& d) {
  d.schedule = philox_element_schedule(key);
  d.block = ~std::uint64_t{0};
}

/// The whole groups of encode_drawn_codes: `whole` times 64 values, the group in d.halves[slot]
/// first; returns the slot that holds the group after them. While a group is encoded, the group
/// two ahead gets its rounds 5-9 and the group three ahead its rounds 0-4, one round per eight
/// values: a round is a chain of a multiply, a shift and a xor (7 cycles), and a whole group's ten
/// rounds in one step made a chain as long as the step's work, which the out-of-order window
/// could not hide (0.51 against 0.45 ns per value with the values in L1: bench/results/
/// 2026-12-01-host-codec-rounds.md). Two groups of five rounds halve it. The rounds themselves,
/// and so the draws, are unchanged.
template <bool Clamp>
QSDP_AVX512_INLINE unsigned encode_drawn_groups(const float* x, std::size_t whole,
                                                const grid_lanes& g, std::uint64_t first_block,
                                                draw_stream& d, unsigned slot, std::uint8_t* out) {
  const philox_schedule& k = d.schedule;
  philox_lanes started = philox_eight(k, block_lanes(first_block + 16), 5);  // two ahead
  __m512i blocks = block_lanes(first_block + 24);                            // three ahead
  for (std::size_t c = 0; c < whole; ++c, slot ^= 1u) {
    const float* in = x + 64 * c;
    const std::uint16_t* halves = d.halves[slot];
    for (int line = 0; line < 4; ++line)
      _mm_prefetch(reinterpret_cast<const char*>(in + 16 * line + prefetch_distance), _MM_HINT_T0);
    philox_lanes next = started;
    started = philox_first_rounds(k, blocks);
    __m512i z[8];
    QSDP_AVX512_UNROLL_8
    for (int s = 0; s < 8; ++s) {
      if (s < 5) {
        philox_round(next, k.k0[s + 5], k.k1[s + 5]);
      } else {
        philox_round(started, k.k0[s - 3], k.k1[s - 3]);
      }
      z[s] = encode8<Clamp>(in + 8 * s, g, halves + 8 * s);
    }
    store64_codes(z, out + 64 * c);
    philox_store(next, d.halves[slot]);
    blocks = _mm512_add_epi64(blocks, _mm512_set1_epi64(8));
  }
  return slot;
}

/// Codes of n floats on grid g, each rounded with its own 16-bit draw from `d`; the values start
/// at value index 8 * first_block. avx2::encode_drawn_codes, 64 values per step. clamp_idle:
/// grid_clamp_is_idle holds for these values and their draws, so the clamp may be left out.
QSDP_AVX512_LOOP void encode_drawn_codes(const float* x, std::size_t n, const code_grid& grid,
                                         bool clamp_idle, std::uint64_t first_block, draw_stream& d,
                                         std::uint8_t* out) {
  if (n == 0) return;
  if (d.block != first_block) {
    philox_store(philox_eight(d.schedule, block_lanes(first_block)), d.halves[0]);
    philox_store(philox_eight(d.schedule, block_lanes(first_block + 8)), d.halves[1]);
    d.slot = 0;
  }
  const grid_lanes g{_mm512_set1_pd(grid.origin), _mm512_set1_pd(grid.inverse_step),
                     _mm512_set1_pd(grid.top)};
  const std::size_t whole = n / 64;
  const unsigned slot = clamp_idle
                            ? encode_drawn_groups<false>(x, whole, g, first_block, d, d.slot, out)
                            : encode_drawn_groups<true>(x, whole, g, first_block, d, d.slot, out);
  const std::size_t last = 64 * whole;
  if (last == n) {  // the stream goes on at the next block
    d.block = first_block + 8 * whole;
    d.slot = slot;
    return;
  }
  // A part of a group: its other values are not the next segment's, so the stream stops here.
  const std::uint16_t* halves = d.halves[slot];
  for (std::size_t v = 0; v < n - last; ++v) {
    float value;  // the caller's buffer may sit at any byte offset
    std::memcpy(&value, x + last + v, sizeof value);
    out[last + v] =
        static_cast<std::uint8_t>(grid_code<true>(grid, value, uniform_from_half(halves[v])));
  }
  d.block = ~std::uint64_t{0};
}

// ---- hadamard<Inner>'s forward rotation, sixteen values per instruction (avx2.hpp's loops with
// twice the lanes: the same IEEE operations in the same order, so the same bits) ----

/// The butterfly stages of stride 1, 2, 4 and 8 within sixteen values: fma(v, +-1, partner) is
/// the lower lane's v + partner and the upper lane's partner - v (avx2::butterflies8).
QSDP_AVX512_INLINE __m512 butterflies16(__m512 v) {
  // The signs as constants, not blends of +-1 under a mask: the blends were recomputed in the
  // loop, four instructions per sixteen values.
  v = _mm512_fmadd_ps(v, _mm512_setr_ps(1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1),
                      _mm512_permute_ps(v, 0xB1));
  v = _mm512_fmadd_ps(v, _mm512_setr_ps(1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1),
                      _mm512_permute_ps(v, 0x4E));
  v = _mm512_fmadd_ps(v, _mm512_setr_ps(1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1),
                      _mm512_shuffle_f32x4(v, v, 0xB1));
  return _mm512_fmadd_ps(v, _mm512_setr_ps(1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1),
                         _mm512_shuffle_f32x4(v, v, 0x4E));
}

/// avx2::vector_stages on vectors of sixteen.
template <int S>
QSDP_AVX512_INLINE void vector_stages(__m512 (&x)[8]) {
  QSDP_AVX512_UNROLL_8
  for (int level = 0; level < S; ++level) {
    const int d = 1 << level;
    QSDP_AVX512_UNROLL_8
    for (int t = 0; t < (1 << S); ++t) {
      if (t & d) continue;
      const __m512 a = x[t], b = x[t + d];
      x[t] = _mm512_add_ps(a, b);
      x[t + d] = _mm512_sub_ps(a, b);
    }
  }
}

/// One pass over a piece of p >= 16 values (avx2::rotation_pass): the first loads 2^S consecutive
/// vectors from `from`, scales them and applies the signs (value i's bit of the sign words, a
/// 16-bit mask per vector), runs the in-vector strides and then strides 16 .. 2^(S-1) 16 across
/// them; a later pass runs strides h .. 2^(S-1) h (h >= 128) on vectors h apart.
template <int S, bool FirstPass>
QSDP_AVX512_INLINE void forward_pass(const float* from, float* v, std::size_t p, std::size_t h,
                                     __m512 scale, const std::uint16_t* sign_masks) {
  constexpr int vectors = 1 << S;
  const std::size_t stride = FirstPass ? 16 : h, span = stride * vectors;
  const __m512 sign_bit = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(0x80000000u)));
  for (std::size_t block = 0; block < p; block += span) {
    if constexpr (FirstPass)
      for (std::size_t line = 0; line < span; line += 16)
        _mm_prefetch(reinterpret_cast<const char*>(from + block + line + avx2::prefetch_distance),
                     _MM_HINT_T0);
    for (std::size_t o = 0; o < stride; o += 16) {
      __m512 x[8];
      QSDP_AVX512_UNROLL_8
      for (int t = 0; t < vectors; ++t) {
        const std::size_t j = block + o + static_cast<std::size_t>(t) * stride;
        if constexpr (FirstPass) {
          const __m512 scaled = _mm512_mul_ps(_mm512_loadu_ps(from + j), scale);
          x[t] = butterflies16(_mm512_mask_xor_ps(
              scaled, static_cast<__mmask16>(sign_masks[j / 16]), scaled, sign_bit));
        } else {
          x[t] = _mm512_load_ps(v + j);
        }
      }
      vector_stages<S>(x);
      QSDP_AVX512_UNROLL_8
      for (int t = 0; t < vectors; ++t)
        _mm512_store_ps(v + block + o + static_cast<std::size_t>(t) * stride, x[t]);
    }
  }
}

/// avx2::hadamard_forward with sixteen lanes for the pieces of 16 values and more (v 64-byte
/// aligned, first % 16 == 0); the rest of a short bucket goes to the AVX2 loops.
QSDP_AVX512_LOOP void hadamard_forward(const float* from, float* v, std::size_t n,
                                       std::uint64_t first, const rotation_record& r) {
  avx2::bucket_signs signs;
  avx2::fetch_signs(signs, n, first, r);
  // Value first + j's sign is bit j % 16 of 16-bit word j / 16 from here (x86: little-endian).
  const auto* masks =
      reinterpret_cast<const std::uint16_t*>(signs.words) + (first / 16 - signs.first_word * 4);
  std::size_t start = 0;
  for (; start < n && hadamard_piece(n - start) >= 16;) {
    const std::size_t p = hadamard_piece(n - start);
    const __m512 scale = _mm512_set1_ps(1.0f / static_cast<float>(p));
    const std::uint16_t* piece_masks = masks + start / 16;
    std::size_t h = 16;  // the next stride to run
    for (bool first_pass = true; first_pass || h < p; first_pass = false) {
      const std::size_t left = p / h;  // vectors a full run would combine
      const int stages = left >= 8 ? 3 : left >= 4 ? 2 : left >= 2 ? 1 : 0;
      const float* in = from + start;
      float* out = v + start;
      if (first_pass) {
        switch (stages) {
          case 0: forward_pass<0, true>(in, out, p, h, scale, piece_masks); break;
          case 1: forward_pass<1, true>(in, out, p, h, scale, piece_masks); break;
          case 2: forward_pass<2, true>(in, out, p, h, scale, piece_masks); break;
          default: forward_pass<3, true>(in, out, p, h, scale, piece_masks); break;
        }
      } else {
        switch (stages) {
          case 1: forward_pass<1, false>(in, out, p, h, scale, piece_masks); break;
          case 2: forward_pass<2, false>(in, out, p, h, scale, piece_masks); break;
          default: forward_pass<3, false>(in, out, p, h, scale, piece_masks); break;
        }
      }
      h <<= stages;
    }
    start += p;
  }
  if (start < n) avx2::hadamard_forward(from + start, v + start, n - start, first + start, r);
}

}  // namespace qsdp::detail::avx512

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#undef QSDP_AVX512_TARGET
#undef QSDP_AVX512_INLINE
#undef QSDP_AVX512_LOOP
#undef QSDP_AVX512_UNROLL_8

#endif
