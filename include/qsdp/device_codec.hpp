// SPDX-License-Identifier: Apache-2.0
//
// The device codec: encode, decode and decode_accumulate on device memory, ordered on a
// cudaStream_t, writing and reading the very packets of the host codec (codec.hpp), byte for byte.
// For translation units compiled by nvcc; qsdp/collectives.hpp includes it there. Declared and
// documented here; the definitions are in detail/cuda/device_codec.cuh.
#pragma once

#include "codec.hpp"

#if defined(__CUDACC__)
#include <cuda_runtime.h>

namespace qsdp {

// Element types: float, __half or __nv_bfloat16 in device memory of the stream's device. Calls are
// stream-ordered and never synchronise. A bad packet header is found by the decoding kernel itself:
// its values come out as NaN and the failure is reported by synchronize_and_check(stream), or by
// the next device codec call on that device.

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

}  // namespace qsdp

#include "detail/cuda/device_codec.cuh"
#endif
