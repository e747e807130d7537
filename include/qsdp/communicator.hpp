// SPDX-License-Identifier: Apache-2.0
/// @file
/// Communicators: what the collectives need from a transport, and the in-process one (ranks as
/// threads). A communicator moves bytes and never quantizes; the collectives (collectives.hpp)
/// never move bytes themselves.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "call_options.hpp"
#include "config.hpp"
#include "detail/collectives/async_lane.hpp"
#include "detail/collectives/group_state.hpp"
#include "detail/transport/local.hpp"

namespace qsdp {

/// Where a communicator's buffers live.
enum class memory_space {
  host,   ///< host memory: local_communicator, mpi_communicator
  device  ///< device memory of the communicator's GPU: nccl_communicator, cuda_local_communicator
};

namespace detail {

/// The call signatures (64-byte call descriptors) all ranks of a communicator have agreed on, so
/// that a repeated call can skip the separate round trip that compares them: the device collectives
/// (whose kernels check the packet headers), and the host ones, which carry their descriptor in
/// front of their values or packets instead. The same on every rank, since every rank
/// makes the same calls in the same order. A device two_level pair keeps its calls' pairs of
/// descriptors (one per level, 128 bytes) in one of its own.
template <std::size_t Bytes>
class basic_agreed_signatures {
 public:
  /// Whether all ranks have agreed on this signature (Bytes bytes) before.
  bool contains(const void* signature) const {
    for (const auto& d : agreed_)
      if (std::memcmp(d.bytes, signature, Bytes) == 0) return true;
    return false;
  }
  /// Remembers an agreed signature; the oldest is forgotten past `capacity`.
  void remember(const void* signature) {
    if (agreed_.size() == capacity) agreed_.pop_front();
    agreed_.emplace_back();
    std::memcpy(agreed_.back().bytes, signature, Bytes);
  }
  static constexpr std::size_t capacity = 64;

 private:
  struct entry {
    unsigned char bytes[Bytes];
  };
  std::deque<entry> agreed_;
};
using agreed_signatures = basic_agreed_signatures<64>;

}  // namespace detail

/// Scratch memory a communicator owns for the collectives: grows when a larger call arrives and is
/// reused otherwise, so steady-state calls allocate nothing. `growths()` counts reallocations
/// (tests use it to prove reuse). It also keeps the call signatures the ranks have agreed on, the
/// open group and the call counters.
class host_workspace {
 public:
  /// The call signatures all ranks of the communicator have agreed on (used by the collectives).
  detail::agreed_signatures agreed;
  /// The group open on the communicator (qsdp::group_start .. qsdp::group_end), if any.
  detail::group_state group;
  /// What the communicator's collectives did with the size gate.
  call_counters counters;
  /// Where the communicator's collectives spent their time (call_timings).
  call_timings timings;

  /// A buffer of at least `bytes` bytes, 64-byte aligned; valid until the next call of get().
  /// Grows to max(bytes, 1.5 x the capacity) when `bytes` exceeds the capacity.
  /// @param bytes the least size of the buffer
  /// @return the start of the buffer, 64-byte aligned
  std::byte* get(std::size_t bytes) {
    if (bytes > capacity_) {
      const std::size_t grown = std::max(bytes, capacity_ + capacity_ / 2);
      storage_ = std::make_unique<std::byte[]>(grown + 64);
      capacity_ = grown;
      ++growths_;
    }
    auto address = reinterpret_cast<std::uintptr_t>(storage_.get());
    return storage_.get() + ((64 - address % 64) % 64);
  }
  /// @return the bytes get() can return without growing
  std::size_t capacity() const noexcept { return capacity_; }
  /// @return how many times get() has reallocated
  std::size_t growths() const noexcept { return growths_; }

 private:
  std::unique_ptr<std::byte[]> storage_;
  std::size_t capacity_ = 0;
  std::size_t growths_ = 0;

 public:
  /// The progress thread of the collectives started on the communicator (all_gather_async and
  /// its kin). Declared last, so that it ends, after its last collective, before the rest goes.
  detail::async_lane lane;
};

/// What the collectives need from a transport of host buffers:
/// - `rank()`, `size()`: this rank and the number of ranks;
/// - `all_gather_bytes(send, recv, n)`: every rank contributes n bytes; recv holds size() * n
///   bytes, rank r's block at offset r * n;
/// - `all_to_all_bytes(send, recv, n)`: send holds size() blocks of n bytes, block j for rank j;
///   recv gets block i from rank i at offset i * n;
/// - `workspace()`: a host_workspace owned by the communicator, reused across calls;
/// - `next_call()`: a per-communicator call counter: every rank calls the collectives in the same
///   order, so indices agree across ranks; consecutive calls return consecutive values (a call in
///   pieces draws a run of them and numbers its pieces from the first);
/// - `memory`: the memory_space of the buffers it moves.
///
/// Every call is collective: all ranks make it, in the same order, with the same n.
/// @tparam C the communicator type
template <class C>
concept communicator = requires(C& c, const std::byte* send, std::byte* recv, std::size_t n) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  c.all_gather_bytes(send, recv, n);
  c.all_to_all_bytes(send, recv, n);
  { c.workspace() } -> std::same_as<host_workspace&>;
  { c.next_call() } -> std::convertible_to<std::uint64_t>;
  { C::memory } -> std::convertible_to<memory_space>;
};

/// Names an exchange that an overlapping_communicator has started, until wait() is called with it.
struct exchange_ticket {
  std::uint64_t id = 0;  ///< the exchange's number among those its communicator started
};

/// A communicator that can keep exchanges in flight while its caller computes, which lets the
/// collectives' pipelines (call_options::max_pieces) encode one piece while the previous one is on
/// the wire:
/// - `start_all_gather_bytes(send, recv, n)`, `start_all_to_all_bytes(send, recv, n)`: as
///   all_gather_bytes and all_to_all_bytes, started, returning an exchange_ticket: until
///   wait(ticket) returns, send must not change and recv must not be read;
/// - `wait(ticket)`: the exchange has completed (under fault_options);
/// - `progress()`: lets started exchanges advance; never waits.
///
/// All ranks start the same exchanges in the same order; they may wait in any order. A blocking
/// exchange started after them is ordered after them. Communicators without these run each
/// exchange whole and the collectives send the same bytes, one piece after another.
/// @tparam C the communicator type
template <class C>
concept overlapping_communicator = communicator<C> &&
    requires(C& c, const std::byte* send, std::byte* recv, std::size_t n, exchange_ticket t) {
  { c.start_all_gather_bytes(send, recv, n) } -> std::same_as<exchange_ticket>;
  { c.start_all_to_all_bytes(send, recv, n) } -> std::same_as<exchange_ticket>;
  c.wait(t);
  c.progress();
};

/// How a communicator waits for its peers and what it does when one fails: the same options for
/// every transport (run_local, run_local_cuda, mpi_communicator, nccl_communicator;
/// docs/reliability.md).
struct fault_options {
  /// The longest wait for the other ranks: one collective exchange (in-process, MPI) or one
  /// blocking wait on the host (NCCL: synchronize(), the first call of a new signature). Unset: the
  /// transport's default (run_local 60 s, MPI no limit with blocking calls, NCCL 10 min). 0: no
  /// limit. Otherwise 1 ms .. 24 h, well above the slowest legitimate wait: a rank that is late
  /// because it writes a checkpoint looks exactly like a hung one. Every rank should pass the same
  /// value (for MPI it must: a limit makes every call non-blocking, and MPI never matches a
  /// blocking collective with a non-blocking one).
  std::optional<std::chrono::milliseconds> timeout{};
  /// Longest sleep between two polls of a waiting MPI or NCCL call, 0 (poll continuously) to 1 min.
  /// The first sleeps are shorter (1 us, doubling), so a wait that ends soon is not charged a whole
  /// interval; 100 us costs a waiting host thread about 1 % of a core.
  std::chrono::microseconds poll_interval{100};
  /// On a timeout or a transport's asynchronous error: true (the default) aborts first -- MPI_Abort
  /// ends the MPI job, ncclCommAbort frees the NCCL communicator -- then throws; false throws
  /// without aborting (qsdp::timeout_error for a timeout) and leaves the communicator unusable, for
  /// a caller that logs or saves what it needs before ending the job itself. In-process ranks are
  /// threads of one process: a failing rank always releases the others, whatever this says.
  bool abort_on_failure = true;
};

/// The longest fault_options::timeout: one day (more buys nothing over 0, no limit).
inline constexpr std::chrono::milliseconds max_fault_timeout = std::chrono::hours(24);
/// The longest fault_options::poll_interval: a longer sleep would leave a dead peer unnoticed as
/// long.
inline constexpr std::chrono::microseconds max_poll_interval = std::chrono::minutes(1);

namespace detail {

/// Throws a qsdp::error naming the option and its value when one is out of range.
inline void check_fault_options(const fault_options& options, const char* where) {
  if (options.timeout && (options.timeout->count() < 0 || *options.timeout > max_fault_timeout))
    throw qsdp::error(std::string(where) + ": fault_options::timeout is " +
                      std::to_string(options.timeout->count()) +
                      " ms; expected 0 (no limit) or 1.." +
                      std::to_string(max_fault_timeout.count()) + " ms");
  if (options.poll_interval.count() < 0 || options.poll_interval > max_poll_interval)
    throw qsdp::error(std::string(where) + ": fault_options::poll_interval is " +
                      std::to_string(options.poll_interval.count()) + " us; expected 0.." +
                      std::to_string(max_poll_interval.count()) + " us (0 polls continuously)");
}

/// The timeout a transport applies: options.timeout, or the transport's default when unset.
inline std::chrono::milliseconds effective_timeout(const fault_options& options,
                                                   std::chrono::milliseconds transport_default) {
  return options.timeout.value_or(transport_default);
}

/// The checks of run_local and run_local_cuda; returns the timeout their ranks wait with.
inline std::chrono::milliseconds checked_local_world(int world, const fault_options& options,
                                                     std::chrono::milliseconds transport_default,
                                                     const char* where) {
  if (world < 1)
    throw qsdp::error(std::string(where) + ": world is " + std::to_string(world) +
                      "; expected >= 1");
  check_fault_options(options, where);
  return effective_timeout(options, transport_default);
}

}  // namespace detail

/// run_local's default fault_options::timeout.
inline constexpr std::chrono::milliseconds local_default_timeout = std::chrono::seconds(60);

/// One rank of an in-process world (ranks are threads of run_local). Host memory. An
/// overlapping_communicator whose started exchanges run when they are waited for (or when a later
/// blocking exchange comes): the latest moment a transport may complete them, so the in-process
/// tests catch a pipeline that reads a packet before waiting for it. rank(), size() and
/// next_call() are those of every communicator.
///
/// Every exchange throws qsdp::error when the ranks pass different byte counts, when another rank
/// failed or returned while this one waits, and qsdp::timeout_error past the world's
/// fault_options::timeout.
class local_communicator : public detail::in_process_rank<detail::local_world> {
 public:
  /// Host buffers.
  static constexpr memory_space memory = memory_space::host;

  /// Made by run_local and run_local_nodes for each rank thread.
  /// @param world the ranks' shared state
  /// @param rank this rank, 0 .. world size - 1
  local_communicator(detail::local_world& world, int rank) : in_process_rank(world, rank) {}

  /// @return this rank's scratch for the collectives
  host_workspace& workspace() noexcept { return workspace_; }

  /// Runs the started exchanges, then gathers n bytes from every rank.
  /// @param send this rank's n bytes
  /// @param recv size() x n bytes: rank r's block at offset r x n
  /// @param n bytes per rank, the same on every rank
  /// @throws qsdp::error when the ranks pass different n, or another rank failed or returned
  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    run_started(started_);
    gather(send, recv, n);
  }

  /// Runs the started exchanges, then sends block j of `send` to rank j.
  /// @param send size() blocks of n bytes, block j for rank j
  /// @param recv size() blocks of n bytes: block i from rank i at offset i x n
  /// @param n bytes per block, the same on every rank
  /// @throws qsdp::error when the ranks pass different n, or another rank failed or returned
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    run_started(started_);
    scatter(send, recv, n);
  }

  /// Starts an all_gather_bytes, which runs when it is waited for.
  /// @param send this rank's n bytes, unchanged until wait() returns
  /// @param recv size() x n bytes, not read until wait() returns
  /// @param n bytes per rank
  /// @return the ticket to wait for
  exchange_ticket start_all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    return start({false, send, recv, n});
  }
  /// Starts an all_to_all_bytes, which runs when it is waited for.
  /// @param send size() blocks of n bytes, unchanged until wait() returns
  /// @param recv size() blocks of n bytes, not read until wait() returns
  /// @param n bytes per block
  /// @return the ticket to wait for
  exchange_ticket start_all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    return start({true, send, recv, n});
  }
  /// Runs the started exchanges up to and including `ticket`, in the order they were started.
  /// @param ticket what start_all_gather_bytes or start_all_to_all_bytes returned
  /// @throws qsdp::error as all_gather_bytes
  void wait(exchange_ticket ticket) { run_started(ticket.id + 1); }
  /// Does nothing: started exchanges run when they are waited for.
  void progress() noexcept {}

 private:
  struct started_exchange {
    bool all_to_all;
    const std::byte* send;
    std::byte* recv;
    std::size_t n;
  };

  exchange_ticket start(const started_exchange& e) {
    queued_.push_back(e);
    return {started_++};
  }

  /// Runs the started exchanges before number `end`; one that fails is not run again.
  void run_started(std::uint64_t end) {
    while (completed_ < end && !queued_.empty()) {
      const started_exchange e = queued_.front();
      queued_.pop_front();
      ++completed_;
      if (e.all_to_all)
        scatter(e.send, e.recv, e.n);
      else
        gather(e.send, e.recv, e.n);
    }
  }

  void gather(const std::byte* send, std::byte* recv, std::size_t n) {
    exchange(send, n, "all_gather_bytes", [&](int peer, const std::byte* data) {
      if (n) std::memcpy(recv + static_cast<std::size_t>(peer) * n, data, n);
    });
  }

  void scatter(const std::byte* send, std::byte* recv, std::size_t n) {
    const std::size_t mine = static_cast<std::size_t>(rank_) * n;
    exchange(send, n * static_cast<std::size_t>(size()), "all_to_all_bytes",
             [&](int peer, const std::byte* data) {
               if (n) std::memcpy(recv + static_cast<std::size_t>(peer) * n, data + mine, n);
             });
  }

  /// Post my buffer, wait for all, read every peer's buffer, wait until all have read.
  template <class Read>
  void exchange(const std::byte* send, std::size_t bytes, const char* what, Read&& read) {
    post_and_meet(send, bytes, "qsdp::local_communicator", what);
    for (int peer = 0; peer < size(); ++peer) read(peer, posted(peer));
    meet();
  }

  host_workspace workspace_;
  std::deque<started_exchange> queued_;
  std::uint64_t started_ = 0, completed_ = 0;
};

static_assert(overlapping_communicator<local_communicator>);

/// Runs fn(comm) on `world` threads, one per rank, and waits for all. If a rank throws, the others
/// are released from any collective with a qsdp::error and the first rank's exception is rethrown
/// here; a rank that returns while others still wait in a collective releases them the same way.
/// @tparam Fn callable as fn(local_communicator&)
/// @param world the number of ranks, >= 1
/// @param fn the work of each rank
/// @param options the fault options of every rank (timeout default: local_default_timeout)
/// @throws qsdp::error when world < 1 or an option is out of range (fault_options::timeout above
///         max_fault_timeout or negative, fault_options::poll_interval above max_poll_interval
///         or negative); else the first exception a rank threw
template <class Fn>
void run_local(int world, Fn&& fn, fault_options options = {}) {
  detail::local_world shared(
      world, detail::checked_local_world(world, options, local_default_timeout, "qsdp::run_local"));
  detail::run_rank_threads(world, shared.barrier, [&](int rank) {
    local_communicator comm(shared, rank);
    fn(comm);
  });
}

/// A communicator pair for two-level collectives (collectives.hpp): `node` joins the ranks of one
/// node (fast links), `cross` the ranks with the same place in their nodes, one per node (the slow
/// links between nodes). Every node has the same number of ranks: rank() = node index x node_size()
/// + place in the node, where the node index is the rank in `cross`. Holds references (both
/// communicators must outlive it) and the scratch of its collectives. Two host communicators make
/// the pair below; two device communicators (two NCCL communicators, say) the device pair of
/// device_communicator.hpp, whose collectives take device buffers and a stream.
/// @tparam Node the communicator of a node's ranks
/// @tparam Cross the communicator of the ranks at one place of every node
template <class Node, class Cross>
class two_level;

/// Deduces the pair's types from its communicators: `qsdp::two_level pair(node, cross);`.
template <class Node, class Cross>
two_level(Node&, Cross&) -> two_level<Node, Cross>;

namespace detail {

/// What each rank says about its places when a two_level pair is made; `refused`: this rank
/// itself found the pair unusable (a device pair on two devices), which every rank must hear.
struct grid_place {
  std::int32_t node_size, node_rank, nodes, node_index, refused;
};

/// The first rank of `places` (count of them, gathered over a communicator) whose `field` differs
/// from entry 0's, or -1.
template <class Field>
int first_differing(const grid_place* places, int count, Field field) {
  for (int r = 1; r < count; ++r)
    if (field(places[r]) != field(places[0])) return r;
  return -1;
}

/// Small host values gathered over a host communicator, received in its workspace (not the heap:
/// an MPI exchange that timed out stays pending and may still write there, mpi_communicator).
/// Returns the size() x n gathered bytes, valid until the communicator's workspace is used again.
struct host_gather {
  template <class Comm>
  const std::byte* operator()(Comm& comm, const void* mine, std::size_t n) const {
    std::byte* const all = comm.workspace().get(static_cast<std::size_t>(comm.size()) * n);
    comm.all_gather_bytes(static_cast<const std::byte*>(mine), all, n);
    return all;
  }
};

/// The check of two_level's constructor, on host or device pairs: `gather(comm, mine, n)` gathers n
/// bytes from each rank of comm (host_gather, or the device pair's). `refusal`: why this rank
/// cannot take part ("" when it can); every rank then throws, naming it.
template <class Node, class Cross, class Gather>
void check_grid(Node& node, Cross& cross, Gather&& gather, const std::string& refusal,
                const char* where) {
  const grid_place mine{node.size(), node.rank(), cross.size(), cross.rank(),
                        refusal.empty() ? 0 : 1};
  // Over the cross communicator: its ranks must all sit at the same place of nodes of one size.
  const auto* const across = reinterpret_cast<const grid_place*>(gather(cross, &mine, sizeof mine));
  std::string problem = refusal;
  for (int r = 0; r < cross.size() && problem.empty(); ++r)
    if (across[r].refused)
      problem = "cross rank " + std::to_string(r) + " refused the pair (its error names why)";
  if (problem.empty()) {
    if (const int r =
            first_differing(across, cross.size(), [](const grid_place& p) { return p.node_size; });
        r >= 0)
      problem =
          "the node of cross rank " + std::to_string(r) + " has " +
          std::to_string(across[static_cast<std::size_t>(r)].node_size) +
          " ranks, cross rank 0's " + std::to_string(across[0].node_size) +
          ": every node must have as many ranks (the world is not a multiple of the node size)";
    else if (const int q = first_differing(across, cross.size(),
                                           [](const grid_place& p) { return p.node_rank; });
             q >= 0)
      problem = "cross rank " + std::to_string(q) + " is rank " +
                std::to_string(across[static_cast<std::size_t>(q)].node_rank) +
                " of its node, cross rank 0 rank " + std::to_string(across[0].node_rank) +
                ": a cross communicator joins the ranks at one place of every node";
  }
  // Over the node: its ranks must all be in cross communicators of one size, at one node index; and
  // a problem any of them found reaches all of them (as one flag), so that every rank throws.
  struct verdict {
    grid_place place;
    std::int32_t failed;
  };
  const verdict said{mine, problem.empty() ? 0 : 1};
  const auto* const within = reinterpret_cast<const verdict*>(gather(node, &said, sizeof said));
  if (problem.empty()) {
    std::vector<grid_place> places;
    for (int r = 0; r < node.size(); ++r) places.push_back(within[r].place);
    if (const int r = first_differing(places.data(), node.size(),
                                      [](const grid_place& p) { return p.nodes; });
        r >= 0)
      problem =
          "node rank " + std::to_string(r) + " is in a cross communicator of " +
          std::to_string(places[static_cast<std::size_t>(r)].nodes) +
          " ranks, node rank 0 in one of " + std::to_string(places[0].nodes) +
          ": every node must have as many ranks (the world is not a multiple of the node size)";
    else if (const int q = first_differing(places.data(), node.size(),
                                           [](const grid_place& p) { return p.node_index; });
             q >= 0)
      problem = "node rank " + std::to_string(q) + " is rank " +
                std::to_string(places[static_cast<std::size_t>(q)].node_index) +
                " of its cross communicator, node rank 0 rank " +
                std::to_string(places[0].node_index) +
                ": the ranks of a node must share their cross rank (the node's index)";
    else
      for (int r = 0; r < node.size(); ++r)
        if (within[r].failed) {
          problem = "node rank " + std::to_string(r) +
                    " found the cross communicators inconsistent or refused the pair (its error "
                    "names how)";
          break;
        }
  }
  if (!problem.empty()) throw qsdp::error(std::string(where) + ": " + problem);
}

}  // namespace detail

/// The pair of two host communicators (local_communicator, mpi_communicator).
template <communicator Node, communicator Cross>
class two_level<Node, Cross> {
 public:
  /// Collective over all ranks of both communicators: checks that they form a grid (every node of
  /// the same size, every cross communicator of the same size, each rank's places consistent).
  /// @param node the communicator of this rank's node; must outlive the pair
  /// @param cross the communicator of this rank's place across the nodes; must outlive the pair
  /// @throws qsdp::error on every rank, saying which ranks differ, when the nodes differ in size,
  ///         the cross communicators differ in size, or a rank's places are inconsistent
  two_level(Node& node, Cross& cross) : node_(node), cross_(cross) {
    detail::check_grid(node, cross, detail::host_gather{}, "", "qsdp::two_level");
  }

  /// @return this rank in the whole world: node index x node_size() + rank in the node
  int rank() const { return cross_.rank() * node_.size() + node_.rank(); }
  /// @return the number of ranks in the whole world: nodes() x node_size()
  int size() const { return cross_.size() * node_.size(); }
  /// @return the number of ranks of each node
  int node_size() const { return node_.size(); }
  /// @return the number of nodes
  int nodes() const { return cross_.size(); }
  /// @return the communicator of this rank's node
  Node& node() noexcept { return node_; }
  /// @return the communicator of this rank's place across the nodes
  Cross& cross() noexcept { return cross_; }
  /// Scratch of the two-level collectives (their reordered and intermediate values); each level's
  /// exchange uses its own communicator's.
  /// @return the pair's own workspace
  host_workspace& workspace() noexcept { return workspace_; }

 private:
  Node& node_;
  Cross& cross_;
  host_workspace workspace_;
};

namespace detail {

/// The rank threads of an in-process grid of nodes (run_local_nodes, run_local_cuda_nodes): world
/// ranks in nodes of node_size consecutive ranks, a World per node and one per place, made by
/// make(size); body(rank, node world, place, cross world, node index) runs on each rank's thread. A
/// rank that throws or returns early releases the ranks of its node and of its place from any
/// collective; those that then fail release theirs, so no rank is left waiting.
template <class World, class Make, class Body>
void run_node_grid(int world, int node_size, const char* where, Make&& make, Body&& body) {
  if (node_size < 1 || world % node_size != 0)
    throw qsdp::error(std::string(where) + ": node_size is " + std::to_string(node_size) +
                      "; expected a divisor of the world size " + std::to_string(world) +
                      " (every node has as many ranks)");
  const int nodes = world / node_size;
  std::vector<std::unique_ptr<World>> node_worlds, cross_worlds;
  for (int n = 0; n < nodes; ++n) node_worlds.push_back(make(node_size));
  for (int l = 0; l < node_size; ++l) cross_worlds.push_back(make(nodes));
  auto node_world = [&](int rank) -> World& {
    return *node_worlds[static_cast<std::size_t>(rank / node_size)];
  };
  auto cross_world = [&](int rank) -> World& {
    return *cross_worlds[static_cast<std::size_t>(rank % node_size)];
  };
  run_rank_threads(
      world,
      [&](int rank) {
        body(rank, node_world(rank), rank % node_size, cross_world(rank), rank / node_size);
      },
      [&](int rank) {
        node_world(rank).barrier.depart(rank % node_size);
        cross_world(rank).barrier.depart(rank / node_size);
      },
      [&](int rank, const std::string& reason) {  // its two worlds: the others fail in turn
        node_world(rank).barrier.break_with(reason);
        cross_world(rank).barrier.break_with(reason);
      });
}

}  // namespace detail

/// Runs fn(pair) on `world` threads as run_local does, the ranks grouped into nodes of `node_size`
/// consecutive ranks: pair is a two_level<local_communicator, local_communicator> whose rank() is
/// the thread's rank. A rank that throws or returns early releases the ranks of its node and of its
/// place from any collective; those that then fail release theirs, so no rank is left waiting.
/// @tparam Fn callable as fn(two_level<local_communicator, local_communicator>&)
/// @param world the number of ranks, >= 1
/// @param node_size the ranks per node, a divisor of world
/// @param fn the work of each rank
/// @param options the fault options of every rank and level (as run_local's)
/// @throws qsdp::error before any thread starts when world < 1, node_size is not a divisor of
///         world, or an option is out of range (as run_local); else the first exception a rank
///         threw
template <class Fn>
void run_local_nodes(int world, int node_size, Fn&& fn, fault_options options = {}) {
  constexpr const char* where = "qsdp::run_local_nodes";
  const auto timeout = detail::checked_local_world(world, options, local_default_timeout, where);
  detail::run_node_grid<detail::local_world>(
      world, node_size, where,
      [&](int size) { return std::make_unique<detail::local_world>(size, timeout); },
      [&](int, detail::local_world& node_world, int place, detail::local_world& cross_world,
          int node_index) {
        local_communicator node(node_world, place);
        local_communicator cross(cross_world, node_index);
        two_level<local_communicator, local_communicator> pair(node, cross);
        fn(pair);
      });
}

}  // namespace qsdp
