// SPDX-License-Identifier: Apache-2.0
/// @file
/// The host codec: compressed_size, encode, decode and decode_accumulate on host memory. One packet
/// holds one buffer of `count` values; docs/reference/wire-format.md describes every byte of it.
/// The device codec (device_codec.hpp) writes and reads the same packets on device memory. Declared
/// and documented here; the definitions are in detail/host/codec.hpp.
///
/// Element types: float, double, __half, __nv_bfloat16. Pointers may sit at any byte offset. Errors
/// throw qsdp::error naming the argument, its value and what was expected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "config.hpp"
#include "quantizers.hpp"
#include "rng_position.hpp"

namespace qsdp {

/// Bytes of one packet holding `count` values of T encoded with policy q (a multiple of 16).
/// @tparam T the element type
/// @tparam Q the policy (a qsdp::codec_policy)
/// @param q the policy
/// @param count values in the packet
/// @return the packet's size in bytes
/// @throws qsdp::error when q's bucket_size is 0, above 2^56, or (hadamard<>) not a power of two
///         from 16 to 4096, or count is above 2^56
template <class T, class Q>
std::size_t compressed_size(const Q& q, std::size_t count);

/// Encodes src[0, count) into `packet`, which must hold compressed_size<T>(q, count) bytes. A
/// randomized policy takes its next call index from q.calls, so every call draws fresh numbers.
/// @param q the policy
/// @param src count values
/// @param count values to encode
/// @param packet compressed_size<T>(q, count) bytes
/// @throws qsdp::error when packet is null, src is null with count > 0, q's bucket_size is 0,
///         above 2^56 or (hadamard<>) not a power of two from 16 to 4096, or count is above
///         2^56
template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet);

/// Encodes at an explicit position of the random stream (q.calls is left alone).
/// @param q the policy
/// @param src count values
/// @param count values to encode
/// @param packet compressed_size<T>(q, count) bytes
/// @param position the call index and stream the random numbers are drawn at
/// @throws qsdp::error when position.stream is 2^31 or more, or as the encode without position
template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet, rng_position position);

/// Encodes with the packet buffer's size checked first.
/// @param q the policy
/// @param src the values to encode
/// @param packet the packet buffer, at least compressed_size<T>(q, src.size()) bytes
/// @throws qsdp::error when packet is smaller than compressed_size, or as the pointer encode
template <class Q, class T>
void encode(const Q& q, std::span<const T> src, std::span<std::byte> packet);

/// Decodes a packet of `count` values into dst. The header is checked against q and count; a
/// mismatch throws qsdp::error naming both values. Buckets that held NaN or inf decode to NaN.
/// On Intel CPUs a float dst of 16 MiB or more is written with non-temporal stores (fenced before
/// the call returns), so the values are left in memory rather than in the caches.
/// @param q the policy the packet was encoded with
/// @param packet the packet
/// @param count values in the packet
/// @param dst count values
/// @throws qsdp::error when packet is null, dst is null with count > 0, q's bucket_size or count
///         is out of range (as encode), or the header does not match (magic, format version,
///         policy, element type T, bits, bucket_size, metadata size, count, reserved field)
template <class Q, class T>
void decode(const Q& q, const std::byte* packet, std::size_t count, T* dst);

/// Decodes with the packet buffer's size checked too.
/// @param q the policy the packet was encoded with
/// @param packet the packet buffer
/// @param dst the values, dst.size() of them
/// @throws qsdp::error when packet is shorter than its header or than a packet of dst.size()
///         values, or as the pointer decode
template <class Q, class T>
void decode(const Q& q, std::span<const std::byte> packet, std::span<T> dst);

/// acc[i] += decoded value i, for one packet of `count` values.
/// @param q the policy the packet was encoded with
/// @param packet the packet (of any element type)
/// @param count values in the packet
/// @param acc count accumulators
/// @throws qsdp::error when acc is null with count > 0, the packet holds half-precision values
///         and this build has no CUDA half headers, or as decode (the header is checked
///         against q and count, not the element type)
template <class Q>
void decode_accumulate(const Q& q, const std::byte* packet, std::size_t count, float* acc);

/// acc[i] += decoded value i, for a packet of acc.size() values, with the packet buffer's size
/// checked too: a truncated packet, or a header that claims more than the buffer holds, throws
/// qsdp::error.
/// @param q the policy the packet was encoded with
/// @param packet the packet buffer
/// @param acc the accumulators, acc.size() of them
/// @throws qsdp::error when packet is shorter than its header or than a packet of acc.size()
///         values, or as the pointer decode_accumulate
template <class Q>
void decode_accumulate(const Q& q, std::span<const std::byte> packet, std::span<float> acc);

/// acc[i] += the sum over packets of decoded value i, for `packet_count` packets of `count` values
/// each, stored back to back (as all_to_all_bytes delivers them). Works through the output in
/// L1-sized chunks, reading each packet's chunk once and keeping the accumulator in cache; the sum
/// runs in packet order.
/// @param q the policy the packets were encoded with
/// @param packets packet_count packets, each compressed_size(q, count) bytes
/// @param packet_count the number of packets
/// @param count values in each packet
/// @param acc count accumulators
/// @throws qsdp::error when packet_count > 0 and packets is null, acc is null with count > 0,
///         or as decode for any packet's header (all of the first packet's element type)
template <class Q>
void decode_accumulate(const Q& q, const std::byte* packets, std::size_t packet_count,
                       std::size_t count, float* acc);

/// Where the block-scaled layout of an MX policy's values goes: the elements and E8M0 scales as a
/// GEMM on MX operands reads them (torchao's MXTensor qdata and scale; docs/reference/
/// block-scaled-layout.md), so that gathered weights reach such a GEMM without a decode.
struct block_scaled_buffers {
  /// block_scaled_element_bytes(q, count) bytes: 8-bit elements one byte each, 6-bit ones one
  /// byte each (in the low bits), 4-bit ones two per byte (the first in the low nibble)
  std::byte* elements = nullptr;
  /// count / q.bucket_size bytes: each block's E8M0 scale, 2^(byte - 127); 0xFF (NaN) for a block
  /// that held NaN or inf (its elements are 0)
  std::uint8_t* scales = nullptr;
};

/// Bytes of block_scaled_buffers::elements for `count` values of MX policy q.
/// @param q the policy (qsdp::mx<Element, R>: mxfp8, mxfp6, mxfp4)
/// @param count values
/// @return the bytes
template <class Q>
std::size_t block_scaled_element_bytes(const Q& q, std::size_t count);

/// Writes the elements and scales of a packet of an MX policy to `out` in the block-scaled layout
/// (the packet's scale and 8- or 4-bit element bytes as they are; 6-bit elements unpacked), without
/// decoding a value. The header is checked as decode checks it, for any element type.
/// @param q the policy the packet was encoded with (qsdp::mx<Element, R>; not rotated)
/// @param packet the packet
/// @param count values in the packet: whole blocks (a multiple of q.bucket_size, which mxfp4 needs
///        even), so that the layouts of consecutive packets join
/// @param out the elements and the scales
/// @throws qsdp::error when packet or out's pointers are null with count > 0, count is not a
///         multiple of q.bucket_size (or mxfp4's bucket_size is odd), or as decode for the header
template <class Q>
void unpack_block_scaled(const Q& q, const std::byte* packet, std::size_t count,
                         block_scaled_buffers out);

/// Bytes of a rows x cols matrix of block scales in cuBLAS's tiled layout (tile_block_scales):
/// the matrix padded to multiples of 128 rows and 4 columns.
/// @param rows rows of the matrix (a weight's rows)
/// @param cols scales per row (a weight's columns / the block size)
/// @return the bytes
inline std::size_t tiled_block_scales_size(std::size_t rows, std::size_t cols);

/// Rearranges a row-major rows x cols matrix of block scales (block_scaled_buffers::scales of a
/// rows x (cols * block) weight) into the tiled layout cuBLAS's block-scaled GEMM reads for its
/// scale operands (CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0, and VEC16_UE4M3 for 16-value
/// blocks): tiles of 128 x 4 scales, 512 bytes each, the padding zero
/// (docs/reference/block-scaled-layout.md). torchao's MXTensor calls these swizzled scales.
/// @param scales rows * cols bytes
/// @param rows rows of the matrix
/// @param cols scales per row
/// @param tiled tiled_block_scales_size(rows, cols) bytes, not overlapping scales
/// @throws qsdp::error when a pointer is null with rows * cols > 0
inline void tile_block_scales(const std::uint8_t* scales, std::size_t rows, std::size_t cols,
                              std::uint8_t* tiled);

/// A value of an element type as float: exact for float, __half and __nv_bfloat16; a double is
/// rounded to nearest. The conversion the codec itself applies before quantizing.
/// @tparam T the element type
/// @param value the value
/// @return the value as float
template <class T>
float to_float(T value);

/// A float as element type T, rounded to nearest even (NaN stays NaN, overflow becomes inf).
/// @tparam T the element type
/// @param value the value
/// @return the value as T
template <class T>
T from_float(float value);

/// Which host loops run, picked at run time: "avx512+avx2+fma" (x86-64 with AVX-512 F/BW/DQ/VL,
/// which serves the stochastic encode, and AVX2 and FMA for the rest), "avx2+fma" or "baseline".
/// All write bit-identical packets.
/// @return the name of the instruction sets in use
inline const char* host_codec_isa();

}  // namespace qsdp

#include "detail/host/codec.hpp"
