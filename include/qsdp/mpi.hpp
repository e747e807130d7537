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
#pragma once

// First: some MPI C++ bindings (old MPICH) clash with <cstdio>'s SEEK_* macros when included after it.
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "communicator.hpp"
#include "config.hpp"

namespace qsdp {

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

/// mpi_communicator::all_gather_bytes with an explicit chunk size (tests pass a tiny one). In place
/// when send is this rank's block of recv (send == recv + rank * n, as FSDP's all-gather into the
/// full parameter does); any other overlap of send and recv is refused, since MPI forbids aliased
/// buffers and would silently deliver garbage.
inline void mpi_all_gather_bytes(MPI_Comm comm, int rank, int size, const std::byte* send, std::byte* recv,
                                 std::size_t n, std::size_t max_chunk) {
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
    mpi_check(MPI_Allgather(from, count, type, recv + offset, count, type, comm), "MPI_Allgather", where);
  });
}

/// mpi_communicator::all_to_all_bytes with an explicit chunk size (tests pass a tiny one). send and
/// recv must not overlap (MPI forbids aliased buffers; local_communicator cannot run in place either).
inline void mpi_all_to_all_bytes(MPI_Comm comm, int size, const std::byte* send, std::byte* recv, std::size_t n,
                                 std::size_t max_chunk) {
  constexpr const char* where = "qsdp::mpi_communicator::all_to_all_bytes";
  const std::size_t total = mpi_total_bytes(n, size, where);
  if (n > 0 && (send == nullptr || recv == nullptr))
    throw qsdp::error(std::string(where) + ": " + (send == nullptr ? "send" : "recv") + " is null with " +
                      std::to_string(n) + " bytes per rank");
  if (mpi_ranges_overlap(send, total, recv, total))
    throw qsdp::error(std::string(where) + ": send and recv overlap; MPI forbids aliased buffers");
  mpi_exchange_in_chunks(n, max_chunk, where, [&](std::size_t offset, int count, MPI_Datatype type) {
    mpi_check(MPI_Alltoall(send + offset, count, type, recv + offset, count, type, comm), "MPI_Alltoall", where);
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
/// called, so the other ranks then wait in the collective. Use one thread per communicator at a time.
class mpi_communicator {
 public:
  static constexpr memory_space memory = memory_space::host;

  /// Throws qsdp::error when MPI is not initialized (or already finalized), when comm is MPI_COMM_NULL
  /// or an intercommunicator (whose collectives exchange between two groups, not among all ranks).
  /// Does not touch comm's error handler (see the top of this file).
  explicit mpi_communicator(MPI_Comm comm) : comm_(comm) {
    constexpr const char* where = "qsdp::mpi_communicator";
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
  host_workspace& workspace() noexcept { return workspace_; }
  std::uint64_t next_call() noexcept { return calls_++; }

  /// Every rank contributes n bytes; recv (size() * n bytes) gets rank r's at offset r * n. Any n,
  /// including 0 and more than INT_MAX. send may be recv + rank() * n (in place).
  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    detail::mpi_all_gather_bytes(comm_, rank_, size_, send, recv, n, detail::mpi_max_chunk_bytes);
  }

  /// send holds size() blocks of n bytes, block j for rank j; recv gets rank i's block at offset i * n.
  /// Any n, including 0 and more than INT_MAX. send and recv must not overlap.
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    detail::mpi_all_to_all_bytes(comm_, size_, send, recv, n, detail::mpi_max_chunk_bytes);
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 0;
  std::uint64_t calls_ = 0;
  host_workspace workspace_;
};

static_assert(communicator<mpi_communicator>);

}  // namespace qsdp
