// SPDX-License-Identifier: Apache-2.0
//
// The block-scaled layout of an MX policy's values, as a GEMM consumes them (torchao's MXTensor
// holds its qdata and scale so; cuBLAS's block-scaled GEMM reads the same elements, and the scales
// after the swizzle docs/reference/block-scaled-layout.md describes): the elements in value order
// (8-bit: one byte each; 6-bit: one byte each, in the low bits; 4-bit: two per byte, the first in
// the low nibble), and the E8M0 scale bytes in block order. A packet holds the scales as its
// metadata and the 8- and 4-bit elements as its codes, byte for byte; 6-bit codes are unpacked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "../../config.hpp"
#include "../../policy.hpp"
#include "format.hpp"

namespace qsdp::detail {

/// An MX policy (qsdp::mx<Element, R>): block scales of one E8M0 byte, no rotation, no tensor
/// scale. Only these have the block-scaled layout (NVFP4's tensor scale is per packet, and a
/// rotated policy's elements are of rotated values).
template <class Q>
concept block_scaled_layout_policy = requires {
  typename Q::element_format;
  requires std::is_same_v<typename Q::meta_type, std::uint8_t>;
};

/// Bytes of the elements of `count` values of `bits` bits in the block-scaled layout.
QSDP_HOST_DEVICE constexpr std::size_t layout_element_bytes(int bits, std::size_t count) {
  return bits == 6 ? count : (count * static_cast<std::size_t>(bits) + 7) / 8;
}

/// Code i of a 6-bit code stream (four codes in three bytes, LSB-first: docs/reference/
/// wire-format.md, "Codes") as a byte of its own.
QSDP_HOST_DEVICE inline std::byte six_bit_code(const std::byte* codes, std::uint64_t i) {
  const std::uint64_t bit = i * 6;
  const unsigned low = static_cast<unsigned>(codes[bit / 8]);
  const unsigned high = bit % 8 > 2 ? static_cast<unsigned>(codes[bit / 8 + 1]) : 0u;
  return static_cast<std::byte>(((low | high << 8) >> (bit % 8)) & 0x3Fu);
}

/// Checks that `count` values of q fill whole blocks that start on whole bytes, so that the layouts
/// of consecutive packets (the ranks of a gather, the pieces of a call) join into one.
template <class Q>
void check_block_scaled_count(const Q& q, std::size_t count, const char* where) {
  if (count % q.bucket_size != 0)
    throw qsdp::error(std::string(where) + ": count is " + std::to_string(count) +
                      "; the block-scaled layout needs whole blocks, a multiple of bucket_size " +
                      std::to_string(q.bucket_size));
  if (Q::bits == 4 && q.bucket_size % 2 != 0)
    throw qsdp::error(std::string(where) + ": bucket_size is " + std::to_string(q.bucket_size) +
                      "; " + Q::name + "'s layout packs two elements per byte: expected it even");
}

/// Copies the elements and scales of a packet of `count` values (layout l, header checked) to
/// `elements` and `scales`.
inline void copy_block_scaled(const std::byte* packet, const packet_layout& l, int bits,
                              std::size_t count, std::byte* elements, std::uint8_t* scales) {
  if (l.buckets) std::memcpy(scales, packet + l.meta_offset, l.buckets);
  const std::byte* codes = packet + l.codes_offset;
  if (bits != 6) {
    if (count) std::memcpy(elements, codes, layout_element_bytes(bits, count));
    return;
  }
  for (std::size_t i = 0; i < count; ++i) elements[i] = six_bit_code(codes, i);
}

/// The offset of scale (row, col) of a matrix of block scales with `cols` columns in cuBLAS's
/// tiled layout: tiles of 128 rows by 4 columns, 512 bytes each, in row-major tile order over the
/// matrix padded to whole tiles; inside a tile, row r and column c at (r % 32) * 16 + (r / 32) * 4
/// + c (docs/reference/block-scaled-layout.md).
QSDP_HOST_DEVICE constexpr std::size_t tiled_scale_offset(std::size_t row, std::size_t col,
                                                          std::size_t cols) {
  const std::size_t tile_columns = (cols + 3) / 4;
  const std::size_t tile = (row / 128) * tile_columns + col / 4;
  return tile * 512 + (row % 32) * 16 + (row % 128 / 32) * 4 + col % 4;
}

/// An output position in the block-scaled layout of Q's values: + v is v values further (v whole
/// blocks), as the collectives' pipeline advances its outputs.
template <class Q>
struct block_scaled_cursor {
  std::byte* elements;
  std::uint8_t* scales;
  std::size_t bucket_size;
  block_scaled_cursor operator+(std::size_t values) const {
    return {elements + layout_element_bytes(Q::bits, values), scales + values / bucket_size,
            bucket_size};
  }
};

}  // namespace qsdp::detail
