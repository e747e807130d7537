// SPDX-License-Identifier: Apache-2.0
//
// The codec: compressed_size, encode, decode and decode_accumulate, on host memory and (in
// translation units compiled by nvcc) on device memory with a trailing cudaStream_t. One packet
// holds one buffer of `count` values; docs/wire-format.md describes every byte of it. Declared and
// documented here; the host definitions are in detail/host/codec.hpp, the device ones in
// detail/cuda/device_codec.cuh.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "config.hpp"
#include "quantizers.hpp"

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace qsdp {

/// An explicit position in a randomized policy's stream: `call` replaces the policy's own call
/// counter and `stream` (< 2^31) separates independent encoders that share a seed (the collectives
/// pass the rank). Encoding the same data with the same seed and position gives the same bytes.
struct rng_position {
  std::uint64_t call = 0;
  std::uint32_t stream = 0;
};

/// A position in the random stream whose call index lives in device memory: `call` points at a
/// std::uint64_t on the stream's device (8-byte aligned). The encode reads it when its kernels run
/// and then adds one to it, both ordered on the stream, so an encode captured in a CUDA graph draws
/// fresh numbers at every replay: the replay that finds the counter at c writes the packet the host
/// encode writes at rng_position{.call = c, .stream = stream}.
struct device_rng_position {
  std::uint64_t* call = nullptr;
  std::uint32_t stream = 0;
};

// ---- Host buffers
// ---------------------------------------------------------------------------------- Element types:
// float, double, __half, __nv_bfloat16. Pointers may sit at any byte offset. Errors (null pointers
// with count > 0, bucket_size 0, a header that does not match) throw qsdp::error naming the
// argument, its value and what was expected.

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

#if defined(__CUDACC__)
// ---- Device buffers (translation units compiled by nvcc)
// ------------------------------------------ float, __half or __nv_bfloat16 in device memory of the
// stream's device. Calls are stream-ordered and never synchronise. A bad packet header is found by
// the decoding kernel itself: its values come out as NaN and the failure is reported by
// synchronize_and_check(stream), or by the next device codec call on that device.

/// Device encode at an explicit position of the random stream.
template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet, rng_position position,
            cudaStream_t stream);

/// Device encode at the call index held in device memory (see device_rng_position), which it
/// advances by one.
template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet,
            device_rng_position position, cudaStream_t stream);

/// Device encode; takes the policy's next call index, like the host encode. (A host counter: a
/// CUDA graph that captured this call repeats its draws at every replay; device_rng_position does
/// not.)
template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet, cudaStream_t stream);

/// Device decode of one packet of `count` values into dst. Buckets that held NaN or inf decode to
/// NaN; a packet whose header does not match q and count decodes to NaN and the mismatch is
/// reported by synchronize_and_check (or the next device codec call).
template <class Q, class T>
void decode(const Q& q, const std::byte* packet, std::size_t count, T* dst, cudaStream_t stream);

/// Device decode-accumulate: acc[i] += the sum over packets of value i, in packet order, for
/// `packet_count` packets of `count` values stored back to back (as all_to_all_bytes delivers
/// them).
template <class Q>
void decode_accumulate(const Q& q, const std::byte* packets, std::size_t packet_count,
                       std::size_t count, float* acc, cudaStream_t stream);

/// Waits for the stream, then reports any bad packet a device decode on its device found since the
/// last check (as a qsdp::error naming the field, as the host decoder would).
inline void synchronize_and_check(cudaStream_t stream);
#endif

}  // namespace qsdp

#include "detail/host/codec.hpp"
#if defined(__CUDACC__)
#include "detail/cuda/device_codec.cuh"
#endif
