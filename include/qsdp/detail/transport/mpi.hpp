// SPDX-License-Identifier: Apache-2.0
//
// The MPI transport's machinery (qsdp::mpi_communicator, mpi.hpp): MPI error checks, exchanges of
// any size as calls of at most 1 GiB per peer, and the timed, polled wait of a non-blocking
// collective.
#pragma once

// First: some MPI C++ bindings (old MPICH) clash with <cstdio>'s SEEK_* macros when included after
// it.
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
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../../communicator.hpp"
#include "../../config.hpp"
#include "wait.hpp"

namespace qsdp {
/// mpi_communicator's default fault_options::timeout: none (blocking MPI calls, no overhead).
inline constexpr std::chrono::milliseconds mpi_default_timeout{0};
/// The error code a timed-out rank passes to MPI_Abort (mpirun usually exits with it): 124, what
/// timeout(1) returns, so scripts that already read 124 as "timed out" read this one right too.
inline constexpr int mpi_timeout_abort_code = 124;
}  // namespace qsdp

namespace qsdp::detail {

/// The largest number of bytes per peer that one MPI call moves (1 GiB). MPI 3.1 counts are `int`,
/// so a call can never name more than INT_MAX elements; larger exchanges are split
/// (mpi_exchange_in_chunks). A power of two well below INT_MAX also keeps every count * element
/// size an implementation computes internally away from the int limit, where MPI libraries have had
/// overflow bugs.
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

/// Returns comm once it is usable by mpi_communicator, with options in range: MPI initialized and
/// not finalized, comm neither MPI_COMM_NULL nor an intercommunicator (whose collectives exchange
/// between two groups, not among all ranks). Otherwise throws qsdp::error naming what is wrong.
inline MPI_Comm mpi_intracommunicator(MPI_Comm comm, const fault_options& options,
                                      const char* where) {
  check_fault_options(options, where);
  int initialized = 0;
  mpi_check(MPI_Initialized(&initialized), "MPI_Initialized", where);
  if (!initialized)
    throw qsdp::error(std::string(where) +
                      ": MPI is not initialized; call MPI_Init (or MPI_Init_thread) "
                      "before constructing an mpi_communicator");
  int finalized = 0;
  mpi_check(MPI_Finalized(&finalized), "MPI_Finalized", where);
  if (finalized) throw qsdp::error(std::string(where) + ": MPI is already finalized");
  if (comm == MPI_COMM_NULL) throw qsdp::error(std::string(where) + ": comm is MPI_COMM_NULL");
  int inter = 0;
  mpi_check(MPI_Comm_test_inter(comm, &inter), "MPI_Comm_test_inter", where);
  if (inter)
    throw qsdp::error(std::string(where) +
                      ": comm is an intercommunicator; expected an intracommunicator");
  return comm;
}

/// A committed datatype of `bytes` contiguous bytes whose extent is `stride`: count 1 of it reads
/// or writes `bytes` bytes, and the collectives place the block of peer i at i * stride. Freed on
/// scope exit, also when a collective throws.
class mpi_strided_bytes : private no_copies {
 public:
  mpi_strided_bytes(std::size_t bytes, std::size_t stride, const char* where) {
    MPI_Datatype block = MPI_DATATYPE_NULL;
    mpi_check(MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &block), "MPI_Type_contiguous",
              where);
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

  MPI_Datatype get() const noexcept { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

/// Runs a byte collective of `n` bytes per peer as calls of at most `max_chunk` bytes per peer.
/// `collective(offset, count, type)` makes one MPI call on bytes [offset, offset + chunk) of every
/// peer's block, the blocks `n` bytes apart in both buffers.
///
/// Why this way: MPI 3.1 has no large-count collectives (MPI_Allgather_c is MPI 4.0, which Open
/// MPI 4.1 lacks). Up to max_chunk bytes go in one call as (n, MPI_BYTE), the fast path every MPI
/// optimizes. Beyond that, chunk k is described by a datatype of `chunk` contiguous bytes resized
/// to an extent of n (see mpi_strided_bytes): with count 1, peer i's part of chunk k sits at offset
/// + i * n in both the send and the receive buffer, so each call fills a column of the blocks in
/// place, without staging copies, and every count stays 1. There are at most two such types (full
/// chunks and the tail), and all ranks make the same calls because n is the same on every rank.
/// max_chunk is a parameter so the tests can drive this path with a few bytes instead of gigabytes.
template <class Collective>
void mpi_exchange_in_chunks(std::size_t n, std::size_t max_chunk, const char* where,
                            Collective&& collective) {
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

inline bool mpi_ranges_overlap(const std::byte* a, std::size_t a_bytes, const std::byte* b,
                               std::size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto a0 = reinterpret_cast<std::uintptr_t>(a);
  const auto b0 = reinterpret_cast<std::uintptr_t>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

/// Bytes of size blocks of n, or a qsdp::error when that does not fit in size_t.
inline std::size_t mpi_total_bytes(std::size_t n, int size, const char* where) {
  const auto ranks = static_cast<std::size_t>(size);
  if (n > std::numeric_limits<std::size_t>::max() / ranks)
    throw qsdp::error(std::string(where) + ": " + std::to_string(n) + " bytes times " +
                      std::to_string(size) + " ranks overflow size_t");
  return n * ranks;
}

/// Timed-out calls whose buffers MPI may still write into, kept for the rest of the process: a
/// collective request cannot be cancelled (MPI 3.1 section 5.12 makes MPI_Cancel and
/// MPI_Request_free on one erroneous), so neither it nor its memory is ever released. Reachable
/// from a static pointer, so leak checkers do not report it; never destroyed, so no exit-time
/// destructor frees memory under MPI.
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
  bool chunked;  // the exchange is split (mpi_exchange_in_chunks); `offset` names the chunk
  std::size_t offset;
};

/// "rank R of S[ (MPI_COMM_WORLD rank W)]: <call> of N bytes per rank[ (the chunk at byte O)]":
/// what a timed-out rank was waiting for.
inline std::string mpi_pending_description(const mpi_pending_call& pending) {
  int rank = -1, size = -1, world_rank = -1;
  MPI_Comm_rank(pending.comm, &rank);
  MPI_Comm_size(pending.comm, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::string text = "rank " + std::to_string(rank) + " of " + std::to_string(size);
  if (world_rank != rank) text += " (MPI_COMM_WORLD rank " + std::to_string(world_rank) + ")";
  text += ": " + std::string(pending.call) + " of " + std::to_string(pending.bytes_per_rank) +
          " bytes per rank";
  if (pending.chunked) text += " (the chunk at byte " + std::to_string(pending.offset) + ")";
  return text;
}

/// MPI progresses a non-blocking collective only inside MPI calls: MPI_Test back to back for the
/// first millisecond, so that a call which completes soon (the common case) sees no added latency.
inline constexpr std::chrono::microseconds mpi_poll_spin{1000};

/// Waits for `request` (a started collective) until it completes or the timeout passes
/// (detail::wait_until_done). At the timeout the request is still pending, and it stays so: with
/// abort_on_failure this rank prints the message and calls MPI_Abort; otherwise the request is kept
/// forever (mpi_abandoned_calls) and qsdp::timeout_error is thrown.
inline void mpi_wait_or_time_out(MPI_Request& request, const fault_options& options,
                                 const mpi_pending_call& pending) {
  const std::string what = mpi_pending_description(pending);
  const wait_context context{
      .where = pending.where,
      .what = what,
      .usual_cause = "another rank hangs, died, or skipped or reordered this collective",
      .spin = mpi_poll_spin};
  try {
    wait_until_done(
        [&] {
          int done = 0;
          mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test", pending.where);
          return done != 0;
        },
        [] { return std::optional<std::string>(); },
        [&](const std::string& failure) -> std::string {
          std::fprintf(stderr, "%s; calling MPI_Abort(comm, %d)\n", failure.c_str(),
                       mpi_timeout_abort_code);
          std::fflush(stderr);
          MPI_Abort(pending.comm, mpi_timeout_abort_code);
          std::abort();  // MPI_Abort returned (it should not): returning would hand MPI's buffers
                         // back
        },
        options, effective_timeout(options, mpi_default_timeout), context);
  } catch (const timeout_error& e) {
    {
      mpi_abandoned_calls& abandoned = mpi_abandoned_calls::get();
      const std::lock_guard lock(abandoned.mutex);
      abandoned.requests.push_back(request);
    }
    throw timeout_error(std::string(e.what()) +
                        "; the call is still pending inside MPI, so this communicator is now "
                        "unusable and its buffers are never freed: end the job with MPI_Abort");
  }
}

/// Bytes of both buffers of an exchange of n bytes per rank; refuses a null buffer.
inline std::size_t mpi_checked_total(const std::byte* send, const std::byte* recv, std::size_t n,
                                     int size, const char* where) {
  const std::size_t total = mpi_total_bytes(n, size, where);
  if (n > 0 && (send == nullptr || recv == nullptr))
    throw qsdp::error(std::string(where) + ": " + (send == nullptr ? "send" : "recv") +
                      " is null with " + std::to_string(n) + " bytes per rank");
  return total;
}

/// The MPI functions of one byte collective: blocking, non-blocking, and their names.
struct mpi_collective_calls {
  int (*blocking)(const void*, int, MPI_Datatype, void*, int, MPI_Datatype, MPI_Comm);
  int (*nonblocking)(const void*, int, MPI_Datatype, void*, int, MPI_Datatype, MPI_Comm,
                     MPI_Request*);
  const char* blocking_name;
  const char* nonblocking_name;
};

/// Exchanges n bytes per rank in calls of at most max_chunk (mpi_exchange_in_chunks): blocking
/// without a timeout, else non-blocking and polled until done or timed out. `send` may be
/// MPI_IN_PLACE for all_gather (then every chunk is in place too).
inline void mpi_exchange(const mpi_collective_calls& calls, MPI_Comm comm, const void* send,
                         std::byte* recv, std::size_t n, std::size_t max_chunk,
                         const fault_options& options, const char* where) {
  const bool limited = effective_timeout(options, mpi_default_timeout).count() > 0;
  mpi_exchange_in_chunks(
      n, max_chunk, where, [&](std::size_t offset, int count, MPI_Datatype type) {
        const void* from =
            send == MPI_IN_PLACE ? MPI_IN_PLACE : static_cast<const std::byte*>(send) + offset;
        if (!limited) {
          mpi_check(calls.blocking(from, count, type, recv + offset, count, type, comm),
                    calls.blocking_name, where);
          return;
        }
        MPI_Request request = MPI_REQUEST_NULL;
        mpi_check(calls.nonblocking(from, count, type, recv + offset, count, type, comm, &request),
                  calls.nonblocking_name, where);
        mpi_wait_or_time_out(request, options,
                             {comm, where, calls.nonblocking_name, n, n > max_chunk, offset});
      });
}

/// mpi_communicator::all_gather_bytes with an explicit chunk size (tests pass a tiny one) and
/// options (without them: blocking calls, no timeout). In place when send is this rank's block of
/// recv (send == recv + rank * n, as FSDP's all-gather into the full parameter does); any other
/// overlap of send and recv is refused, since MPI forbids aliased buffers and would silently
/// deliver garbage.
inline void mpi_all_gather_bytes(MPI_Comm comm, int rank, int size, const std::byte* send,
                                 std::byte* recv, std::size_t n, std::size_t max_chunk,
                                 const fault_options& options = {}) {
  constexpr const char* where = "qsdp::mpi_communicator::all_gather_bytes";
  const std::size_t total = mpi_checked_total(send, recv, n, size, where);
  const bool in_place = n > 0 && send == recv + static_cast<std::size_t>(rank) * n;
  if (!in_place && mpi_ranges_overlap(send, n, recv, total))
    throw qsdp::error(std::string(where) +
                      ": send and recv overlap and send is not this rank's block of "
                      "recv (recv + rank * n); MPI forbids aliased buffers");
  mpi_exchange({MPI_Allgather, MPI_Iallgather, "MPI_Allgather", "MPI_Iallgather"}, comm,
               in_place ? MPI_IN_PLACE : send, recv, n, max_chunk, options, where);
}

/// mpi_communicator::all_to_all_bytes with an explicit chunk size (tests pass a tiny one) and
/// options (without them: blocking calls, no timeout). send and recv must not overlap (MPI forbids
/// aliased buffers; local_communicator cannot run in place either).
inline void mpi_all_to_all_bytes(MPI_Comm comm, int size, const std::byte* send, std::byte* recv,
                                 std::size_t n, std::size_t max_chunk,
                                 const fault_options& options = {}) {
  constexpr const char* where = "qsdp::mpi_communicator::all_to_all_bytes";
  const std::size_t total = mpi_checked_total(send, recv, n, size, where);
  if (mpi_ranges_overlap(send, total, recv, total))
    throw qsdp::error(std::string(where) + ": send and recv overlap; MPI forbids aliased buffers");
  mpi_exchange({MPI_Alltoall, MPI_Ialltoall, "MPI_Alltoall", "MPI_Ialltoall"}, comm, send, recv, n,
               max_chunk, options, where);
}

/// Starts an exchange of n bytes per rank of an mpi_communicator's pipeline (start_*_bytes) and
/// returns its request: one non-blocking call, or, beyond max_chunk bytes per peer (which one MPI
/// call cannot name), the whole exchange run at once (mpi_exchange) and MPI_REQUEST_NULL, which a
/// wait finds completed. send and recv must not overlap (the pipelines never run in place).
inline MPI_Request mpi_start_exchange(const mpi_collective_calls& calls, MPI_Comm comm, int size,
                                      const std::byte* send, std::byte* recv, std::size_t n,
                                      std::size_t max_chunk, const fault_options& options,
                                      const char* where) {
  const std::size_t total = mpi_checked_total(send, recv, n, size, where);
  const std::size_t send_bytes = calls.nonblocking == MPI_Ialltoall ? total : n;
  if (mpi_ranges_overlap(send, send_bytes, recv, total))
    throw qsdp::error(std::string(where) + ": send and recv overlap; MPI forbids aliased buffers");
  MPI_Request request = MPI_REQUEST_NULL;
  if (n > max_chunk) {
    mpi_exchange(calls, comm, send, recv, n, max_chunk, options, where);
    return request;
  }
  mpi_check(calls.nonblocking(send, static_cast<int>(n), MPI_BYTE, recv, static_cast<int>(n),
                              MPI_BYTE, comm, &request),
            calls.nonblocking_name, where);
  return request;
}

}  // namespace qsdp::detail
