// SPDX-License-Identifier: Apache-2.0
//
// qsdp-bench: compressed collectives against the same exchange uncompressed, in the conventions of
// nccl-tests (bench/README.md; options and output: docs/reference/qsdp-bench.md).
//
//   qsdp-bench [-b 1M] [-e 64M] [-f 2] [-n 20] [-w 5] [-c 1]
//              [--op all_gather|reduce_scatter|all_reduce|delta_gather]
//              [--quantizer stochastic|uniform|symmetric|random_shift|identity|hadamard]
//              [--inner stochastic|uniform|symmetric|random_shift] [--bits 8] [--bucket 1024]
//              [--data weights|gradients]
//              [--dtype float|bf16|half] [--backend local|mpi|nccl] [--ranks 4] [--json FILE]
//              [--model --link-gbps G [--latency-us A] [--codec-gbps C] [--codec-threads K]]
//
// Sizes follow nccl-tests: `size` is the bytes of the whole buffer (all_gather: the gathered
// output, reduce_scatter: the input of count * ranks values, all_reduce: the buffer), `count` the
// values per rank (all_reduce: of the buffer). algbw = size / time; busbw = algbw * (n - 1) / n
// (all_reduce: 2 (n - 1) / n). Every rank runs the same fixed number of iterations after the
// warm-up ones, each after a barrier; an iteration's time is the slowest rank's, and the table
// shows the median over iterations. "plain" is the uncompressed exchange on the same communicator:
// MPI_Allgather, MPI_Reduce_scatter_block and MPI_Allreduce for the MPI backend, qsdp::identity
// through the same pipeline for the in-process one, ncclAllGather / ncclReduceScatter /
// ncclAllReduce for NCCL (bench/qsdp_bench_nccl.cu).
//
// This file: main. The host backends and the model: qsdp_bench_host.hpp, compiled once per element
// type (qsdp_bench_host_<type>.cpp); the NCCL backend: qsdp_bench_nccl.cu.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <qsdp/collectives.hpp>
#if QSDP_BENCH_MPI
#include <mpi.h>

#include <qsdp/mpi.hpp>
#endif

#include "qsdp_bench.hpp"

using namespace qsdp_bench;

namespace {

/// The host backends for --dtype, of the element types this build has (CMake's QSDP_BENCH_DTYPES).
void run_host(const options& o) {
#if QSDP_BENCH_DTYPE_FLOAT
  if (o.dtype == "float") return run_host_float(o);
#endif
#if QSDP_BENCH_DTYPE_BF16
  if (o.dtype == "bf16") return run_host_bf16(o);
#endif
#if QSDP_BENCH_DTYPE_HALF
  if (o.dtype == "half") return run_host_half(o);
#endif
  dtype_not_built(o.dtype);
}

}  // namespace

int main(int argc, char** argv) {
#if QSDP_BENCH_MPI
  // MPI for --backend mpi, and for --backend nccl when started by mpirun (one process per GPU).
  bool mpi = false;
  const bool under_mpirun =
      std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--backend") == 0 &&
        (std::strcmp(argv[i + 1], "mpi") == 0 ||
         (std::strcmp(argv[i + 1], "nccl") == 0 && under_mpirun)))
      mpi = true;
  if (mpi) {
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
#endif
  int status = 0;
  try {
    const options o = parse(argc, argv);
    if (o.backend == "nccl" && !o.model) {
#if QSDP_BENCH_NCCL
      process_group group;
#if QSDP_BENCH_MPI
      if (mpi) {
        MPI_Comm_rank(MPI_COMM_WORLD, &group.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &group.world);
        group.broadcast_from_0 = [](void* data, std::size_t bytes) {
          if (MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
            throw std::runtime_error("qsdp-bench: MPI_Bcast of the ncclUniqueId failed");
        };
      }
#endif
      run_nccl(o, group);
#endif
    } else {
      run_host(o);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    status = 1;
  }
#if QSDP_BENCH_MPI
  if (mpi) {
    if (status != 0) MPI_Abort(MPI_COMM_WORLD, status);
    MPI_Finalize();
  }
#endif
  return status;
}
