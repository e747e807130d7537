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

/// One Philox-4x32-10 block: counter c0..c3 under key k0,k1. Matches Random123's known-answer
/// vectors.
QSDP_HOST_DEVICE constexpr philox_block philox4x32_10(std::uint32_t c0, std::uint32_t c1,
                                                      std::uint32_t c2, std::uint32_t c3,
                                                      std::uint32_t k0, std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(philox_m0) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(philox_m1) * c2;
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32),
                        lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32),
                        lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += philox_w0;
    k1 += philox_w1;
  }
  return {{c0, c1, c2, c3}};
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
/// (docs/wire-format.md):
///   key     = (seed low 32 bits, seed high 32 bits)
///   counter = (block low 32, block high 32, call low 32, stream | domain << 31)
/// Per-bucket draws (24 bits): bucket b uses word b%4 of block b/4 of the bucket domain.
/// Per-value draws (16 bits): the element domain's blocks, read as a stream of 16-bit halves
/// (word 0 low half, word 0 high half, word 1 low half, ...): value i uses half i%8 of block i/8.
struct rng_key {
  std::uint64_t seed = 0;
  std::uint64_t call = 0;
  std::uint32_t stream = 0;  // < 2^31; collectives use it to give every rank its own stream

  QSDP_HOST_DEVICE constexpr philox_block block(draw_domain domain,
                                                std::uint64_t block_index) const {
    return philox4x32_10(static_cast<std::uint32_t>(block_index),
                         static_cast<std::uint32_t>(block_index >> 32),
                         static_cast<std::uint32_t>(call),
                         (stream & 0x7FFFFFFFu) | (static_cast<std::uint32_t>(domain) << 31),
                         static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  }

  /// U[0,1) draw number `index` of the given domain, from a whole 32-bit word (24 bits used).
  QSDP_HOST_DEVICE constexpr float uniform(draw_domain domain, std::uint64_t index) const {
    return uniform_from_bits(block(domain, index >> 2).v[index & 3]);
  }

  /// The 16-bit draw of value `index` (what stochastic rounding uses).
  QSDP_HOST_DEVICE constexpr float value_uniform(std::uint64_t index) const {
    const std::uint32_t word = block(draw_domain::element, index >> 3).v[(index >> 1) & 3];
    return uniform_from_half(index & 1 ? word >> 16 : word);
  }
};

}  // namespace qsdp::detail
