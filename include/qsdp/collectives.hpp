// SPDX-License-Identifier: Apache-2.0
//
// Compressed collectives over any qsdp::communicator: orchestration only. The codec quantizes, the
// communicator moves bytes.
//
//   all_gather:     shard --encode--> packet --all_gather_bytes--> world packets --decode--> full
//   reduce_scatter: full --encode each of world chunks--> world packets --all_to_all_bytes-->
//                   the world packets for my chunk --decode_accumulate (fp32)--> shard (sum or avg)
//   all_reduce:     reduce_scatter, then all_gather of the reduced shard (every rank bit-identical)
//
// Reduce-scatter goes through all-to-all rather than a ring, so each value is quantized exactly
// once and summed in fp32 on the receiver: the error does not grow with the number of ranks.
//
// Every call first exchanges a 64-byte descriptor (collective, policy, bits, bucket size, element
// type, count, op) so that a rank that called differently makes every rank throw the same
// qsdp::error, instead of a hang or garbage; then the packets, whose headers every receiver checks
// again.
//
// Declared and documented here; the host definitions are in detail/collectives/host.hpp, the device
// ones (translation units compiled by nvcc) in detail/cuda/device_collectives.cuh.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec.hpp"
#include "communicator.hpp"
#include "quantizers.hpp"

#if defined(__CUDACC__) && __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>

#include "device_communicator.hpp"
#endif

namespace qsdp {

/// How reduce_scatter and all_reduce combine the ranks' values.
enum class reduce_op : std::uint32_t { sum = 1, avg = 2 };

// ---- Host buffers, over a communicator (local_communicator, mpi_communicator)
// --------------------- Collective: every rank makes the same call (policy, bits, bucket size,
// element type, count, op), or every rank throws qsdp::error naming the first difference.

/// Compressed all-gather (like ncclAllGather): every rank contributes `count` values of `send`;
/// `recv` receives count * comm.size() values, rank r's at offset r * count.
template <communicator Comm, class Q, class T>
void all_gather(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count);

/// Compressed reduce-scatter (like ncclReduceScatter): `send` holds count * comm.size() values;
/// rank r receives in `recv` the sum (or average) over ranks of chunk r, `count` values. Each value
/// is quantized once and summed in fp32.
template <communicator Comm, class Q, class T>
void reduce_scatter(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                    reduce_op op);

/// Compressed all-reduce, in place on `count` values: reduce_scatter, then all_gather of the
/// reduced shards, so every rank ends with bit-identical values. The last shard is padded with
/// zeros when count is not a multiple of comm.size().
template <communicator Comm, class Q, class T>
void all_reduce(Comm& comm, const Q& q, T* data, std::size_t count, reduce_op op);

#if defined(__CUDACC__) && __has_include(<cuda_runtime.h>)
// ---- Device buffers, over a device_communicator (nccl_communicator, cuda_local_communicator)
// ------- The same pipeline, random streams and packets as on the host, ordered on `stream`;
// nothing waits on the GPU except once per new call signature, when the ranks' descriptors are
// compared on the host (docs/cuda.md). A bad packet from a peer decodes to NaN and is reported by
// the next call.

/// Compressed all-gather of device buffers, ordered on `stream` (like ncclAllGather).
template <device_communicator Comm, class Q, class T>
void all_gather(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                cudaStream_t stream);

/// Compressed reduce-scatter of device buffers, ordered on `stream` (like ncclReduceScatter): each
/// value quantized once, summed in fp32 by one fused kernel.
template <device_communicator Comm, class Q, class T>
void reduce_scatter(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count, reduce_op op,
                    cudaStream_t stream);

/// Compressed all-reduce in place on device buffers: reduce_scatter, then all_gather of the reduced
/// shards (the last padded with zeros), so every rank ends bit-identical.
template <device_communicator Comm, class Q, class T>
void all_reduce(Comm& comm, const Q& q, T* data, std::size_t count, reduce_op op,
                cudaStream_t stream);
#endif

}  // namespace qsdp

#include "detail/collectives/host.hpp"
#if defined(__CUDACC__) && __has_include(<cuda_runtime.h>)
#include "detail/cuda/device_collectives.cuh"
#endif
