// SPDX-License-Identifier: Apache-2.0
//
// The smallest drop-in: a data-parallel step that all-gathers weight shards and reduce-scatters
// gradients with MPI, turned into compressed qsdp calls. The lines marked "was:" are the original
// MPI calls; only they changed, plus the include, the communicator and the two policies.
//
//   mpirun -n 4 ./qsdp_mpi_drop_in
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include <qsdp/collectives.hpp>  // added
#include <qsdp/mpi.hpp>          // added

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  const int shard = 1 << 20;  // values per rank
  std::vector<float> weights_shard(shard), weights(static_cast<std::size_t>(shard) * world);
  std::vector<float> grads(static_cast<std::size_t>(shard) * world), grad_shard(shard);
  for (int i = 0; i < shard; ++i) weights_shard[i] = std::sin(0.001f * (i + rank * shard));
  for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = 1e-3f * std::cos(0.01f * i + rank);

  qsdp::mpi_communicator comm(MPI_COMM_WORLD);                     // added
  qsdp::random_shift<8> weight_q{.bucket_size = 1024, .seed = 1};  // added: QSDP's weight quantizer
  qsdp::stochastic<8> grad_q{.bucket_size = 1024, .seed = 2};      // added: unbiased gradients

  // was: MPI_Allgather(weights_shard.data(), shard, MPI_FLOAT, weights.data(), shard, MPI_FLOAT,
  //                    MPI_COMM_WORLD);
  qsdp::all_gather(comm, weight_q, weights_shard.data(), weights.data(), shard);

  // was: MPI_Reduce_scatter_block(grads.data(), grad_shard.data(), shard, MPI_FLOAT, MPI_SUM,
  //                               MPI_COMM_WORLD);
  qsdp::reduce_scatter(comm, grad_q, grads.data(), grad_shard.data(), shard, qsdp::reduce_op::sum);

  // How far from the uncompressed exchange? (Only to show it; a training loop would not check.)
  std::vector<float> exact_weights(weights.size()), exact_grads(shard);
  MPI_Allgather(weights_shard.data(), shard, MPI_FLOAT, exact_weights.data(), shard, MPI_FLOAT,
                MPI_COMM_WORLD);
  MPI_Reduce_scatter_block(grads.data(), exact_grads.data(), shard, MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD);
  double w_err = 0, w_norm = 0, g_err = 0, g_norm = 0;
  for (std::size_t i = 0; i < weights.size(); ++i)
    w_err += std::pow(weights[i] - exact_weights[i], 2.0),
        w_norm += std::pow(exact_weights[i], 2.0);
  for (int i = 0; i < shard; ++i)
    g_err += std::pow(grad_shard[i] - exact_grads[i], 2.0), g_norm += std::pow(exact_grads[i], 2.0);
  const std::size_t wire = qsdp::compressed_size<float>(weight_q, shard);
  if (rank == 0)
    std::printf(
        "%d ranks, %d values per rank: %zu bytes per packet instead of %zu (%.2fx less), "
        "rel. L2 error: weights %.2e, gradients %.2e\n",
        world, shard, wire, shard * sizeof(float), double(shard * sizeof(float)) / wire,
        std::sqrt(w_err / w_norm), std::sqrt(g_err / g_norm));
  const int ok = std::sqrt(w_err / w_norm) < 1e-2 && std::sqrt(g_err / g_norm) < 1e-2;
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
