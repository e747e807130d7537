// SPDX-License-Identifier: Apache-2.0
//
// Dense packing of B-bit codes (B = 1..8), LSB-first: code i occupies bits [i*B, (i+1)*B) of the
// code stream, and bit j of the stream is bit j%8 of byte j/8. Eight codes always fill exactly B
// bytes, so the packers work on groups of eight; the unpacker also accepts a start that is not a
// multiple of eight.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../../config.hpp"

#if defined(__SSE2__) && !defined(__CUDA_ARCH__)
#include <emmintrin.h>
#define QSDP_PACK_SSE2 1
#else
#define QSDP_PACK_SSE2 0
#endif

namespace qsdp::detail {

/// Packs `groups` groups of eight codes (each < 2^B) into groups * B bytes.
template <int B>
QSDP_FORCE_INLINE void pack_groups(const std::uint8_t* codes, std::size_t groups, std::byte* out) {
  if constexpr (B == 8) {
    std::memcpy(out, codes, groups * 8);
  } else if constexpr ((B == 4 || B == 2) && std::endian::native == std::endian::little) {
    // Eight codes as one word, byte k code k: shifts and masks gather the bits of neighbouring
    // bytes (each code < 2^B, so a shift brings no bits but the neighbour's), halving the bytes at
    // each step until the group's B bytes are left. With SSE2, the same steps on 32 codes at a
    // time, the halving done by saturating packs (every byte they keep is below 256).
    const std::size_t vector_groups = QSDP_PACK_SSE2 ? groups / 4 * 4 : 0;
#if QSDP_PACK_SSE2
    const __m128i low_bytes = _mm_set1_epi16(0x00FF);
    // 16-bit lane: its two bytes' bits (each below 2^bits) in its low byte
    const auto pairs = [&](__m128i c, int bits) {
      return _mm_and_si128(_mm_or_si128(c, _mm_srli_epi16(c, 8 - bits)), low_bytes);
    };
    for (std::size_t g = 0; g < vector_groups; g += 4) {
      const __m128i c0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 8 * g));
      const __m128i c1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 8 * g + 16));
      __m128i packed = _mm_packus_epi16(pairs(c0, B), pairs(c1, B));  // byte k: codes 2k, 2k + 1
      if constexpr (B == 4) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 4 * g), packed);
      } else {
        packed = _mm_packus_epi16(pairs(packed, 2 * B), _mm_setzero_si128());
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 2 * g), packed);
      }
    }
#endif
    for (std::size_t g = vector_groups; g < groups; ++g) {
      std::uint64_t w;
      std::memcpy(&w, codes + 8 * g, 8);
      w = (w | (w >> (8 - B))) & 0x00FF00FF00FF00FFull;  // byte 2k: codes 2k, 2k + 1
      w = (w | (w >> (16 - 2 * B))) & 0x0000FFFF0000FFFFull;
      w = w | (w >> (32 - 4 * B));
      if constexpr (B == 4) {
        const auto packed = static_cast<std::uint32_t>(w);
        std::memcpy(out + 4 * g, &packed, 4);
      } else {
        const auto packed = static_cast<std::uint16_t>((w & 0xFF) | ((w >> 24) & 0xFF00));
        std::memcpy(out + 2 * g, &packed, 2);
      }
    }
  } else if constexpr (B == 4) {
    auto* o = reinterpret_cast<std::uint8_t*>(out);
    for (std::size_t j = 0; j < groups * 4; ++j)
      o[j] = static_cast<std::uint8_t>(codes[2 * j] | (codes[2 * j + 1] << 4));
  } else if constexpr (B == 2) {
    auto* o = reinterpret_cast<std::uint8_t*>(out);
    for (std::size_t j = 0; j < groups * 2; ++j)
      o[j] = static_cast<std::uint8_t>(codes[4 * j] | (codes[4 * j + 1] << 2) |
                                       (codes[4 * j + 2] << 4) | (codes[4 * j + 3] << 6));
  } else {
    for (std::size_t g = 0; g < groups; ++g) {
      std::uint64_t word = 0;
      for (int k = 0; k < 8; ++k) word |= static_cast<std::uint64_t>(codes[8 * g + k]) << (k * B);
      std::memcpy(out + g * B, &word, B);
    }
  }
}

/// Reads one code at index `i` of the stream (touches only the bytes the code occupies).
template <int B>
QSDP_FORCE_INLINE std::uint8_t read_code(const std::byte* stream, std::size_t i) {
  const std::size_t bit = i * B;
  const auto* s = reinterpret_cast<const std::uint8_t*>(stream);
  unsigned value = s[bit / 8] >> (bit % 8);
  if (bit % 8 + B > 8) value |= static_cast<unsigned>(s[bit / 8 + 1]) << (8 - bit % 8);
  return static_cast<std::uint8_t>(value & ((1u << B) - 1u));
}

/// Unpacks codes [start, start + n) of the stream into out[0, n). Reads only bytes that hold them.
template <int B>
QSDP_FORCE_INLINE void unpack_codes(const std::byte* stream, std::size_t start, std::size_t n,
                                    std::uint8_t* out) {
  if constexpr (B == 8) {
    std::memcpy(out, stream + start, n);
  } else {
    std::size_t j = 0;
    for (; j < n && (start + j) % 8 != 0; ++j) out[j] = read_code<B>(stream, start + j);
    const std::size_t groups = (n - j) / 8;
    const std::byte* in = stream + (start + j) / 8 * B;
    std::uint8_t* o = out + j;
    if constexpr (B == 4 && std::endian::native == std::endian::little) {
      // pack_groups' steps backwards: the group's four bytes spread to one code per byte (with
      // SSE2: low and high halves of 16 bytes, interleaved).
      const std::size_t vector_groups = QSDP_PACK_SSE2 ? groups / 4 * 4 : 0;
#if QSDP_PACK_SSE2
      const __m128i nibble = _mm_set1_epi8(0x0F);
      for (std::size_t g = 0; g < vector_groups; g += 4) {
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 4 * g));
        const __m128i lo = _mm_and_si128(packed, nibble);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 8 * g), _mm_unpacklo_epi8(lo, hi));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 8 * g + 16), _mm_unpackhi_epi8(lo, hi));
      }
#endif
      for (std::size_t g = vector_groups; g < groups; ++g) {
        std::uint32_t packed;
        std::memcpy(&packed, in + 4 * g, 4);
        std::uint64_t w = packed;
        w = (w | (w << 16)) & 0x0000FFFF0000FFFFull;
        w = (w | (w << 8)) & 0x00FF00FF00FF00FFull;
        w = (w | (w << 4)) & 0x0F0F0F0F0F0F0F0Full;
        std::memcpy(o + 8 * g, &w, 8);
      }
    } else if constexpr (B == 4) {
      const auto* s = reinterpret_cast<const std::uint8_t*>(in);
      for (std::size_t k = 0; k < groups * 4; ++k) {
        o[2 * k] = s[k] & 0xF;
        o[2 * k + 1] = s[k] >> 4;
      }
    } else if constexpr (B == 2) {
      const auto* s = reinterpret_cast<const std::uint8_t*>(in);
      for (std::size_t k = 0; k < groups * 2; ++k) {
        o[4 * k] = s[k] & 3;
        o[4 * k + 1] = (s[k] >> 2) & 3;
        o[4 * k + 2] = (s[k] >> 4) & 3;
        o[4 * k + 3] = s[k] >> 6;
      }
    } else {
      for (std::size_t g = 0; g < groups; ++g) {
        std::uint64_t word = 0;
        std::memcpy(&word, in + g * B, B);
        for (int k = 0; k < 8; ++k)
          o[8 * g + k] = static_cast<std::uint8_t>((word >> (k * B)) & ((1u << B) - 1u));
      }
    }
    for (j += groups * 8; j < n; ++j) out[j] = read_code<B>(stream, start + j);
  }
}

/// Collects codes in a staging buffer aligned to groups of eight in the stream and packs full
/// buffers, so codes of consecutive buckets share bytes without read-modify-write. For B = 8 codes
/// go straight to the packet.
template <int B, std::size_t Capacity = 2048>
class code_writer {
  static_assert(Capacity % 8 == 0);

 public:
  explicit code_writer(std::byte* stream) : stream_(stream) {}

  /// Room for up to space() codes, to be filled and then commit()ed.
  std::uint8_t* slots() {
    if constexpr (B == 8)
      return reinterpret_cast<std::uint8_t*>(stream_) + written_;
    else
      return staging_ + fill_;
  }
  std::size_t space() const {
    if constexpr (B == 8)
      return Capacity;
    else
      return Capacity - fill_;
  }
  void commit(std::size_t n) {
    if constexpr (B == 8) {
      written_ += n;
    } else {
      fill_ += n;
      if (fill_ == Capacity) flush_full();
    }
  }
  /// Packs what is left; the last partial group is padded with zero bits. Returns bytes written.
  std::size_t finish() {
    if constexpr (B == 8) {
      return written_;
    } else {
      const std::size_t groups = (fill_ + 7) / 8;
      for (std::size_t j = fill_; j < groups * 8; ++j) staging_[j] = 0;
      std::uint8_t tail[8 * 8];  // the last group, packed, then cut to the bytes the codes need
      const std::size_t full = groups ? groups - 1 : 0;
      pack_groups<B>(staging_, full, stream_ + written_);
      written_ += full * B;
      if (groups) {
        pack_groups<B>(staging_ + full * 8, 1, reinterpret_cast<std::byte*>(tail));
        const std::size_t bytes = ((fill_ - full * 8) * B + 7) / 8;
        std::memcpy(stream_ + written_, tail, bytes);
        written_ += bytes;
      }
      fill_ = 0;
      return written_;
    }
  }

 private:
  void flush_full() {
    pack_groups<B>(staging_, Capacity / 8, stream_ + written_);
    written_ += Capacity / 8 * B;
    fill_ = 0;
  }

  std::byte* stream_;
  std::size_t written_ = 0;  // bytes (B < 8) or codes (B == 8) already in the stream
  std::size_t fill_ = 0;
  alignas(64) std::uint8_t staging_[B == 8 ? 8 : Capacity];
};

}  // namespace qsdp::detail

#undef QSDP_PACK_SSE2
