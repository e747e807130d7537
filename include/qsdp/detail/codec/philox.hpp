// SPDX-License-Identifier: Apache-2.0
//
// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator, so the host codec and the CUDA kernels can draw the same number for the
// same element without sharing any state. Integer-only, hence bit-identical everywhere.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../config.hpp"

namespace qsdp::detail {

struct philox_block {
  std::uint32_t v[4];
};

inline constexpr std::uint32_t philox_m0 = 0xD2511F53u;
inline constexpr std::uint32_t philox_m1 = 0xCD9E8D57u;
inline constexpr std::uint32_t philox_w0 = 0x9E3779B9u;  // golden ratio
inline constexpr std::uint32_t philox_w1 = 0xBB67AE85u;  // sqrt(3) - 1

/// One Philox round of one block under round key k0,k1.
QSDP_HOST_DEVICE constexpr void philox_round(philox_block& b, std::uint32_t k0, std::uint32_t k1) {
  const std::uint64_t p0 = static_cast<std::uint64_t>(philox_m0) * b.v[0];
  const std::uint64_t p1 = static_cast<std::uint64_t>(philox_m1) * b.v[2];
  b = {{static_cast<std::uint32_t>(p1 >> 32) ^ b.v[1] ^ k0, static_cast<std::uint32_t>(p1),
        static_cast<std::uint32_t>(p0 >> 32) ^ b.v[3] ^ k1, static_cast<std::uint32_t>(p0)}};
}

/// Philox-4x32-10 of N blocks (counters c[i]) under one key k0,k1, rounds outermost: the round keys
/// are computed once for all N.
template <unsigned N>
QSDP_HOST_DEVICE constexpr void philox4x32_10(philox_block (&c)[N], std::uint32_t k0,
                                              std::uint32_t k1) {
  QSDP_UNROLL
  for (int round = 0; round < 10; ++round) {
    QSDP_UNROLL
    for (unsigned i = 0; i < N; ++i) philox_round(c[i], k0, k1);
    k0 += philox_w0;
    k1 += philox_w1;
  }
}

/// One Philox-4x32-10 block: counter c0..c3 under key k0,k1. Matches Random123's known-answer
/// vectors.
QSDP_HOST_DEVICE constexpr philox_block philox4x32_10(std::uint32_t c0, std::uint32_t c1,
                                                      std::uint32_t c2, std::uint32_t c3,
                                                      std::uint32_t k0, std::uint32_t k1) {
  philox_block b[1] = {{{c0, c1, c2, c3}}};
  philox4x32_10(b, k0, k1);
  return b[0];
}

/// Word i (0..3) of a block, selected without indexing (an index the compiler cannot see through
/// would put the block in local memory).
QSDP_HOST_DEVICE constexpr std::uint32_t philox_word(const philox_block& b, std::uint64_t i) {
  return i == 0 ? b.v[0] : i == 1 ? b.v[1] : i == 2 ? b.v[2] : b.v[3];
}

/// The top 24 bits of a draw as a float in [0, 1): exact, so host and device agree to the bit.
QSDP_HOST_DEVICE constexpr float uniform_from_bits(std::uint32_t bits) {
  return static_cast<float>(bits >> 8) * 0x1p-24f;
}

/// A 16-bit draw as a float in (0, 1): (k + 1/2) / 2^16, exact. Per-value draws use 16 bits: that
/// halves the generator's cost, and the rounding it allows is at most 2^-17 of a quantization step
/// (for 8-bit codes, 2^-25 of the bucket's range: below float rounding of the values themselves).
QSDP_HOST_DEVICE constexpr float uniform_from_half(std::uint32_t half) {
  return (static_cast<float>(half & 0xFFFFu) + 0.5f) * 0x1p-16f;
}

/// What a random draw of the codec is for: one number per element, or one per bucket.
enum class draw_domain : std::uint32_t { element = 0, bucket = 1 };

/// Where one encode call sits in the random stream. Counter layout of a block
/// (docs/reference/wire-format.md):
///   key     = (seed low 32 bits, seed high 32 bits)
///   counter = (block low 32, block high 32, call low 32, stream | domain << 31)
/// Per-bucket draws (24 bits): bucket b uses word b%4 of block b/4 of the bucket domain.
/// Per-value draws (16 bits): the element domain's blocks, read as a stream of 16-bit halves
/// (word 0 low half, word 0 high half, word 1 low half, ...): value i uses half i%8 of block i/8.
struct rng_key {
  std::uint64_t seed = 0;
  std::uint64_t call = 0;
  std::uint32_t stream = 0;  // < 2^31; collectives use it to give every rank its own stream

  /// The counter of block `block_index` of a domain.
  QSDP_HOST_DEVICE constexpr philox_block counter(draw_domain domain,
                                                  std::uint64_t block_index) const {
    return {{static_cast<std::uint32_t>(block_index), static_cast<std::uint32_t>(block_index >> 32),
             static_cast<std::uint32_t>(call),
             (stream & 0x7FFFFFFFu) | (static_cast<std::uint32_t>(domain) << 31)}};
  }

  QSDP_HOST_DEVICE constexpr philox_block block(draw_domain domain,
                                                std::uint64_t block_index) const {
    philox_block b[1] = {counter(domain, block_index)};
    philox4x32_10(b, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
    return b[0];
  }

  /// Blocks first .. first + N - 1 of a domain, generated together.
  template <unsigned N>
  QSDP_HOST_DEVICE constexpr void blocks(draw_domain domain, std::uint64_t first,
                                         philox_block (&out)[N]) const {
    for (unsigned i = 0; i < N; ++i) out[i] = counter(domain, first + i);
    philox4x32_10(out, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  }

  /// U[0,1) draw number `index` of the given domain, from a whole 32-bit word (24 bits used).
  QSDP_HOST_DEVICE constexpr float uniform(draw_domain domain, std::uint64_t index) const {
    return uniform_from_bits(philox_word(block(domain, index >> 2), index & 3));
  }

  /// The 16-bit draw of value `index` (what stochastic rounding uses).
  QSDP_HOST_DEVICE constexpr float value_uniform(std::uint64_t index) const {
    const std::uint32_t word =
        philox_word(block(draw_domain::element, index >> 3), (index >> 1) & 3);
    return uniform_from_half(index & 1 ? word >> 16 : word);
  }
};

}  // namespace qsdp::detail
