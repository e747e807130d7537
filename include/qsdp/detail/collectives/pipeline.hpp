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
// Each phase runs in pieces (plan_pieces, call_options::max_pieces): piece p's exchange is started
// as soon as its packets are encoded and waited for only after piece p + 1 has been encoded, so
// the codec works while the wire carries the previous piece; a transport that cannot overlap
// (Steps whose exchanges complete when started) runs the same pieces one after another, with the
// same bytes.
//
// The Steps object does each step on its side: detail/collectives/host.hpp's host_steps with the
// host codec and a communicator, detail/cuda/device_collectives.cuh's device_steps with kernels
// ordered on a stream. Both draw the same random streams (chunk_stream, one call index per piece)
// and write the same packets, so host and device collectives give bit-identical results. A Steps
// type provides:
//   rank(), world()                              the communicator's
//   plan(), scratch()                            the collective_call and its scratch (plan_scratch)
//   lead()                                       bytes in front of each packet in an exchange
//                                                (the host's call descriptor; 0 on the device):
//                                                each `block` below is lead() + a packet
//   encode(src, count, block, key)               one block of `count` values
//   start_all_gather(send, recv, n), start_all_to_all(send, recv, n)
//                                                start an exchange of n bytes per peer; returns a
//                                                ticket. Until wait(ticket), send must not change
//                                                and recv must not be read.
//   wait(ticket)                                 the exchange has completed
//   progress()                                   lets started exchanges advance (MPI moves a
//                                                non-blocking collective only inside MPI calls)
//   decode_each(blocks, block_bytes, count, recv, stride)
//                                                rank r's block to recv + r * stride
//   reduce(blocks, block_bytes, count, recv)     the sum (or average) of the world blocks to recv
//   copy(to, from, n), zero(to, n)               n values of the element type
//   finish()                                     after the last step (the device moves its call
//                                                counter on; see device_steps)
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "../codec/format.hpp"
#include "../codec/philox.hpp"
#include "plan.hpp"

namespace qsdp::detail {

/// Waits, when it goes out of scope early (an exception), for the exchanges a pipeline has started
/// and has not waited for: they are in flight on every rank and may still write into the scratch,
/// which the next call reuses. Errors while draining are dropped: the first error is the one
/// thrown.
template <class Steps>
class pending_exchanges {
 public:
  using ticket = decltype(std::declval<Steps&>().start_all_gather(nullptr, nullptr, 0));

  explicit pending_exchanges(Steps& steps) : steps_(steps) {}
  pending_exchanges(const pending_exchanges&) = delete;
  pending_exchanges& operator=(const pending_exchanges&) = delete;
  ~pending_exchanges() {
    for (std::size_t i = first_; i < started_; ++i) {
      try {
        steps_.wait(tickets_[i % 2]);
      } catch (...) {
      }
    }
  }

  void started(ticket t) { tickets_[started_++ % 2] = t; }
  /// Waits for the oldest exchange still outstanding.
  void wait_oldest() {
    const std::size_t i = first_++;
    steps_.wait(tickets_[i % 2]);
  }

 private:
  Steps& steps_;
  ticket tickets_[2]{};  // at most two exchanges are in flight
  std::size_t first_ = 0, started_ = 0;
};

/// all_gather of `count` values per rank, the phase whose pieces draw call indices call + p, in
/// `packets` (a slot of world + 1 blocks per piece: mine, then the world's). recv is where value 0
/// goes, and recv + v where value v does: T* for decoded values, or another output of the steps'
/// decode_each (the block-scaled layout).
template <class Steps, class Q, class T, class Out>
void gather_packets(Steps& steps, const Q& q, const T* send, Out recv, std::size_t count,
                    std::uint64_t call, std::byte* packets) {
  const piece_plan& pieces = steps.plan().pieces;
  const std::size_t slot = steps.plan().scratch.piece_bytes;
  const std::uint32_t stream =
      steps.plan().stream_base + chunk_stream(steps.rank(), steps.world(), 0);
  pending_exchanges<Steps> pending(steps);
  auto decode = [&](std::size_t p) {
    const std::size_t n = pieces.values_of(p, count);
    const std::size_t block = steps.lead() + layout_for<Q, T>(q, n).total;
    pending.wait_oldest();
    steps.decode_each(packets + p * slot + block, block, n, recv + p * pieces.values, count);
  };
  for (std::size_t p = 0; p < pieces.count; ++p) {
    const std::size_t n = pieces.values_of(p, count);
    const std::size_t block = steps.lead() + layout_for<Q, T>(q, n).total;
    std::byte* const mine = packets + p * slot;
    steps.encode(send + p * pieces.values, n, mine, rng_key{seed_of(q), call + p, stream});
    pending.started(steps.start_all_gather(mine, mine + block, block));
    if (p > 0) decode(p - 1);
  }
  decode(pieces.count - 1);
}

/// reduce_scatter of world chunks of `count` values, the phase whose pieces draw call indices
/// call + p, in `packets` (a slot per piece: world outgoing, then world incoming blocks).
template <class Steps, class Q, class T>
void scatter_packets(Steps& steps, const Q& q, const T* send, T* recv, std::size_t count,
                     std::uint64_t call, std::byte* packets) {
  const piece_plan& pieces = steps.plan().pieces;
  const std::size_t slot = steps.plan().scratch.piece_bytes;
  const auto world = static_cast<std::size_t>(steps.world());
  pending_exchanges<Steps> pending(steps);
  auto reduce = [&](std::size_t p) {
    const std::size_t n = pieces.values_of(p, count);
    const std::size_t block = steps.lead() + layout_for<Q, T>(q, n).total;
    pending.wait_oldest();
    steps.reduce(packets + p * slot + world * block, block, n, recv + p * pieces.values);
  };
  for (std::size_t p = 0; p < pieces.count; ++p) {
    const std::size_t n = pieces.values_of(p, count);
    const std::size_t block = steps.lead() + layout_for<Q, T>(q, n).total;
    std::byte* const outgoing = packets + p * slot;
    for (std::size_t chunk = 0; chunk < world; ++chunk) {
      const auto stream = steps.plan().stream_base +
                          chunk_stream(steps.rank(), steps.world(), static_cast<int>(chunk));
      steps.encode(send + chunk * count + p * pieces.values, n, outgoing + chunk * block,
                   rng_key{seed_of(q), call + p, stream});
      steps.progress();
    }
    pending.started(steps.start_all_to_all(outgoing, outgoing + world * block, block));
    if (p > 0) reduce(p - 1);
  }
  reduce(pieces.count - 1);
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
