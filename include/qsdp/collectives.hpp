// SPDX-License-Identifier: Apache-2.0
/// @file
/// Compressed collectives over any qsdp::communicator: orchestration only. The codec quantizes, the
/// communicator moves bytes.
///
/// ```
///  all_gather:     shard --encode--> packet --all_gather_bytes--> world packets --decode--> full
///  reduce_scatter: full --encode each of world chunks--> world packets --all_to_all_bytes-->
///                  the world packets for my chunk --decode_accumulate (fp32)--> shard (sum or avg)
///  all_reduce:     reduce_scatter, then all_gather of the reduced shard (every rank bit-identical)
/// ```
///
/// Reduce-scatter goes through all-to-all rather than a ring, so each value is quantized exactly
/// once and summed in fp32 on the receiver: the error does not grow with the number of ranks.
///
/// Every call carries a 64-byte descriptor (collective, policy, bits, bucket size, element type,
/// count, op, size gate, pieces) in front of its packets, or of its values when the size gate
/// (call_options) sends it uncompressed, and every receiver compares the world's before it decodes,
/// so that a rank that called differently makes every rank throw the same qsdp::error instead of a
/// hang or garbage; the packets' headers are checked again. The first call of each signature on a
/// communicator exchanges the descriptors in a round trip of their own first, which also catches
/// calls whose exchanges would differ in size (docs/reference/wire-format.md).
///
/// Declared and documented here; the host definitions are in detail/collectives/host.hpp, the
/// device ones (translation units compiled by nvcc) in detail/cuda/device_collectives.cuh.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "call_options.hpp"
#include "codec.hpp"
#include "collective_types.hpp"
#include "communicator.hpp"
#include "quantizers.hpp"
#include "work.hpp"

#if defined(__CUDACC__) && __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>

#include "device_codec.hpp"
#include "device_communicator.hpp"
#endif

namespace qsdp {

// ---- Host buffers, over a communicator (local_communicator, mpi_communicator) -------------------
// Collective: every rank makes the same call (policy, bits, bucket size, element type, count, op),
// or every rank throws qsdp::error naming the first difference.

/// Compressed all-gather (like ncclAllGather): every rank contributes `count` values of `send`;
/// `recv` receives count * comm.size() values, rank r's at offset r * count. In place as NCCL's:
/// `send` may be `recv + comm.rank() * count` (the result is the out-of-place call's, byte for
/// byte); other overlaps of send and recv are not allowed. Inside a group (group_start) the call is
/// checked and recorded, and runs at group_end.
/// @param comm this rank's communicator
/// @param q the policy (a qsdp::codec_policy), the same on every rank
/// @param send this rank's count values
/// @param recv count * comm.size() values
/// @param count values per rank, the same on every rank
/// @param options the size gate and the pipeline, the same on every rank
/// @throws qsdp::error when send or recv is null with count > 0, call_options::max_pieces is
///         outside 1..max_pieces_limit, inside a group when its size gate is not the group's, the
///         world is too large for the random streams (world^2 must stay below 2^31), or q's
///         bucket_size or count is out of range (as encode); on every rank when the ranks' calls
///         differ (policy, bits, bucket size, element type, count, size gate, pieces); when a
///         peer's packet fails the header checks (naming the rank); and what the communicator
///         throws (a peer that failed, a timeout)
template <communicator Comm, class Q, class T>
void all_gather(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                call_options options = {});

/// all_gather that hands its result over still encoded, in the block-scaled layout a GEMM on MX
/// operands reads (qsdp::block_scaled_buffers; torchao's MXTensor): rank r's elements at
/// recv.elements + block_scaled_element_bytes(q, r * count), its scales at recv.scales +
/// r * count / q.bucket_size. No value is decoded. Its exchanges and agreement are all_gather's,
/// call for call, so a rank may take the decoded form where another takes this one; it always
/// encodes (a size gate that would send the call uncompressed throws), and is not grouped.
/// @param comm this rank's communicator (host memory)
/// @param q the MX policy (mxfp8, mxfp6, mxfp4; not rotated), the same on every rank
/// @param send this rank's count values
/// @param recv the world's elements and scales, comm.size() times count values' worth
/// @param count values per rank, whole blocks (a multiple of q.bucket_size), the same on every rank
/// @param options the pipeline (pieces); min_compressed_bytes must not gate the call
/// @throws qsdp::error as all_gather, and when count is not a multiple of q.bucket_size, or
///         options would send the call uncompressed
template <communicator Comm, class Q, class T>
void all_gather_encoded(Comm& comm, const Q& q, const T* send, block_scaled_buffers recv,
                        std::size_t count, call_options options = {});

/// Compressed reduce-scatter (like ncclReduceScatter): `send` holds count * comm.size() values;
/// rank r receives in `recv` the sum (or average) over ranks of chunk r, `count` values. Each value
/// is quantized once and summed in fp32. In place as NCCL's: `recv` may be
/// `send + comm.rank() * count` (the out-of-place call's bytes); other overlaps are not allowed.
/// Inside a group (group_start) the call is checked and recorded, and runs at group_end.
/// @param comm this rank's communicator
/// @param q the policy (a qsdp::codec_policy), the same on every rank
/// @param send count * comm.size() values, chunk r for rank r
/// @param recv count values: this rank's chunk, reduced
/// @param count values per chunk, the same on every rank
/// @param op sum or avg
/// @param options the size gate and the pipeline, the same on every rank
/// @throws qsdp::error when send or recv is null with count > 0, op is not sum or avg,
///         call_options::max_pieces is outside 1..max_pieces_limit, inside a group when its size
///         gate is not the group's, the world is too large for the random streams (world^2 must
///         stay below 2^31), or q's bucket_size or count is out of range (as encode); on every rank
///         when the ranks' calls differ (policy, bits, bucket size, element type, count, op, size
///         gate, pieces); when a peer's packet fails the header checks (naming the rank); and what
///         the communicator throws (a peer that failed, a timeout)
template <communicator Comm, class Q, class T>
void reduce_scatter(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count, reduce_op op,
                    call_options options = {});

/// Compressed all-reduce, in place on `count` values: reduce_scatter, then all_gather of the
/// reduced shards, so every rank ends with bit-identical values. The last shard is padded with
/// zeros when count is not a multiple of comm.size().
/// @param comm this rank's communicator
/// @param q the policy (a qsdp::codec_policy), the same on every rank
/// @param data count values, replaced by the reduced values
/// @param count values, the same on every rank
/// @param op sum or avg
/// @param options the size gate and the pipeline, the same on every rank
/// @throws qsdp::error when a group is open on comm (group_start), data is null with count > 0, op
///         is not sum or avg, call_options::max_pieces is outside 1..max_pieces_limit, the world is
///         too large for the random streams (world^2 must stay below 2^31), or q's bucket_size or
///         count is out of range (as encode); on every rank when the ranks' calls differ (policy,
///         bits, bucket size, element type, count, op, size gate, pieces); when a peer's packet
///         fails the header checks (naming the rank); and what the communicator throws (a peer that
///         failed, a timeout)
template <communicator Comm, class Q, class T>
void all_reduce(Comm& comm, const Q& q, T* data, std::size_t count, reduce_op op,
                call_options options = {});

/// Opens a group on `comm`, as ncclGroupStart does: until the matching group_end, qsdp::all_gather
/// and qsdp::reduce_scatter on `comm` check their arguments, draw their call indices and return
/// without moving anything; group_end then runs them all in one exchange (the packets of every
/// call laid out in one message per peer, after the group's descriptor; the first run of a group
/// agrees on it in a round trip of its own), instead of an exchange per call:
///
///     qsdp::group_start(comm);
///     for (auto& layer : layers)
///       qsdp::all_gather(comm, w8, layer.shard, layer.full, layer.count);
///     qsdp::reduce_scatter(comm, g8, grads, grad_shard, grad_count, qsdp::reduce_op::avg);
///     qsdp::group_end(comm);   // every layer.full and grad_shard are ready here
///
/// A group may mix all_gathers and reduce_scatters of any counts, element types and policies. As
/// in NCCL, the buffers of a recorded call belong to it until group_end returns (nothing is read
/// before group_end, nothing written before it either), groups nest (only the outermost group_end
/// runs), and in-place calls keep NCCL's conventions. all_reduce and delta_gather are not grouped:
/// made while a group is open on the communicator they throw qsdp::error (a qsdp::two_level pair
/// is not a communicator and takes no group). A call refused when it is recorded (a bad argument,
/// another gate) is not part of the group, and the group stays open. Device communicators have
/// their own overloads (below, with the device collectives).
///
/// The size gate (call_options::min_compressed_bytes) applies to the group's total: every call of
/// a group passes the same gate, and when the calls' values add up to fewer bytes per peer than
/// it, every call moves them uncompressed (as the gate sends a single call). Results: a group gives
/// every call the bytes of the same call made on its own, at the same place in the sequence of
/// calls, bit for bit, whenever the gate decides alike for both: always when the gate is 0, and
/// when the call alone and the group are both at least the gate, or the group as a whole is below
/// it. A call below the gate in a group above it is compressed (its own random numbers, its
/// policy's error), where on its own it would have moved uncompressed. Later calls draw the same
/// random numbers either way.
///
/// On a communicator that overlaps exchanges (qsdp::overlapping_communicator: MPI's, the
/// in-process one) the group's calls are cut into segments of consecutive calls of at least 256 KiB
/// of packets, each its own exchange, started once it is encoded, so that encoding, the wire and
/// decoding overlap as in a single call's pipeline; elsewhere the group is one exchange.
/// call_options::max_pieces cuts each call's packets as on its own, so that the bytes match.
/// @param comm this rank's communicator
/// @throws qsdp::error when groups are nested beyond INT_MAX
template <communicator Comm>
void group_start(Comm& comm);

/// Closes the group group_start opened; the outermost one runs the group's calls (group_start) and
/// returns when every call's result is in its buffer. Collective: every rank must record the same
/// calls in the same order.
/// @param comm this rank's communicator
/// @throws qsdp::error when no group is open; on every rank when the ranks' groups differ (the
///         number of calls, or the first call that differs and how, as a single call names it),
///         also when one rank made another collective call instead; when a peer's packet fails
///         the header checks; and what the communicator throws (a peer that failed, a timeout).
///         The group is closed either way.
template <communicator Comm>
void group_end(Comm& comm);

/// Non-blocking collectives on host communicators, as torch.distributed's `async_op=True` or MPI's
/// MPI_Iallgather: the call checks its arguments (a bad one throws here, as the blocking call's
/// would), starts the collective and returns a qsdp::work; wait() on it returns when the result is
/// in the buffers, or rethrows the collective's error (on every rank where the blocking call throws
/// on every rank):
///
///     auto grads = qsdp::reduce_scatter_async(comm, g8, grad, shard, n, qsdp::reduce_op::avg);
///     backward_of_the_next_layer();          // runs while the gradients are on the wire
///     grads.wait();                          // shard is ready; grad may be written again
///
/// The started collectives of a communicator run on its progress thread (one per communicator,
/// started with the first), one after another in the order they were started, and give the bytes
/// of the same blocking calls in that order. Until its work is done, a collective owns the buffers
/// it names: do not write its inputs, read its outputs or free either. A blocking call on the
/// communicator (a collective, group_end, delta_gather) first waits for the started ones, so
/// blocking and started calls may be mixed in any order that every rank keeps. Collectives cannot
/// be started inside a group: record them with the blocking calls and start the group with
/// group_end_async. On an mpi_communicator the progress thread calls MPI, which needs MPI
/// initialised with MPI_Init_thread at MPI_THREAD_SERIALIZED or above (refused otherwise). Device
/// collectives need no such form: they are ordered on the caller's stream and return at once.
/// @param comm this rank's communicator (a host one: local_communicator, mpi_communicator)
/// @param q the policy, as all_gather's
/// @param send this rank's count values, read until the work is done
/// @param recv count * comm.size() values, written until the work is done
/// @param count values per rank
/// @param options the size gate and the pipeline, as all_gather's
/// @return the started collective; an error that no wait() rethrew before the work was destroyed
///         is rethrown by the communicator's next call
/// @throws what the blocking call throws before it moves anything (bad arguments), and qsdp::error
///         when a group is open on comm or the communicator cannot be called from another thread
template <communicator Comm, class Q, class T>
work all_gather_async(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                      call_options options = {});

/// reduce_scatter, started (all_gather_async): the arguments of the blocking call.
/// @param comm this rank's communicator
/// @param q the policy
/// @param send count * comm.size() values, read until the work is done
/// @param recv count values, written until the work is done
/// @param count values per chunk
/// @param op sum or avg
/// @param options the size gate and the pipeline
/// @return the started collective
/// @throws as all_gather_async
template <communicator Comm, class Q, class T>
work reduce_scatter_async(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                          reduce_op op, call_options options = {});

/// all_reduce, started (all_gather_async): the arguments of the blocking call.
/// @param comm this rank's communicator
/// @param q the policy
/// @param data count values, replaced by the reduced values when the work is done
/// @param count values
/// @param op sum or avg
/// @param options the size gate and the pipeline
/// @return the started collective
/// @throws as all_gather_async
template <communicator Comm, class Q, class T>
work all_reduce_async(Comm& comm, const Q& q, T* data, std::size_t count, reduce_op op,
                      call_options options = {});

/// Closes the group group_start opened, as group_end, but starts the outermost group's calls on
/// the communicator's progress thread and returns their work at once (all_gather_async); an inner
/// group's work is empty (its calls run with the outermost group).
/// @param comm this rank's communicator
/// @return the started group
/// @throws qsdp::error when no group is open, or the communicator cannot be called from another
///         thread (the group stays open); the group's errors (group_end) come from wait()
template <communicator Comm>
work group_end_async(Comm& comm);

/// Weight-difference all-gather (SDP4Bit's weight differences): one object per rank keeps the last
/// reconstruction of every rank's shard, and each call sends the quantized difference between the
/// rank's current shard and the reconstruction the receivers hold, instead of the shard:
///
///     qsdp::delta_gather<float> gather(count, comm.size());
///     gather.all_gather(comm, w, shard.data(), full.data());   // full: count * comm.size() values
///
/// Every rank adds the same decoded differences to the same reconstruction, so every rank's `full`
/// is bit-identical and quantization errors never accumulate: a call's error is the policy's error
/// on (change since the last call + the last call's error), which shrinks call after call to the
/// level of the weights' change. The first call (and the first after reset()) sends the whole
/// shard against a zero reconstruction, with the policy's plain error.
///
/// Where it fits: every rank keeps the full weights between steps anyway (ZeRO-1/2, Megatron's
/// distributed optimizer, any data-parallel replica that all-gathers updated shards). Memory: the
/// reconstruction, count * world values of T, plus count floats of difference, plus (T other than
/// float) count * world floats of decoded differences; under ZeRO-3, which frees the gathered
/// weights between uses, it costs a full copy of them. It is allocated by the first call, in host
/// memory for a host communicator, in the communicator's device memory for a device communicator
/// (the device overload, with a stream); one object serves one of the two.
///
/// Collective like all_gather: a rank that calls with another count or policy makes every rank
/// throw; so does a rank whose reconstruction has seen a different number of calls (one that
/// skipped a call or reset alone), since its reconstruction no longer matches the others' (on
/// device buffers the counts are compared by a kernel, and every rank throws at its next call, as a
/// bad packet is reported). A reconstruction value that is not finite (a NaN or inf that a shard
/// once held) counts as 0 in the next difference, on every rank alike, so the value recovers at the
/// next call. Host and device calls give the same values, bit for bit.
/// @tparam T the element type of the shards
template <class T>
class delta_gather {
 public:
  /// Allocates nothing: the buffers come with the first call.
  /// @param count values per rank's shard (as all_gather's count)
  /// @param world the communicator's size
  /// @throws qsdp::error when count x world is beyond 2^56 values
  delta_gather(std::size_t count, int world);

  /// full[r * count, (r + 1) * count) = rank r's reconstructed shard, after sending this rank's.
  /// @param comm this rank's host communicator, of size world
  /// @param q the policy (a qsdp::codec_policy), the same on every rank
  /// @param shard this rank's count values
  /// @param full count * world values
  /// @throws qsdp::error when a group is open on comm, comm.size() is not world, shard or full is
  ///         null with count > 0, or the earlier calls were on a device communicator; on every
  ///         rank when a rank's reconstruction has seen another number of calls; as all_gather
  ///         otherwise
  template <communicator Comm, class Q>
  void all_gather(Comm& comm, const Q& q, const T* shard, T* full);
#if defined(__CUDACC__) && __has_include(<cuda_runtime.h>)
  /// The same on device buffers, ordered on `stream` (T: float, __half or __nv_bfloat16); no host
  /// synchronisation after the first call.
  /// @param comm this rank's device communicator, of size world
  /// @param q the policy (a qsdp::codec_policy), the same on every rank
  /// @param shard this rank's count values in device memory
  /// @param full count * world values in device memory
  /// @param stream the stream the call is ordered on
  /// @throws qsdp::error as the host overload (with earlier calls on a host communicator), or
  ///         when a CUDA call fails; a call-count mismatch is reported at the next call
  template <device_communicator Comm, class Q>
  void all_gather(Comm& comm, const Q& q, const T* shard, T* full, cudaStream_t stream);
#endif

  /// @return the values per rank's shard
  std::size_t count() const noexcept { return count_; }
  /// @return the number of ranks
  int world() const noexcept { return world_; }
  /// Calls since construction or the last reset().
  /// @return the number of calls
  std::uint64_t calls() const noexcept { return calls_; }
  /// The reconstruction every rank holds: count * world values, as the last call returned them
  /// (host memory, or device memory after device calls; null before the first call).
  /// @return the reconstruction, or null
  const T* reconstruction() const noexcept;
  /// Forgets the reconstruction (every rank must reset before the same call).
  void reset();
  /// Bytes this object holds (host or device memory).
  /// @return the bytes of its buffers
  std::size_t memory_bytes() const noexcept;

 private:
  std::size_t count_;
  int world_;
  std::uint64_t calls_ = 0;
  std::vector<T> reconstruction_;
  std::vector<float> difference_;
  std::vector<float> decoded_;             // T other than float: the gathered differences
  std::vector<std::uint64_t> peer_calls_;  // the ranks' call counts, exchanged every call
  std::shared_ptr<void> device_;           // device calls: detail::cuda::delta_state<T>
  T* device_reconstruction_ = nullptr;     // device calls: its reconstruction
  bool reset_pending_ = false;             // device calls: zero the reconstruction first
};

// ---- Two levels: a node's fast links and the slower links between nodes -------------------------
// Over a qsdp::two_level pair of host communicators (communicator.hpp: from two communicators,
// run_local_nodes, or mpi_two_level), each level with its own policy; the device overloads below
// take a pair of device communicators. Rank r = node index x node size + place in the
// node; counts, buffers and ops as in the flat calls. Both levels agree on the call (a rank that
// called differently makes every rank throw), and each decides the size gate on its own exchange.

/// Two-level reduce-scatter: the ranks of each node first reduce-scatter within the node (policy
/// inside) so that each holds its node's sums of the chunks of its place in every node, then the
/// ranks at one place reduce-scatter those across nodes (policy across). A node's ranks send
/// (nodes - 1) x node_size chunks over the slow links, node_size times fewer than flat
/// reduce_scatter's (world - node_size) x node_size: a node's sum travels once. Each value is
/// quantized twice: once as itself (inside), once inside its node's partial sum (across); the error
/// is the inside bounds of the node's ranks plus the across bound of the node sums, summed over
/// nodes (identity inside: the across part only). Partial sums are rounded to T between the levels.
/// @param comm this rank's two_level pair
/// @param q the policies of the two levels, the same on every rank
/// @param send count * comm.size() values, chunk r for rank r
/// @param recv count values: this rank's chunk, reduced
/// @param count values per chunk, the same on every rank
/// @param op sum or avg
/// @param options the size gate and the pipeline, for each level's exchanges
/// @throws qsdp::error when send or recv is null with count > 0, op is not sum or avg,
///         call_options::max_pieces is outside 1..max_pieces_limit, the world is too large for the
///         random streams (world x (node size + nodes) must stay below 2^31), or q's bucket_size or
///         count is out of range (as encode); on every rank when the ranks' calls differ (policy,
///         bits, bucket size, element type, count, op, size gate, pieces); when a peer's packet
///         fails the header checks (naming the rank); and what the communicator throws (a peer that
///         failed, a timeout)
template <communicator Node, communicator Cross, class Inside, class Across, class T>
void reduce_scatter(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                    const T* send, T* recv, std::size_t count, reduce_op op,
                    call_options options = {});

/// Two-level all-gather: each rank first all-gathers its shard across nodes with the ranks at its
/// place (policy across), then the node all-gathers those shards (policy inside), so a shard
/// crosses the slow links once. Every rank ends with the same bits (the inside encode of a shard is
/// the same on every node: the same decoded values, drawing the same random numbers). Each value is
/// quantized twice (identity inside: once); the error is the across bound plus the inside bound of
/// the across-decoded values.
/// @param comm this rank's two_level pair
/// @param q the policies of the two levels, the same on every rank
/// @param send this rank's count values
/// @param recv count * comm.size() values
/// @param count values per rank, the same on every rank
/// @param options the size gate and the pipeline, for each level's exchanges
/// @throws qsdp::error as the two-level reduce_scatter (without op)
template <communicator Node, communicator Cross, class Inside, class Across, class T>
void all_gather(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                const T* send, T* recv, std::size_t count, call_options options = {});

/// Two-level all-reduce in place: two-level reduce_scatter of the data padded to world shards, then
/// two-level all_gather of the reduced shards; every rank ends with the same bits.
/// @param comm this rank's two_level pair
/// @param q the policies of the two levels, the same on every rank
/// @param data count values, replaced by the reduced values
/// @param count values, the same on every rank
/// @param op sum or avg
/// @param options the size gate and the pipeline, for each level's exchanges
/// @throws qsdp::error as the two-level reduce_scatter (data in place of send and recv)
template <communicator Node, communicator Cross, class Inside, class Across, class T>
void all_reduce(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q, T* data,
                std::size_t count, reduce_op op, call_options options = {});

#if defined(__CUDACC__) && __has_include(<cuda_runtime.h>)
// ---- Device buffers, over a device_communicator (nccl_communicator, cuda_local_communicator) ----
// The same pipeline, random streams and packets as on the host, ordered on `stream`; nothing waits
// on the GPU except once per new call signature, when the ranks' descriptors are compared on the
// host (docs/reference/cuda-collectives.md). A bad packet from a peer decodes to NaN and is
// reported by the next call.

/// Compressed all-gather of device buffers, ordered on `stream` (like ncclAllGather), in place
/// as the host overload. Inside a qsdp group (group_start on a device communicator) the call is
/// checked and recorded, and runs at group_end. Not inside an ncclGroupStart()/ncclGroupEnd() of
/// the caller's: the call enqueues its kernels at once, and the first call of a signature waits on
/// the host for an exchange NCCL would defer to ncclGroupEnd (it then fails with
/// qsdp::timeout_error after the communicator's timeout, saying so; NCCL offers no way to detect an
/// open group). qsdp's groups are the answer there: the calls that would go between
/// ncclGroupStart and ncclGroupEnd go between qsdp::group_start and qsdp::group_end.
/// @param comm this rank's device communicator
/// @param q the policy (a qsdp::codec_policy), the same on every rank
/// @param send this rank's count values in device memory
/// @param recv count * comm.size() values in device memory
/// @param count values per rank, the same on every rank
/// @param stream the stream the call is ordered on
/// @param options the size gate and the pipeline, the same on every rank
/// @throws qsdp::error as the host overload, when a CUDA call fails, or (from the next call, or
///         the communicator's synchronize) for a peer's bad packet
template <device_communicator Comm, class Q, class T>
void all_gather(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                cudaStream_t stream, call_options options = {});

/// The encoded all-gather of device buffers, ordered on `stream`: as the host overload, the layout
/// written by one kernel after the exchange (a bad packet header, reported as the decoding
/// all_gather reports it, sets every scale of the call to NaN). Not recorded in qsdp groups (it
/// throws inside one).
/// @param comm this rank's device communicator
/// @param q the MX policy (mxfp8, mxfp6, mxfp4; not rotated), the same on every rank
/// @param send this rank's count values in device memory
/// @param recv the world's elements and scales in device memory
/// @param count values per rank, whole blocks, the same on every rank
/// @param stream the stream the call is ordered on
/// @param options the pipeline; min_compressed_bytes must not gate the call
/// @throws qsdp::error as the host overload, when a CUDA call fails, or (from the next call) for
///         a peer's bad packet
template <device_communicator Comm, class Q, class T>
void all_gather_encoded(Comm& comm, const Q& q, const T* send, block_scaled_buffers recv,
                        std::size_t count, cudaStream_t stream, call_options options = {});

/// Compressed reduce-scatter of device buffers, ordered on `stream` (like ncclReduceScatter): each
/// value quantized once, summed in fp32 by one fused kernel. In place as the host overload; inside
/// a qsdp group recorded and run at group_end; not inside the caller's NCCL group (see the device
/// all_gather).
/// @param comm this rank's device communicator
/// @param q the policy (a qsdp::codec_policy), the same on every rank
/// @param send count * comm.size() values in device memory, chunk r for rank r
/// @param recv count values in device memory: this rank's chunk, reduced
/// @param count values per chunk, the same on every rank
/// @param op sum or avg
/// @param stream the stream the call is ordered on
/// @param options the size gate and the pipeline, the same on every rank
/// @throws qsdp::error as the host overload, when a CUDA call fails, or (from the next call, or
///         the communicator's synchronize) for a peer's bad packet
template <device_communicator Comm, class Q, class T>
void reduce_scatter(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count, reduce_op op,
                    cudaStream_t stream, call_options options = {});

/// Compressed all-reduce in place on device buffers: reduce_scatter, then all_gather of the reduced
/// shards (the last padded with zeros), so every rank ends bit-identical. Not inside the caller's
/// NCCL group (see the device all_gather), nor inside a qsdp group (it throws there).
/// @param comm this rank's device communicator
/// @param q the policy (a qsdp::codec_policy), the same on every rank
/// @param data count values in device memory, replaced by the reduced values
/// @param count values, the same on every rank
/// @param op sum or avg
/// @param stream the stream the call is ordered on
/// @param options the size gate and the pipeline, the same on every rank
/// @throws qsdp::error as the host overload, when a CUDA call fails, or (from the next call, or
///         the communicator's synchronize) for a peer's bad packet
template <device_communicator Comm, class Q, class T>
void all_reduce(Comm& comm, const Q& q, T* data, std::size_t count, reduce_op op,
                cudaStream_t stream, call_options options = {});

// Groups on a device communicator: the device overloads of group_start and group_end (the API
// reference documents the two once, with the host overloads). group_start opens a group, as the
// host overload and ncclGroupStart do: until the matching group_end, the device qsdp::all_gather
// and qsdp::reduce_scatter on `comm` check their arguments, draw their call indices and return
// without enqueueing anything; group_end then enqueues them all on their stream in one agreement
// and one exchange:
//
//     qsdp::group_start(comm);                     // where llm.c has ncclGroupStart()
//     for (auto& layer : layers)
//       qsdp::all_gather(comm, w8, layer.shard, layer.full, layer.count, stream);
//     qsdp::group_end(comm);                       // enqueued here, ordered on `stream`
//
// As on the host: any counts, element types and policies, one size gate applying to the group's
// total, the bits of the same calls made one by one whenever the gate decides alike, groups that
// nest, NCCL's in-place conventions; all_reduce and delta_gather throw while a group is open. The
// calls of a group are ordered on one stream (the first call's; another stream throws when the
// call is recorded). The buffers of a recorded call must stay valid until the group's work on the
// stream has completed; nothing reads them before group_end.
//
// The ranks agree on a group once per group signature (its calls' descriptors in order), with one
// host synchronisation, as single device calls agree once per call signature: later groups of the
// same calls wait for nothing on the host and may be captured in a CUDA graph. Where the
// communicator's exchanges may run on any stream (NCCL's), a group of more than one call is cut
// into segments of at least 256 KiB of packets, each exchanged on the communicator's second stream
// while the next is encoded; elsewhere it is one exchange on the stream. Throws qsdp::error when
// groups are nested beyond INT_MAX.
template <device_communicator Comm>
void group_start(Comm& comm);

// Closes the group group_start opened on a device communicator; the outermost one enqueues the
// group's calls on their stream (group_start) and returns without waiting for them, except on a
// group signature's first run, which synchronises once to compare the ranks' group descriptors.
// Collective: every rank must record the same calls in the same order. Throws qsdp::error when no
// group is open; on every rank when the ranks' groups differ on the group signature's first run
// (the number of calls, or the first call that differs and how); when a CUDA call fails; for a
// peer's bad packet seen by an earlier call (a bad packet in this group is reported by the next
// call, as for single calls). The group is closed either way.
template <device_communicator Comm>
void group_end(Comm& comm);

// ---- Two levels on device buffers ---------------------------------------------------------------
// Over a two_level pair of device communicators (two NCCL communicators, say;
// device_communicator.hpp): the host two-level calls' schedules, bits and error bounds, ordered on
// `stream`; the reorderings are device copies, each level a flat device collective. The ranks agree
// on both levels' descriptors once per call signature (one host round trip, as the flat device
// calls), so later calls may be captured in a CUDA graph over NCCL.

/// Two-level reduce-scatter of device buffers (as the host one).
/// @param comm this rank's two_level pair of device communicators
/// @param q the policies of the two levels, the same on every rank
/// @param send count * comm.size() values in device memory, chunk r for rank r
/// @param recv count values in device memory: this rank's chunk, reduced
/// @param count values per chunk, the same on every rank
/// @param op sum or avg
/// @param stream the stream the call is ordered on
/// @param options the size gate and the pipeline, for each level's exchanges
/// @throws qsdp::error as the host two-level call, when a CUDA call fails, or (from the next call,
///         or the communicator's synchronize) for a peer's bad packet
template <device_communicator Node, device_communicator Cross, class Inside, class Across, class T>
void reduce_scatter(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                    const T* send, T* recv, std::size_t count, reduce_op op, cudaStream_t stream,
                    call_options options = {});

/// Two-level all-gather of device buffers (as the host one).
/// @param comm this rank's two_level pair of device communicators
/// @param q the policies of the two levels, the same on every rank
/// @param send this rank's count values in device memory
/// @param recv count * comm.size() values in device memory
/// @param count values per rank, the same on every rank
/// @param stream the stream the call is ordered on
/// @param options the size gate and the pipeline, for each level's exchanges
/// @throws qsdp::error as the host two-level call, when a CUDA call fails, or (from the next call,
///         or the communicator's synchronize) for a peer's bad packet
template <device_communicator Node, device_communicator Cross, class Inside, class Across, class T>
void all_gather(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q,
                const T* send, T* recv, std::size_t count, cudaStream_t stream,
                call_options options = {});

/// Two-level all-reduce in place on device buffers (as the host one).
/// @param comm this rank's two_level pair of device communicators
/// @param q the policies of the two levels, the same on every rank
/// @param data count values in device memory, replaced by the reduced values
/// @param count values, the same on every rank
/// @param op sum or avg
/// @param stream the stream the call is ordered on
/// @param options the size gate and the pipeline, for each level's exchanges
/// @throws qsdp::error as the host two-level call, when a CUDA call fails, or (from the next call,
///         or the communicator's synchronize) for a peer's bad packet
template <device_communicator Node, device_communicator Cross, class Inside, class Across, class T>
void all_reduce(two_level<Node, Cross>& comm, const level_policies<Inside, Across>& q, T* data,
                std::size_t count, reduce_op op, cudaStream_t stream, call_options options = {});
#endif

}  // namespace qsdp

#include "detail/collectives/delta.hpp"
#include "detail/collectives/host.hpp"
#include "detail/collectives/two_level.hpp"
#if defined(__CUDACC__) && __has_include(<cuda_runtime.h>)
#include "detail/cuda/device_collectives.cuh"
#include "detail/cuda/device_delta.cuh"
#include "detail/cuda/device_two_level.cuh"
#endif
