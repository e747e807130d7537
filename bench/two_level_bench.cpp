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
// ranks. Bucket 1024 throughout (hadamard: 1024 too). The size gate is the recommended one (sizes
// below 32 KiB per peer move uncompressed). Rank 0 prints one table row per call and size, and
// a verdict per operation from the largest size; progress lines go to stderr once the run takes
// more than a few seconds.
//
//   mpirun -n 4 qsdp-bench-two-level --node-size 2 [-b 1M] [-e 64M] [-f 4] [-n 3] [-w 1]
//          [--op reduce_scatter|all_gather|both] [--json FILE]
//
// bench/net/run.sh --node-size 2 --inside-rate R shapes the links as nodes; with --node-namespaces
// the nodes are hosts of their own whose ranks share memory, found with --node-size 0
// (docs/guides/two-level.md; results: docs/benchmarks/two-level.md).
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
#include "console.hpp"          // progress lines, percentages (examples/)

namespace {

/// qsdp::recommended_min_compressed_bytes, on every qsdp call of the benchmark.
constexpr qsdp::call_options gate{.min_compressed_bytes = qsdp::recommended_min_compressed_bytes};

struct options {
  int node_size = -1;  // required; 0: the ranks that share memory
  std::size_t min_bytes = std::size_t{1} << 20, max_bytes = std::size_t{64} << 20;
  double factor = 4;
  int iterations = 3, warmup = 1;
  std::string op = "both";
  std::string json;
  bool help = false;
};

const char* help_text =
    "usage: mpirun -n N qsdp-bench-two-level --node-size S [options]\n"
    "\n"
    "Times qsdp's two-level collectives (inside nodes of S ranks, then across them) against flat\n"
    "qsdp and plain MPI on the same ranks, for fp32 values, and prints one row per call and size.\n"
    "\n"
    "  --node-size S   Ranks per node, S >= 1, N a multiple of S; 0: the ranks that share\n"
    "                  memory, as MPI sees them (MPI_COMM_TYPE_SHARED) (no default).\n"
    "  -b SIZE         The smallest size, in bytes per rank; K, M and G multiply by 1024, 1024^2\n"
    "                  and 1024^3 (default 1M).\n"
    "  -e SIZE         The largest size, in bytes per rank (default 64M).\n"
    "  -f F            Each size is F times the one before, F > 1 (default 4).\n"
    "  -n N            Timed calls per size and call; the table shows their median (default 3).\n"
    "  -w N            Untimed calls before them (default 1).\n"
    "  --op OP         reduce_scatter, all_gather or both (default both).\n"
    "  --json FILE     Also writes every row to FILE as JSON (default: no file).\n"
    "  --backend mpi   Accepted for bench/net/run.sh; MPI is the only backend.\n"
    "  -h, --help      Prints this text.\n";

[[noreturn]] void usage(const std::string& message) {
  throw std::invalid_argument("qsdp-bench-two-level: " + message +
                              " (qsdp-bench-two-level --help lists the options)");
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
    if (flag == "-h" || flag == "--help") {
      o.help = true;
      return o;
    }
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
  if (o.node_size < 0) usage("--node-size is required (>= 0)");
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
  double ratio;       // fp32 bytes / bytes of the packets that cross between nodes
};

int g_rank = 0, g_world = 1;

/// Every rank's host name (MPI_Get_processor_name) in rank order, each after a space; rank 0's
/// result is the one that counts. Shows on which "host" each rank ran, e.g. in bench/net's nodes.
std::string hosts_by_rank() {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  std::vector<char> all(static_cast<std::size_t>(g_world) * MPI_MAX_PROCESSOR_NAME);
  MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
             0, MPI_COMM_WORLD);
  std::string hosts;
  for (int r = 0; r < g_world; ++r)
    hosts += " " + std::string(all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  return hosts;
}

/// fp32 bytes over the bytes of policy q's packet of `count` values: the compression of what
/// crosses between nodes (flat: of everything).
template <class Q>
double ratio_of(const Q& q, std::size_t count) {
  return static_cast<double>(count * sizeof(float)) /
         static_cast<double>(qsdp::compressed_size<float>(q, count));
}

/// One line for one operation at the largest size: the fastest variant whose error is at most twice
/// flat 8-bit qsdp's (a faster call that is much less accurate is no win), against plain MPI and
/// flat 8-bit qsdp, and its error; then the fastest at any error, where that is another.
void print_verdict(const std::vector<row>& rows, const std::string& op) {
  std::size_t first = rows.size();
  for (std::size_t i = rows.size(); i-- > 0;)
    if (rows[i].op == op) {
      first = rows[i].plain;
      break;
    }
  if (first == rows.size()) return;
  const row& plain = rows[first];
  const row& flat8 = rows[first + 1];
  const double error_limit = 2 * flat8.error;
  std::size_t best = first, fastest = first;
  for (std::size_t i = first; i < rows.size() && rows[i].op == op; ++i) {
    if (rows[i].error <= error_limit && rows[i].seconds < rows[best].seconds) best = i;
    if (rows[i].seconds < rows[fastest].seconds) fastest = i;
  }
  const row& b = rows[best];
  // The clause on the fastest call at any error, when it is not the one the verdict names.
  const auto print_fastest = [&] {
    if (fastest != best)
      std::printf("; fastest at any error: %s, %.2fx faster than %s, at %s rel. L2 error",
                  rows[fastest].variant.c_str(), plain.seconds / rows[fastest].seconds,
                  plain.variant.c_str(), console::percent_text(rows[fastest].error).c_str());
    std::printf("\n");
  };
  std::printf("# verdict, %s at %zu B per rank: ", op.c_str(), b.bytes_per_rank);
  if (best == first) {
    std::size_t next = first + 1;
    for (std::size_t i = first + 1; i < rows.size() && rows[i].op == op; ++i)
      if (rows[i].error <= error_limit && rows[i].seconds < rows[next].seconds) next = i;
    std::printf(
        "plain %s is the fastest within twice %s's error; the fastest such compressed "
        "call, %s, takes %.2fx its time",
        plain.variant.c_str(), flat8.variant.c_str(), rows[next].variant.c_str(),
        rows[next].seconds / plain.seconds);
    print_fastest();
    return;
  }
  std::printf("fastest within twice %s's error: %s, %.2fx faster than %s", flat8.variant.c_str(),
              b.variant.c_str(), plain.seconds / b.seconds, plain.variant.c_str());
  if (best != first + 1)
    std::printf(" and %.2fx faster than %s", flat8.seconds / b.seconds, flat8.variant.c_str());
  std::printf(", sending %.2fx fewer bytes across nodes, at %s rel. L2 error", b.ratio,
              console::percent_text(b.error).c_str());
  print_fastest();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int status = 0;
  try {
    const options o = parse(argc, argv);
    if (o.help) {
      if (g_rank == 0) std::fputs(help_text, stdout);
      MPI_Finalize();
      return 0;
    }
    qsdp::mpi_two_level levels(MPI_COMM_WORLD, o.node_size);
    const int node_size = levels.node().size();
    const std::string hosts = hosts_by_rank();
    qsdp::mpi_communicator flat(MPI_COMM_WORLD);
    auto& pair = levels.pair();
    const auto w = static_cast<std::size_t>(g_world);
    std::vector<row> rows;
    std::vector<double> sizes;
    for (double size = static_cast<double>(o.min_bytes);
         size <= static_cast<double>(o.max_bytes) * 1.0000001; size *= o.factor)
      sizes.push_back(size);
    console::progress shown(sizes.size() *
                            ((o.op != "all_gather" ? 6 : 0) + (o.op != "reduce_scatter" ? 5 : 0)));
    if (g_rank == 0) {
      std::printf(
          "# qsdp-bench-two-level: %d ranks in nodes of %d%s, fp32 values, bucket 1024\n"
          "# hosts by rank:%s\n"
          "# time: the slowest rank's, median of %d call%s after %d warm-up call%s, each after a "
          "barrier\n"
          "# rel. L2 err: ||y - x|| / ||x|| (relative RMS error) over all ranks, x the float64 "
          "result\n"
          "# ratio: fp32 bytes / packet bytes of the policy that crosses between nodes (flat: its "
          "one policy);\n"
          "# sizes below the size gate (32 KiB per peer) go uncompressed\n"
          "#\n",
          g_world, node_size, o.node_size == 0 ? " (the ranks that share memory)" : "",
          hosts.c_str(), o.iterations, o.iterations == 1 ? "" : "s", o.warmup,
          o.warmup == 1 ? "" : "s");
      std::printf("# %-14s %14s  %-50s %10s %8s %9s %7s %11s\n", "op", "size", "variant", "time",
                  "vs MPI", "vs flat", "ratio", "rel. L2");
      std::printf("# %-14s %14s  %-50s %10s %8s %9s %7s %11s\n", "", "(B per rank)", "", "(ms)",
                  "(x)", "8-bit (x)", "(x)", "err");
    }
    for (const double size : sizes) {
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
        auto add = [&](const std::string& variant, double ratio,
                       const std::function<void()>& call) {
          shown.step("reduce_scatter, " + std::to_string(bytes) + " B per rank: " + variant);
          const double t = time_call(o, call);
          rows.push_back({"reduce_scatter", variant, bytes, t, rel_l2(out, exact), plain, ratio});
        };
        const qsdp::stochastic<8> s8{.seed = 1};
        const qsdp::stochastic<4> s4{.seed = 1};
        const qsdp::hadamard<qsdp::stochastic<4>> h4{{.seed = 2}};
        add("MPI_Reduce_scatter_block", 1.0, [&] {
          MPI_Reduce_scatter_block(grads.data(), out.data(), static_cast<int>(count), MPI_FLOAT,
                                   MPI_SUM, MPI_COMM_WORLD);
        });
        add("flat stochastic<8>", ratio_of(s8, count), [&] {
          qsdp::reduce_scatter(flat, qsdp::stochastic<8>{.seed = 1}, grads.data(), out.data(),
                               count, qsdp::reduce_op::sum, gate);
        });
        add("flat stochastic<4>", ratio_of(s4, count), [&] {
          qsdp::reduce_scatter(flat, qsdp::stochastic<4>{.seed = 1}, grads.data(), out.data(),
                               count, qsdp::reduce_op::sum, gate);
        });
        add("two-level stochastic<8> | stochastic<4>", ratio_of(s4, count), [&] {
          qsdp::reduce_scatter(
              pair,
              qsdp::level_policies{qsdp::stochastic<8>{.seed = 1}, qsdp::stochastic<4>{.seed = 2}},
              grads.data(), out.data(), count, qsdp::reduce_op::sum, gate);
        });
        add("two-level stochastic<8> | hadamard<stochastic<4>>", ratio_of(h4, count), [&] {
          qsdp::reduce_scatter(
              pair,
              qsdp::level_policies{qsdp::stochastic<8>{.seed = 1},
                                   qsdp::hadamard<qsdp::stochastic<4>>{{.seed = 2}}},
              grads.data(), out.data(), count, qsdp::reduce_op::sum, gate);
        });
        add("two-level identity | hadamard<stochastic<4>>", ratio_of(h4, count), [&] {
          qsdp::reduce_scatter(
              pair,
              qsdp::level_policies{qsdp::identity{},
                                   qsdp::hadamard<qsdp::stochastic<4>>{{.seed = 2}}},
              grads.data(), out.data(), count, qsdp::reduce_op::sum, gate);
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
        auto add = [&](const std::string& variant, double ratio,
                       const std::function<void()>& call) {
          shown.step("all_gather, " + std::to_string(bytes) + " B per rank: " + variant);
          const double t = time_call(o, call);
          rows.push_back({"all_gather", variant, bytes, t, rel_l2(full, exact), plain, ratio});
        };
        const qsdp::random_shift<8> r8{.seed = 1};
        const qsdp::random_shift<4> r4{.seed = 1};
        add("MPI_Allgather", 1.0, [&] {
          MPI_Allgather(shard.data(), static_cast<int>(count), MPI_FLOAT, full.data(),
                        static_cast<int>(count), MPI_FLOAT, MPI_COMM_WORLD);
        });
        add("flat random_shift<8>", ratio_of(r8, count), [&] {
          qsdp::all_gather(flat, qsdp::random_shift<8>{.seed = 1}, shard.data(), full.data(), count,
                           gate);
        });
        add("flat random_shift<4>", ratio_of(r4, count), [&] {
          qsdp::all_gather(flat, qsdp::random_shift<4>{.seed = 1}, shard.data(), full.data(), count,
                           gate);
        });
        add("two-level random_shift<8> | random_shift<8>", ratio_of(r8, count), [&] {
          qsdp::all_gather(pair,
                           qsdp::level_policies{qsdp::random_shift<8>{.seed = 1},
                                                qsdp::random_shift<8>{.seed = 2}},
                           shard.data(), full.data(), count, gate);
        });
        add("two-level identity | random_shift<8>", ratio_of(r8, count), [&] {
          qsdp::all_gather(pair,
                           qsdp::level_policies{qsdp::identity{}, qsdp::random_shift<8>{.seed = 2}},
                           shard.data(), full.data(), count, gate);
        });
      }
      if (g_rank == 0) {
        for (std::size_t i = size_rows; i < rows.size(); ++i) {
          const row& r = rows[i];
          const row& base = rows[r.plain];
          const row& flat8 = rows[r.plain + 1];
          std::printf("  %-14s %14zu  %-50s %10.3f %7.2fx %8.2fx %6.2fx %11.3e\n", r.op.c_str(),
                      r.bytes_per_rank, r.variant.c_str(), r.seconds * 1e3,
                      base.seconds / r.seconds, flat8.seconds / r.seconds, r.ratio, r.error);
        }
        std::fflush(stdout);
      }
    }
    if (g_rank == 0) {
      std::printf("#\n");
      if (o.op != "all_gather") print_verdict(rows, "reduce_scatter");
      if (o.op != "reduce_scatter") print_verdict(rows, "all_gather");
      std::fflush(stdout);
    }
    if (g_rank == 0 && !o.json.empty()) {
      std::FILE* f = std::fopen(o.json.c_str(), "w");
      if (!f) throw std::runtime_error("qsdp-bench-two-level: cannot write " + o.json);
      std::fprintf(f,
                   "{\"ranks\": %d, \"node_size\": %d, \"shared_memory_nodes\": %s, "
                   "\"iterations\": %d, \"warmup\": %d, \"rows\": [",
                   g_world, node_size, o.node_size == 0 ? "true" : "false", o.iterations, o.warmup);
      for (std::size_t i = 0; i < rows.size(); ++i)
        std::fprintf(f,
                     "%s\n  {\"op\": \"%s\", \"variant\": \"%s\", \"bytes_per_rank\": %zu, "
                     "\"seconds\": %.9g, \"rel_l2\": %.9g, \"ratio\": %.9g}",
                     i ? "," : "", rows[i].op.c_str(), rows[i].variant.c_str(),
                     rows[i].bytes_per_rank, rows[i].seconds, rows[i].error, rows[i].ratio);
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
