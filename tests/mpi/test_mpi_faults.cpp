// SPDX-License-Identifier: Apache-2.0
//
// A rank that fails mid-run must end the whole MPI job with an error, never leave it hanging. A
// plain MPI program (like test_mpi_communicator.cpp): every rank runs a few qsdp::all_gather /
// reduce_scatter calls on host buffers, then rank 1 injects the fault named on the command line
// before the last collective:
//   none         no fault: every rank finishes and the program exits 0 (the harness works)
//   abort        std::abort() (Open MPI kills the job: a rank died on a signal)
//   exit         std::exit(3), without MPI_Finalize (Open MPI kills the job)
//   throw        a qsdp::error that main catches, prints and answers with MPI_Abort (what users
//                should do)
//   segv         raise(SIGSEGV) (Open MPI kills the job: a rank died on a signal)
//   hang         rank 1 sleeps forever (the others' fault_options::timeout ends the job)
//   hang-pieced  the same while the others wait in a reduce_scatter in pipeline pieces, whose
//                non-blocking exchanges time out in mpi_communicator::wait
//   skip         rank 1 skips the last collective and calls MPI_Finalize (the timeout ends the job)
// Usage: qsdp_test_mpi_faults <mode> [timeout_ms]. The default timeout is 2000 ms for none, the
// hangs and skip, 0 (blocking MPI calls) for the modes where a rank dies, to show that Open MPI
// alone ends those. Needs at least 2 ranks. tests/mpi/check_mpi_fault.cmake runs it under mpiexec
// (ctest: mpi.fault.*).
#include <qsdp/collectives.hpp>
#include <qsdp/mpi.hpp>

#include "mpi_check.hpp"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace {

using qsdp_mpi_test::check;
using qsdp_mpi_test::g_rank;

enum class fault { none, abort, exit, throw_error, segv, hang, hang_pieced, skip };

struct fault_name {
  fault mode;
  const char* name;
};
constexpr fault_name fault_names[] = {{fault::none, "none"},
                                      {fault::abort, "abort"},
                                      {fault::exit, "exit"},
                                      {fault::throw_error, "throw"},
                                      {fault::segv, "segv"},
                                      {fault::hang, "hang"},
                                      {fault::hang_pieced, "hang-pieced"},
                                      {fault::skip, "skip"}};

const char* name_of(fault mode) {
  for (const fault_name& f : fault_names)
    if (f.mode == mode) return f.name;
  return "?";
}

/// Value i of rank `rank`'s input in round `round`: smooth, different on every rank and round.
float input_value(int rank, int round, std::size_t i) {
  return std::sin(0.01f * static_cast<float>(i) + static_cast<float>(rank) +
                  0.5f * static_cast<float>(round));
}

constexpr std::size_t count = 4096;  // values per rank
constexpr int rounds = 3;            // each: all_gather, then reduce_scatter
// hang-pieced's reduce_scatter: two pipeline pieces of qsdp::min_piece_bytes per chunk.
constexpr std::size_t pieced_count = 2 * (qsdp::min_piece_bytes / sizeof(float));
constexpr qsdp::call_options pieced_options{.max_pieces = 2};

/// What one rank received in one run of the sequence, to compare runs bit for bit.
struct results {
  std::vector<std::vector<float>> gathered;
  std::vector<std::vector<float>> reduced;
};

/// The sequence of collectives; rank 1 injects `mode` in the last round, after its all_gather and
/// before the reduce_scatter, so the other ranks are inside that reduce_scatter when the fault
/// hits.
results run_collectives(qsdp::mpi_communicator& comm, fault mode) {
  const qsdp::stochastic<8> policy{.bucket_size = 256, .seed = 1};
  const int world = comm.size();
  const auto ranks = static_cast<std::size_t>(world);
  // Input values lie in [-1, 1]: an 8-bit bucket's step is at most 2 / 255, and stochastic rounding
  // moves a value by less than one step.
  const float step = 2.0f / 255.0f + 1e-6f;
  results out;
  for (int round = 0; round < rounds; ++round) {
    std::vector<float> shard(count);
    for (std::size_t i = 0; i < count; ++i) shard[i] = input_value(comm.rank(), round, i);
    std::vector<float> full(count * ranks);
    qsdp::all_gather(comm, policy, shard.data(), full.data(), count);
    float worst = 0.0f;
    for (int r = 0; r < world; ++r)
      for (std::size_t i = 0; i < count; ++i)
        worst = std::max(worst, std::fabs(full[static_cast<std::size_t>(r) * count + i] -
                                          input_value(r, round, i)));
    check(worst <= step,
          "all_gather round " + std::to_string(round) + ": error " + std::to_string(worst));
    out.gathered.push_back(full);

    if (round == rounds - 1 && mode != fault::none && comm.rank() == 1) {
      std::fprintf(stderr, "rank 1: injecting fault '%s' after %d collectives\n", name_of(mode),
                   2 * round + 1);
      std::fflush(stderr);
      switch (mode) {
        case fault::abort: std::abort();
        case fault::exit: std::exit(3);
        case fault::throw_error:
          // A rank-local mistake (here a null output buffer) is thrown before MPI is called, so the
          // other ranks are already waiting in the collective; main's handler must end the job.
          qsdp::reduce_scatter(comm, policy, full.data(), static_cast<float*>(nullptr), count,
                               qsdp::reduce_op::sum);
          break;
        case fault::segv: std::raise(SIGSEGV); break;
        case fault::hang_pieced: {
          // Rank 1 agrees on the others' pieced call (the descriptor exchange that begins a
          // signature's first call), so that they go on to its exchanges, then hangs before them.
          const auto mine = qsdp::detail::describe_call<qsdp::stochastic<8>, float>(
              policy, qsdp::detail::collective_kind::reduce_scatter, qsdp::reduce_op::sum,
              pieced_count, world, pieced_options);
          std::vector<std::byte> all(ranks * sizeof mine);
          comm.all_gather_bytes(reinterpret_cast<const std::byte*>(&mine), all.data(), sizeof mine);
        }
          [[fallthrough]];
        case fault::hang:
          for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
        case fault::skip: return out;  // skips the reduce_scatter; main calls MPI_Finalize
        case fault::none: break;
      }
    }

    if (round == rounds - 1 && mode == fault::hang_pieced) {
      // The waiting ranks' call runs in pieces (call_options::max_pieces): its exchanges are
      // started non-blocking and waited for with the polled timeout (mpi_communicator::wait).
      const std::vector<float> send(pieced_count * ranks, 0.5f);
      std::vector<float> chunk(pieced_count);
      qsdp::reduce_scatter(comm, policy, send.data(), chunk.data(), pieced_count,
                           qsdp::reduce_op::sum, pieced_options);
    }

    // Every rank sends the same values (full) to every rank: rank r's chunk of the sum is world
    // times full's chunk r, each term off by less than one step.
    std::vector<float> reduced(count);
    qsdp::reduce_scatter(comm, policy, full.data(), reduced.data(), count, qsdp::reduce_op::sum);
    worst = 0.0f;
    for (std::size_t i = 0; i < count; ++i) {
      const float expected = static_cast<float>(world) * input_value(comm.rank(), round, i);
      worst = std::max(worst, std::fabs(reduced[i] - expected));
    }
    check(worst <= 2.0f * static_cast<float>(world) * step,
          "reduce_scatter round " + std::to_string(round) + ": error " + std::to_string(worst));
    out.reduced.push_back(reduced);
  }
  return out;
}

bool parse_mode(const char* text, fault& mode) {
  for (const fault_name& f : fault_names)
    if (std::strcmp(text, f.name) == 0) {
      mode = f.mode;
      return true;
    }
  return false;
}

/// The whole test on one rank; qsdp errors propagate to main.
void run(fault mode, std::chrono::milliseconds timeout) {
  qsdp::mpi_communicator comm(MPI_COMM_WORLD, {.timeout = timeout});
  if (g_rank == 0)
    std::printf("faults: mode %s, %d ranks, timeout %lld ms\n", name_of(mode), comm.size(),
                static_cast<long long>(timeout.count()));
  const results first = run_collectives(comm, mode);
  if (mode != fault::none) return;
  // No fault: the same sequence on a communicator with the other wait mode (blocking when the first
  // had a timeout, and the reverse) gives bit-identical results, since both count calls from 0.
  const std::chrono::milliseconds other =
      timeout.count() == 0 ? std::chrono::milliseconds(30000) : std::chrono::milliseconds(0);
  qsdp::mpi_communicator other_comm(MPI_COMM_WORLD, {.timeout = other});
  const results second = run_collectives(other_comm, mode);
  check(first.gathered == second.gathered && first.reduced == second.reduced,
        "timeout " + std::to_string(timeout.count()) + " ms and " + std::to_string(other.count()) +
            " ms give the same results");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);

  fault mode = fault::none;
  if (argc < 2 || argc > 3 || !parse_mode(argv[1], mode) || world_size < 2) {
    if (g_rank == 0)
      std::fprintf(
          stderr,
          "usage: mpiexec -n <2 or more> %s none|abort|exit|throw|segv|hang|hang-pieced|skip "
          "[timeout_ms]\n",
          argv[0]);
    MPI_Finalize();
    return 2;
  }
  const bool rank_dies = mode == fault::abort || mode == fault::exit ||
                         mode == fault::throw_error || mode == fault::segv;
  std::chrono::milliseconds timeout(rank_dies ? 0 : 2000);
  if (argc == 3) timeout = std::chrono::milliseconds(std::atoll(argv[2]));

  try {
    run(mode, timeout);
  } catch (const std::exception& e) {
    // The pattern for users: report the error on this rank, then end the job, since the other ranks
    // may be waiting in a collective that this rank will never join.
    std::fprintf(stderr, "rank %d: error: %s; calling MPI_Abort\n", g_rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  long counts[2] = {qsdp_mpi_test::g_passed, qsdp_mpi_test::g_failed};
  long totals[2] = {0, 0};
  if (mode != fault::skip || g_rank != 1)  // a skipping rank went straight on to MPI_Finalize
    MPI_Allreduce(counts, totals, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) {
    std::printf("faults: mode %s: %ld checks passed, %ld failed, summed over ranks\n",
                name_of(mode), totals[0], totals[1]);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return totals[1] == 0 ? 0 : 1;
}
