// SPDX-License-Identifier: Apache-2.0
/// @file
/// The MPI transport: qsdp::mpi_communicator, a qsdp::communicator over an MPI_Comm that the
/// caller owns (qsdp never duplicates, frees or reconfigures it), and qsdp::mpi_two_level. Host
/// memory only; link MPI yourself (CMake: MPI::MPI_CXX or MPI::MPI_C), qsdp::qsdp does not.
///
/// Errors. Every MPI return code is checked and a failure becomes a qsdp::error naming the MPI call
/// and MPI's own message. But MPI only returns errors when the communicator's error handler is
/// MPI_ERRORS_RETURN: under the default, MPI_ERRORS_ARE_FATAL, MPI aborts the job inside the
/// failing call, before qsdp can report anything. qsdp does not change the handler behind your back
/// (it is your communicator, and other code may rely on the handler); call
/// `MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN)` yourself to get exceptions. The datatype
/// calls (MPI_Type_*) belong to no communicator; MPI 3.1 raises their errors on MPI_COMM_WORLD's
/// handler (MPI 4.0: MPI_COMM_SELF's).
///
/// Faults: a rank that dies, hangs or skips a collective. A collective completes only when every
/// rank joins it, so one failing rank leaves the others waiting inside MPI, where qsdp cannot see
/// them.
/// - A rank that dies is handled by the launcher, not by qsdp: Open MPI's mpirun kills the whole
///   job, and exits non-zero, when a process ends on a signal (abort, segfault), exits without
///   MPI_Finalize (whatever its status), or calls MPI_Abort. An exception thrown on one rank (a
///   qsdp::error for a bad argument, say) is such a death only if it leaves main; catch it there,
///   print it and call MPI_Abort(MPI_COMM_WORLD, code): the other ranks, already waiting in the
///   collective, are then killed too instead of waiting for a rank that will never come.
/// - A rank that hangs (a deadlock, a stuck file system), or that skips a collective or returns
///   early and then waits in MPI_Finalize, kills nothing: the job hangs forever.
///   fault_options::timeout bounds the wait: each MPI call of a collective then runs non-blocking
///   (MPI_Iallgather, MPI_Ialltoall) and is polled until it completes or the timeout passes; at the
///   timeout this rank names itself, the call, the byte count and the timeout on stderr and calls
///   MPI_Abort (or throws qsdp::timeout_error; see fault_options::abort_on_failure), and the
///   launcher ends the job. Timeout 0 (the default) keeps the blocking calls, with no overhead (a
///   collective in pipeline pieces uses non-blocking ones either way, waited for in MPI_Wait).
///   Every rank of a communicator must use the same setting, zero or not: MPI never matches a
///   blocking collective with a non-blocking one, so mixed ranks would wait for each other forever.
#pragma once

// First: some MPI C++ bindings (old MPICH) clash with <cstdio>'s SEEK_* macros when included after
// it.
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "communicator.hpp"
#include "config.hpp"
#include "detail/transport/mpi.hpp"

namespace qsdp {

/// One rank of an MPI communicator. Non-owning: `comm` must outlive this object, and MPI must stay
/// initialized while it is used. Host memory (a CUDA-aware MPI could move device buffers, but qsdp
/// does not assume one). Not copyable: a copy would start its own call counter and workspace, and
/// the counters of the ranks would no longer agree; move it or pass it by reference.
///
/// Like any MPI collective, every call must be made by all ranks of `comm`, in the same order, with
/// the same n; argument errors (null buffers, overlap) are thrown on the rank that made them,
/// before MPI is called, so the other ranks then wait in the collective: catch the error, print it
/// and call MPI_Abort, or give every rank a timeout (fault_options). Use one thread per
/// communicator at a time.
class mpi_communicator {
 public:
  /// Host buffers.
  static constexpr memory_space memory = memory_space::host;

  /// Wraps `comm`. Does not touch comm's error handler (see the top of this file).
  /// @param comm an intracommunicator the caller owns; must outlive this object
  /// @param options the fault options; every rank of comm must pass the same options.timeout,
  ///        zero or not
  /// @throws qsdp::error when MPI is not initialized (or already finalized), when comm is
  ///         MPI_COMM_NULL or an intercommunicator (whose collectives exchange between two groups,
  ///         not among all ranks), when an option is out of range (fault_options::timeout above
  ///         max_fault_timeout or negative, fault_options::poll_interval above max_poll_interval
  ///         or negative), or when MPI_Comm_rank or MPI_Comm_size fails
  explicit mpi_communicator(MPI_Comm comm, fault_options options = {})
      : comm_(detail::mpi_intracommunicator(comm, options, "qsdp::mpi_communicator")),
        options_(options) {
    // Cached: rank() and size() are called on every collective and never change for a communicator.
    detail::mpi_check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank", "qsdp::mpi_communicator");
    detail::mpi_check(MPI_Comm_size(comm, &size_), "MPI_Comm_size", "qsdp::mpi_communicator");
  }

  mpi_communicator(const mpi_communicator&) = delete;
  mpi_communicator& operator=(const mpi_communicator&) = delete;
  /// Takes over the wrapped communicator, call counter and workspace (no exchange or collective may
  /// be started).
  mpi_communicator(mpi_communicator&&) noexcept = default;
  /// Takes over the wrapped communicator, call counter and workspace (no exchange or collective may
  /// be started).
  /// @return this object
  mpi_communicator& operator=(mpi_communicator&&) noexcept = default;
  ~mpi_communicator() = default;

  /// @return this rank in the communicator
  int rank() const noexcept { return rank_; }
  /// @return the number of ranks of the communicator
  int size() const noexcept { return size_; }
  /// The wrapped communicator (still owned by the caller).
  /// @return the MPI_Comm passed to the constructor
  MPI_Comm native() const noexcept { return comm_; }
  /// @return the fault options passed to the constructor
  const fault_options& options() const noexcept { return options_; }
  /// False once an exchange timed out with abort_on_failure = false; every exchange then throws.
  /// @return whether exchanges may still be made
  bool usable() const noexcept { return unusable_because_.empty(); }
  /// @return the scratch of the collectives
  host_workspace& workspace() noexcept { return workspace_; }
  /// Refuses the collectives started with a work (all_gather_async and its kin) unless MPI may be
  /// called from their progress thread: initialised at MPI_THREAD_SERIALIZED or above.
  /// @param where the call, for the message
  /// @throws qsdp::error naming the thread level MPI provides and MPI_Init_thread
  void check_async_use(const char* where) const {
    int provided = MPI_THREAD_SINGLE;
    detail::mpi_check(MPI_Query_thread(&provided), "MPI_Query_thread", where);
    if (provided >= MPI_THREAD_SERIALIZED) return;
    throw qsdp::error(
        std::string(where) + ": MPI provides thread level " +
        (provided == MPI_THREAD_FUNNELED ? "MPI_THREAD_FUNNELED" : "MPI_THREAD_SINGLE") +
        ", and a started collective calls MPI from the communicator's progress "
        "thread; expected MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE: initialise "
        "MPI with MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided)");
  }
  /// @return the index of the next collective call: 0, 1, 2, ... on every rank alike
  std::uint64_t next_call() noexcept { return calls_++; }

  /// Every rank contributes n bytes; recv (size() * n bytes) gets rank r's at offset r * n. Any n,
  /// including 0 and more than INT_MAX. send may be recv + rank() * n (in place).
  ///
  /// With a timeout and abort_on_failure = false, a timed-out call throws qsdp::timeout_error but
  /// stays pending inside MPI, which may still read send and write recv at any later time: they
  /// must never be freed or reused (the collectives pass workspace() memory, which this class then
  /// keeps forever), and the job must end with MPI_Abort.
  /// @param send this rank's n bytes
  /// @param recv size() x n bytes
  /// @param n bytes per rank, the same on every rank
  /// @throws qsdp::error when send or recv is null with n > 0, when send and recv overlap and send
  ///         is not this rank's block of recv, when size() x n overflows, when an MPI call fails,
  ///         or when the communicator is unusable (usable()); qsdp::timeout_error past
  ///         fault_options::timeout
  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    constexpr const char* where = "qsdp::mpi_communicator::all_gather_bytes";
    throw_if_unusable(where);
    try {
      detail::mpi_all_gather_bytes(comm_, rank_, size_, send, recv, n, detail::mpi_max_chunk_bytes,
                                   options_);
    } catch (const timeout_error& e) {
      abandon_started(MPI_REQUEST_NULL);
      become_unusable(e.what());
      throw;
    }
  }

  /// send holds size() blocks of n bytes, block j for rank j; recv gets rank i's block at offset
  /// i x n. Any n, including 0 and more than INT_MAX. send and recv must not overlap. A timed-out
  /// call: as all_gather_bytes.
  /// @param send size() blocks of n bytes, block j for rank j
  /// @param recv size() blocks of n bytes
  /// @param n bytes per block, the same on every rank
  /// @throws qsdp::error when send or recv is null with n > 0, when send and recv overlap, when
  ///         size() x n overflows, when an MPI call fails, or when the communicator is unusable;
  ///         qsdp::timeout_error past fault_options::timeout
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    constexpr const char* where = "qsdp::mpi_communicator::all_to_all_bytes";
    throw_if_unusable(where);
    try {
      detail::mpi_all_to_all_bytes(comm_, size_, send, recv, n, detail::mpi_max_chunk_bytes,
                                   options_);
    } catch (const timeout_error& e) {
      abandon_started(MPI_REQUEST_NULL);
      become_unusable(e.what());
      throw;
    }
  }

  /// The pipeline's exchanges (qsdp::overlapping_communicator): MPI_Iallgather and MPI_Ialltoall,
  /// moved on by progress() and wait(). wait() blocks in MPI_Wait, or with a timeout polls as the
  /// blocking exchanges do; a timed-out wait leaves this exchange and every other started one
  /// pending inside MPI (their buffers are kept forever, as for the blocking exchanges). Use the
  /// collectives rather than these, unless you write a pipeline of your own; then wait for every
  /// started exchange before this object is destroyed or assigned to (MPI would still write into
  /// the buffers of one that was not).
  /// @param send this rank's n bytes, unchanged until wait() returns
  /// @param recv size() x n bytes, not read until wait() returns; must not overlap send
  /// @param n bytes per rank, the same on every rank
  /// @return the ticket to wait for
  /// @throws qsdp::error as all_gather_bytes (and when send and recv overlap at all)
  exchange_ticket start_all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    return start({MPI_Allgather, MPI_Iallgather, "MPI_Allgather", "MPI_Iallgather"}, send, recv, n,
                 "qsdp::mpi_communicator::start_all_gather_bytes");
  }
  /// Starts an all_to_all_bytes (MPI_Ialltoall), as start_all_gather_bytes does.
  /// @param send size() blocks of n bytes, unchanged until wait() returns
  /// @param recv size() blocks of n bytes, not read until wait() returns; must not overlap send
  /// @param n bytes per block, the same on every rank
  /// @return the ticket to wait for
  /// @throws qsdp::error as all_to_all_bytes
  exchange_ticket start_all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    return start({MPI_Alltoall, MPI_Ialltoall, "MPI_Alltoall", "MPI_Ialltoall"}, send, recv, n,
                 "qsdp::mpi_communicator::start_all_to_all_bytes");
  }

  /// Waits until the started exchange `ticket` has completed.
  /// @param ticket what start_all_gather_bytes or start_all_to_all_bytes returned
  /// @throws qsdp::error when ticket names no started exchange that was not waited for yet, when
  ///         MPI_Wait fails, or when the communicator is unusable; qsdp::timeout_error past
  ///         fault_options::timeout
  void wait(exchange_ticket ticket) {
    constexpr const char* where = "qsdp::mpi_communicator::wait";
    throw_if_unusable(where);
    if (ticket.id < first_started_ || ticket.id - first_started_ >= started_.size() ||
        started_[static_cast<std::size_t>(ticket.id - first_started_)].waited)
      throw qsdp::error(std::string(where) + ": ticket " + std::to_string(ticket.id) +
                        " names no started exchange that was not waited for yet");
    pending_start& pending = started_[static_cast<std::size_t>(ticket.id - first_started_)];
    pending.waited = true;
    if (pending.request != MPI_REQUEST_NULL) {
      if (detail::effective_timeout(options_, mpi_default_timeout).count() == 0) {
        detail::mpi_check(MPI_Wait(&pending.request, MPI_STATUS_IGNORE), "MPI_Wait", where);
      } else {
        try {
          detail::mpi_wait_or_time_out(
              pending.request, options_,
              {comm_, where, pending.call, pending.bytes_per_rank, false, 0});
        } catch (const timeout_error& e) {
          abandon_started(pending.request);
          become_unusable(e.what());
          throw;
        }
      }
    }
    // Once every started exchange has been waited for, the list starts over.
    for (const pending_start& p : started_)
      if (!p.waited) return;
    first_started_ += started_.size();
    started_.clear();
  }

  /// One MPI_Test on the oldest unfinished exchange: MPI moves every pending call on inside it.
  /// @throws qsdp::error when MPI_Test fails
  void progress() {
    for (pending_start& p : started_) {
      if (p.request == MPI_REQUEST_NULL) continue;
      int done = 0;
      detail::mpi_check(MPI_Test(&p.request, &done, MPI_STATUS_IGNORE), "MPI_Test",
                        "qsdp::mpi_communicator::progress");
      return;
    }
  }

 private:
  void throw_if_unusable(const char* where) const {
    if (!unusable_because_.empty())
      throw qsdp::error(std::string(where) +
                        ": this communicator is unusable since an earlier exchange timed "
                        "out; end the job with MPI_Abort. The earlier error: " +
                        unusable_because_);
  }

  /// After a timeout in throw mode. The pending MPI call may write into the workspace (the
  /// collectives' packets live there), so the workspace moves to mpi_abandoned_calls, never to be
  /// freed, and this object continues with an empty one: a later workspace().get() that grows must
  /// not free memory under MPI either.
  void become_unusable(const char* reason) {
    unusable_because_ = reason;
    detail::mpi_abandoned_calls& abandoned = detail::mpi_abandoned_calls::get();
    const std::lock_guard lock(abandoned.mutex);
    abandoned.workspaces.push_back(std::move(workspace_));
    workspace_ = host_workspace{};
  }

  /// A started exchange: its request (MPI_REQUEST_NULL once complete), what it moves (for a
  /// timeout's message) and whether its ticket was waited for.
  struct pending_start {
    MPI_Request request;
    const char* call;
    std::size_t bytes_per_rank;
    bool waited;
  };

  exchange_ticket start(const detail::mpi_collective_calls& calls, const std::byte* send,
                        std::byte* recv, std::size_t n, const char* where) {
    throw_if_unusable(where);
    MPI_Request request = MPI_REQUEST_NULL;
    try {
      request = detail::mpi_start_exchange(calls, comm_, size_, send, recv, n,
                                           detail::mpi_max_chunk_bytes, options_, where);
    } catch (const timeout_error& e) {  // a whole exchange beyond the chunk limit timed out
      abandon_started(MPI_REQUEST_NULL);
      become_unusable(e.what());
      throw;
    }
    started_.push_back({request, calls.nonblocking_name, n, false});
    return {first_started_ + started_.size() - 1};
  }

  /// After a timeout: the started exchanges other than `timed_out` (already kept by
  /// mpi_wait_or_time_out) stay pending forever too.
  void abandon_started(MPI_Request timed_out) {
    detail::mpi_abandoned_calls& abandoned = detail::mpi_abandoned_calls::get();
    const std::lock_guard lock(abandoned.mutex);
    for (pending_start& p : started_)
      if (p.request != MPI_REQUEST_NULL && p.request != timed_out)
        abandoned.requests.push_back(p.request);
    started_.clear();
  }

  MPI_Comm comm_;
  fault_options options_;
  int rank_ = 0;
  int size_ = 0;
  std::uint64_t calls_ = 0;
  host_workspace workspace_;
  std::string unusable_because_;        // empty while usable
  std::vector<pending_start> started_;  // exchanges started since all were last waited for
  std::uint64_t first_started_ = 0;     // the ticket of started_[0]
};

static_assert(overlapping_communicator<mpi_communicator>);

/// A two-level pair over MPI (the communicators of collectives.hpp's two-level calls): splits
/// `comm` into nodes -- the ranks that share memory (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED),
/// or, with node_size > 0, runs of node_size consecutive ranks (to emulate nodes on one machine) --
/// and into one cross communicator per place in the node (MPI_Comm_split by the rank in the node).
/// Owns and frees both communicators; `comm` is the caller's and must outlive this object, and it
/// must be destroyed before MPI_Finalize (after it, the communicators are left to MPI). Every rank
/// must construct it at the same time (collective over comm). Throws qsdp::error on every rank when
/// comm's size is not a multiple of node_size, or when the shared-memory nodes differ in size
/// (two_level's check). Both communicators inherit comm's error handler; options apply to both
/// levels.
///
/// Rank order: pair().rank() = node index x node size + rank in the node, the nodes ordered by
/// their lowest rank in comm and the ranks of a node by their rank in comm. That is comm's own
/// order when each node holds consecutive ranks (mpirun's default placement, and always with
/// node_size), but not under a round-robin placement (--map-by node): the chunks of reduce_scatter
/// and the blocks of all_gather follow pair().rank(), so check it against your own rank there.
class mpi_two_level {
 public:
  /// Splits `comm` into the two levels; collective over comm.
  /// @param comm the caller's communicator; must outlive this object
  /// @param node_size 0: the nodes are the ranks that share memory; else the ranks per node, a
  ///        divisor of comm's size
  /// @param options the fault options of both levels
  /// @throws qsdp::error on every rank when node_size is negative or not a divisor of comm's size,
  ///         when the shared-memory nodes differ in size, when an option is out of range, or when
  ///         an MPI call fails
  explicit mpi_two_level(MPI_Comm comm, int node_size = 0, fault_options options = {})
      : node_comm_(split_node(comm, node_size)),
        cross_comm_(split_cross(comm, node_comm_.comm)),
        node_(node_comm_.comm, options),
        cross_(cross_comm_.comm, options),
        pair_(node_, cross_) {}

  mpi_two_level(const mpi_two_level&) = delete;
  mpi_two_level& operator=(const mpi_two_level&) = delete;

  /// @return the pair to pass to the two-level collectives
  two_level<mpi_communicator, mpi_communicator>& pair() noexcept { return pair_; }
  /// @return the communicator of this rank's node
  mpi_communicator& node() noexcept { return node_; }
  /// @return the communicator of this rank's place across the nodes
  mpi_communicator& cross() noexcept { return cross_; }

 private:
  /// An MPI communicator this object made, freed with it.
  struct owned_comm {
    MPI_Comm comm = MPI_COMM_NULL;
    explicit owned_comm(MPI_Comm c) : comm(c) {}
    owned_comm(const owned_comm&) = delete;
    owned_comm& operator=(const owned_comm&) = delete;
    ~owned_comm() {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm);
    }
  };

  static MPI_Comm split_node(MPI_Comm comm, int node_size) {
    constexpr const char* where = "qsdp::mpi_two_level";
    int rank = 0, size = 0;
    detail::mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", where);
    detail::mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size", where);
    if (node_size < 0 || (node_size > 0 && size % node_size != 0))
      throw qsdp::error(std::string(where) + ": node_size is " + std::to_string(node_size) +
                        "; expected 0 (the shared-memory nodes) or a divisor of the world size " +
                        std::to_string(size) + " (every node has as many ranks)");
    MPI_Comm node = MPI_COMM_NULL;
    if (node_size == 0)
      detail::mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
                        "MPI_Comm_split_type", where);
    else
      detail::mpi_check(MPI_Comm_split(comm, rank / node_size, rank, &node), "MPI_Comm_split",
                        where);
    return node;
  }

  /// One communicator per place in the node, its ranks ordered by their node's lowest rank in comm,
  /// so that the ranks of a node get the same index (their cross rank) at every place.
  static MPI_Comm split_cross(MPI_Comm comm, MPI_Comm node) {
    constexpr const char* where = "qsdp::mpi_two_level";
    int rank = 0, place = 0, leader = 0;
    detail::mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", where);
    detail::mpi_check(MPI_Comm_rank(node, &place), "MPI_Comm_rank", where);
    detail::mpi_check(MPI_Allreduce(&rank, &leader, 1, MPI_INT, MPI_MIN, node), "MPI_Allreduce",
                      where);
    MPI_Comm cross = MPI_COMM_NULL;
    detail::mpi_check(MPI_Comm_split(comm, place, leader, &cross), "MPI_Comm_split", where);
    return cross;
  }

  owned_comm node_comm_, cross_comm_;
  mpi_communicator node_, cross_;
  two_level<mpi_communicator, mpi_communicator> pair_;
};

}  // namespace qsdp
