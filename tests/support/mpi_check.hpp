// SPDX-License-Identifier: Apache-2.0
//
// The check harness of the MPI test programs (tests/mpi), which run under mpiexec without doctest:
// every rank counts its passed and failed checks and prints each failure with its rank; report()
// sums the counts over the ranks, rank 0 prints "N passed, M failed", and the exit status is
// non-zero when any check failed anywhere.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <string>

#include <qsdp/config.hpp>

namespace qsdp_mpi_test {

inline int g_rank = -1;  // -1 until MPI_Init (the first check may run before it)
inline long g_passed = 0;
inline long g_failed = 0;

inline void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, what.c_str());
  }
}

/// Runs fn and checks that it throws qsdp::error whose message contains `needle`.
template <class Fn>
void check_throws(Fn&& fn, const std::string& needle, const std::string& what) {
  try {
    fn();
    check(false, what + ": no exception");
  } catch (const qsdp::error& e) {
    check(std::string(e.what()).find(needle) != std::string::npos,
          what + ": message '" + e.what() + "' lacks '" + needle + "'");
  } catch (...) {
    check(false, what + ": threw something other than qsdp::error");
  }
}

/// Sums the checks of every rank of `comm` (collective), prints the total on rank 0 after `title`
/// (when not empty), and returns the process's exit status: 0 when no rank failed a check.
inline int report(MPI_Comm comm, const std::string& title = "") {
  long counts[2] = {g_passed, g_failed};
  long totals[2] = {0, 0};
  MPI_Allreduce(counts, totals, 2, MPI_LONG, MPI_SUM, comm);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) {
    if (!title.empty()) std::printf("%s\n", title.c_str());
    std::printf("%ld passed, %ld failed\n", totals[0], totals[1]);
    std::fflush(stdout);
  }
  return totals[1] == 0 ? 0 : 1;
}

}  // namespace qsdp_mpi_test
