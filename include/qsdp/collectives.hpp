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
// Reduce-scatter goes through all-to-all rather than a ring, so each value is quantized exactly once
// and summed in fp32 on the receiver: the error does not grow with the number of ranks.
//
// Every call first exchanges a 64-byte descriptor (collective, policy, bits, bucket size, element type,
// count, op) so that a rank that called differently makes every rank throw the same qsdp::error,
// instead of a hang or garbage; then the packets, whose headers every receiver checks again.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "codec.hpp"
#include "communicator.hpp"
#include "quantizers.hpp"

namespace qsdp {

enum class reduce_op : std::uint32_t { sum = 1, avg = 2 };

namespace detail {

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
  std::uint8_t element;       // element_type
  std::uint8_t meta_size;
  std::uint32_t wire_tag;
  std::uint32_t world;
  std::uint64_t bucket_size;
  std::uint64_t count;
  std::uint64_t reserved[3];
};
static_assert(sizeof(call_descriptor) == 64);

inline constexpr std::uint32_t descriptor_magic = 0x43445351u;  // "QSDC"

template <class Q, class T>
call_descriptor describe_call(const Q& q, collective_kind kind, reduce_op op, bool has_op,
                              std::size_t count, int world) {
  call_descriptor d{};
  d.magic = descriptor_magic;
  d.collective = static_cast<std::uint32_t>(kind);
  d.op = has_op ? static_cast<std::uint32_t>(op) : 0;
  d.quantizer_id = wire_id<Q>();
  d.element = static_cast<std::uint8_t>(element_traits<T>::tag);
  d.wire_tag = wire_tag<Q>();
  d.world = static_cast<std::uint32_t>(world);
  d.count = count;
  if constexpr (is_identity<Q>) {
    d.bits = static_cast<std::uint8_t>(8 * sizeof(T));
  } else {
    d.bits = Q::bits;
    d.meta_size = sizeof(typename Q::meta_type);
    d.bucket_size = q.bucket_size;
  }
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
    return differ("collective", collective_name(mine.collective), collective_name(theirs.collective));
  if (theirs.quantizer_id != mine.quantizer_id || theirs.wire_tag != mine.wire_tag)
    return differ("quantizer", std::string(quantizer_id_name(mine.quantizer_id)) + " (tag " + num(mine.wire_tag) + ")",
                  std::string(quantizer_id_name(theirs.quantizer_id)) + " (tag " + num(theirs.wire_tag) + ")");
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
  return "";
}

/// Throws on every rank alike if any rank's descriptor (world of them, back to back in `all`) differs
/// from another's: each rank compares all descriptors with rank 0's.
inline void check_descriptors(const std::byte* all, int world, const char* where) {
  call_descriptor first;
  std::memcpy(&first, all, sizeof first);
  for (int peer = 1; peer < world; ++peer) {
    call_descriptor theirs;
    std::memcpy(&theirs, all + static_cast<std::size_t>(peer) * sizeof theirs, sizeof theirs);
    const std::string mismatch = describe_mismatch(first, 0, theirs, peer);
    if (!mismatch.empty())
      throw qsdp::error(std::string(where) + ": ranks disagree: " + mismatch);
  }
}

/// Exchanges descriptors (into `scratch`, world * 64 bytes) and checks them.
template <class Comm>
void agree_on_call(Comm& comm, const call_descriptor& mine, std::byte* scratch, const char* where) {
  comm.all_gather_bytes(reinterpret_cast<const std::byte*>(&mine), scratch, sizeof mine);
  check_descriptors(scratch, comm.size(), where);
}

inline void check_world(int size, const char* where) {
  if (size < 1) throw qsdp::error(std::string(where) + ": communicator size is " + std::to_string(size));
  const auto world = static_cast<std::uint64_t>(size);
  if (world * world >= (std::uint64_t{1} << 31))
    throw qsdp::error(std::string(where) + ": world size " + std::to_string(world) +
                      " is too large for the random streams (world^2 must stay below 2^31)");
}

template <class Comm, class Q, class T>
void check_collective_arguments(const Comm& comm, const Q& q, const char* where) {
  static_assert(std::remove_cvref_t<Comm>::memory == memory_space::host,
                "these overloads take host buffers; device communicators (NCCL) need the CUDA "
                "overloads, which take a stream");
  require_policy<Q>();
  require_element<T>();
  check_bucket_size(q, where);
  check_world(comm.size(), where);
}

/// Random-stream number of the chunk a rank encodes: distinct for every (rank, chunk) pair of a call.
inline std::uint32_t chunk_stream(int rank, int world, int chunk) {
  return static_cast<std::uint32_t>(rank) * static_cast<std::uint32_t>(world) +
         static_cast<std::uint32_t>(chunk);
}

/// Checks the header of the packet received from rank `from`; the rank is named only when it fails,
/// so the common path builds no strings (no allocation per call).
template <class Q>
void check_received(const Q& q, const std::byte* packet, std::size_t count, int element,
                    std::size_t packet_bytes, int from, const char* where) {
  try {
    validated_layout(q, packet, count, is_identity<Q> ? element : -1, packet_bytes, where);
  } catch (const qsdp::error& e) {
    throw qsdp::error(std::string(e.what()) + " (in the packet from rank " + std::to_string(from) + ")");
  }
}

/// all_gather's body, with scratch laid out by the caller: `packets` holds (world + 1) packets.
template <class Comm, class Q, class T>
void all_gather_packets(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                        std::uint64_t call, std::byte* packets, const char* where) {
  const int world = comm.size();
  const std::size_t packet_bytes = compressed_size<T>(q, count);
  std::byte* mine = packets;
  std::byte* gathered = packets + packet_bytes;
  encode(q, send, count, mine,
         rng_position{.call = call, .stream = chunk_stream(comm.rank(), world, 0)});
  comm.all_gather_bytes(mine, gathered, packet_bytes);
  for (int r = 0; r < world; ++r) {
    const std::byte* packet = gathered + static_cast<std::size_t>(r) * packet_bytes;
    check_received(q, packet, count, static_cast<int>(element_traits<T>::tag), packet_bytes, r, where);
    decode(q, packet, count, recv + static_cast<std::size_t>(r) * count);
  }
}

/// reduce_scatter's body: `packets` holds 2 * world packets, `acc` count floats.
template <class Comm, class Q, class T>
void reduce_scatter_packets(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                            reduce_op op, std::uint64_t call, std::byte* packets, float* acc,
                            const char* where) {
  const int world = comm.size();
  const std::size_t packet_bytes = compressed_size<T>(q, count);
  std::byte* outgoing = packets;
  std::byte* incoming = packets + static_cast<std::size_t>(world) * packet_bytes;
  for (int chunk = 0; chunk < world; ++chunk)
    encode(q, send + static_cast<std::size_t>(chunk) * count, count,
           outgoing + static_cast<std::size_t>(chunk) * packet_bytes,
           rng_position{.call = call, .stream = chunk_stream(comm.rank(), world, chunk)});
  comm.all_to_all_bytes(outgoing, incoming, packet_bytes);
  for (int r = 0; r < world; ++r)
    check_received(q, incoming + static_cast<std::size_t>(r) * packet_bytes, count,
                   static_cast<int>(element_traits<T>::tag), packet_bytes, r, where);
  std::fill(acc, acc + count, 0.0f);
  decode_accumulate(q, incoming, static_cast<std::size_t>(world), count, acc);
  if (op == reduce_op::avg) {
    const float ranks = static_cast<float>(world);
    for (std::size_t i = 0; i < count; ++i) acc[i] = acc[i] / ranks;
  }
  // Plain rounding, not saturation: a sum that overflows T is reported as inf, never clipped.
  narrow_store(acc, count, recv);
}

inline std::size_t align64(std::size_t n) { return (n + 63) / 64 * 64; }

inline void check_op(reduce_op op, const char* where) {
  if (op != reduce_op::sum && op != reduce_op::avg)
    throw qsdp::error(std::string(where) + ": reduce_op " +
                      std::to_string(static_cast<std::uint32_t>(op)) + " is not sum (1) or avg (2)");
}

template <class T>
void check_buffers(const void* a, const char* a_name, const void* b, const char* b_name,
                   std::size_t count, const char* where) {
  if (count == 0) return;
  if (a == nullptr) throw qsdp::error(std::string(where) + ": " + a_name + " is null with count " + std::to_string(count));
  if (b == nullptr) throw qsdp::error(std::string(where) + ": " + b_name + " is null with count " + std::to_string(count));
}

}  // namespace detail

/// Compressed all-gather (like ncclAllGather): every rank contributes `count` values of `send`; `recv`
/// receives count * comm.size() values, rank r's at offset r * count. Collective: every rank calls it
/// with the same policy, count and element type, or every rank throws qsdp::error.
template <communicator Comm, class Q, class T>
void all_gather(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count) {
  constexpr const char* where = "qsdp::all_gather";
  detail::check_collective_arguments<Comm, Q, T>(comm, q, where);
  detail::check_buffers<T>(send, "send", recv, "recv", count, where);
  const int world = comm.size();
  const std::uint64_t call = comm.next_call();
  const std::size_t packet_bytes = compressed_size<T>(q, count);
  const std::size_t descriptors = detail::align64(64 * static_cast<std::size_t>(world));
  std::byte* scratch = comm.workspace().get(descriptors + packet_bytes * (static_cast<std::size_t>(world) + 1));
  detail::agree_on_call(comm, detail::describe_call<Q, T>(q, detail::collective_kind::all_gather, reduce_op::sum, false, count, world),
                        scratch, where);
  detail::all_gather_packets(comm, q, send, recv, count, call, scratch + descriptors, where);
}

/// Compressed reduce-scatter (like ncclReduceScatter): `send` holds count * comm.size() values; rank r
/// receives in `recv` the sum (or average) over ranks of chunk r, `count` values. Each value is quantized
/// once and summed in fp32.
template <communicator Comm, class Q, class T>
void reduce_scatter(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count, reduce_op op) {
  constexpr const char* where = "qsdp::reduce_scatter";
  detail::check_collective_arguments<Comm, Q, T>(comm, q, where);
  detail::check_buffers<T>(send, "send", recv, "recv", count, where);
  detail::check_op(op, where);
  const int world = comm.size();
  const std::uint64_t call = comm.next_call();
  const std::size_t packet_bytes = compressed_size<T>(q, count);
  const std::size_t descriptors = detail::align64(64 * static_cast<std::size_t>(world));
  const std::size_t packets = detail::align64(2 * static_cast<std::size_t>(world) * packet_bytes);
  std::byte* scratch = comm.workspace().get(descriptors + packets + count * sizeof(float));
  detail::agree_on_call(comm, detail::describe_call<Q, T>(q, detail::collective_kind::reduce_scatter, op, true, count, world),
                        scratch, where);
  detail::reduce_scatter_packets(comm, q, send, recv, count, op, call, scratch + descriptors,
                                 reinterpret_cast<float*>(scratch + descriptors + packets), where);
}

/// Compressed all-reduce, in place on `count` values: reduce_scatter, then all_gather of the reduced
/// shards, so every rank ends with bit-identical values. The last shard is padded with zeros when
/// count is not a multiple of comm.size().
template <communicator Comm, class Q, class T>
void all_reduce(Comm& comm, const Q& q, T* data, std::size_t count, reduce_op op) {
  constexpr const char* where = "qsdp::all_reduce";
  detail::check_collective_arguments<Comm, Q, T>(comm, q, where);
  detail::check_buffers<T>(data, "data", data, "data", count, where);
  detail::check_op(op, where);
  const auto world = static_cast<std::size_t>(comm.size());
  // Two phases, two call indices: the gather's draws must not repeat the scatter's.
  const std::uint64_t scatter_call = comm.next_call();
  const std::uint64_t gather_call = comm.next_call();
  const std::size_t shard = (count + world - 1) / world;
  const std::size_t padded = shard * world;
  const std::size_t packet_bytes = compressed_size<T>(q, shard);
  const std::size_t descriptors = detail::align64(64 * world);
  const std::size_t packets = detail::align64(2 * world * packet_bytes);
  const std::size_t values = detail::align64(padded * sizeof(T));
  const std::size_t reduced = detail::align64(shard * sizeof(T));
  std::byte* scratch = comm.workspace().get(descriptors + packets + values + reduced + shard * sizeof(float));
  detail::agree_on_call(comm, detail::describe_call<Q, T>(q, detail::collective_kind::all_reduce, op, true, count, comm.size()),
                        scratch, where);
  std::byte* packet_area = scratch + descriptors;
  T* full = reinterpret_cast<T*>(scratch + descriptors + packets);
  T* mine = reinterpret_cast<T*>(scratch + descriptors + packets + values);
  float* acc = reinterpret_cast<float*>(scratch + descriptors + packets + values + reduced);
  if (count) std::memcpy(static_cast<void*>(full), data, count * sizeof(T));
  for (std::size_t i = count; i < padded; ++i) full[i] = detail::element_traits<T>::from_float(0.0f);
  detail::reduce_scatter_packets(comm, q, full, mine, shard, op, scatter_call, packet_area, acc, where);
  detail::all_gather_packets(comm, q, mine, full, shard, gather_call, packet_area, where);
  if (count) std::memcpy(static_cast<void*>(data), full, count * sizeof(T));
}

}  // namespace qsdp

#if defined(__CUDACC__) && __has_include(<cuda_runtime.h>)
// Device buffers over a device_communicator (NCCL, cuda_local): the same calls with a trailing
// cudaStream_t (nvcc translation units only).
#include "detail/cuda/device_collectives.cuh"
#endif
