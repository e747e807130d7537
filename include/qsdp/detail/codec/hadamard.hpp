// SPDX-License-Identifier: Apache-2.0
//
// The randomized Hadamard rotation of qsdp::hadamard<Inner> (quantizers.hpp), stated once for the
// host codec and the kernels. docs/reference/wire-format.md has it as a packet reader needs it.
//
// A bucket is cut into pieces whose sizes are the powers of two of its length's binary expansion,
// largest first: a whole bucket (bucket_size is a power of two) is one piece; a short last bucket
// of 100 values is pieces of 64, 32 and 4. Each piece is rotated on its own, so any count works and
// a packet holds exactly as many codes as the inner policy's.
//
// Forward, for a piece of p = 2^k values starting at value index `first` of the packet:
//   y_j = s_j * x_j / p      (one exact multiply by +-2^-k: s_j is a random sign)
//   then k butterfly stages, stride 1, 2, ..., p/2: (a, b) -> (a + b, a - b)
// which is y = H D x / p with H the Walsh-Hadamard matrix (H H = p I) and D the diagonal of signs.
// Every partial sum is at most max|x| in magnitude, so finite inputs never overflow. The inverse
// runs the same stages on the decoded values, scaled by 1/p, and multiplies by the signs and p:
// x = D H y (hadamard_inverse says why the scaling). An overflow there (quantization error on data
// at FLT_MAX) saturates to +-FLT_MAX: finite stays finite. The scalings are exact except for
// subnormal results: values below 2^-126 * p lose low bits (an absolute error below 2^-149 * p).
//
// The signs are Philox draws that depend only on the seed, the call index and the value's index in
// the packet (not on the encoder's stream), so every rank of a reduce-scatter rotates a chunk the
// same way and the receiver can sum the rotated values and transform once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../../config.hpp"
#include "philox.hpp"

namespace qsdp::detail {

inline constexpr std::size_t hadamard_min_bucket = 16;
inline constexpr std::size_t hadamard_max_bucket = 4096;

/// A rotated packet's wire id is the inner policy's with this bit set.
inline constexpr std::uint8_t hadamard_id_bit = 0x80;

/// What follows the header of a rotated packet: where its signs come from (16 bytes).
struct rotation_record {
  std::uint64_t seed;
  std::uint64_t call;
};
static_assert(sizeof(rotation_record) == 16, "rotation_record must be 16 bytes with no padding");

/// Bytes between a packet's header and its metadata for a policy of wire id `id`.
QSDP_HOST_DEVICE constexpr std::size_t rotation_bytes(std::uint8_t id) {
  return (id & hadamard_id_bit) ? sizeof(rotation_record) : 0;
}

/// The sign draws sit in the element domain at block indices from 2^63 on (the per-value draws of
/// stochastic rounding use blocks below 2^61), with stream 0: value i's sign is bit i % 128 of
/// block 2^63 + i / 128 (word (i % 128) / 32, bit i % 32), 1 meaning negative.
inline constexpr std::uint64_t sign_block_base = std::uint64_t{1} << 63;

QSDP_HOST_DEVICE constexpr philox_block sign_block(const rotation_record& r, std::uint64_t block) {
  return rng_key{r.seed, r.call, 0}.block(draw_domain::element, sign_block_base + block);
}

/// The 128 sign bits of one block as two 64-bit words (value i % 128 < 64 in the first).
struct sign_bits {
  std::uint64_t low, high;
  QSDP_HOST_DEVICE constexpr bool negative(unsigned bit) const {
    return ((bit < 64 ? low >> bit : high >> (bit - 64)) & 1u) != 0;
  }
};

QSDP_HOST_DEVICE constexpr sign_bits signs_of_block(const rotation_record& r, std::uint64_t block) {
  const philox_block b = sign_block(r, block);
  return {b.v[0] | (std::uint64_t{b.v[1]} << 32), b.v[2] | (std::uint64_t{b.v[3]} << 32)};
}

/// The largest power of two not above n (n >= 1): the size of the next piece.
QSDP_HOST_DEVICE constexpr std::size_t hadamard_piece(std::size_t n) {
  std::size_t p = 1;
  while (p <= n / 2) p *= 2;
  return p;
}

/// log2 of the size of the piece that holds value `offset` (< n) of a bucket of n values: the
/// pieces follow n's binary expansion, largest first, so offset lies in the piece of the highest
/// bit where it and n differ (n has it, offset not). The kernels, which rotate a bucket's values in
/// parallel, locate each value's piece with it; hadamard_forward walks the pieces in order.
QSDP_HOST_DEVICE constexpr unsigned hadamard_piece_log2(std::uint32_t offset, std::uint32_t n) {
#if defined(__CUDA_ARCH__)
  return 31u - static_cast<unsigned>(__clz(offset ^ n));
#else
  unsigned log = 0;
  for (std::uint32_t d = (offset ^ n) >> 1; d != 0; d >>= 1) ++log;
  return log;
#endif
}

/// 2^-log (log 0..12), exactly: the forward scaling of a piece of 2^log values.
QSDP_HOST_DEVICE constexpr float hadamard_inverse_size(unsigned log) {
  return bit_cast<float>((127u - log) << 23);
}

/// 2^log (log 0..12): the inverse's final scaling of a piece of 2^log values.
QSDP_HOST_DEVICE constexpr float hadamard_size(unsigned log) {
  return bit_cast<float>((127u + log) << 23);
}

/// a * b rounded once, never fused with a later addition: the rotation's scalings are exact
/// products (powers of two) except for subnormal results, where a fused multiply-add would round
/// differently from the host's separate multiply.
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float hadamard_product(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// Whether `n` is a bucket size hadamard<Inner> takes: a power of two from 16 to 4096.
QSDP_HOST_DEVICE constexpr bool hadamard_bucket_ok(std::size_t n) {
  return n >= hadamard_min_bucket && n <= hadamard_max_bucket && (n & (n - 1)) == 0;
}

/// The butterfly stages of one piece of p values, stride 1 first (forward and inverse alike).
QSDP_HOST_DEVICE inline void hadamard_butterflies(float* v, std::size_t p) {
  for (std::size_t h = 1; h < p; h *= 2) {
    for (std::size_t j0 = 0; j0 < p; j0 += 2 * h) {
      for (std::size_t j = j0; j < j0 + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
}

/// The signs of values first .. first + n - 1, one Philox block per 128 values.
class sign_reader {
 public:
  QSDP_HOST_DEVICE explicit sign_reader(const rotation_record& r) : record_(r) {}
  QSDP_HOST_DEVICE bool negative(std::uint64_t i) {
    if (i / 128 != block_) {
      block_ = i / 128;
      bits_ = signs_of_block(record_, block_);
    }
    return bits_.negative(static_cast<unsigned>(i % 128));
  }

 private:
  rotation_record record_;
  std::uint64_t block_ = ~std::uint64_t{0};
  sign_bits bits_{};
};

/// Forward rotation of one bucket of n values (any n from 1 to 4096) whose first value is value
/// `first` of the packet: v holds the values on entry and the rotated values on return.
QSDP_HOST_DEVICE inline void hadamard_forward(float* v, std::size_t n, std::uint64_t first,
                                              const rotation_record& r) {
  sign_reader signs(r);
  for (std::size_t start = 0; start < n;) {
    const std::size_t p = hadamard_piece(n - start);
    const float scale = 1.0f / static_cast<float>(p);  // exact: p is a power of two <= 4096
    for (std::size_t j = 0; j < p; ++j)
      v[start + j] *= signs.negative(first + start + j) ? -scale : scale;
    hadamard_butterflies(v + start, p);
    start += p;
  }
}

/// The largest finite float, with x's sign, where x is infinite; x otherwise.
QSDP_HOST_DEVICE constexpr float saturate_infinite(float x) {
  constexpr float largest = 3.40282346638528859812e+38f;
  return x > largest ? largest : x < -largest ? -largest : x;
}

/// An inverse rotation's result as decoders hand it on: quiet_nan() for any NaN, and, with
/// `saturate`, an infinite value clipped to +-FLT_MAX (hadamard_inverse says why).
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float hadamard_output(float x, bool saturate) {
  return x != x ? quiet_nan() : saturate ? saturate_infinite(x) : x;
}

/// Inverse rotation of one bucket (hadamard_forward's layout): v holds decoded rotated values on
/// entry and the values on return. The piece is scaled by 1/p first and by p last (both exact but
/// for subnormals), so that no partial sum overflows where the result does not: quantization error
/// may push a rotated value past what the exact transform would give, and unscaled partial sums of
/// values near FLT_MAX / p would then reach inf and turn into NaN (inf - inf). Saturate (a decode:
/// finite stays finite): a result beyond FLT_MAX becomes +-FLT_MAX; without it (the sum of several
/// packets' rotated values, as a reduction's sum may overflow) inf. A NaN result (from values
/// decoded to inf) is quiet_nan(): which NaN inf - inf gives, and whether a sign flip reaches it,
/// depends on the operand order, which the vector loops may change.
template <bool Saturate>
QSDP_HOST_DEVICE inline void hadamard_inverse(float* v, std::size_t n, std::uint64_t first,
                                              const rotation_record& r) {
  sign_reader signs(r);
  for (std::size_t start = 0; start < n;) {
    const std::size_t p = hadamard_piece(n - start);
    const float size = static_cast<float>(p), scale = 1.0f / size;  // exact: powers of two
    for (std::size_t j = 0; j < p; ++j) v[start + j] *= scale;
    hadamard_butterflies(v + start, p);
    for (std::size_t j = 0; j < p; ++j)
      v[start + j] = hadamard_output(
          v[start + j] * (signs.negative(first + start + j) ? -size : size), Saturate);
    start += p;
  }
}

}  // namespace qsdp::detail
