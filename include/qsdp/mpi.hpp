// SPDX-License-Identifier: Apache-2.0
//
// The MPI transport: qsdp::mpi_communicator, a qsdp::communicator over an MPI_Comm that the caller owns
// (qsdp never duplicates, frees or reconfigures it). Host memory only; link MPI yourself (CMake:
// MPI::MPI_CXX or MPI::MPI_C), qsdp::qsdp does not.
//
// Errors. Every MPI return code is checked and a failure becomes a qsdp::error naming the MPI call and
// MPI's own message. But MPI only returns errors when the communicator's error handler is
// MPI_ERRORS_RETURN: under the default, MPI_ERRORS_ARE_FATAL, MPI aborts the job inside the failing call,
// before qsdp can report anything. qsdp does not change the handler behind your back (it is your
// communicator, and other code may rely on the handler); call
//     MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
// yourself to get exceptions. The datatype calls (MPI_Type_*) belong to no communicator; MPI 3.1 raises
// their errors on MPI_COMM_WORLD's handler (MPI 4.0: MPI_COMM_SELF's).
//
// Faults: a rank that dies, hangs or skips a collective. A collective completes only when every rank
// joins it, so one failing rank leaves the others waiting inside MPI, where qsdp cannot see them.
//   - A rank that dies is handled by the launcher, not by qsdp: Open MPI's mpirun kills the whole job,
//     and exits non-zero, when a process ends on a signal (abort, segfault), exits without
//     MPI_Finalize (whatever its status), or calls MPI_Abort. An exception thrown on one rank (a
//     qsdp::error for a bad argument, say) is such a death only if it leaves main; catch it there,
//     print it and call MPI_Abort(MPI_COMM_WORLD, code): the other ranks, already waiting in the
//     collective, are then killed too instead of waiting for a rank that will never come.
//   - A rank that hangs (a deadlock, a stuck file system), or that skips a collective or returns early
//     and then waits in MPI_Finalize, kills nothing: the job hangs forever. mpi_options::timeout
//     bounds the wait: each MPI call of a collective then runs non-blocking (MPI_Iallgather,
//     MPI_Ialltoall) and is polled until it completes or the timeout passes; at the timeout this rank
//     names itself, the call, the byte count and the timeout on stderr and calls MPI_Abort (or throws
//     qsdp::mpi_timeout_error; see mpi_options::abort_on_timeout), and the launcher ends the job.
//     Timeout 0 (the default) keeps the blocking calls, with no overhead. Every rank of a
//     communicator must use the same setting, zero or not: MPI never matches a blocking collective
//     with a non-blocking one, so mixed ranks would wait for each other forever.
#pragma once

// First: some MPI C++ bindings (old MPICH) clash with <cstdio>'s SEEK_* macros when included after it.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "communicator.hpp"
#include "config.hpp"

namespace qsdp {

/// How an mpi_communicator waits for the other ranks. Every rank of the communicator must pass the same
/// timeout, zero or not: MPI never matches a blocking collective with a non-blocking one.
struct mpi_options {
  /// The longest one MPI call of a collective may wait on this rank, the other ranks' lateness
  /// included; an exchange above 1 GiB per peer is several calls, each with the full timeout. 0 (the
  /// default): no limit, and the blocking MPI_Allgather / MPI_Alltoall as without options, at no cost.
  /// Otherwise 1 ms .. mpi_max_timeout, well above the slowest legitimate wait: a rank that is late
  /// because it writes a checkpoint looks exactly like a hung one.
  std::chrono::milliseconds timeout{0};
  /// At the timeout: true (the default) prints one line to stderr naming the rank, the MPI call, the
  /// bytes and the timeout, then calls MPI_Abort(comm, mpi_timeout_abort_code): the whole job ends with
  /// an error. false: throws qsdp::mpi_timeout_error and leaves the communicator unusable (every later
  /// exchange throws); the caller must still end the job with MPI_Abort, after logging or saving what
  /// it needs. The timed-out MPI call cannot be cancelled and may still write into its buffers, so
  /// none of them may be freed: see mpi_communicator::all_gather_bytes.
  bool abort_on_timeout = true;
};

/// The largest mpi_options::timeout: one day. Larger values buy nothing over 0 (no limit) and would
/// overflow the clock arithmetic of the deadline.
inline constexpr std::chrono::milliseconds mpi_max_timeout = std::chrono::hours(24);

/// The error code a timed-out rank passes to MPI_Abort (mpirun usually exits with it): 124, what
/// timeout(1) returns, so scripts that already read 124 as "timed out" read this one right too.
inline constexpr int mpi_timeout_abort_code = 124;

/// Thrown when a collective exceeds mpi_options::timeout with abort_on_timeout = false. A qsdp::error, so
/// code that catches qsdp::error sees it too.
class mpi_timeout_error : public error {
 public:
  using error::error;
};

namespace detail {

/// The largest number of bytes per peer that one MPI call moves (1 GiB). MPI 3.1 counts are `int`, so a
/// call can never name more than INT_MAX elements; larger exchanges are split (mpi_exchange_in_chunks).
/// A power of two well below INT_MAX also keeps every count * element size an implementation computes
/// internally away from the int limit, where MPI libraries have had overflow bugs.
inline constexpr std::size_t mpi_max_chunk_bytes = std::size_t{1} << 30;

inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS || length <= 0)
    return "unknown MPI error code " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

/// Throws qsdp::error("<where>: <call> failed: <MPI's message> (MPI error code N)") unless code is
/// MPI_SUCCESS.
inline void mpi_check(int code, const char* call, const char* where) {
  if (code == MPI_SUCCESS) return;
  throw qsdp::error(std::string(where) + ": " + call + " failed: " + mpi_error_string(code) +
                    " (MPI error code " + std::to_string(code) + ")");
}

/// A committed datatype of `bytes` contiguous bytes whose extent is `stride`: count 1 of it reads or
/// writes `bytes` bytes, and the collectives place the block of peer i at i * stride. Freed on scope
/// exit, also when a collective throws.
class mpi_strided_bytes {
 public:
  mpi_strided_bytes(std::size_t bytes, std::size_t stride, const char* where) {
    MPI_Datatype block = MPI_DATATYPE_NULL;
    mpi_check(MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &block), "MPI_Type_contiguous", where);
    const int resized = MPI_Type_create_resized(block, 0, static_cast<MPI_Aint>(stride), &type_);
    MPI_Type_free(&block);  // the resized type keeps what it needs of `block`
    if (resized != MPI_SUCCESS) type_ = MPI_DATATYPE_NULL;
    mpi_check(resized, "MPI_Type_create_resized", where);
    const int committed = MPI_Type_commit(&type_);
    if (committed != MPI_SUCCESS) MPI_Type_free(&type_);
    mpi_check(committed, "MPI_Type_commit", where);
  }
  ~mpi_strided_bytes() {
    if (type_ != MPI_DATATYPE_NULL) MPI_Type_free(&type_);
  }
  mpi_strided_bytes(const mpi_strided_bytes&) = delete;
  mpi_strided_bytes& operator=(const mpi_strided_bytes&) = delete;

  MPI_Datatype get() const noexcept { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

/// Runs a byte collective of `n` bytes per peer as calls of at most `max_chunk` bytes per peer.
/// `collective(offset, count, type)` makes one MPI call on bytes [offset, offset + chunk) of every
/// peer's block, the blocks `n` bytes apart in both buffers.
///
/// Why this way: MPI 3.1 has no large-count collectives (MPI_Allgather_c is MPI 4.0, which Open MPI 4.1
/// lacks). Up to max_chunk bytes go in one call as (n, MPI_BYTE), the fast path every MPI optimizes.
/// Beyond that, chunk k is described by a datatype of `chunk` contiguous bytes resized to an extent of
/// n (see mpi_strided_bytes): with count 1, peer i's part of chunk k sits at offset + i * n in both the
/// send and the receive buffer, so each call fills a column of the blocks in place, without staging
/// copies, and every count stays 1. There are at most two such types (full chunks and the tail), and
/// all ranks make the same calls because n is the same on every rank. max_chunk is a parameter so the
/// tests can drive this path with a few bytes instead of gigabytes.
template <class Collective>
void mpi_exchange_in_chunks(std::size_t n, std::size_t max_chunk, const char* where, Collective&& collective) {
  if (max_chunk == 0 || max_chunk > static_cast<std::size_t>(INT_MAX))
    throw qsdp::error(std::string(where) + ": chunk size is " + std::to_string(max_chunk) +
                      "; expected 1..INT_MAX bytes");
  if (n <= max_chunk) {
    collective(std::size_t{0}, static_cast<int>(n), MPI_BYTE);
    return;
  }
  if (n > static_cast<std::size_t>(std::numeric_limits<MPI_Aint>::max()))
    throw qsdp::error(std::string(where) + ": " + std::to_string(n) +
                      " bytes per rank exceed MPI_Aint, the largest extent MPI can describe");
  const std::size_t full = n / max_chunk;
  const std::size_t tail = n % max_chunk;
  {
    const mpi_strided_bytes chunk(max_chunk, n, where);
    for (std::size_t k = 0; k < full; ++k) collective(k * max_chunk, 1, chunk.get());
  }
  if (tail != 0) {
    const mpi_strided_bytes last(tail, n, where);
    collective(full * max_chunk, 1, last.get());
  }
}

inline bool mpi_ranges_overlap(const std::byte* a, std::size_t a_bytes, const std::byte* b, std::size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto a0 = reinterpret_cast<std::uintptr_t>(a);
  const auto b0 = reinterpret_cast<std::uintptr_t>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

/// Bytes of size blocks of n, or a qsdp::error when that does not fit in size_t.
inline std::size_t mpi_total_bytes(std::size_t n, int size, const char* where) {
  const auto ranks = static_cast<std::size_t>(size);
  if (n > std::numeric_limits<std::size_t>::max() / ranks)
    throw qsdp::error(std::string(where) + ": " + std::to_string(n) + " bytes times " + std::to_string(size) +
                      " ranks overflow size_t");
  return n * ranks;
}

/// Refuses options no rank could use; the same options give the same answer on every rank.
inline void mpi_check_options(const mpi_options& options, const char* where) {
  if (options.timeout.count() < 0 || options.timeout > mpi_max_timeout)
    throw qsdp::error(std::string(where) + ": options.timeout is " + std::to_string(options.timeout.count()) +
                      " ms; expected 0 (no limit) or 1.." + std::to_string(mpi_max_timeout.count()) + " ms");
}

/// Timed-out calls whose buffers MPI may still write into, kept for the rest of the process: a collective
/// request cannot be cancelled (MPI 3.1 section 5.12 makes MPI_Cancel and MPI_Request_free on one
/// erroneous), so neither it nor its memory is ever released. Reachable from a static pointer, so leak
/// checkers do not report it; never destroyed, so no exit-time destructor frees memory under MPI.
struct mpi_abandoned_calls {
  std::mutex mutex;
  std::vector<MPI_Request> requests;
  std::vector<host_workspace> workspaces;

  static mpi_abandoned_calls& get() {
    static auto* const calls = new mpi_abandoned_calls;
    return *calls;
  }
};

/// One pending MPI call of an exchange, for the timeout message.
struct mpi_pending_call {
  MPI_Comm comm;
  const char* where;  // the qsdp function
  const char* call;   // the MPI function
  std::size_t bytes_per_rank;
  bool chunked;       // the exchange is split (mpi_exchange_in_chunks); `offset` names the chunk
  std::size_t offset;
};

/// "<where>: rank R of S: <call> of N bytes per rank did not complete within T ms (...)".
inline std::string mpi_timeout_message(const mpi_pending_call& pending, std::chrono::milliseconds timeout) {
  int rank = -1, size = -1, world_rank = -1;
  MPI_Comm_rank(pending.comm, &rank);
  MPI_Comm_size(pending.comm, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::string text = std::string(pending.where) + ": rank " + std::to_string(rank) + " of " +
                     std::to_string(size);
  if (world_rank != rank) text += " (MPI_COMM_WORLD rank " + std::to_string(world_rank) + ")";
  text += ": " + std::string(pending.call) + " of " + std::to_string(pending.bytes_per_rank) +
          " bytes per rank";
  if (pending.chunked) text += " (the chunk at byte " + std::to_string(pending.offset) + ")";
  text += " did not complete within " + std::to_string(timeout.count()) +
          " ms (mpi_options::timeout): another rank hangs, died, or skipped or reordered this collective";
  return text;
}

/// Polling: MPI_Test back to back for the first mpi_poll_spin, so that a call which completes soon
/// (the common case) sees no added latency; then sleeps of an eighth of the time waited so far, at
/// most mpi_poll_max_sleep, so a rank waiting for a late or hung peer stops burning a core while the
/// latency added to a slow call stays under an eighth of its wait and 1 ms. MPI progresses a
/// non-blocking collective only inside MPI calls, hence the spin before any sleep.
inline constexpr std::chrono::microseconds mpi_poll_spin{1000};
inline constexpr std::chrono::microseconds mpi_poll_max_sleep{1000};

/// Waits for `request` (a started collective) until it completes or options.timeout passes. At the
/// timeout the request is still pending, and it stays so: with abort_on_timeout this rank prints
/// the message and calls MPI_Abort; otherwise the request is kept forever (mpi_abandoned_calls) and
/// mpi_timeout_error is thrown.
inline void mpi_wait_or_time_out(MPI_Request& request, const mpi_options& options,
                                 const mpi_pending_call& pending) {
  using clock = std::chrono::steady_clock;
  const clock::time_point start = clock::now();
  const clock::time_point deadline = start + options.timeout;
  for (;;) {
    int done = 0;
    mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test", pending.where);
    if (done) return;
    const clock::time_point now = clock::now();
    if (now >= deadline) break;
    const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(now - start);
    if (waited < mpi_poll_spin) continue;
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
    std::this_thread::sleep_for(std::min({waited / 8, mpi_poll_max_sleep, left}));
  }
  const std::string message = mpi_timeout_message(pending, options.timeout);
  if (options.abort_on_timeout) {
    std::fprintf(stderr, "%s; calling MPI_Abort(comm, %d)\n", message.c_str(), mpi_timeout_abort_code);
    std::fflush(stderr);
    MPI_Abort(pending.comm, mpi_timeout_abort_code);
    std::abort();  // MPI_Abort returned (it should not): returning would hand MPI's buffers back
  }
  {
    mpi_abandoned_calls& abandoned = mpi_abandoned_calls::get();
    const std::lock_guard lock(abandoned.mutex);
    abandoned.requests.push_back(request);
  }
  throw mpi_timeout_error(message + "; the call is still pending inside MPI, so this communicator is now "
                          "unusable and its buffers are never freed: end the job with MPI_Abort");
}

/// mpi_communicator::all_gather_bytes with an explicit chunk size (tests pass a tiny one) and options
/// (without them: blocking calls, no timeout). In place when send is this rank's block of recv
/// (send == recv + rank * n, as FSDP's all-gather into the full parameter does); any other overlap of
/// send and recv is refused, since MPI forbids aliased buffers and would silently deliver garbage.
inline void mpi_all_gather_bytes(MPI_Comm comm, int rank, int size, const std::byte* send, std::byte* recv,
                                 std::size_t n, std::size_t max_chunk, const mpi_options& options = {}) {
  constexpr const char* where = "qsdp::mpi_communicator::all_gather_bytes";
  const std::size_t total = mpi_total_bytes(n, size, where);
  if (n > 0 && (send == nullptr || recv == nullptr))
    throw qsdp::error(std::string(where) + ": " + (send == nullptr ? "send" : "recv") + " is null with " +
                      std::to_string(n) + " bytes per rank");
  const bool in_place = n > 0 && send == recv + static_cast<std::size_t>(rank) * n;
  if (!in_place && mpi_ranges_overlap(send, n, recv, total))
    throw qsdp::error(std::string(where) + ": send and recv overlap and send is not this rank's block of "
                      "recv (recv + rank * n); MPI forbids aliased buffers");
  mpi_exchange_in_chunks(n, max_chunk, where, [&](std::size_t offset, int count, MPI_Datatype type) {
    const void* from = in_place ? MPI_IN_PLACE : static_cast<const void*>(send + offset);
    if (options.timeout.count() == 0) {
      mpi_check(MPI_Allgather(from, count, type, recv + offset, count, type, comm), "MPI_Allgather", where);
      return;
    }
    MPI_Request request = MPI_REQUEST_NULL;
    mpi_check(MPI_Iallgather(from, count, type, recv + offset, count, type, comm, &request), "MPI_Iallgather",
              where);
    mpi_wait_or_time_out(request, options, {comm, where, "MPI_Iallgather", n, n > max_chunk, offset});
  });
}

/// mpi_communicator::all_to_all_bytes with an explicit chunk size (tests pass a tiny one) and options
/// (without them: blocking calls, no timeout). send and recv must not overlap (MPI forbids aliased
/// buffers; local_communicator cannot run in place either).
inline void mpi_all_to_all_bytes(MPI_Comm comm, int size, const std::byte* send, std::byte* recv, std::size_t n,
                                 std::size_t max_chunk, const mpi_options& options = {}) {
  constexpr const char* where = "qsdp::mpi_communicator::all_to_all_bytes";
  const std::size_t total = mpi_total_bytes(n, size, where);
  if (n > 0 && (send == nullptr || recv == nullptr))
    throw qsdp::error(std::string(where) + ": " + (send == nullptr ? "send" : "recv") + " is null with " +
                      std::to_string(n) + " bytes per rank");
  if (mpi_ranges_overlap(send, total, recv, total))
    throw qsdp::error(std::string(where) + ": send and recv overlap; MPI forbids aliased buffers");
  mpi_exchange_in_chunks(n, max_chunk, where, [&](std::size_t offset, int count, MPI_Datatype type) {
    if (options.timeout.count() == 0) {
      mpi_check(MPI_Alltoall(send + offset, count, type, recv + offset, count, type, comm), "MPI_Alltoall",
                where);
      return;
    }
    MPI_Request request = MPI_REQUEST_NULL;
    mpi_check(MPI_Ialltoall(send + offset, count, type, recv + offset, count, type, comm, &request),
              "MPI_Ialltoall", where);
    mpi_wait_or_time_out(request, options, {comm, where, "MPI_Ialltoall", n, n > max_chunk, offset});
  });
}

}  // namespace detail

/// One rank of an MPI communicator. Non-owning: `comm` must outlive this object, and MPI must stay
/// initialized while it is used. Host memory (a CUDA-aware MPI could move device buffers, but qsdp does
/// not assume one). Not copyable: a copy would start its own call counter and workspace, and the
/// counters of the ranks would no longer agree; move it or pass it by reference.
///
/// Like any MPI collective, every call must be made by all ranks of `comm`, in the same order, with the
/// same n; argument errors (null buffers, overlap) are thrown on the rank that made them, before MPI is
/// called, so the other ranks then wait in the collective: catch the error, print it and call MPI_Abort,
/// or give every rank a timeout (mpi_options). Use one thread per communicator at a time.
class mpi_communicator {
 public:
  static constexpr memory_space memory = memory_space::host;

  /// Throws qsdp::error when MPI is not initialized (or already finalized), when comm is MPI_COMM_NULL
  /// or an intercommunicator (whose collectives exchange between two groups, not among all ranks), or
  /// when options.timeout is outside 0..mpi_max_timeout. Does not touch comm's error handler (see the
  /// top of this file). Every rank of comm must pass the same options.timeout, zero or not.
  explicit mpi_communicator(MPI_Comm comm, mpi_options options = {}) : comm_(comm), options_(options) {
    constexpr const char* where = "qsdp::mpi_communicator";
    detail::mpi_check_options(options, where);
    int initialized = 0;
    detail::mpi_check(MPI_Initialized(&initialized), "MPI_Initialized", where);
    if (!initialized)
      throw qsdp::error(std::string(where) + ": MPI is not initialized; call MPI_Init (or MPI_Init_thread) "
                                             "before constructing an mpi_communicator");
    int finalized = 0;
    detail::mpi_check(MPI_Finalized(&finalized), "MPI_Finalized", where);
    if (finalized) throw qsdp::error(std::string(where) + ": MPI is already finalized");
    if (comm == MPI_COMM_NULL) throw qsdp::error(std::string(where) + ": comm is MPI_COMM_NULL");
    int inter = 0;
    detail::mpi_check(MPI_Comm_test_inter(comm, &inter), "MPI_Comm_test_inter", where);
    if (inter)
      throw qsdp::error(std::string(where) + ": comm is an intercommunicator; expected an intracommunicator");
    // Cached: rank() and size() are called on every collective and never change for a communicator.
    detail::mpi_check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank", where);
    detail::mpi_check(MPI_Comm_size(comm, &size_), "MPI_Comm_size", where);
  }

  mpi_communicator(const mpi_communicator&) = delete;
  mpi_communicator& operator=(const mpi_communicator&) = delete;
  mpi_communicator(mpi_communicator&&) noexcept = default;
  mpi_communicator& operator=(mpi_communicator&&) noexcept = default;
  ~mpi_communicator() = default;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  /// The wrapped communicator (still owned by the caller).
  MPI_Comm native() const noexcept { return comm_; }
  const mpi_options& options() const noexcept { return options_; }
  /// False once an exchange timed out with abort_on_timeout = false; every exchange then throws.
  bool usable() const noexcept { return unusable_because_.empty(); }
  host_workspace& workspace() noexcept { return workspace_; }
  std::uint64_t next_call() noexcept { return calls_++; }

  /// Every rank contributes n bytes; recv (size() * n bytes) gets rank r's at offset r * n. Any n,
  /// including 0 and more than INT_MAX. send may be recv + rank() * n (in place).
  ///
  /// With a timeout and abort_on_timeout = false, a timed-out call throws qsdp::mpi_timeout_error but
  /// stays pending inside MPI, which may still read send and write recv at any later time: they must
  /// never be freed or reused (the collectives pass workspace() memory, which this class then keeps
  /// forever), and the job must end with MPI_Abort.
  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    constexpr const char* where = "qsdp::mpi_communicator::all_gather_bytes";
    throw_if_unusable(where);
    try {
      detail::mpi_all_gather_bytes(comm_, rank_, size_, send, recv, n, detail::mpi_max_chunk_bytes, options_);
    } catch (const mpi_timeout_error& e) {
      become_unusable(e.what());
      throw;
    }
  }

  /// send holds size() blocks of n bytes, block j for rank j; recv gets rank i's block at offset i * n.
  /// Any n, including 0 and more than INT_MAX. send and recv must not overlap. A timed-out call:
  /// as all_gather_bytes.
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    constexpr const char* where = "qsdp::mpi_communicator::all_to_all_bytes";
    throw_if_unusable(where);
    try {
      detail::mpi_all_to_all_bytes(comm_, size_, send, recv, n, detail::mpi_max_chunk_bytes, options_);
    } catch (const mpi_timeout_error& e) {
      become_unusable(e.what());
      throw;
    }
  }

 private:
  void throw_if_unusable(const char* where) const {
    if (!unusable_because_.empty())
      throw qsdp::error(std::string(where) + ": this communicator is unusable since an earlier exchange timed "
                        "out; end the job with MPI_Abort. The earlier error: " + unusable_because_);
  }

  /// After a timeout in throw mode. The pending MPI call may write into the workspace (the collectives'
  /// packets live there), so the workspace moves to mpi_abandoned_calls, never to be freed, and this
  /// object continues with an empty one: a later workspace().get() that grows must not free memory
  /// under MPI either.
  void become_unusable(const char* reason) {
    unusable_because_ = reason;
    detail::mpi_abandoned_calls& abandoned = detail::mpi_abandoned_calls::get();
    const std::lock_guard lock(abandoned.mutex);
    abandoned.workspaces.push_back(std::move(workspace_));
    workspace_ = host_workspace{};
  }

  MPI_Comm comm_;
  mpi_options options_;
  int rank_ = 0;
  int size_ = 0;
  std::uint64_t calls_ = 0;
  host_workspace workspace_;
  std::string unusable_because_;  // empty while usable
};

static_assert(communicator<mpi_communicator>);

}  // namespace qsdp
