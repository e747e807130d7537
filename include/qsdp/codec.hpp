// SPDX-License-Identifier: Apache-2.0
//
// The host codec: compressed_size, encode, decode and decode_accumulate on host memory. One packet
// holds one buffer of `count` values; docs/reference/wire-format.md describes every byte of it. The
// device codec (device_codec.hpp) writes and reads the same packets on device memory. Declared and
// documented here; the definitions are in detail/host/codec.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "config.hpp"
#include "quantizers.hpp"
#include "rng_position.hpp"

namespace qsdp {

// Element types: float, double, __half, __nv_bfloat16. Pointers may sit at any byte offset. Errors
// (null pointers with count > 0, bucket_size 0, a header that does not match) throw qsdp::error
// naming the argument, its value and what was expected.

/// Bytes of one packet holding `count` values of T encoded with policy q (a multiple of 16).
template <class T, class Q>
std::size_t compressed_size(const Q& q, std::size_t count);

/// Encodes src[0, count) into `packet`, which must hold compressed_size<T>(q, count) bytes. A
/// randomized policy takes its next call index from q.calls, so every call draws fresh numbers.
template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet);

/// Encodes at an explicit position of the random stream (q.calls is left alone).
template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet, rng_position position);

/// Encodes with the packet buffer's size checked first.
template <class Q, class T>
void encode(const Q& q, std::span<const T> src, std::span<std::byte> packet);

/// Decodes a packet of `count` values into dst. The header is checked against q and count; a
/// mismatch throws qsdp::error naming both values. Buckets that held NaN or inf decode to NaN.
template <class Q, class T>
void decode(const Q& q, const std::byte* packet, std::size_t count, T* dst);

/// Decodes with the packet buffer's size checked too.
template <class Q, class T>
void decode(const Q& q, std::span<const std::byte> packet, std::span<T> dst);

/// acc[i] += decoded value i, for one packet of `count` values.
template <class Q>
void decode_accumulate(const Q& q, const std::byte* packet, std::size_t count, float* acc);

/// acc[i] += decoded value i, for a packet of acc.size() values, with the packet buffer's size
/// checked too: a truncated packet, or a header that claims more than the buffer holds, throws
/// qsdp::error.
template <class Q>
void decode_accumulate(const Q& q, std::span<const std::byte> packet, std::span<float> acc);

/// acc[i] += the sum over packets of decoded value i, for `packet_count` packets of `count` values
/// each, stored back to back (as all_to_all_bytes delivers them). Works through the output in
/// L1-sized chunks, reading each packet's chunk once and keeping the accumulator in cache; the sum
/// runs in packet order.
template <class Q>
void decode_accumulate(const Q& q, const std::byte* packets, std::size_t packet_count,
                       std::size_t count, float* acc);

/// A value of an element type as float: exact for float, __half and __nv_bfloat16; a double is
/// rounded to nearest. The conversion the codec itself applies before quantizing.
template <class T>
float to_float(T value);

/// A float as element type T, rounded to nearest even (NaN stays NaN, overflow becomes inf).
template <class T>
T from_float(float value);

/// Which host loops run, picked at run time: "avx512+avx2+fma" (x86-64 with AVX-512 F/BW/DQ/VL,
/// which serves the stochastic encode, and AVX2 and FMA for the rest), "avx2+fma" or "baseline".
/// All write bit-identical packets.
inline const char* host_codec_isa();

}  // namespace qsdp

#include "detail/host/codec.hpp"
