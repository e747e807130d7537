// SPDX-License-Identifier: Apache-2.0
//
// qsdp-bench-two-level: two-level collectives (qsdp::mpi_two_level) against flat qsdp and plain
// MPI, side by side in one MPI job, on fp32 values per rank from -b to -e (multiplied by -f):
//
//   reduce_scatter (gradients: N(0, 1e-3), one in 97 N(0, 1)): MPI_Reduce_scatter_block, flat
//     stochastic<8> and <4>, two-level {stochastic<8> inside, stochastic<4> across},
//     {stochastic<8>, hadamard<stochastic<4>>} and {identity, hadamard<stochastic<4>>}
//   all_gather (weights: N(0, 0.02)): MPI_Allgather, flat random_shift<8> and <4>, two-level
//     {random_shift<8>, random_shift<8>} and {identity, random_shift<8>}
//
// Every call is timed after a barrier (the slowest rank's time; the median over -n iterations after
// -w warm-up ones), and its error is the relative L2 distance to the float64 result, over all
// ranks. Bucket 1024 throughout (hadamard: 1024 too). The size gate is left at its default (sizes
// below 32 KiB per peer then move uncompressed).
//
//   mpirun -n 4 qsdp-bench-two-level --node-size 2 [-b 1M] [-e 64M] [-f 4] [-n 3] [-w 1]
//          [--op reduce_scatter|all_gather|both] [--json FILE]
//
// bench/net/run.sh --node-size 2 --inside-rate R shapes the links as nodes (docs/benchmarks.md).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <qsdp/collectives.hpp>
#include <qsdp/mpi.hpp>

#include "codec_instances.hpp"  // the codec's loops, compiled once (tests/support)

namespace {

struct options {
  int node_size = 0;
  std::size_t min_bytes = std::size_t{1} << 20, max_bytes = std::size_t{64} << 20;
  double factor = 4;
  int iterations = 3, warmup = 1;
  std::string op = "both";
  std::string json;
};

[[noreturn]] void usage(const std::string& message) {
  throw std::invalid_argument("qsdp-bench-two-level: " + message +
                              " (usage: --node-size S [-b SIZE] [-e SIZE] [-f F] [-n N] [-w N] "
                              "[--op reduce_scatter|all_gather|both] [--json FILE])");
}

std::size_t parse_size(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string suffix(end);
  const double scale = suffix == "K"   ? 1024.0
                       : suffix == "M" ? 1048576.0
                       : suffix == "G" ? 1073741824.0
                                       : 1.0;
  if (end == text.c_str() || !(v > 0) || (!suffix.empty() && scale == 1.0))
    usage("size " + text + ": expected a size such as 4M");
  return static_cast<std::size_t>(v * scale);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[i + 1];
    if (flag == "--node-size")
      o.node_size = std::atoi(value.c_str());
    else if (flag == "-b")
      o.min_bytes = parse_size(value);
    else if (flag == "-e")
      o.max_bytes = parse_size(value);
    else if (flag == "-f")
      o.factor = std::strtod(value.c_str(), nullptr);
    else if (flag == "-n")
      o.iterations = std::atoi(value.c_str());
    else if (flag == "-w")
      o.warmup = std::atoi(value.c_str());
    else if (flag == "--op")
      o.op = value;
    else if (flag == "--json")
      o.json = value;
    else if (flag == "--backend" && value != "mpi")  // bench/net/run.sh passes --backend mpi
      usage("--backend " + value + ": this benchmark runs over MPI only");
    else if (flag != "--backend")
      usage("unknown option " + flag);
  }
  if (o.node_size < 1) usage("--node-size is required (>= 1)");
  if (!(o.factor > 1) || o.iterations < 1 || o.warmup < 0 || o.min_bytes > o.max_bytes)
    usage("bad -f, -n, -w, -b or -e");
  if (o.op != "reduce_scatter" && o.op != "all_gather" && o.op != "both")
    usage("--op " + o.op + ": expected reduce_scatter, all_gather or both");
  return o;
}

std::vector<float> make_values(std::size_t n, int rank, bool gradients) {
  std::mt19937 rng(1000u + static_cast<unsigned>(rank));
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v)
    x = gradients ? (rng() % 97 == 0 ? 1.0f : 1e-3f) * normal(rng) : 0.02f * normal(rng);
  return v;
}

/// Median over iterations of the slowest rank's time of `call`, in seconds.
double time_call(const options& o, const std::function<void()>& call) {
  std::vector<double> times;
  for (int i = 0; i < o.warmup + o.iterations; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    call();
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i >= o.warmup) times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

/// Relative L2 distance of `got` to `want` over all ranks.
double rel_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double sums[2] = {0, 0};
  for (std::size_t i = 0; i < got.size(); ++i) {
    sums[0] += (got[i] - want[i]) * (got[i] - want[i]);
    sums[1] += want[i] * want[i];
  }
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return std::sqrt(sums[0] / sums[1]);
}

struct row {
  std::string op, variant;
  std::size_t bytes_per_rank;
  double seconds, error;
  std::size_t plain;  // the index of this op and size's plain MPI row; flat 8-bit is the next
};

int g_rank = 0, g_world = 1;

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int status = 0;
  try {
    const options o = parse(argc, argv);
    qsdp::mpi_two_level levels(MPI_COMM_WORLD, o.node_size);
    qsdp::mpi_communicator flat(MPI_COMM_WORLD);
    auto& pair = levels.pair();
    const auto w = static_cast<std::size_t>(g_world);
    std::vector<row> rows;
    if (g_rank == 0)
      std::printf(
          "# qsdp-bench-two-level: %d ranks, nodes of %d; fp32; time = slowest rank, median of "
          "%d after %d warm-up; error = rel. L2 to float64 over all ranks\n",
          g_world, o.node_size, o.iterations, o.warmup);
    for (double size = static_cast<double>(o.min_bytes);
         size <= static_cast<double>(o.max_bytes) * 1.0000001; size *= o.factor) {
      const std::size_t count = static_cast<std::size_t>(size) / sizeof(float);
      const std::size_t bytes = count * sizeof(float);
      const std::size_t size_rows = rows.size();
      if (o.op != "all_gather") {
        const auto grads = make_values(count * w, g_rank, true);
        std::vector<double> exact(count, 0.0);
        {
          std::vector<double> wide(grads.begin(), grads.end());
          MPI_Reduce_scatter_block(wide.data(), exact.data(), static_cast<int>(count), MPI_DOUBLE,
                                   MPI_SUM, MPI_COMM_WORLD);
        }
        std::vector<float> out(count);
        const std::size_t plain = rows.size();
        auto add = [&](const std::string& variant, const std::function<void()>& call) {
          const double t = time_call(o, call);
          rows.push_back({"reduce_scatter", variant, bytes, t, rel_l2(out, exact), plain});
        };
        add("MPI_Reduce_scatter_block", [&] {
          MPI_Reduce_scatter_block(grads.data(), out.data(), static_cast<int>(count), MPI_FLOAT,
                                   MPI_SUM, MPI_COMM_WORLD);
        });
        add("flat stochastic<8>", [&] {
          qsdp::reduce_scatter(flat, qsdp::stochastic<8>{.seed = 1}, grads.data(), out.data(),
                               count, qsdp::reduce_op::sum);
        });
        add("flat stochastic<4>", [&] {
          qsdp::reduce_scatter(flat, qsdp::stochastic<4>{.seed = 1}, grads.data(), out.data(),
                               count, qsdp::reduce_op::sum);
        });
        add("two-level stochastic<8> | stochastic<4>", [&] {
          qsdp::reduce_scatter(
              pair,
              qsdp::level_policies{qsdp::stochastic<8>{.seed = 1}, qsdp::stochastic<4>{.seed = 2}},
              grads.data(), out.data(), count, qsdp::reduce_op::sum);
        });
        add("two-level stochastic<8> | hadamard<stochastic<4>>", [&] {
          qsdp::reduce_scatter(
              pair,
              qsdp::level_policies{qsdp::stochastic<8>{.seed = 1},
                                   qsdp::hadamard<qsdp::stochastic<4>>{{.seed = 2}}},
              grads.data(), out.data(), count, qsdp::reduce_op::sum);
        });
        add("two-level identity | hadamard<stochastic<4>>", [&] {
          qsdp::reduce_scatter(
              pair,
              qsdp::level_policies{qsdp::identity{},
                                   qsdp::hadamard<qsdp::stochastic<4>>{{.seed = 2}}},
              grads.data(), out.data(), count, qsdp::reduce_op::sum);
        });
      }
      if (o.op != "reduce_scatter") {
        const auto shard = make_values(count, g_rank, false);
        std::vector<double> exact(count * w);
        {
          const std::vector<double> wide(shard.begin(), shard.end());
          MPI_Allgather(wide.data(), static_cast<int>(count), MPI_DOUBLE, exact.data(),
                        static_cast<int>(count), MPI_DOUBLE, MPI_COMM_WORLD);
        }
        std::vector<float> full(count * w);
        const std::size_t plain = rows.size();
        auto add = [&](const std::string& variant, const std::function<void()>& call) {
          const double t = time_call(o, call);
          rows.push_back({"all_gather", variant, bytes, t, rel_l2(full, exact), plain});
        };
        add("MPI_Allgather", [&] {
          MPI_Allgather(shard.data(), static_cast<int>(count), MPI_FLOAT, full.data(),
                        static_cast<int>(count), MPI_FLOAT, MPI_COMM_WORLD);
        });
        add("flat random_shift<8>", [&] {
          qsdp::all_gather(flat, qsdp::random_shift<8>{.seed = 1}, shard.data(), full.data(),
                           count);
        });
        add("flat random_shift<4>", [&] {
          qsdp::all_gather(flat, qsdp::random_shift<4>{.seed = 1}, shard.data(), full.data(),
                           count);
        });
        add("two-level random_shift<8> | random_shift<8>", [&] {
          qsdp::all_gather(pair,
                           qsdp::level_policies{qsdp::random_shift<8>{.seed = 1},
                                                qsdp::random_shift<8>{.seed = 2}},
                           shard.data(), full.data(), count);
        });
        add("two-level identity | random_shift<8>", [&] {
          qsdp::all_gather(pair,
                           qsdp::level_policies{qsdp::identity{}, qsdp::random_shift<8>{.seed = 2}},
                           shard.data(), full.data(), count);
        });
      }
      if (g_rank == 0) {
        for (std::size_t i = size_rows; i < rows.size(); ++i) {
          const row& r = rows[i];
          const row& base = rows[r.plain];
          const row& flat8 = rows[r.plain + 1];
          std::printf(
              "%-15s %10zu  %-50s %10.1f us  %6.2fx vs MPI  %6.2fx vs flat 8-bit  rel. L2 %.3e\n",
              r.op.c_str(), r.bytes_per_rank, r.variant.c_str(), r.seconds * 1e6,
              base.seconds / r.seconds, flat8.seconds / r.seconds, r.error);
        }
        std::fflush(stdout);
      }
    }
    if (g_rank == 0 && !o.json.empty()) {
      std::FILE* f = std::fopen(o.json.c_str(), "w");
      if (!f) throw std::runtime_error("qsdp-bench-two-level: cannot write " + o.json);
      std::fprintf(f,
                   "{\"ranks\": %d, \"node_size\": %d, \"iterations\": %d, \"warmup\": %d, "
                   "\"rows\": [",
                   g_world, o.node_size, o.iterations, o.warmup);
      for (std::size_t i = 0; i < rows.size(); ++i)
        std::fprintf(f,
                     "%s\n  {\"op\": \"%s\", \"variant\": \"%s\", \"bytes_per_rank\": %zu, "
                     "\"seconds\": %.9g, \"rel_l2\": %.9g}",
                     i ? "," : "", rows[i].op.c_str(), rows[i].variant.c_str(),
                     rows[i].bytes_per_rank, rows[i].seconds, rows[i].error);
      std::fprintf(f, "\n]}\n");
      std::fclose(f);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", g_rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);  // the other ranks may be waiting in a collective
    status = 1;
  }
  MPI_Finalize();
  return status;
}
