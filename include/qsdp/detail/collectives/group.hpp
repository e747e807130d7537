// SPDX-License-Identifier: Apache-2.0
//
// Groups of host collectives (qsdp::group_start / qsdp::group_end, declared and documented in
// qsdp/collectives.hpp). Inside a group, qsdp::all_gather and qsdp::reduce_scatter record the call
// (checked and planned as a single call: the same call indices, the same packets) and return;
// group_end then runs them all:
//
//   1. on a group signature's first run, one agreement: a 64-byte group descriptor (how many
//      calls, a hash of their call descriptors, the size gate) from every rank; only when the
//      hashes differ, a second exchange of the call descriptors themselves, to name the first call
//      that differs;
//   2. every call encodes its packets into this rank's block(s), call after call, after the group
//      descriptor (host blocks; the device sends bare packets);
//   3. one exchange: all_gather_bytes of one block when every call is an all_gather, else
//      all_to_all_bytes of one block per peer (an all_gather's packets copied into each);
//   4. the world's group descriptors are compared, then every call decodes (all_gather) or sums
//      (reduce_scatter) its packets from the blocks.
//
// On an overlapping_communicator (MPI's, the in-process one) the calls are cut into segments of
// consecutive calls, each its own exchange started as soon as it is encoded, so that encoding,
// the wire and decoding overlap as in a single call's pipeline; the packets are the same.
//
// The size gate applies to the group's total: below it every call moves its values in packets of
// the policy qsdp::identity, which give the bits of a single call that the gate sends uncompressed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "../../call_options.hpp"
#include "../../codec.hpp"
#include "../../collective_types.hpp"
#include "../../communicator.hpp"
#include "group_state.hpp"
#include "host_packets.hpp"
#include "plan.hpp"
#include "timing.hpp"

namespace qsdp::detail {

/// The checks every host collective makes before it plans, grouped or not.
template <class Comm, class Q, class T>
void check_host_call(const Comm& comm, const Q& q, collective_kind kind, reduce_op op, const T* a,
                     const T* b, std::size_t count, const call_options& options,
                     const char* where) {
  check_collective_arguments<Comm, Q, T>(comm, q, where);
  const bool in_place = kind == collective_kind::all_reduce;
  check_buffers(a, in_place ? "data" : "send", b, in_place ? "data" : "recv", count, where);
  check_count(count, where);
  if (kind != collective_kind::all_gather) check_op(op, where);
  check_max_pieces(options.max_pieces, where);
}

/// What a host and a device group member share: the call as recorded, and its plan (call
/// indices, pipeline pieces) drawn when it was recorded, as the single call draws it.
template <class Comm, class Q, class T>
class planned_group_member : public group_member {
 public:
  planned_group_member(Comm& comm, const Q& q, collective_kind kind, reduce_op op, const T* send,
                       T* recv, std::size_t count, const call_options& options, const char* where)
      : comm_(comm),
        q_(q),
        op_(op),
        send_(send),
        recv_(recv),
        count_(count),
        where_(where),
        plan_(plan_collective<Q, T>(comm, q, kind, op, count, options)) {}

  const void* descriptor() const override { return &plan_.descriptor; }
  std::size_t value_bytes() const override { return count_ * sizeof(T); }
  std::size_t gate() const override { return plan_.descriptor.min_compressed_bytes; }
  bool scatters() const override { return plan_.kind == collective_kind::reduce_scatter; }

  std::size_t block_bytes(bool gated) const override {
    if (gated) return layout_for<identity, T>(identity{}, count_).total;
    std::size_t bytes = 0;
    for (std::size_t p = 0; p < plan_.pieces.count; ++p)
      bytes += layout_for<Q, T>(q_, plan_.pieces.values_of(p, count_)).total;
    return bytes;
  }

 protected:
  /// The values this rank encodes for chunk `chunk` of its block(s) (a reduce_scatter's chunk
  /// for each peer, an all_gather's one), and their random stream, as the single call's.
  const T* chunk_values(std::size_t chunk) const {
    return send_ + (scatters() ? chunk * count_ : 0);
  }
  std::uint32_t chunk_random_stream(std::size_t chunk) const {
    return plan_.stream_base + chunk_stream(comm_.rank(), comm_.size(), static_cast<int>(chunk));
  }
  std::size_t chunks() const { return scatters() ? static_cast<std::size_t>(comm_.size()) : 1; }

  Comm& comm_;
  Q q_;
  reduce_op op_;
  const T* send_;
  T* recv_;
  std::size_t count_;
  const char* where_;
  collective_call plan_;
};

/// Every call recorded in a group has the first call's size gate: the gate applies to the total.
inline void check_group_gate(const group_state& group, const call_options& options,
                             const char* where) {
  if (!group.members.empty() && group.members.front()->gate() != options.min_compressed_bytes)
    throw qsdp::error(std::string(where) + " in a group: call_options::min_compressed_bytes is " +
                      std::to_string(options.min_compressed_bytes) +
                      ", the group's first call passed " +
                      std::to_string(group.members.front()->gate()) +
                      "; a group has one size gate, which applies to its total");
}

/// An all_gather or reduce_scatter recorded in a group, as the single call would run it: its
/// packets encoded piece by piece with the same random streams, so that its result is the single
/// call's, byte for byte, whenever the gate decides alike.
template <class Comm, class Q, class T>
class host_group_member final : public planned_group_member<Comm, Q, T> {
  using base = planned_group_member<Comm, Q, T>;
  using base::comm_, base::q_, base::op_, base::recv_, base::count_, base::where_, base::plan_,
      base::scatters;

 public:
  using base::base;

  std::size_t accumulator_floats(bool gated) const override {
    if (!scatters()) return 0;
    return gated ? count_ : plan_.pieces.values;
  }

  void encode(std::byte* blocks, std::size_t stride, std::size_t offset, bool gated) override {
    add_seconds_on_exit timed(comm_.workspace().timings.encode_seconds);
    for (std::size_t chunk = 0; chunk < this->chunks(); ++chunk) {
      std::byte* out = blocks + chunk * stride + offset;
      const T* src = this->chunk_values(chunk);
      const std::uint32_t stream = this->chunk_random_stream(chunk);
      if (gated) {
        qsdp::encode(identity{}, src, count_, out, rng_position{.call = plan_.calls[0]});
        continue;
      }
      for (std::size_t p = 0; p < plan_.pieces.count; ++p) {
        const std::size_t n = plan_.pieces.values_of(p, count_);
        qsdp::encode(q_, src + p * plan_.pieces.values, n, out,
                     rng_position{.call = plan_.calls[0] + p, .stream = stream});
        out += layout_for<Q, T>(q_, n).total;
      }
    }
  }

  void finish(const std::byte* blocks, std::size_t stride, std::size_t offset, bool gated,
              float* accumulator) override {
    add_seconds_on_exit timed(comm_.workspace().timings.decode_seconds);
    if (gated)
      finish_pieces(identity{}, piece_plan{count_, 1}, blocks + offset, stride, accumulator);
    else
      finish_pieces(q_, plan_.pieces, blocks + offset, stride, accumulator);
  }

 private:
  template <class P>
  void finish_pieces(const P& q, const piece_plan& pieces, const std::byte* packets,
                     std::size_t stride, float* accumulator) {
    const int world = comm_.size();
    for (std::size_t p = 0; p < pieces.count; ++p) {
      const std::size_t n = pieces.values_of(p, count_);
      const std::size_t packet_bytes = layout_for<P, T>(q, n).total;
      T* const out = recv_ + p * pieces.values;
      if (scatters())
        reduce_packets(q, packets, stride, packet_bytes, world, n, op_, accumulator, out, where_);
      else
        decode_packets(q, packets, stride, packet_bytes, world, n, out, count_, where_, [] {});
      packets += packet_bytes;
    }
  }
};

inline constexpr const char* group_end_where = "qsdp::group_end";

/// Records a call made while a group is open on `comm`, after the checks of a single call.
template <class Comm, class Q, class T>
void record_in_group(Comm& comm, const Q& q, collective_kind kind, reduce_op op, const T* send,
                     T* recv, std::size_t count, const call_options& options, const char* where) {
  check_host_call(comm, q, kind, op, send, recv, count, options, where);
  group_state& group = comm.workspace().group;
  check_group_gate(group, options, where);
  group.members.push_back(std::make_unique<host_group_member<Comm, Q, T>>(
      comm, q, kind, op, send, recv, count, options, where));
}

/// What every rank says about its group before any packet moves (64 bytes, little-endian).
struct group_descriptor {
  std::uint32_t magic;  // "QSDG"
  std::uint32_t calls;  // members
  std::uint32_t world;
  std::uint32_t reserved0;
  std::uint64_t gate;    // the members' call_options::min_compressed_bytes
  std::uint64_t values;  // uncompressed bytes per peer, all members
  std::uint64_t hash;    // FNV-1a over the members' call descriptors, in call order
  std::uint64_t reserved[3];
};
static_assert(sizeof(group_descriptor) == 64);

inline constexpr std::uint32_t group_magic = 0x47445351u;  // "QSDG"

inline std::uint64_t fnv1a(std::uint64_t hash, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 0x100000001b3ull;
  return hash;
}

inline group_descriptor describe_group(const std::vector<std::unique_ptr<group_member>>& members,
                                       int world) {
  group_descriptor d{};
  d.magic = group_magic;
  d.calls = static_cast<std::uint32_t>(members.size());
  d.world = static_cast<std::uint32_t>(world);
  d.gate = members.empty() ? 0 : members.front()->gate();
  d.hash = 0xcbf29ce484222325ull;
  for (const auto& m : members) {
    d.values += m->value_bytes();
    d.hash = fnv1a(d.hash, m->descriptor(), sizeof(call_descriptor));
  }
  return d;
}

/// Compares the world's group descriptors (rank r's at all + r * stride) with rank 0's: throws
/// when one is not a group descriptor or holds another number of calls; returns whether their calls
/// differ otherwise (the hash of their call descriptors, the gate or the world).
inline bool compare_group_descriptors(const std::byte* all, std::size_t stride, std::size_t world) {
  group_descriptor first;
  std::memcpy(&first, all, sizeof first);
  bool hashes_differ = false;
  for (std::size_t peer = 0; peer < world; ++peer) {
    group_descriptor theirs;
    std::memcpy(&theirs, all + peer * stride, sizeof theirs);
    const std::string rank = "rank " + std::to_string(peer);
    if (theirs.magic != group_magic)
      throw qsdp::error(std::string(group_end_where) + ": ranks disagree: " + rank +
                        " sent no group descriptor: it made another collective call, not a "
                        "group_end");
    if (theirs.calls != first.calls)
      throw qsdp::error(std::string(group_end_where) + ": ranks disagree: " + rank +
                        "'s group holds " + std::to_string(theirs.calls) + " calls, rank 0's " +
                        std::to_string(first.calls));
    hashes_differ = hashes_differ || theirs.hash != first.hash || theirs.gate != first.gate ||
                    theirs.world != first.world;
  }
  return hashes_differ;
}

/// Agrees on the group: throws on every rank alike when the ranks' groups differ, naming how (the
/// number of calls, or the first call that differs and the field). gather(mine, n) returns the
/// world's n bytes (rank r's at r * n) on the host: the transport's (run_group).
template <class Gather>
void agree_on_group(const std::vector<std::unique_ptr<group_member>>& members, int world_size,
                    Gather&& gather) {
  const group_descriptor mine = describe_group(members, world_size);
  const auto world = static_cast<std::size_t>(world_size);
  if (!compare_group_descriptors(gather(&mine, sizeof mine), sizeof mine, world)) return;
  // Every rank saw the same descriptors, so every rank takes this second exchange.
  const std::size_t bytes = members.size() * sizeof(call_descriptor);
  std::vector<std::byte> mine_calls(bytes);
  for (std::size_t m = 0; m < members.size(); ++m)
    std::memcpy(mine_calls.data() + m * sizeof(call_descriptor), members[m]->descriptor(),
                sizeof(call_descriptor));
  const std::byte* const calls = gather(mine_calls.data(), bytes);
  for (std::size_t m = 0; m < members.size(); ++m) {
    call_descriptor zero;
    std::memcpy(&zero, calls + m * sizeof zero, sizeof zero);
    for (std::size_t peer = 1; peer < world; ++peer) {
      call_descriptor theirs;
      std::memcpy(&theirs, calls + peer * bytes + m * sizeof theirs, sizeof theirs);
      const std::string mismatch = describe_mismatch(zero, 0, theirs, static_cast<int>(peer));
      if (!mismatch.empty())
        throw qsdp::error(std::string(group_end_where) + ": ranks disagree on call " +
                          std::to_string(m) + " of the group (" + collective_name(zero.collective) +
                          "): " + mismatch);
    }
  }
  throw qsdp::error(std::string(group_end_where) +
                    ": ranks disagree on the group, though no call descriptor differs: they run "
                    "different library versions");
}

/// Consecutive members of a group whose packets move in one exchange, and where they go in the
/// group's scratch.
struct group_segment {
  std::size_t first = 0, end = 0;  // members [first, end)
  std::size_t block = 0;           // bytes of each rank's block
  bool scatters = false;           // all_to_all (a reduce_scatter among them), else all_gather
  std::size_t outgoing = 0, incoming = 0;  // offsets of the segment's blocks in the scratch
};

/// A segment closes once its blocks hold this many bytes, so that on an overlapping transport one
/// segment is encoded while the previous one is on the wire (as a single call's pieces).
inline constexpr std::size_t group_segment_bytes = min_piece_bytes / 4;

/// The exchanges of a group on a host communicator (run_group's Transport; the device's is in
/// detail/cuda/device_group.cuh). A Transport provides:
///   overlaps()                       whether segments may be on the wire while others are encoded
///   world()                          the communicator's size
///   agree(members)                   agree_on_group through the transport's gather, where needed
///   lead()                           bytes in front of each block: the group's descriptor on the
///                                    host, checked by every rank before it finishes a member;
///                                    0 on the device
///   scratch(bytes)                   the group's scratch, 64-byte aligned
///   replicate(blocks, stride, offset, n)
///                                    copies bytes [offset, offset + n) of block 0 to the others
///   start(scatters, out, in, block, alone) -> ticket
///                                    starts the exchange of one segment (all_to_all of world
///                                    blocks when it scatters, else all_gather of one); `alone`:
///                                    the group's only segment
///   wait(ticket, alone)              the segment's exchange is complete
///   count(gated, bytes)              the call counters
template <class Comm>
class host_group_transport {
 public:
  explicit host_group_transport(Comm& comm) : comm_(comm) {}

  static constexpr bool overlaps() { return overlapping_communicator<Comm>; }
  int world() const { return comm_.size(); }
  /// Host groups agree on a group signature's first run in a round trip of their own, as host
  /// calls do (agree_once); later runs carry the group's descriptor in front of every block. An
  /// empty group, which sends no block, agrees every time.
  void agree(const std::vector<std::unique_ptr<group_member>>& members) {
    const group_descriptor mine = describe_group(members, comm_.size());
    agreed_signatures& agreed = comm_.workspace().agreed;
    if (!members.empty() && agreed.contains(&mine)) return;
    agree_on_group(members, comm_.size(), [&](const void* bytes, std::size_t n) {
      std::byte* const all = comm_.workspace().get(n * static_cast<std::size_t>(comm_.size()));
      comm_.all_gather_bytes(static_cast<const std::byte*>(bytes), all, n);
      return static_cast<const std::byte*>(all);
    });
    agreed.remember(&mine);
  }
  static constexpr std::size_t lead() { return sizeof(group_descriptor); }
  std::byte* scratch(std::size_t bytes) { return comm_.workspace().get(bytes); }
  void replicate(std::byte* blocks, std::size_t stride, std::size_t offset, std::size_t n) {
    for (std::size_t peer = 1; peer < static_cast<std::size_t>(comm_.size()); ++peer)
      std::memcpy(blocks + peer * stride + offset, blocks + offset, n);
  }
  exchange_ticket start(bool scatters, const std::byte* out, std::byte* in, std::size_t block,
                        bool alone) {
    if constexpr (overlaps()) {
      if (!alone)
        return scatters ? comm_.start_all_to_all_bytes(out, in, block)
                        : comm_.start_all_gather_bytes(out, in, block);
    }
    if (scatters)
      comm_.all_to_all_bytes(out, in, block);
    else
      comm_.all_gather_bytes(out, in, block);
    return {};
  }
  void wait(exchange_ticket ticket, bool alone) {
    if constexpr (overlaps())
      if (!alone) comm_.wait(ticket);
  }
  void count(bool gated, std::size_t bytes) { comm_.workspace().counters.count(gated, bytes); }

 private:
  Comm& comm_;
};

/// Runs a group's members in one agreement and their exchange (the file comment): one exchange of
/// the whole group, or, where the transport overlaps, one per segment of at least
/// group_segment_bytes, started as soon as the segment is encoded.
template <class Transport>
void run_group(Transport& transport, std::vector<std::unique_ptr<group_member>> members) {
  const auto world = static_cast<std::size_t>(transport.world());
  std::size_t values = 0;
  for (const auto& m : members) values += m->value_bytes();
  const bool gated = !members.empty() && gated_uncompressed(values, 1, members.front()->gate());
  const std::size_t lead = transport.lead();
  std::vector<group_segment> segments;
  std::size_t floats = 0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (segments.empty() || (transport.overlaps() && segments.back().block >= group_segment_bytes))
      segments.push_back({.first = i, .end = i, .block = lead});
    group_segment& seg = segments.back();
    seg.end = i + 1;
    seg.block += members[i]->block_bytes(gated);
    seg.scatters = seg.scatters || members[i]->scatters();
    floats = std::max(floats, members[i]->accumulator_floats(gated));
  }
  std::size_t bytes = 0;
  for (group_segment& seg : segments) {
    seg.outgoing = bytes;
    bytes += align64((seg.scatters ? world : 1) * seg.block);
    seg.incoming = bytes;
    bytes += align64(world * seg.block);
  }
  const std::size_t accumulator = bytes;
  // An empty group agrees too: a rank whose group is empty must not leave the others waiting.
  transport.agree(members);
  if (members.empty()) return;
  std::byte* const scratch = transport.scratch(accumulator + floats * sizeof(float));

  const group_descriptor mine = describe_group(members, transport.world());
  auto encode = [&](const group_segment& seg) {
    std::byte* const out = scratch + seg.outgoing;
    if (lead)
      for (std::size_t b = 0; b < (seg.scatters ? world : 1); ++b)
        std::memcpy(out + b * seg.block, &mine, lead);
    std::size_t offset = lead;
    for (std::size_t i = seg.first; i < seg.end; ++i) {
      const std::size_t n = members[i]->block_bytes(gated);
      members[i]->encode(out, seg.block, offset, gated);
      if (seg.scatters && !members[i]->scatters()) transport.replicate(out, seg.block, offset, n);
      offset += n;
    }
  };
  const bool alone = segments.size() == 1;
  float* const acc = reinterpret_cast<float*>(scratch + accumulator);
  auto finish = [&](const group_segment& seg) {
    if (lead && compare_group_descriptors(scratch + seg.incoming, seg.block, world))
      throw qsdp::error(std::string(group_end_where) +
                        ": ranks disagree on the group: a call in it differs from rank 0's in "
                        "its collective, count, policy, op, element type, pipeline or gate (each "
                        "rank's group was agreed on before, so only their descriptors are "
                        "compared here)");
    std::size_t offset = lead;
    for (std::size_t i = seg.first; i < seg.end; ++i) {
      members[i]->finish(scratch + seg.incoming, seg.block, offset, gated, acc);
      offset += members[i]->block_bytes(gated);
    }
  };
  // Segment s is encoded and started, then segment s - 1 waited for and finished. An exception
  // waits for the exchanges still in flight first: they write into the scratch the next call uses.
  std::vector<exchange_ticket> tickets(segments.size());
  std::size_t started = 0, waited = 0;
  struct drain {
    Transport& transport;
    std::vector<exchange_ticket>& tickets;
    std::size_t& started;
    std::size_t& waited;
    bool alone;
    ~drain() {
      for (; waited < started; ++waited) {
        try {
          transport.wait(tickets[waited], alone);
        } catch (...) {  // the first error is the one thrown
        }
      }
    }
  } in_flight{transport, tickets, started, waited, alone};
  auto wait_and_finish = [&] {
    const std::size_t s = waited++;  // waited for, even when the wait throws
    transport.wait(tickets[s], alone);
    finish(segments[s]);
  };
  for (const group_segment& seg : segments) {
    encode(seg);
    tickets[started] = transport.start(seg.scatters, scratch + seg.outgoing, scratch + seg.incoming,
                                       seg.block, alone);
    ++started;
    if (started > 1) wait_and_finish();
  }
  if (started > waited) wait_and_finish();
  for (const auto& m : members) transport.count(gated, m->value_bytes());
}

/// Throws when a collective that cannot be grouped is called while a group is open on `comm`.
template <class Comm>
void refuse_in_group(Comm& comm, const char* where) {
  if (comm.workspace().group.open())
    throw qsdp::error(std::string(where) +
                      ": called while a group is open on this communicator (qsdp::group_start); "
                      "a group holds qsdp::all_gather and qsdp::reduce_scatter calls: make this "
                      "call after qsdp::group_end");
}

/// What every blocking host collective does first: wait for the collectives started on `comm`
/// (detail/collectives/async_lane.hpp), then refuse to run inside a group. On the lane's own
/// thread, a started collective was checked when it was started, and the group state belongs to
/// the caller's thread.
template <class Comm>
void enter_host_call(Comm& comm, const char* where) {
  async_lane& lane = comm.workspace().lane;
  if (lane.on_lane()) return;
  lane.drain(where);
  refuse_in_group(comm, where);
}

/// Queues `job` (a collective already checked) on `comm`'s progress thread and returns its work.
/// Refused inside a group, and where the communicator says it cannot be used from another thread.
template <class Comm, class Job>
qsdp::work start_on_lane(Comm& comm, Job&& job, const char* where) {
  if (comm.workspace().group.open())
    throw qsdp::error(std::string(where) +
                      ": called while a group is open on this communicator (qsdp::group_start); "
                      "record the call with the blocking form and start the whole group with "
                      "qsdp::group_end_async");
  if constexpr (requires { comm.check_async_use(where); }) comm.check_async_use(where);
  return comm.workspace().lane.submit(std::forward<Job>(job), where);
}

}  // namespace qsdp::detail

namespace qsdp::detail {

/// group_start's bookkeeping, the same on every communicator: one level deeper.
inline void open_group(group_state& group) {
  if (group.depth == std::numeric_limits<int>::max())
    throw qsdp::error("qsdp::group_start: groups nested " + std::to_string(group.depth) +
                      " deep; expected a group_end for each group_start");
  ++group.depth;
}

/// group_end's bookkeeping: one level up; the outermost level hands its members over to run
/// (the group is closed before it runs, so that a failure leaves the communicator usable), inner
/// levels hand over nothing.
inline std::vector<std::unique_ptr<group_member>> close_group(
    group_state& group, const char* where = "qsdp::group_end") {
  if (!group.open())
    throw qsdp::error(std::string(where) +
                      ": no group is open on this communicator; expected a qsdp::group_start "
                      "before it");
  if (--group.depth > 0) return {};
  std::vector<std::unique_ptr<group_member>> members = std::move(group.members);
  group.members.clear();
  return members;
}

}  // namespace qsdp::detail

namespace qsdp {

template <communicator Comm>
void group_start(Comm& comm) {
  detail::open_group(comm.workspace().group);
}

template <communicator Comm>
void group_end(Comm& comm) {
  comm.workspace().lane.drain("qsdp::group_end");
  detail::group_state& group = comm.workspace().group;
  std::vector<std::unique_ptr<detail::group_member>> members = detail::close_group(group);
  if (group.open()) return;  // an inner group: the outermost one runs
  detail::add_seconds_on_exit timed(comm.workspace().timings.calls_seconds);
  detail::host_group_transport<Comm> transport(comm);
  detail::run_group(transport, std::move(members));
}

template <communicator Comm>
work group_end_async(Comm& comm) {
  constexpr const char* where = "qsdp::group_end_async";
  detail::group_state& group = comm.workspace().group;
  if constexpr (requires { comm.check_async_use(where); })
    if (group.depth == 1) comm.check_async_use(where);  // refused with the group still open
  // std::function copies its callable: the members travel behind a shared pointer.
  auto members = std::make_shared<std::vector<std::unique_ptr<detail::group_member>>>(
      detail::close_group(group, where));
  if (group.open()) return work{};  // an inner group: the outermost one runs
  return comm.workspace().lane.submit(
      [&comm, members] {
        detail::add_seconds_on_exit timed(comm.workspace().timings.calls_seconds);
        detail::host_group_transport<Comm> transport(comm);
        detail::run_group(transport, std::move(*members));
      },
      where);
}

}  // namespace qsdp
