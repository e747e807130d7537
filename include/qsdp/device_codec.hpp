// SPDX-License-Identifier: Apache-2.0
/// @file
/// The device codec: encode, decode and decode_accumulate on device memory, ordered on a
/// cudaStream_t, writing and reading the very packets of the host codec (codec.hpp), byte for byte.
/// For translation units compiled by nvcc; qsdp/collectives.hpp includes it there. Declared and
/// documented here; the definitions are in detail/cuda/device_codec.cuh.
///
/// Element types: float, __half or __nv_bfloat16 in device memory of the stream's device. Calls
/// are stream-ordered and never synchronise. A bad packet header is found by the decoding kernel
/// itself: its values come out as NaN and the failure is reported by synchronize_and_check(stream),
/// or by the next device codec call on that device.
#pragma once

#include "codec.hpp"

#if defined(__CUDACC__)
#include <cuda_runtime.h>

namespace qsdp {

/// Device encode at an explicit position of the random stream.
/// @param q the policy (a qsdp::codec_policy)
/// @param src count values in device memory
/// @param count values to encode
/// @param packet compressed_size<T>(q, count) bytes of device memory
/// @param position the call index and stream the random numbers are drawn at
/// @param stream the stream the kernels are ordered on
/// @throws qsdp::error when packet is null, src is null with count > 0, position.stream is 2^31 or
///         more, a buffer is not device memory of the stream's device, q's bucket_size or count is
///         out of range (as the host codec), or a CUDA call fails
template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet, rng_position position,
            cudaStream_t stream);

/// Device encode at the call index held in device memory (see device_rng_position), which it
/// advances by one.
/// @param q the policy (a qsdp::codec_policy)
/// @param src count values in device memory
/// @param count values to encode
/// @param packet compressed_size<T>(q, count) bytes of device memory
/// @param position the call index in device memory and the stream of the random numbers
/// @param stream the stream the kernels are ordered on
/// @throws qsdp::error when packet is null, src is null with count > 0, position.stream is 2^31 or
///         more, position.call is null, not 8-byte aligned or not device memory, a buffer is not
///         device memory of the stream's device, q's bucket_size or count is out of range (as the
///         host codec), or a CUDA call fails
template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet,
            device_rng_position position, cudaStream_t stream);

/// Device encode; takes the policy's next call index, like the host encode. (A host counter: a
/// CUDA graph that captured this call repeats its draws at every replay; device_rng_position does
/// not.)
/// @param q the policy (a qsdp::codec_policy)
/// @param src count values in device memory
/// @param count values to encode
/// @param packet compressed_size<T>(q, count) bytes of device memory
/// @param stream the stream the kernels are ordered on
/// @throws qsdp::error when packet is null, src is null with count > 0, a buffer is not device
///         memory of the stream's device, q's bucket_size or count is out of range (as the host
///         codec), or a CUDA call fails
template <class Q, class T>
void encode(const Q& q, const T* src, std::size_t count, std::byte* packet, cudaStream_t stream);

/// Device decode of one packet of `count` values into dst. Buckets that held NaN or inf decode to
/// NaN; a packet whose header does not match q and count decodes to NaN and the mismatch is
/// reported by synchronize_and_check (or the next device codec call).
/// @param q the policy the packet was encoded with
/// @param packet the packet in device memory
/// @param count values in the packet
/// @param dst count values in device memory
/// @param stream the stream the kernel is ordered on
/// @throws qsdp::error when packet is null, dst is null with count > 0, a buffer is not device
///         memory of the stream's device, q's bucket_size or count is out of range (as the host
///         codec), or a CUDA call fails
template <class Q, class T>
void decode(const Q& q, const std::byte* packet, std::size_t count, T* dst, cudaStream_t stream);

/// Device decode-accumulate: acc[i] += the sum over packets of value i, in packet order, for
/// `packet_count` packets of `count` values stored back to back (as all_to_all_bytes delivers
/// them).
/// @param q the policy the packets were encoded with
/// @param packets packet_count packets in device memory, each compressed_size(q, count) bytes
/// @param packet_count the number of packets, < 2^32
/// @param count values in each packet
/// @param acc count accumulators in device memory
/// @param stream the stream the kernel is ordered on
/// @throws qsdp::error when packet_count is 2^32 or more, packets is null, acc is null with count >
///         0, the packets are identity packets and the stream is under CUDA graph capture, a buffer
///         is not device memory of the stream's device, q's bucket_size or count is out of range
///         (as the host codec), or a CUDA call fails
template <class Q>
void decode_accumulate(const Q& q, const std::byte* packets, std::size_t packet_count,
                       std::size_t count, float* acc, cudaStream_t stream);

/// The device form of the host's unpack_block_scaled: a packet of an MX policy's elements and
/// scales written in the block-scaled layout, on the stream. A bad header sets every scale to
/// E8M0's NaN (0xFF) and every element to 0, and is reported as a decode's (synchronize_and_check).
/// @param q the policy the packet was encoded with (qsdp::mx<Element, R>; not rotated)
/// @param packet the packet in device memory
/// @param count values in the packet: whole blocks (a multiple of q.bucket_size)
/// @param out the elements and scales in device memory
/// @param stream the stream the kernel is ordered on
/// @throws qsdp::error when count is not a multiple of q.bucket_size (or mxfp4's is odd), a
///         pointer is null (out's with count > 0), a buffer is not device memory of the stream's
///         device, or a CUDA call fails
template <class Q>
void unpack_block_scaled(const Q& q, const std::byte* packet, std::size_t count,
                         block_scaled_buffers out, cudaStream_t stream);

/// Waits for the stream, then reports any bad packet a device decode on its device found since the
/// last check (as a qsdp::error naming the field, as the host decoder would).
/// @param stream the stream to wait for
/// @throws qsdp::error for a bad packet a device decode found, or when a CUDA call fails
inline void synchronize_and_check(cudaStream_t stream);

}  // namespace qsdp

#include "detail/cuda/device_codec.cuh"
#endif
