// SPDX-License-Identifier: Apache-2.0
//
// The collectives' pipelines, stated once for host and device buffers:
//
//   all_gather:     shard --encode--> packet --all_gather_bytes--> world packets --decode--> full
//   reduce_scatter: full --encode each of world chunks--> world packets --all_to_all_bytes-->
//                   the world packets for my chunk --sum in fp32 (or average)--> shard
//   all_reduce:     reduce_scatter of the data padded to world shards, then all_gather of the
//                   reduced shard (every rank ends bit-identical)
//
// The Steps object does each step on its side: detail/collectives/host.hpp's host_steps with the
// host codec and a communicator, detail/cuda/device_collectives.cuh's device_steps with kernels
// ordered on a stream. Both draw the same random streams (chunk_stream) and write the same packets,
// so host and device collectives give bit-identical results. A Steps type provides:
//   rank(), world()                              the communicator's
//   plan(), scratch()                            the collective_call and its scratch (plan_scratch)
//   encode(src, count, packet, key)              one packet of `count` values
//   all_gather_bytes(send, recv, n), all_to_all_bytes(send, recv, n)
//   decode_each(packets, packet_bytes, count, recv)      rank r's packet to recv + r * count
//   reduce(packets, packet_bytes, count, recv)   the sum (or average) of the world packets to recv
//   copy(to, from, n), zero(to, n)               n values of the element type
//   finish()                                     after the last step (the device moves its call
//                                                counter on; see device_steps)
#pragma once

#include <cstddef>
#include <cstdint>

#include "../codec/format.hpp"
#include "../codec/philox.hpp"
#include "plan.hpp"

namespace qsdp::detail {

/// all_gather of `count` values per rank, at call index `call`, in `packets` ((world + 1) packets).
template <class Steps, class Q, class T>
void gather_packets(Steps& steps, const Q& q, const T* send, T* recv, std::size_t count,
                    std::uint64_t call, std::byte* packets) {
  const std::size_t packet_bytes = layout_for<Q, T>(q, count).total;
  std::byte* const gathered = packets + packet_bytes;
  steps.encode(send, count, packets,
               rng_key{seed_of(q), call,
                       steps.plan().stream_base + chunk_stream(steps.rank(), steps.world(), 0)});
  steps.all_gather_bytes(packets, gathered, packet_bytes);
  steps.decode_each(gathered, packet_bytes, count, recv);
}

/// reduce_scatter of world chunks of `count` values, at call index `call`, in `packets` (world
/// outgoing, then world incoming).
template <class Steps, class Q, class T>
void scatter_packets(Steps& steps, const Q& q, const T* send, T* recv, std::size_t count,
                     std::uint64_t call, std::byte* packets) {
  const std::size_t packet_bytes = layout_for<Q, T>(q, count).total;
  const auto world = static_cast<std::size_t>(steps.world());
  std::byte* const incoming = packets + world * packet_bytes;
  for (std::size_t chunk = 0; chunk < world; ++chunk) {
    const auto stream = steps.plan().stream_base +
                        chunk_stream(steps.rank(), steps.world(), static_cast<int>(chunk));
    steps.encode(send + chunk * count, count, packets + chunk * packet_bytes,
                 rng_key{seed_of(q), call, stream});
  }
  steps.all_to_all_bytes(packets, incoming, packet_bytes);
  steps.reduce(incoming, packet_bytes, count, recv);
}

/// The collective `steps` was planned for (steps.plan().kind): a, b are send and recv (all_reduce:
/// the data, twice), `count` as the public call's.
template <class Steps, class Q, class T>
void run_collective(Steps& steps, const Q& q, const T* a, T* b, std::size_t count) {
  const collective_call& c = steps.plan();
  std::byte* const scratch = steps.scratch();
  std::byte* const packets = scratch + c.scratch.packets;
  if (c.kind == collective_kind::all_gather) {
    gather_packets(steps, q, a, b, count, c.calls[0], packets);
  } else if (c.kind == collective_kind::reduce_scatter) {
    scatter_packets(steps, q, a, b, count, c.calls[0], packets);
  } else {
    T* const full = reinterpret_cast<T*>(scratch + c.scratch.values);
    T* const mine = reinterpret_cast<T*>(scratch + c.scratch.reduced);
    steps.copy(full, b, count);
    steps.zero(full + count, c.padded - count);  // all-zero bits: +0 in every element type
    scatter_packets(steps, q, full, mine, c.shard, c.calls[0], packets);
    gather_packets(steps, q, mine, full, c.shard, c.calls[1], packets);
    steps.copy(b, full, count);
  }
  steps.finish();
}

}  // namespace qsdp::detail
