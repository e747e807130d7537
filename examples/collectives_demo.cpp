// SPDX-License-Identifier: Apache-2.0
//
// qsdp demo: compressed all-gather and reduce-scatter among 4 ranks (threads of this process, over
// qsdp::local_communicator), for every built-in policy, against the uncompressed exchange on the
// same communicator. For each: bytes each rank puts on the wire, compression, error against the
// uncompressed result, and time; then a verdict per collective, computed from the rows. Progress
// lines go to stderr once the run takes more than a few seconds.
//
//   qsdp_demo [--ranks R] [--size N] [--dtype float|bf16] [--repeats K]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <qsdp/collectives.hpp>

#include "console.hpp"
#include "demo_main.hpp"

namespace {

struct options {
  int ranks = 4;
  std::size_t size = std::size_t{1} << 24;  // values per rank
  std::string dtype = "float";
  int repeats = 3;
};

const char* help_text =
    "usage: qsdp_demo [--ranks R] [--size N] [--dtype float|bf16] [--repeats K]\n"
    "\n"
    "Runs qsdp::all_gather and qsdp::reduce_scatter among R ranks (threads of this process) with\n"
    "every built-in policy and prints, for each, the bytes a rank sends, the compression, the\n"
    "error against the uncompressed result and the time, then a verdict per collective.\n"
    "\n"
    "  --ranks R    Ranks, R >= 1; more than 256 run as 256 (default 4).\n"
    "  --size N     Values per rank, N >= 1 (default 16777216, 64 MiB of float).\n"
    "  --dtype T    The element type: float, or bf16 where the CUDA headers are (default float).\n"
    "  --repeats K  Timed calls per policy after one untimed call, K >= 1; more than 100 run as\n"
    "               100. The table shows their median (default 3).\n"
    "  -h, --help   Prints this text.\n";

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "qsdp_demo: %s (qsdp_demo --help lists the options)\n", why.c_str());
  std::exit(2);
}

unsigned long long positive(const std::string& flag, const char* text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (!end || *end != '\0' || v == 0 || text[0] == '-')
    usage(flag + " needs a positive integer, got '" + text + "'");
  return v;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(help_text, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) usage("missing value after " + a);
    const char* v = argv[++i];
    if (a == "--ranks")
      o.ranks = static_cast<int>(std::min(positive(a, v), 256ull));
    else if (a == "--size")
      o.size = positive(a, v);
    else if (a == "--repeats")
      o.repeats = static_cast<int>(std::min(positive(a, v), 100ull));
    else if (a == "--dtype")
      o.dtype = v;
    else
      usage("unknown option " + a);
  }
  if (o.dtype != "float" && o.dtype != "bf16")
    usage("--dtype must be float or bf16, got " + o.dtype);
#if !QSDP_HAS_CUDA_HALF
  if (o.dtype == "bf16") usage("--dtype bf16: this build has no CUDA headers, so no bf16 type");
#endif
  return o;
}

/// Weights ~ N(0, 0.02) for the all-gather; gradients ~ N(0, 1e-3) with rare outliers for
/// reduce-scatter.
template <class T>
std::vector<T> make(int rank, std::size_t n, bool gradients) {
  std::mt19937 rng(1234u + static_cast<unsigned>(rank));
  std::normal_distribution<float> normal;
  std::vector<T> v(n);
  for (auto& x : v) {
    float f = normal(rng);
    f = gradients ? ((rng() % 1000 == 0) ? 0.1f * f : 1e-3f * f) : 0.02f * f;
    x = qsdp::from_float<T>(f);
  }
  return v;
}

struct row {
  std::string policy;
  std::size_t wire = 0;
  double ratio = 0, rel_l2 = 0, max_err = 0, seconds = 0;
};

template <class T, class Q>
row run_one(const options& o, const Q& q, const std::string& name, bool reduce,
            const std::vector<std::vector<T>>& input, std::vector<std::vector<T>>& exact) {
  const auto n = o.size;
  const auto world = static_cast<std::size_t>(o.ranks);
  row r;
  r.policy = name;
  std::vector<double> times;
  std::vector<double> err2(world, 0.0), norm2(world, 0.0), max_err(world, 0.0);
  qsdp::run_local(o.ranks, [&](qsdp::local_communicator& comm) {
    const auto me = static_cast<std::size_t>(comm.rank());
    std::vector<T> out(reduce ? n : n * world);
    std::byte token{};
    std::vector<std::byte> tokens(world);
    for (int rep = 0; rep <= o.repeats; ++rep) {  // rep 0 warms up (first-touch, workspace growth)
      comm.all_gather_bytes(&token, tokens.data(), 1);  // start together
      const auto start = std::chrono::steady_clock::now();
      if (reduce)
        qsdp::reduce_scatter(comm, q, input[me].data(), out.data(), n, qsdp::reduce_op::sum);
      else
        qsdp::all_gather(comm, q, input[me].data(), out.data(), n);
      comm.all_gather_bytes(&token, tokens.data(), 1);  // until the slowest rank is done
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (me == 0 && rep > 0) times.push_back(s);
    }
    if (exact[me].empty()) {
      exact[me] = out;  // the identity run goes first: it is the uncompressed result
      return;
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
      const double e = double(qsdp::to_float(out[i])) - qsdp::to_float(exact[me][i]);
      err2[me] += e * e;
      norm2[me] += double(qsdp::to_float(exact[me][i])) * qsdp::to_float(exact[me][i]);
      max_err[me] = std::max(max_err[me], std::abs(e));
    }
  });
  std::sort(times.begin(), times.end());
  r.seconds = times[times.size() / 2];
  r.wire = qsdp::compressed_size<T>(q, n) * (reduce ? world : 1);
  r.ratio = double(n * sizeof(T) * (reduce ? world : 1)) / r.wire;
  double e2 = 0, n2 = 0;
  for (std::size_t k = 0; k < world; ++k)
    e2 += err2[k], n2 += norm2[k], r.max_err = std::max(r.max_err, max_err[k]);
  r.rel_l2 = n2 > 0 ? std::sqrt(e2 / n2) : 0.0;
  return r;
}

/// The error the verdict allows: the policy with the fewest bytes within it is named first.
constexpr double verdict_error = 0.01;

/// One line from one table: within verdict_error, the policy that sends the fewest bytes (or the
/// most accurate one, if none is within it), and the fastest compressed policy.
void print_verdict(const char* collective, const char* dtype, const std::vector<row>& rows) {
  const row& plain = rows[0];
  const row* fewest = nullptr;
  const row* accurate = &rows[1];
  const row* fastest = &rows[1];
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const row& r = rows[i];
    if (r.rel_l2 <= verdict_error && (!fewest || r.wire < fewest->wire)) fewest = &r;
    if (r.rel_l2 < accurate->rel_l2) accurate = &r;
    if (r.seconds < fastest->seconds) fastest = &r;
  }
  std::printf("verdict, %s: ", collective);
  if (fewest)
    std::printf(
        "%s sends %.2fx fewer bytes than uncompressed %s at %s rel. L2 error (the fewest "
        "bytes within %s)",
        fewest->policy.c_str(), fewest->ratio, dtype, console::percent_text(fewest->rel_l2).c_str(),
        console::percent_text(verdict_error).c_str());
  else
    std::printf(
        "no policy stays within %s rel. L2 error; the most accurate, %s, sends %.2fx fewer "
        "bytes than uncompressed %s at %s",
        console::percent_text(verdict_error).c_str(), accurate->policy.c_str(), accurate->ratio,
        dtype, console::percent_text(accurate->rel_l2).c_str());
  std::printf("; fastest compressed policy: %s, %.3f ms (%.2fx the uncompressed time)\n",
              fastest->policy.c_str(), 1e3 * fastest->seconds, fastest->seconds / plain.seconds);
}

template <class T>
void run(const options& o) {
  const auto world = static_cast<std::size_t>(o.ranks);
  std::printf(
      "qsdp demo: %d ranks (threads of this process, qsdp::local_communicator), %zu %s values per "
      "rank (%.2f MiB),\nbucket 1024, time: median of %d call%s\n",
      o.ranks, o.size, o.dtype.c_str(), o.size * sizeof(T) / 1048576.0, o.repeats,
      o.repeats == 1 ? "" : "s");
  console::progress shown(18);
  std::vector<std::vector<row>> tables;
  for (bool reduce : {false, true}) {
    const char* collective = reduce ? "reduce_scatter" : "all_gather";
    std::vector<std::vector<T>> input(world), exact(world);
    for (std::size_t k = 0; k < world; ++k)
      input[k] = make<T>(static_cast<int>(k), reduce ? o.size * world : o.size, reduce);
    std::vector<row> rows;
    shown.step(std::string(collective) + " uncompressed");
    rows.push_back(run_one<T>(o, qsdp::identity{}, "uncompressed", reduce, input, exact));
    auto add = [&](auto q, const char* name) {
      shown.step(std::string(collective) + " " + name);
      rows.push_back(run_one<T>(o, q, name, reduce, input, exact));
    };
    if (!reduce) add(qsdp::random_shift<8>{.seed = 1}, "random_shift<8>");
    add(qsdp::stochastic<8>{.seed = 1}, "stochastic<8>");
    add(qsdp::uniform<8>{}, "uniform<8>");
    add(qsdp::symmetric<8>{}, "symmetric<8>");
    if (!reduce) add(qsdp::random_shift<4>{.seed = 1}, "random_shift<4>");
    add(qsdp::stochastic<4>{.seed = 1}, "stochastic<4>");
    add(qsdp::hadamard<qsdp::stochastic<4>>{{.seed = 1}}, "hadamard<stochastic<4>>");
    add(qsdp::symmetric<4>{}, "symmetric<4>");
    add(qsdp::stochastic<2>{.seed = 1}, "stochastic<2>");
    std::printf("\n%s\n",
                reduce ? "reduce_scatter, sum of gradients: each rank sends world chunks and "
                         "receives the sum of its chunk"
                       : "all_gather of weight shards: each rank sends its shard and receives "
                         "every shard");
    std::printf("%-24s %14s %8s %12s %12s %8s %10s %12s\n", "policy", "sent/rank", "ratio",
                "rel. L2 err", "max abs err", "SQNR", "time", "speed vs");
    std::printf("%-24s %14s %8s %12s %12s %8s %10s %12s\n", "", "(B)", "(x)", "", "", "(dB)",
                "(ms)", "uncomp. (x)");
    for (const row& r : rows) {
      char sqnr[16] = "exact";
      if (r.rel_l2 > 0) std::snprintf(sqnr, sizeof sqnr, "%.1f", -20.0 * std::log10(r.rel_l2));
      std::printf("%-24s %14zu %7.2fx %12.3e %12.3e %8s %10.3f %11.2fx\n", r.policy.c_str(), r.wire,
                  r.ratio, r.rel_l2, r.max_err, sqnr, 1e3 * r.seconds, rows[0].seconds / r.seconds);
    }
    tables.push_back(std::move(rows));
  }
  std::printf(
      "\nsent/rank: what one rank hands to the transport per call (packets with their headers);\n"
      "ratio: uncompressed bytes / sent bytes. Errors against the uncompressed result, over all "
      "ranks:\n"
      "rel. L2 err: ||y - x|| / ||x|| (relative RMS error); max abs err: the largest |y_i - x_i|;\n"
      "SQNR: -20 log10(rel. L2 err), signal over quantization noise.\n"
      "time: one call, until the slowest rank is done; speed vs uncomp.: uncompressed time / this "
      "time.\n"
      "The ranks are threads sharing memory, so the exchange is a memcpy and the times mostly show "
      "the\n"
      "codec's cost; over a network each call moves ratio times fewer bytes (qsdp-bench --backend "
      "mpi,\n"
      "with bench/net/run.sh, times that: docs/benchmarks/collectives.md).\n"
      "Data: weights ~ N(0, 0.02); gradients ~ N(0, 1e-3) with one value in 1000 a 100x outlier.\n"
      "Buckets with an outlier stretch an asymmetric grid (uniform, stochastic) over it, so at few "
      "bits\n"
      "the small gradients get coarse steps: symmetric keeps zero exact; smaller buckets also "
      "help,\n"
      "and hadamard<> spreads each outlier over its bucket before quantizing.\n\n");
  print_verdict("all_gather", o.dtype.c_str(), tables[0]);
  print_verdict("reduce_scatter", o.dtype.c_str(), tables[1]);
}

}  // namespace

int main(int argc, char** argv) {
  return run_demo("qsdp_demo", argc, argv, parse,
                  [](auto element, const options& o) { run<decltype(element)>(o); });
}
