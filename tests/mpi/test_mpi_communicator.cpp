// SPDX-License-Identifier: Apache-2.0
//
// qsdp::mpi_communicator across real MPI ranks. A plain MPI program rather than doctest: every rank
// runs every check (they are collective), failures are printed by the rank that saw them, and the
// counts are summed over ranks at the end. Run under mpiexec with any number of ranks (ctest:
// mpi.communicator.np*).
#include <qsdp/collectives.hpp>
#include <qsdp/mpi.hpp>

#include "mpi_check.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace {

using qsdp_mpi_test::check;
using qsdp_mpi_test::check_throws;
using qsdp_mpi_test::g_rank;

/// Byte i of the block that rank `from` sends to rank `to` in an exchange of n bytes per block:
/// distinct for every (from, to, n) and not periodic in i, so a misplaced or shifted block is
/// caught.
std::byte pattern(int from, int to, std::size_t n, std::size_t i) {
  std::uint64_t x = (static_cast<std::uint64_t>(from) << 48) ^
                    (static_cast<std::uint64_t>(to) << 32) ^ (static_cast<std::uint64_t>(n) << 20) ^
                    i;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return static_cast<std::byte>(x & 0xff);
}

/// An all-gather through detail::mpi_all_gather_bytes (chunk = 0: the communicator's own entry
/// point), with the communicator's options (blocking, or polled against a timeout). Every rank
/// verifies every block. With in_place the rank's block is written into recv beforehand and send
/// points at it.
void test_all_gather(qsdp::mpi_communicator& comm, std::size_t n, std::size_t chunk,
                     bool in_place) {
  const int rank = comm.rank();
  const int size = comm.size();
  const std::string what = "all_gather n=" + std::to_string(n) + " chunk=" + std::to_string(chunk) +
                           (in_place ? " in place" : "") + " size=" + std::to_string(size);
  std::vector<std::byte> send(n);
  for (std::size_t i = 0; i < n; ++i) send[i] = pattern(rank, -1, n, i);
  // Sentinel bytes around recv catch writes past either end.
  const std::size_t guard = 16;
  std::vector<std::byte> buffer(n * static_cast<std::size_t>(size) + 2 * guard, std::byte{0xa5});
  std::byte* recv = buffer.data() + guard;
  const std::byte* from = send.data();
  if (in_place) {
    if (n) std::memcpy(recv + static_cast<std::size_t>(rank) * n, send.data(), n);
    from = recv + static_cast<std::size_t>(rank) * n;
  }
  try {
    if (chunk == 0)
      comm.all_gather_bytes(from, recv, n);
    else
      qsdp::detail::mpi_all_gather_bytes(comm.native(), rank, size, from, recv, n, chunk,
                                         comm.options());
  } catch (const std::exception& e) {
    check(false, what + ": threw " + e.what());
    return;
  }
  std::size_t wrong = 0;
  for (int r = 0; r < size; ++r)
    for (std::size_t i = 0; i < n; ++i)
      if (recv[static_cast<std::size_t>(r) * n + i] != pattern(r, -1, n, i)) ++wrong;
  check(wrong == 0, what + ": " + std::to_string(wrong) + " wrong bytes");
  bool guards = true;
  for (std::size_t i = 0; i < guard; ++i)
    guards =
        guards && buffer[i] == std::byte{0xa5} && buffer[buffer.size() - 1 - i] == std::byte{0xa5};
  check(guards, what + ": wrote outside recv");
}

/// An all-to-all; every rank verifies the block it got from every rank.
void test_all_to_all(qsdp::mpi_communicator& comm, std::size_t n, std::size_t chunk) {
  const int rank = comm.rank();
  const int size = comm.size();
  const std::string what = "all_to_all n=" + std::to_string(n) + " chunk=" + std::to_string(chunk) +
                           " size=" + std::to_string(size);
  const std::size_t total = n * static_cast<std::size_t>(size);
  std::vector<std::byte> send(total);
  for (int to = 0; to < size; ++to)
    for (std::size_t i = 0; i < n; ++i)
      send[static_cast<std::size_t>(to) * n + i] = pattern(rank, to, n, i);
  const std::size_t guard = 16;
  std::vector<std::byte> buffer(total + 2 * guard, std::byte{0x5a});
  std::byte* recv = buffer.data() + guard;
  try {
    if (chunk == 0)
      comm.all_to_all_bytes(send.data(), recv, n);
    else
      qsdp::detail::mpi_all_to_all_bytes(comm.native(), size, send.data(), recv, n, chunk,
                                         comm.options());
  } catch (const std::exception& e) {
    check(false, what + ": threw " + e.what());
    return;
  }
  std::size_t wrong = 0;
  for (int from = 0; from < size; ++from)
    for (std::size_t i = 0; i < n; ++i)
      if (recv[static_cast<std::size_t>(from) * n + i] != pattern(from, rank, n, i)) ++wrong;
  check(wrong == 0, what + ": " + std::to_string(wrong) + " wrong bytes");
  bool guards = true;
  for (std::size_t i = 0; i < guard; ++i)
    guards =
        guards && buffer[i] == std::byte{0x5a} && buffer[buffer.size() - 1 - i] == std::byte{0x5a};
  check(guards, what + ": wrote outside recv");
}

/// The exchanges on one communicator: the direct path (sizes around the interesting edges) and the
/// chunked path driven by tiny fake chunk sizes (full chunks only, full chunks plus a tail, chunk
/// 1).
void test_exchanges(qsdp::mpi_communicator& comm) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4096},
                        std::size_t{4097}, std::size_t{1} << 20}) {
    test_all_gather(comm, n, 0, false);
    test_all_gather(comm, n, 0, true);
    test_all_to_all(comm, n, 0);
  }
  struct sized {
    std::size_t n, chunk;
  };
  for (const sized s : {sized{7, 1}, sized{7, 3}, sized{7, 7}, sized{4097, 1024}, sized{4097, 4096},
                        sized{4096, 1024}, sized{1, 1}, sized{0, 3}, sized{65537, 1000}}) {
    test_all_gather(comm, s.n, s.chunk, false);
    test_all_gather(comm, s.n, s.chunk, true);
    test_all_to_all(comm, s.n, s.chunk);
  }
}

void test_zero_bytes_with_null_buffers(qsdp::mpi_communicator& comm) {
  try {
    comm.all_gather_bytes(nullptr, nullptr, 0);
    comm.all_to_all_bytes(nullptr, nullptr, 0);
    check(true, "zero-byte exchanges with null buffers");
  } catch (const std::exception& e) {
    check(false, std::string("zero-byte exchanges with null buffers threw ") + e.what());
  }
}

/// Refusals happen before MPI is called and identically on every rank, so no rank is left waiting.
void test_bad_arguments(qsdp::mpi_communicator& comm) {
  std::vector<std::byte> buffer(64 * static_cast<std::size_t>(comm.size()));
  check_throws([&] { comm.all_gather_bytes(nullptr, buffer.data(), 8); }, "send is null",
               "all_gather_bytes null send");
  check_throws([&] { comm.all_to_all_bytes(buffer.data(), nullptr, 8); }, "recv is null",
               "all_to_all_bytes null recv");
  check_throws([&] { comm.all_to_all_bytes(buffer.data(), buffer.data(), 8); }, "overlap",
               "all_to_all_bytes send == recv");
  // send overlaps recv but is not this rank's block.
  const std::size_t wrong_block = static_cast<std::size_t>((comm.rank() + 1) % comm.size()) * 8 + 1;
  check_throws([&] { comm.all_gather_bytes(buffer.data() + wrong_block, buffer.data(), 8); },
               "overlap", "all_gather_bytes misplaced in-place send");
  check_throws(
      [&] {
        qsdp::detail::mpi_all_gather_bytes(comm.native(), comm.rank(), comm.size(), buffer.data(),
                                           buffer.data() + 8, 8, 0);
      },
      "chunk size is 0", "chunk size 0");
}

/// The pipeline's exchanges: started ones complete in any wait order with the data of their
/// blocking twins; a ticket that names no started exchange is refused; a blocking exchange may
/// follow.
void test_started_exchanges(qsdp::mpi_communicator& comm) {
  const auto w = static_cast<std::size_t>(comm.size());
  const auto r = static_cast<std::size_t>(comm.rank());
  std::vector<std::byte> gather_send(16), gathered(16 * w), scatter_send(8 * w), scattered(8 * w);
  for (std::size_t i = 0; i < 16; ++i) gather_send[i] = static_cast<std::byte>(r * 16 + i);
  for (std::size_t i = 0; i < 8 * w; ++i) scatter_send[i] = static_cast<std::byte>(r * 100 + i);
  const qsdp::exchange_ticket a =
      comm.start_all_gather_bytes(gather_send.data(), gathered.data(), 16);
  const qsdp::exchange_ticket b =
      comm.start_all_to_all_bytes(scatter_send.data(), scattered.data(), 8);
  check(b.id == a.id + 1, "tickets count up");
  for (int i = 0; i < 50; ++i) comm.progress();
  comm.wait(b);  // out of order
  comm.wait(a);
  bool ok = true;
  for (std::size_t peer = 0; peer < w; ++peer)
    for (std::size_t i = 0; i < 16; ++i)
      ok = ok && gathered[peer * 16 + i] == static_cast<std::byte>(peer * 16 + i);
  check(ok, "started all_gather_bytes delivers every rank's block");
  ok = true;
  for (std::size_t peer = 0; peer < w; ++peer)
    for (std::size_t i = 0; i < 8; ++i)
      ok = ok && scattered[peer * 8 + i] == static_cast<std::byte>(peer * 100 + r * 8 + i);
  check(ok, "started all_to_all_bytes delivers block r of every rank");
  check_throws([&] { comm.wait(a); }, "not waited for yet", "a ticket waited for twice");
  check_throws(
      [&] { (void)comm.start_all_to_all_bytes(scatter_send.data(), scatter_send.data(), 8); },
      "overlap", "started all_to_all_bytes send == recv");
  std::vector<std::byte> after(16 * w);
  comm.all_gather_bytes(gather_send.data(), after.data(), 16);
  check(after == gathered, "a blocking exchange after started ones");
}

void test_counters_and_workspace(MPI_Comm world) {
  qsdp::mpi_communicator a(world);
  qsdp::mpi_communicator b(world);
  check(a.next_call() == 0 && a.next_call() == 1 && a.next_call() == 2, "next_call counts 0, 1, 2");
  check(b.next_call() == 0, "next_call is per object");
  qsdp::mpi_communicator moved(std::move(a));
  check(moved.next_call() == 3, "a moved communicator keeps its counter");

  qsdp::host_workspace& ws = b.workspace();
  check(&ws == &b.workspace(), "workspace() returns the same object");
  std::byte* first = ws.get(1000);
  for (int i = 0; i < 10; ++i) (void)ws.get(1000);
  std::byte* again = ws.get(1000);
  check(ws.growths() == 1, "workspace grows once for repeated same-size get (growths " +
                               std::to_string(ws.growths()) + ")");
  check(first == again, "workspace returns the same buffer for the same size");
  check(reinterpret_cast<std::uintptr_t>(first) % 64 == 0, "workspace buffer is 64-byte aligned");
  (void)ws.get(10);
  check(ws.growths() == 1, "a smaller get reuses the buffer");
}

void test_construction(MPI_Comm world) {
  int rank = -1, size = -1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  qsdp::mpi_communicator comm(world);
  check(comm.rank() == rank && comm.size() == size, "rank() and size() match MPI_Comm_rank/size");
  check(comm.native() == world, "native() is the wrapped communicator");
  static_assert(qsdp::communicator<qsdp::mpi_communicator>);
  static_assert(qsdp::mpi_communicator::memory == qsdp::memory_space::host);

  check_throws([] { qsdp::mpi_communicator null_comm(MPI_COMM_NULL); }, "MPI_COMM_NULL",
               "MPI_COMM_NULL");

  // The user's error handler is left as it was.
  MPI_Comm dup;
  MPI_Comm_dup(world, &dup);
  MPI_Errhandler before, after;
  MPI_Comm_get_errhandler(dup, &before);
  { qsdp::mpi_communicator wrapped(dup); }
  MPI_Comm_get_errhandler(dup, &after);
  check(before == after, "the communicator's error handler is unchanged");
  MPI_Errhandler_free(&before);
  MPI_Errhandler_free(&after);
  MPI_Comm_free(&dup);

  // An intercommunicator between the even and the odd ranks.
  if (size >= 2) {
    MPI_Comm half, inter;
    MPI_Comm_split(world, rank % 2, rank, &half);
    MPI_Intercomm_create(half, 0, world, rank % 2 == 0 ? 1 : 0, 99, &inter);
    check_throws([&] { qsdp::mpi_communicator c(inter); }, "intercommunicator",
                 "intercommunicator");
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
  }
}

/// fault_options: defaults, refusals, and the accessors.
void test_options(MPI_Comm world) {
  const qsdp::fault_options defaults;
  check(!defaults.timeout && defaults.abort_on_failure && qsdp::mpi_default_timeout.count() == 0,
        "fault_options defaults: the transport's timeout (MPI: no limit), abort");
  qsdp::mpi_communicator plain(world);
  check(!plain.options().timeout && plain.usable(), "a communicator without options has no limit");
  qsdp::mpi_communicator timed(
      world, {.timeout = std::chrono::milliseconds(1500), .abort_on_failure = false});
  check(timed.options().timeout == std::chrono::milliseconds(1500) &&
            !timed.options().abort_on_failure,
        "options() returns the options given");
  check_throws([&] { qsdp::mpi_communicator c(world, {.timeout = std::chrono::milliseconds(-1)}); },
               "fault_options::timeout is -1 ms; expected 0 (no limit) or 1..86400000 ms",
               "negative timeout");
  check_throws([&] { qsdp::mpi_communicator c(world, {.timeout = std::chrono::hours(25)}); },
               "fault_options::timeout is 90000000 ms", "timeout above max_fault_timeout");
  check_throws(
      [] { qsdp::mpi_communicator c(MPI_COMM_NULL, {.timeout = std::chrono::seconds(1)}); },
      "MPI_COMM_NULL", "MPI_COMM_NULL with options");
}

/// A timeout with abort_on_failure = false, made real without hanging the job: rank 0 alone starts
/// an all-gather on a duplicate of world and must get qsdp::timeout_error after the timeout, after
/// which its communicator refuses every exchange. The other ranks join that all-gather only
/// afterwards, so the call rank 0 abandoned (still pending in MPI) completes and nothing is left
/// waiting at MPI_Finalize.
void test_timeout_throws(MPI_Comm world) {
  int rank = -1, size = -1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  if (size < 2) return;  // one rank alone never waits
  MPI_Comm dup;
  MPI_Comm_dup(world, &dup);
  constexpr std::size_t n = 8;
  // MPI may write into these after the timed-out call returned (the reason they are static: never
  // freed).
  static std::byte send[n];
  static std::byte recv[n * 64];
  for (std::size_t i = 0; i < n; ++i) send[i] = pattern(rank, -1, n, i);
  const auto timeout = std::chrono::milliseconds(300);
  qsdp::mpi_communicator comm(dup, {.timeout = timeout, .abort_on_failure = false});
  if (rank == 0) {
    (void)comm.workspace().get(1000);  // moved away at the timeout: MPI may still write into it
    const auto start = std::chrono::steady_clock::now();
    std::string message;
    try {
      comm.all_gather_bytes(send, recv, n);
    } catch (const qsdp::timeout_error& e) {
      message = e.what();
    } catch (const std::exception& e) {
      check(false,
            std::string("timed-out all_gather_bytes threw something other than timeout_error: ") +
                e.what());
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    const std::string expected =
        "qsdp::mpi_communicator::all_gather_bytes: timed out: rank 0 of " + std::to_string(size) +
        ": MPI_Iallgather of 8 bytes per rank did not complete within 300 ms";
    check(message.find(expected) != std::string::npos,
          "timeout message '" + message + "' lacks '" + expected + "'");
    check(message.find("unusable") != std::string::npos,
          "timeout message says the communicator is unusable");
    check(waited >= timeout, "the timeout error comes after the timeout");
    check(!comm.usable(), "a timed-out communicator is unusable");
    check_throws([&] { comm.all_to_all_bytes(send, recv, n); }, "this communicator is unusable",
                 "all_to_all_bytes after a timeout");
    check(comm.workspace().capacity() == 0, "the workspace MPI may write into was set aside");
  }
  MPI_Barrier(world);  // rank 0 has timed out; now the others join its abandoned all-gather
  if (rank != 0) {
    try {
      comm.all_gather_bytes(send, recv, n);
      std::size_t wrong = 0;
      for (int r = 0; r < size; ++r)
        for (std::size_t i = 0; i < n; ++i)
          if (recv[static_cast<std::size_t>(r) * n + i] != pattern(r, -1, n, i)) ++wrong;
      check(wrong == 0, "the late ranks complete the abandoned all-gather (" +
                            std::to_string(wrong) + " wrong bytes)");
    } catch (const std::exception& e) {
      check(false, std::string("late all_gather_bytes threw ") + e.what());
    }
  }
  MPI_Barrier(world);  // progresses rank 0's abandoned request too
  MPI_Comm_free(&dup);
}

/// MPI error codes become qsdp::error naming the call and MPI's message.
void test_error_messages() {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(MPI_ERR_COMM, text, &length);
  const std::string mpi_text(text, static_cast<std::size_t>(length));
  check_throws([] { qsdp::detail::mpi_check(MPI_ERR_COMM, "MPI_Allgather", "qsdp::test"); },
               "qsdp::test: MPI_Allgather failed: " + mpi_text, "mpi_check message");
  bool quiet = true;
  try {
    qsdp::detail::mpi_check(MPI_SUCCESS, "MPI_Allgather", "qsdp::test");
  } catch (...) {
    quiet = false;
  }
  check(quiet, "mpi_check passes MPI_SUCCESS");

  // A real MPI failure, reported instead of aborting because the handler returns errors: a count
  // that wraps to -1 (the byte functions never pass one). Datatype calls belong to no communicator;
  // MPI 3.1 raises their errors on MPI_COMM_WORLD, so its handler is switched for this check and
  // restored.
  MPI_Errhandler saved;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &saved);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  check_throws(
      [] { qsdp::detail::mpi_strided_bytes bad(static_cast<std::size_t>(-1), 8, "qsdp::test"); },
      "MPI_Type_contiguous failed", "MPI_Type_contiguous error is reported");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, saved);
  MPI_Errhandler_free(&saved);
}

}  // namespace

int main(int argc, char** argv) {
  // Before MPI_Init: construction must refuse, naming MPI_Init.
  check_throws([] { qsdp::mpi_communicator early(MPI_COMM_WORLD); }, "call MPI_Init",
               "construction before MPI_Init");

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);

  try {
    test_construction(MPI_COMM_WORLD);
    test_error_messages();
    test_counters_and_workspace(MPI_COMM_WORLD);

    qsdp::mpi_communicator world(MPI_COMM_WORLD);
    test_exchanges(world);
    test_zero_bytes_with_null_buffers(world);
    test_bad_arguments(world);
    test_options(MPI_COMM_WORLD);
    test_timeout_throws(MPI_COMM_WORLD);

    // The same exchanges, each MPI call non-blocking and polled against a timeout, with the same
    // results; the test_all_* helpers pass the options on to the chunked path too.
    qsdp::mpi_communicator timed(MPI_COMM_WORLD, {.timeout = std::chrono::seconds(30)});
    test_exchanges(timed);
    test_zero_bytes_with_null_buffers(timed);
    test_bad_arguments(timed);
    test_started_exchanges(world);
    test_started_exchanges(timed);

    // MPI_Init gives no thread level above MPI_THREAD_FUNNELED here: a started collective, whose
    // progress thread would call MPI, is refused before anything moves, naming the fix.
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    std::vector<float> in(8, 1.0f), out(8 * static_cast<std::size_t>(world_size));
    if (provided < MPI_THREAD_SERIALIZED)
      check_throws(
          [&] {
            (void)qsdp::all_gather_async(world, qsdp::uniform<8>{}, in.data(), out.data(), 8);
          },
          "MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED", "a started collective refused");
    qsdp::all_gather(world, qsdp::uniform<8>{}, in.data(), out.data(), 8);
    check(out.back() == 1.0f, "a blocking collective after the refusal");

    // A sub-communicator (ranks split by parity, reversed order): rank(), size() and the exchanges
    // follow the wrapped communicator, not MPI_COMM_WORLD.
    MPI_Comm part;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, -g_rank, &part);
    {
      qsdp::mpi_communicator sub(part);
      const int expected_size = world_size / 2 + (g_rank % 2 == 0 ? world_size % 2 : 0);
      check(sub.size() == expected_size, "sub-communicator size");
      int sub_rank = -1;
      MPI_Comm_rank(part, &sub_rank);
      check(sub.rank() == sub_rank, "sub-communicator rank");
      test_all_gather(sub, 4097, 0, false);
      test_all_to_all(sub, 4097, 0);
      test_all_to_all(sub, 4097, 1000);
    }
    MPI_Comm_free(&part);
  } catch (const std::exception& e) {
    check(false, std::string("unexpected exception: ") + e.what());
  }

  const int status =
      qsdp_mpi_test::report(MPI_COMM_WORLD, "mpi_communicator: " + std::to_string(world_size) +
                                                " ranks, checks summed over ranks");
  MPI_Finalize();
  return status;
}
