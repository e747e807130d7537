// SPDX-License-Identifier: Apache-2.0
//
// What the host and the device collectives share (collectives.hpp declares the calls; detail/
// collectives/host.hpp and detail/cuda/device_collectives.cuh run them): the 64-byte call
// descriptor the ranks agree on before any payload moves, the random stream of each (rank, chunk),
// the argument checks, and the one layout of a collective's scratch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>

#include "../../call_options.hpp"
#include "../../communicator.hpp"
#include "../../config.hpp"
#include "../../policy.hpp"
#include "../codec/float_types.hpp"
#include "../codec/format.hpp"

namespace qsdp {
enum class reduce_op : std::uint32_t;  // collectives.hpp
}  // namespace qsdp

namespace qsdp::detail {

enum class collective_kind : std::uint32_t { all_gather = 1, reduce_scatter = 2, all_reduce = 3 };

inline const char* collective_name(std::uint32_t kind) {
  switch (kind) {
    case 1: return "all_gather";
    case 2: return "reduce_scatter";
    case 3: return "all_reduce";
    default: return "unknown collective";
  }
}

/// What every rank says about its call before any payload moves (64 bytes, little-endian).
struct call_descriptor {
  std::uint32_t magic;        // "QSDC"
  std::uint32_t collective;   // collective_kind
  std::uint32_t op;           // reduce_op, 0 for all_gather
  std::uint8_t quantizer_id;  // as in packet headers
  std::uint8_t bits;
  std::uint8_t element;  // element_type
  std::uint8_t meta_size;
  std::uint32_t wire_tag;
  std::uint32_t world;
  std::uint64_t bucket_size;
  std::uint64_t count;
  std::uint64_t min_compressed_bytes;  // call_options::min_compressed_bytes (the size gate)
  std::uint64_t max_pieces;            // call_options::max_pieces (the pipeline)
  std::uint64_t reserved;
};
static_assert(sizeof(call_descriptor) == 64);

inline constexpr std::uint32_t descriptor_magic = 0x43445351u;  // "QSDC"

template <class Q, class T>
call_descriptor describe_call(const Q& q, collective_kind kind, reduce_op op, std::size_t count,
                              int world, const call_options& options) {
  call_descriptor d{};
  d.magic = descriptor_magic;
  d.collective = static_cast<std::uint32_t>(kind);
  d.op = kind == collective_kind::all_gather ? 0 : static_cast<std::uint32_t>(op);
  write_encoder_identity<Q, T>(q, d);
  d.world = static_cast<std::uint32_t>(world);
  d.count = count;
  d.min_compressed_bytes = options.min_compressed_bytes;
  d.max_pieces = options.max_pieces;
  return d;
}

/// Names the first field in which `theirs` (rank `peer`) differs from `mine`, or "" if none.
inline std::string describe_mismatch(const call_descriptor& mine, int my_rank,
                                     const call_descriptor& theirs, int peer) {
  auto differ = [&](const char* field, const std::string& a, const std::string& b) {
    return std::string("rank ") + std::to_string(peer) + " called with " + field + " " + b +
           ", rank " + std::to_string(my_rank) + " with " + a;
  };
  auto num = [](auto v) { return std::to_string(v); };
  if (theirs.magic != descriptor_magic)
    return "rank " + std::to_string(peer) + " sent no valid call descriptor (magic " +
           hex32(theirs.magic) + "): it is running another collective or another library version";
  if (theirs.collective != mine.collective)
    return differ("collective", collective_name(mine.collective),
                  collective_name(theirs.collective));
  if (theirs.quantizer_id != mine.quantizer_id || theirs.wire_tag != mine.wire_tag)
    return differ(
        "quantizer",
        std::string(quantizer_id_name(mine.quantizer_id)) + " (tag " + num(mine.wire_tag) + ")",
        std::string(quantizer_id_name(theirs.quantizer_id)) + " (tag " + num(theirs.wire_tag) +
            ")");
  if (theirs.bits != mine.bits) return differ("bits", num(mine.bits), num(theirs.bits));
  if (theirs.bucket_size != mine.bucket_size)
    return differ("bucket_size", num(mine.bucket_size), num(theirs.bucket_size));
  if (theirs.meta_size != mine.meta_size)
    return differ("metadata size", num(mine.meta_size), num(theirs.meta_size));
  if (theirs.element != mine.element)
    return differ("element type", element_type_name(static_cast<element_type>(mine.element)),
                  element_type_name(static_cast<element_type>(theirs.element)));
  if (theirs.count != mine.count) return differ("count", num(mine.count), num(theirs.count));
  if (theirs.op != mine.op)
    return differ("reduce_op", mine.op == 1 ? "sum" : "avg", theirs.op == 1 ? "sum" : "avg");
  if (theirs.world != mine.world) return differ("world size", num(mine.world), num(theirs.world));
  if (theirs.min_compressed_bytes != mine.min_compressed_bytes)
    return differ("call_options::min_compressed_bytes", num(mine.min_compressed_bytes),
                  num(theirs.min_compressed_bytes));
  if (theirs.max_pieces == 0)
    return "rank " + std::to_string(peer) +
           " sent a call descriptor without call_options::max_pieces: it runs an older library "
           "version";
  if (theirs.max_pieces != mine.max_pieces)
    return differ("call_options::max_pieces", num(mine.max_pieces), num(theirs.max_pieces));
  if (theirs.reserved != 0)
    return "rank " + std::to_string(peer) + " sent a call descriptor whose reserved field is " +
           num(theirs.reserved) + ": it runs another library version";
  return "";
}

/// Throws on every rank alike if any rank's descriptor (world of them in `all`, `stride` bytes
/// apart) differs from another's: each rank compares all descriptors with rank 0's.
inline void check_descriptors(const std::byte* all, int world, const char* where,
                              std::size_t stride = sizeof(call_descriptor)) {
  call_descriptor first;
  std::memcpy(&first, all, sizeof first);
  for (int peer = 1; peer < world; ++peer) {
    call_descriptor theirs;
    std::memcpy(&theirs, all + static_cast<std::size_t>(peer) * stride, sizeof theirs);
    const std::string mismatch = describe_mismatch(first, 0, theirs, peer);
    if (!mismatch.empty()) throw qsdp::error(std::string(where) + ": ranks disagree: " + mismatch);
  }
}

inline void check_world(int size, const char* where) {
  if (size < 1)
    throw qsdp::error(std::string(where) + ": communicator size is " + std::to_string(size));
  const auto world = static_cast<std::uint64_t>(size);
  if (world * world >= (std::uint64_t{1} << 31))
    throw qsdp::error(std::string(where) + ": world size " + std::to_string(world) +
                      " is too large for the random streams (world^2 must stay below 2^31)");
}

/// Random-stream number of the chunk a rank encodes: distinct for every (rank, chunk) pair of a
/// call.
inline std::uint32_t chunk_stream(int rank, int world, int chunk) {
  return static_cast<std::uint32_t>(rank) * static_cast<std::uint32_t>(world) +
         static_cast<std::uint32_t>(chunk);
}

inline std::size_t align64(std::size_t n) { return (n + 63) / 64 * 64; }

inline void check_op(reduce_op op, const char* where) {
  if (op != reduce_op::sum && op != reduce_op::avg)
    throw qsdp::error(std::string(where) + ": reduce_op " +
                      std::to_string(static_cast<std::uint32_t>(op)) +
                      " is not sum (1) or avg (2)");
}

inline void check_buffers(const void* a, const char* a_name, const void* b, const char* b_name,
                          std::size_t count, const char* where) {
  if (count == 0) return;
  if (a == nullptr)
    throw qsdp::error(std::string(where) + ": " + a_name + " is null with count " +
                      std::to_string(count));
  if (b == nullptr)
    throw qsdp::error(std::string(where) + ": " + b_name + " is null with count " +
                      std::to_string(count));
}

inline void check_max_pieces(std::size_t max_pieces, const char* where) {
  if (max_pieces < 1 || max_pieces > max_pieces_limit)
    throw qsdp::error(std::string(where) + ": call_options::max_pieces is " +
                      std::to_string(max_pieces) + "; expected 1.." +
                      std::to_string(max_pieces_limit));
}

/// How a compressed phase is cut into pipeline pieces (call_options::max_pieces): `count` pieces of
/// `values` values each, the last one shorter when the shard does not divide.
struct piece_plan {
  std::size_t values = 0;
  std::size_t count = 1;
  /// Values of piece p.
  std::size_t values_of(std::size_t p, std::size_t shard) const {
    return std::min(values, shard - p * values);
  }
};

/// The pieces of a phase of `shard` values per peer of `value_size` bytes: as many as max_pieces
/// allows while each holds at least min_piece_bytes of values, of equal length rounded up to a
/// multiple of `align` values (the policy's bucket size and 64: a piece holds whole buckets and
/// starts 64-value aligned). A function of the call's agreed arguments only, so every rank, host
/// and device, cuts alike.
inline piece_plan plan_pieces(std::size_t shard, std::size_t value_size, std::size_t align,
                              std::size_t max_pieces) {
  piece_plan p{shard, 1};
  const std::size_t pieces = std::min(max_pieces, shard / (min_piece_bytes / value_size));
  if (pieces <= 1) return p;
  const std::size_t unit = std::lcm(align, std::size_t{64});
  const std::size_t even = (shard + pieces - 1) / pieces;
  p.values = (even + unit - 1) / unit * unit;
  p.count = (shard + p.values - 1) / p.values;
  if (p.count <= 1) p = {shard, 1};
  return p;
}

/// The alignment plan_pieces keeps for policy Q: its bucket size (1 for identity).
template <class Q>
std::size_t piece_alignment(const Q& q) {
  if constexpr (is_identity<Q>) {
    (void)q;
    return 1;
  } else {
    return q.bucket_size;
  }
}

/// Bytes in front of every packet of a compressed call's exchanges: on the host the call's
/// descriptor, which every rank checks before it decodes, so that only a signature's first call
/// needs a round trip of its own (run_host_collective); on the device none (its signatures are
/// agreed once, and the kernels check the packet headers).
constexpr std::size_t exchange_lead(memory_space memory) {
  return memory == memory_space::host ? sizeof(call_descriptor) : 0;
}

/// Where a collective's scratch goes, as byte offsets from its 64-byte aligned start.
struct scratch_layout {
  std::size_t descriptors = 0;  // the ranks' call descriptors
  std::size_t packets = 0;      // outgoing and incoming packets, piece by piece
  std::size_t piece_bytes = 0;  // the packets of one piece (its slot in `packets`)
  std::size_t values = 0;       // all_reduce: a copy of the data, padded to world shards (T)
  std::size_t reduced = 0;      // all_reduce: this rank's reduced shard (T)
  std::size_t accumulator = 0;  // host reductions: the fp32 sums of one piece
  std::size_t total = 0;
};

/// The one scratch layout of the collectives, host and device, for `world` ranks, shards of `shard`
/// values of `value_size` bytes, cut into `pieces` whose packets take `packet_bytes` each with
/// their exchange_lead (a full piece's; the last piece's may be shorter and still takes a full
/// slot):
///   descriptors  world of them; the device adds a slot from which it sends its own
///   packets      one slot per piece, each slot all_gather: mine and the world gathered;
///                reductions: world outgoing, world incoming (a piece's exchange may still be in
///                flight while the next piece is encoded, so pieces never share a slot)
///   values, reduced  all_reduce only
///   accumulator  host reductions only, one piece (the device sums in registers)
/// Each section starts at a multiple of 64 bytes.
inline scratch_layout plan_scratch(collective_kind kind, memory_space memory, std::size_t world,
                                   std::size_t shard, std::size_t value_size,
                                   std::size_t packet_bytes, const piece_plan& pieces) {
  const bool device = memory == memory_space::device;
  const bool reduces = kind != collective_kind::all_gather;
  scratch_layout l;
  l.descriptors = 0;
  l.packets = align64(sizeof(call_descriptor) * (world + (device ? 1 : 0)));
  l.piece_bytes = (reduces ? 2 * world : world + 1) * packet_bytes;
  std::size_t end = l.packets + align64(pieces.count * l.piece_bytes);
  if (kind == collective_kind::all_reduce) {
    l.values = end;
    l.reduced = l.values + align64(shard * world * value_size);
    end = l.reduced + align64(shard * value_size);
  }
  if (reduces && !device) {
    l.accumulator = end;
    end = l.accumulator + align64(pieces.values * sizeof(float));
  }
  l.total = end;
  return l;
}

/// Whether the size gate (call_options::min_compressed_bytes) sends a call of `count` values of
/// `value_size` bytes uncompressed: every rank sends each peer fewer than min_compressed_bytes
/// bytes of values (all_gather, reduce_scatter: count per peer; all_reduce: the whole buffer, which
/// the gated all_reduce sends to every peer in one exchange). Overflow-free for any count.
inline bool gated_uncompressed(std::size_t count, std::size_t value_size,
                               std::size_t min_compressed_bytes) {
  const std::size_t smallest_compressed =  // ceil(min_compressed_bytes / value_size)
      min_compressed_bytes / value_size + (min_compressed_bytes % value_size != 0 ? 1 : 0);
  return count < smallest_compressed;
}

/// The encoded all-gather always encodes: a size gate that would send its `count` values of
/// `value_size` bytes uncompressed is refused.
inline void check_encoded_gate(std::size_t count, std::size_t value_size,
                               const call_options& options, const char* where) {
  if (gated_uncompressed(count, value_size, options.min_compressed_bytes))
    throw qsdp::error(std::string(where) + ": min_compressed_bytes is " +
                      std::to_string(options.min_compressed_bytes) + ", which would send these " +
                      std::to_string(count * value_size) +
                      " bytes of values uncompressed; the encoded form needs them encoded "
                      "(expected at most the values' bytes, or 0)");
}

/// Where a gated host call's scratch goes: its values move in blocks of one call descriptor (64
/// bytes) followed by the uncompressed values (`block_values` of them), world blocks out for
/// reduce_scatter (one per peer), one for all_gather and all_reduce (the same to every peer), world
/// blocks in; then the fp32 sums of the reductions.
struct gated_layout {
  std::size_t block_values = 0;  // values per block
  std::size_t block_bytes = 0;   // 64 + block_values * value size
  std::size_t outgoing = 0;
  std::size_t incoming = 0;
  std::size_t accumulator = 0;
  std::size_t total = 0;
};

inline gated_layout plan_gated(collective_kind kind, std::size_t world, std::size_t count,
                               std::size_t value_size) {
  gated_layout l;
  l.block_values = count;  // all_reduce: the whole buffer; the others: count per peer
  l.block_bytes = sizeof(call_descriptor) + count * value_size;
  const std::size_t out_blocks = kind == collective_kind::reduce_scatter ? world : 1;
  l.outgoing = 0;
  l.incoming = align64(out_blocks * l.block_bytes);
  l.accumulator = l.incoming + align64(world * l.block_bytes);
  l.total =
      l.accumulator + (kind == collective_kind::all_gather ? 0 : align64(count * sizeof(float)));
  return l;
}

/// A collective call as every rank must agree on it, and where its scratch goes. all_reduce runs on
/// shards of ceil(count / world) values (the last padded with zeros) in two phases, its
/// reduce-scatter and its all-gather. Each phase is cut into pieces (plan_pieces), and piece p of a
/// phase draws call index calls[phase] + p: every piece, and every phase, its own numbers. A call
/// the size gate sends uncompressed draws the same call indices (so the calls after it draw the
/// same random numbers either way) and runs as the policy qsdp::identity: on the device through
/// the same pipeline, on the host in one exchange (gated_layout).
struct collective_call {
  collective_kind kind;
  std::size_t shard;           // values per rank's chunk
  std::size_t padded;          // shard * world for all_reduce, else shard
  piece_plan pieces;           // of every phase
  std::uint64_t calls[2];      // the first call index of each phase: [1] is all_reduce's second
  std::uint64_t call_indices;  // how many the call drew from the communicator
  bool uncompressed;           // the size gate sends the values as they are
  std::uint32_t stream_base;   // added to every chunk_stream (0; a level of a two-level call)
  call_descriptor descriptor;  // what this rank says about the call
  scratch_layout scratch;      // the pipeline's (device, or a compressed host call)
  gated_layout gated;          // a gated host call's
};

/// Plans a collective of `count` values (all_reduce: the whole buffer; else per rank), drawing its
/// call indices from the communicator: the part every collective, host or device, begins with.
template <class Q, class T, class Comm>
collective_call plan_collective(Comm& comm, const Q& q, collective_kind kind, reduce_op op,
                                std::size_t count, const call_options& options,
                                std::uint32_t stream_base = 0) {
  const auto world = static_cast<std::size_t>(comm.size());
  collective_call c{};
  c.kind = kind;
  c.shard = kind == collective_kind::all_reduce ? (count + world - 1) / world : count;
  c.padded = kind == collective_kind::all_reduce ? c.shard * world : count;
  c.pieces = plan_pieces(c.shard, sizeof(T), piece_alignment(q), options.max_pieces);
  const std::size_t phases = kind == collective_kind::all_reduce ? 2 : 1;
  c.call_indices = phases * c.pieces.count;
  c.calls[0] = comm.next_call();
  for (std::uint64_t i = 1; i < c.call_indices; ++i) (void)comm.next_call();
  c.calls[1] = c.calls[0] + c.pieces.count;
  c.uncompressed = gated_uncompressed(count, sizeof(T), options.min_compressed_bytes);
  c.stream_base = stream_base;
  c.descriptor = describe_call<Q, T>(q, kind, op, count, comm.size(), options);
  const std::size_t packet_bytes = c.uncompressed
                                       ? layout_for<identity, T>(identity{}, c.pieces.values).total
                                       : layout_for<Q, T>(q, c.pieces.values).total;
  c.scratch = plan_scratch(kind, Comm::memory, world, c.shard, sizeof(T),
                           exchange_lead(Comm::memory) + packet_bytes, c.pieces);
  if (c.uncompressed && Comm::memory == memory_space::host)
    c.gated = plan_gated(kind, world, count, sizeof(T));
  return c;
}

}  // namespace qsdp::detail
