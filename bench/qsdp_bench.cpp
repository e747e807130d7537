// SPDX-License-Identifier: Apache-2.0
//
// qsdp-bench: compressed collectives against the same exchange uncompressed, in the conventions of
// nccl-tests (bench/README.md, docs/benchmarks.md).
//
//   qsdp-bench [-b 1M] [-e 64M] [-f 2] [-n 20] [-w 5] [-c 1] [--op all_gather|reduce_scatter|all_reduce]
//              [--quantizer stochastic|uniform|symmetric|random_shift|identity] [--bits 8] [--bucket 1024]
//              [--dtype float|bf16|half] [--backend local|mpi] [--ranks 4] [--json FILE]
//
// Sizes follow nccl-tests: `size` is the bytes of the whole buffer (all_gather: the gathered output,
// reduce_scatter: the input of count * ranks values, all_reduce: the buffer), `count` the values per rank
// (all_reduce: of the buffer). algbw = size / time; busbw = algbw * (n - 1) / n (all_reduce: 2 (n - 1) / n).
// Every rank runs the same fixed number of iterations after the warm-up ones, each after a barrier; an
// iteration's time is the slowest rank's, and the table shows the median over iterations. "plain" is the
// uncompressed exchange on the same communicator: MPI_Allgather, MPI_Reduce_scatter_block and
// MPI_Allreduce for the MPI backend, qsdp::identity through the same pipeline for the in-process one.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
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

namespace {

enum class op_kind { all_gather, reduce_scatter, all_reduce };

struct options {
  std::size_t min_bytes = std::size_t{1} << 20;
  std::size_t max_bytes = std::size_t{64} << 20;
  double factor = 2;
  int iterations = 20;
  int warmup = 5;
  bool check = true;
  op_kind op = op_kind::all_gather;
  std::string quantizer = "stochastic";
  int bits = 8;
  std::size_t bucket = 1024;
  std::string dtype = "float";
  std::string backend = "local";
  int ranks = 4;
  std::string json;
  // --model: predict instead of measure (alpha-beta network, codec timed here or given).
  bool model = false;
  double link_gbps = 0;       // per-rank link rate, Gbit/s
  double latency_us = 0;      // per message
  double codec_gbps = 0;      // codec throughput (bytes read + written per second / 1e9); 0: measure
  int codec_threads = 0;      // threads sharing the CPU while the codec is timed (0: --ranks)
};

[[noreturn]] void usage_error(const std::string& message) {
  throw std::invalid_argument("qsdp-bench: " + message + " (qsdp-bench --help lists the options)");
}

/// "64M", "1G", "4096", "1.5K" -> bytes.
std::size_t parse_size(const std::string& text, const char* flag) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(value >= 0))
    usage_error(std::string(flag) + " " + text + ": expected a size such as 1M or 4096");
  double scale = 1;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k") scale = 1024.0;
  else if (suffix == "M" || suffix == "m") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g") scale = 1024.0 * 1024 * 1024;
  else if (!suffix.empty()) usage_error(std::string(flag) + " " + text + ": unknown suffix '" + suffix + "'");
  return static_cast<std::size_t>(value * scale);
}

int parse_int(const std::string& text, const char* flag, int lo, int hi) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < lo || v > hi)
    usage_error(std::string(flag) + " " + text + ": expected an integer in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  return static_cast<int>(v);
}

const char* help_text =
    "qsdp-bench: compressed collectives vs the same exchange uncompressed (nccl-tests conventions)\n"
    "  -b, --minbytes SIZE    smallest size (default 1M); sizes take K, M, G suffixes\n"
    "  -e, --maxbytes SIZE    largest size (default 64M)\n"
    "  -f, --stepfactor F     multiply the size by F each step (default 2)\n"
    "  -n, --iters N          timed iterations per size (default 20)\n"
    "  -w, --warmup_iters N   untimed iterations first (default 5)\n"
    "  -c, --check 0|1        compute the error against the uncompressed result (default 1)\n"
    "  --op all_gather|reduce_scatter|all_reduce      (default all_gather)\n"
    "  --quantizer stochastic|uniform|symmetric|random_shift|identity (default stochastic)\n"
    "  --bits 1..8            code width (default 8; random_shift 2..8)\n"
    "  --bucket N             values per bucket (default 1024)\n"
    "  --dtype float|bf16|half                        (default float)\n"
    "  --backend local|mpi    in-process ranks (threads) or MPI processes (default local)\n"
    "  --ranks N              ranks of the local backend (default 4)\n"
    "  --json FILE            also write every row as JSON\n"
    "  --model                predict the times instead (alpha-beta): needs --link-gbps; --ranks is n\n"
    "  --link-gbps G          per-rank link rate in Gbit/s (model)\n"
    "  --latency-us A         per-message latency in microseconds (model, default 0)\n"
    "  --codec-gbps C         codec throughput, bytes read + written per s / 1e9 (model; default: timed\n"
    "                         here with --codec-threads threads busy at once, default --ranks)\n";

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::fputs(help_text, stdout);
      std::exit(0);
    }
    if (flag == "--model") {
      o.model = true;
      continue;
    }
    if (i + 1 >= argc) usage_error(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "-b" || flag == "--minbytes") o.min_bytes = parse_size(value, "-b");
    else if (flag == "-e" || flag == "--maxbytes") o.max_bytes = parse_size(value, "-e");
    else if (flag == "-f" || flag == "--stepfactor") {
      o.factor = std::strtod(value.c_str(), nullptr);
      if (!(o.factor > 1)) usage_error("-f " + value + ": expected a factor > 1");
    } else if (flag == "-n" || flag == "--iters") o.iterations = parse_int(value, "-n", 1, 1 << 20);
    else if (flag == "-w" || flag == "--warmup_iters") o.warmup = parse_int(value, "-w", 0, 1 << 20);
    else if (flag == "-c" || flag == "--check") o.check = parse_int(value, "-c", 0, 1) == 1;
    else if (flag == "--op") {
      if (value == "all_gather") o.op = op_kind::all_gather;
      else if (value == "reduce_scatter") o.op = op_kind::reduce_scatter;
      else if (value == "all_reduce") o.op = op_kind::all_reduce;
      else usage_error("--op " + value + ": expected all_gather, reduce_scatter or all_reduce");
    } else if (flag == "--quantizer") o.quantizer = value;
    else if (flag == "--bits") o.bits = parse_int(value, "--bits", 1, 8);
    else if (flag == "--bucket") o.bucket = static_cast<std::size_t>(parse_int(value, "--bucket", 1, 1 << 30));
    else if (flag == "--dtype") o.dtype = value;
    else if (flag == "--backend") o.backend = value;
    else if (flag == "--ranks") o.ranks = parse_int(value, "--ranks", 1, 1024);
    else if (flag == "--json") o.json = value;
    else if (flag == "--link-gbps") o.link_gbps = std::strtod(value.c_str(), nullptr);
    else if (flag == "--latency-us") o.latency_us = std::strtod(value.c_str(), nullptr);
    else if (flag == "--codec-gbps") o.codec_gbps = std::strtod(value.c_str(), nullptr);
    else if (flag == "--codec-threads") o.codec_threads = parse_int(value, "--codec-threads", 1, 1024);
    else usage_error("unknown option " + flag);
  }
  if (o.min_bytes > o.max_bytes)
    usage_error("-b " + std::to_string(o.min_bytes) + " is larger than -e " + std::to_string(o.max_bytes));
  if (o.dtype != "float" && o.dtype != "bf16" && o.dtype != "half")
    usage_error("--dtype " + o.dtype + ": expected float, bf16 or half");
  if (o.backend != "local" && o.backend != "mpi")
    usage_error("--backend " + o.backend + ": expected local or mpi" +
                (o.backend == "nccl" ? " (the NCCL backend comes with the CUDA build of qsdp-bench)" : ""));
  if (o.quantizer == "random_shift" && o.bits < 2) usage_error("--bits 1: random_shift needs 2..8");
  if (o.model && !(o.link_gbps > 0)) usage_error("--model needs --link-gbps > 0 (the link rate to predict for)");
  if (o.model && (o.latency_us < 0 || o.codec_gbps < 0)) usage_error("--latency-us and --codec-gbps must be >= 0");
  return o;
}

const char* op_name(op_kind op) {
  switch (op) {
    case op_kind::all_gather: return "all_gather";
    case op_kind::reduce_scatter: return "reduce_scatter";
    case op_kind::all_reduce: return "all_reduce";
  }
  return "?";
}

/// One row of the table.
struct row {
  std::size_t size = 0, count = 0, wire = 0, plain_wire = 0;
  double time_us = 0, algbw = 0, busbw = 0, plain_time_us = 0, plain_busbw = 0;
  double rel_l2 = NAN, max_error = NAN;
};

/// What a backend runs: the compressed call, the plain one, a barrier, and an all-gather of doubles
/// (to find the slowest rank). Buffers are host memory.
template <class T>
struct runner {
  int rank = 0, world = 1;
  std::function<void(const T*, T*, std::size_t)> compressed;  // (send, recv, count)
  std::function<void(const T*, T*, std::size_t)> plain;
  std::function<void()> barrier;
  std::function<void(const double*, double*, std::size_t)> gather;  // n doubles per rank
};

template <class T>
std::vector<T> make_input(std::size_t n, int rank, op_kind op) {
  std::mt19937 rng(1000u + static_cast<unsigned>(rank));
  std::normal_distribution<float> normal;
  std::vector<T> v(n);
  for (auto& x : v) {
    // Weights for all_gather; gradients (small, with rare outliers) for the reductions.
    const float value = op == op_kind::all_gather ? 0.02f * normal(rng)
                                                   : (rng() % 97 == 0 ? 1.0f : 1e-3f) * normal(rng);
    x = qsdp::detail::element_traits<T>::from_float(value);
  }
  return v;
}

/// Times `call` for warm-up + iterations runs, each after a barrier; returns each iteration's slowest-rank
/// time in microseconds (the same on every rank).
template <class T>
std::vector<double> time_iterations(runner<T>& r, const options& o, const std::function<void()>& call) {
  for (int i = 0; i < o.warmup; ++i) {
    r.barrier();
    call();
  }
  std::vector<double> mine(static_cast<std::size_t>(o.iterations));
  for (int i = 0; i < o.iterations; ++i) {
    r.barrier();
    const auto start = std::chrono::steady_clock::now();
    call();
    mine[static_cast<std::size_t>(i)] =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }
  std::vector<double> all(mine.size() * static_cast<std::size_t>(r.world));
  r.gather(mine.data(), all.data(), mine.size());
  std::vector<double> slowest(mine.size(), 0.0);
  for (int p = 0; p < r.world; ++p)
    for (std::size_t i = 0; i < mine.size(); ++i)
      slowest[i] = std::max(slowest[i], all[static_cast<std::size_t>(p) * mine.size() + i]);
  return slowest;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class T, class Q>
std::vector<row> run_sweep(runner<T>& r, const options& o, const Q& q) {
  const std::size_t world = static_cast<std::size_t>(r.world);
  std::vector<row> rows;
  for (double size = static_cast<double>(o.min_bytes); size <= static_cast<double>(o.max_bytes) * 1.0000001;
       size *= o.factor) {
    row out;
    // Counts as nccl-tests derives them, rounded down to whole values per rank.
    const std::size_t bytes = static_cast<std::size_t>(size);
    const std::size_t count = o.op == op_kind::all_reduce ? bytes / sizeof(T) : bytes / sizeof(T) / world;
    if (count == 0) continue;
    const std::size_t in_count = o.op == op_kind::reduce_scatter ? count * world : count;
    const std::size_t out_count = o.op == op_kind::all_gather ? count * world : count;
    out.count = count;
    out.size = (o.op == op_kind::all_reduce ? count : count * world) * sizeof(T);
    const std::vector<T> input = make_input<T>(in_count, r.rank, o.op);
    std::vector<T> result(std::max(in_count, out_count)), exact(std::max(in_count, out_count));

    auto run_compressed = [&] { r.compressed(input.data(), result.data(), count); };
    auto run_plain = [&] { r.plain(input.data(), exact.data(), count); };
    const double t = median(time_iterations(r, o, run_compressed));
    const double tp = median(time_iterations(r, o, run_plain));
    const double algbw = static_cast<double>(out.size) / (t * 1e-6) / 1e9;
    const double algbw_plain = static_cast<double>(out.size) / (tp * 1e-6) / 1e9;
    const double factor = o.op == op_kind::all_reduce ? 2.0 * static_cast<double>(world - 1) / static_cast<double>(world)
                                                       : static_cast<double>(world - 1) / static_cast<double>(world);
    out.time_us = t;
    out.algbw = algbw;
    out.busbw = algbw * factor;
    out.plain_time_us = tp;
    out.plain_busbw = algbw_plain * factor;
    const std::size_t packet_count = o.op == op_kind::all_reduce ? (count + world - 1) / world : count;
    out.wire = qsdp::compressed_size<T>(q, packet_count);
    out.plain_wire = packet_count * sizeof(T);
    if (o.check) {
      run_compressed();
      run_plain();
      double err = 0, norm = 0, worst = 0;
      for (std::size_t i = 0; i < out_count; ++i) {
        const double a = qsdp::detail::element_traits<T>::to_float(result[i]);
        const double b = qsdp::detail::element_traits<T>::to_float(exact[i]);
        err += (a - b) * (a - b);
        norm += b * b;
        worst = std::max(worst, std::abs(a - b));
      }
      // The worst rank's errors.
      const double mine[2] = {norm > 0 ? std::sqrt(err / norm) : std::sqrt(err), worst};
      std::vector<double> all(2 * world);
      r.gather(mine, all.data(), 2);
      out.rel_l2 = out.max_error = 0;
      for (std::size_t p = 0; p < world; ++p) {
        out.rel_l2 = std::max(out.rel_l2, all[2 * p]);
        out.max_error = std::max(out.max_error, all[2 * p + 1]);
      }
    }
    rows.push_back(out);
  }
  return rows;
}

const char* dtype_label(const std::string& d) { return d == "float" ? "float" : d == "bf16" ? "bf16" : "half"; }

void print_header(const options& o, const std::string& policy, int world) {
  std::printf("# qsdp-bench: op %s, quantizer %s, bucket %zu, dtype %s, backend %s, %d ranks\n", op_name(o.op),
              policy.c_str(), o.bucket, o.dtype.c_str(), o.model ? "model" : o.backend.c_str(), world);
  if (o.model)
    std::printf("# times predicted from the link and the codec; no error columns (nothing is exchanged)\n");
  else
    std::printf("# iterations %d (after %d warm-up), each after a barrier; time = slowest rank, median over "
              "iterations; plain = the uncompressed exchange on the same communicator\n",
              o.iterations, o.warmup);
  std::printf("#\n# %12s %12s %6s | %11s %9s %9s | %12s %6s | %9s %9s | %11s %9s | %7s\n", "size", "count", "type",
              "time (us)", "algbw", "busbw", "wire bytes", "ratio", "rel. L2", "max err", "plain (us)", "busbw",
              "speedup");
  std::printf("# %12s %12s %6s | %11s %9s %9s | %12s %6s | %9s %9s | %11s %9s | %7s\n", "(B)", "(values)", "",
              "", "(GB/s)", "(GB/s)", "(per rank)", "", "", "", "", "(GB/s)", "");
}

void print_row(const row& r, const options& o) {
  std::printf("  %12zu %12zu %6s | %11.1f %9.3f %9.3f | %12zu %6.2f | %9.2e %9.2e | %11.1f %9.3f | %6.2fx\n", r.size,
              r.count, dtype_label(o.dtype), r.time_us, r.algbw, r.busbw, r.wire,
              static_cast<double>(r.plain_wire) / static_cast<double>(r.wire), r.rel_l2, r.max_error,
              r.plain_time_us, r.plain_busbw, r.plain_time_us / r.time_us);
}

void write_json(const std::string& path, const options& o, const std::string& policy, int world,
                const std::vector<row>& rows) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw std::runtime_error("qsdp-bench: cannot write --json " + path + ": " + std::strerror(errno));
  // bench/net/run.sh exports the link it shaped; the model mode states its own.
  const char* rate = std::getenv("QSDP_NET_RATE");
  const char* delay = std::getenv("QSDP_NET_DELAY");
  std::string link = "null";
  if (o.model)
    link = "{\"rate_gbps\": " + std::to_string(o.link_gbps) + ", \"latency_us\": " + std::to_string(o.latency_us) + "}";
  else if (rate)
    link = std::string("{\"rate\": \"") + rate + "\", \"delay\": \"" + (delay ? delay : "0ms") + "\"}";
  std::fprintf(f, "{\"op\": \"%s\", \"quantizer\": \"%s\", \"bits\": %d, \"bucket\": %zu, \"dtype\": \"%s\", "
                  "\"backend\": \"%s\", \"ranks\": %d, \"iterations\": %d, \"warmup\": %d, \"link\": %s, \"rows\": [",
               op_name(o.op), policy.c_str(), o.quantizer == "identity" ? 0 : o.bits, o.bucket, o.dtype.c_str(),
               o.model ? "model" : o.backend.c_str(), world, o.iterations, o.warmup, link.c_str());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    auto number = [](double v) { return std::isfinite(v) ? std::to_string(v) : std::string("null"); };
    std::fprintf(f,
                 "%s\n  {\"size\": %zu, \"count\": %zu, \"time_us\": %s, \"algbw\": %s, \"busbw\": %s, "
                 "\"wire_bytes\": %zu, \"plain_wire_bytes\": %zu, \"rel_l2\": %s, \"max_error\": %s, "
                 "\"plain_time_us\": %s, \"plain_busbw\": %s, \"speedup\": %s}",
                 i ? "," : "", r.size, r.count, number(r.time_us).c_str(), number(r.algbw).c_str(),
                 number(r.busbw).c_str(), r.wire, r.plain_wire, number(r.rel_l2).c_str(),
                 number(r.max_error).c_str(), number(r.plain_time_us).c_str(), number(r.plain_busbw).c_str(),
                 number(r.plain_time_us / r.time_us).c_str());
  }
  std::fprintf(f, "\n]}\n");
  std::fclose(f);
}

/// The compressed call of policy q on a host communicator.
template <class T, class Q, class Comm>
void collective(Comm& comm, const Q& q, op_kind op, const T* send, T* recv, std::size_t count) {
  switch (op) {
    case op_kind::all_gather: qsdp::all_gather(comm, q, send, recv, count); break;
    case op_kind::reduce_scatter: qsdp::reduce_scatter(comm, q, send, recv, count, qsdp::reduce_op::sum); break;
    case op_kind::all_reduce:
      std::memcpy(static_cast<void*>(recv), send, count * sizeof(T));
      qsdp::all_reduce(comm, q, recv, count, qsdp::reduce_op::sum);
      break;
  }
}

template <class T, class Comm>
void bind_common(runner<T>& r, Comm& comm) {
  r.rank = comm.rank();
  r.world = comm.size();
  r.barrier = [&comm] {
    const std::byte token{1};
    std::vector<std::byte> sink(static_cast<std::size_t>(comm.size()));
    comm.all_gather_bytes(&token, sink.data(), 1);
  };
  r.gather = [&comm](const double* mine, double* all, std::size_t n) {
    comm.all_gather_bytes(reinterpret_cast<const std::byte*>(mine), reinterpret_cast<std::byte*>(all),
                          n * sizeof(double));
  };
}

// ---- --model: alpha-beta prediction -------------------------------------------------------------------
// Every exchange is n - 1 messages per rank through the rank's own link (a ring or direct sends: each rank
// sends and receives (n - 1) * bytes), so t_net(bytes) = (n - 1) * (alpha + bytes / beta). qsdp runs
// codec and network one after the other (no overlap), and first exchanges a 64-byte descriptor:
//   all_gather      plain: t_net(P)                        qsdp: t_net(64) + enc(c) + t_net(W) + n dec(c)
//   reduce_scatter  plain: t_net(P) + (n - 1) sum(c)       qsdp: t_net(64) + n enc(c) + t_net(W) + acc(n, c)
//   all_reduce      reduce_scatter of the buffer's shards, then all_gather of them
// with P = c * sizeof(T), W the packet's bytes, and the codec times measured here on the same data
// (median of 5, `codec_threads` threads encoding at once, since ranks of one machine share its cores),
// or derived from --codec-gbps.
struct codec_times {
  double encode_s = 0, decode_s = 0, accumulate_s = 0, add_s = 0;  // per call, one chunk of c values
};

template <class T, class Q>
codec_times time_codec(const options& o, const Q& q, std::size_t count, int ranks) {
  codec_times t;
  const std::size_t wire = qsdp::compressed_size<T>(q, count);
  if (o.codec_gbps > 0) {
    const double rate = o.codec_gbps * 1e9;
    t.encode_s = static_cast<double>(count * sizeof(T) + wire) / rate;
    t.decode_s = t.encode_s;
    t.accumulate_s = static_cast<double>(wire + 2 * count * sizeof(float)) / rate;
    t.add_s = static_cast<double>(3 * count * sizeof(float)) / rate;
    return t;
  }
  const int threads = o.codec_threads > 0 ? o.codec_threads : ranks;
  auto median_seconds = [&](auto&& body) {
    std::vector<double> per_run;
    for (int run = 0; run < 5; ++run) {
      std::vector<double> each(static_cast<std::size_t>(threads));
      std::vector<std::thread> pool;
      for (int k = 0; k < threads; ++k)
        pool.emplace_back([&, k] {
          const auto start = std::chrono::steady_clock::now();
          body(k);
          each[static_cast<std::size_t>(k)] =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        });
      for (auto& th : pool) th.join();
      per_run.push_back(*std::max_element(each.begin(), each.end()));
    }
    return median(per_run);
  };
  std::vector<std::vector<T>> inputs;
  std::vector<std::vector<std::byte>> packets;
  std::vector<std::vector<T>> outputs;
  std::vector<std::vector<float>> sums;
  for (int k = 0; k < threads; ++k) {
    inputs.push_back(make_input<T>(count, k, o.op));
    packets.emplace_back(wire);
    outputs.emplace_back(count);
    sums.emplace_back(count, 0.0f);
  }
  t.encode_s = median_seconds([&](int k) {
    qsdp::encode(q, inputs[static_cast<std::size_t>(k)].data(), count, packets[static_cast<std::size_t>(k)].data());
  });
  t.decode_s = median_seconds([&](int k) {
    qsdp::decode(q, packets[static_cast<std::size_t>(k)].data(), count, outputs[static_cast<std::size_t>(k)].data());
  });
  t.accumulate_s = median_seconds([&](int k) {
    qsdp::decode_accumulate(q, packets[static_cast<std::size_t>(k)].data(), count, sums[static_cast<std::size_t>(k)].data());
  });
  t.add_s = median_seconds([&](int k) {
    auto& acc = sums[static_cast<std::size_t>(k)];
    const auto& in = inputs[static_cast<std::size_t>(k)];
    for (std::size_t i = 0; i < count; ++i) acc[i] += qsdp::detail::element_traits<T>::to_float(in[i]);
  });
  return t;
}

template <class T, class Q>
std::vector<row> model_sweep(const options& o, const Q& q) {
  const auto n = static_cast<std::size_t>(o.ranks);
  const double alpha = o.latency_us * 1e-6, beta = o.link_gbps * 1e9 / 8;
  auto net = [&](double bytes) { return static_cast<double>(n - 1) * (alpha + bytes / beta); };
  std::vector<row> rows;
  for (double size = static_cast<double>(o.min_bytes); size <= static_cast<double>(o.max_bytes) * 1.0000001;
       size *= o.factor) {
    const std::size_t bytes = static_cast<std::size_t>(size);
    const std::size_t count = o.op == op_kind::all_reduce ? bytes / sizeof(T) : bytes / sizeof(T) / n;
    if (count == 0) continue;
    row out;
    out.count = count;
    out.size = (o.op == op_kind::all_reduce ? count : count * n) * sizeof(T);
    const std::size_t chunk = o.op == op_kind::all_reduce ? (count + n - 1) / n : count;
    const codec_times c = time_codec<T>(o, q, chunk, o.ranks);
    out.wire = qsdp::compressed_size<T>(q, chunk);
    out.plain_wire = chunk * sizeof(T);
    const double W = static_cast<double>(out.wire), P = static_cast<double>(out.plain_wire);
    const double nd = static_cast<double>(n);
    const double gather_q = net(64) + c.encode_s + net(W) + nd * c.decode_s;
    const double gather_p = net(P);
    const double scatter_q = net(64) + nd * c.encode_s + net(W) + nd * c.accumulate_s;
    const double scatter_p = net(P) + (nd - 1) * c.add_s;
    double tq = 0, tp = 0;
    switch (o.op) {
      case op_kind::all_gather: tq = gather_q, tp = gather_p; break;
      case op_kind::reduce_scatter: tq = scatter_q, tp = scatter_p; break;
      case op_kind::all_reduce: tq = scatter_q + gather_q, tp = scatter_p + gather_p; break;
    }
    const double factor = o.op == op_kind::all_reduce ? 2.0 * (nd - 1) / nd : (nd - 1) / nd;
    out.time_us = tq * 1e6;
    out.algbw = static_cast<double>(out.size) / tq / 1e9;
    out.busbw = out.algbw * factor;
    out.plain_time_us = tp * 1e6;
    out.plain_busbw = static_cast<double>(out.size) / tp / 1e9 * factor;
    rows.push_back(out);
  }
  return rows;
}

/// Runs the sweep for policy q and element type T on the chosen backend; rank 0 prints.
template <class T, class Q>
void run(const options& o, const Q& q, const std::string& policy) {
  auto report = [&](int rank, int world, const std::vector<row>& rows) {
    if (rank != 0) return;
    print_header(o, policy, world);
    for (const row& r : rows) print_row(r, o);
    if (!o.json.empty()) write_json(o.json, o, policy, world, rows);
  };
  if (o.model) {
    std::printf("# MODEL (predicted, not measured): links %.3g Gbit/s per rank, latency %.3g us, codec %s\n",
                o.link_gbps, o.latency_us,
                o.codec_gbps > 0 ? (std::to_string(o.codec_gbps) + " GB/s (given)").c_str()
                                 : "timed on this machine");
    report(0, o.ranks, model_sweep<T>(o, q));
    return;
  }
  if (o.backend == "local") {
    qsdp::run_local(o.ranks, [&](qsdp::local_communicator& comm) {
      runner<T> r;
      bind_common(r, comm);
      r.compressed = [&](const T* s, T* d, std::size_t n) { collective(comm, q, o.op, s, d, n); };
      r.plain = [&](const T* s, T* d, std::size_t n) { collective(comm, qsdp::identity{}, o.op, s, d, n); };
      const std::vector<row> rows = run_sweep(r, o, q);
      report(comm.rank(), comm.size(), rows);
    }, qsdp::local_options{.timeout = std::chrono::minutes(10)});
    return;
  }
#if QSDP_BENCH_MPI
  qsdp::mpi_communicator comm(MPI_COMM_WORLD);
  runner<T> r;
  bind_common(r, comm);
  MPI_Datatype type = sizeof(T) == 4 ? MPI_FLOAT : MPI_UINT16_T;
  r.compressed = [&](const T* s, T* d, std::size_t n) { collective(comm, q, o.op, s, d, n); };
  r.plain = [&](const T* s, T* d, std::size_t n) {
    if (n > static_cast<std::size_t>(INT32_MAX)) throw std::runtime_error("qsdp-bench: count above INT_MAX for MPI");
    const int c = static_cast<int>(n);
    int rc = MPI_SUCCESS;
    switch (o.op) {
      case op_kind::all_gather: rc = MPI_Allgather(s, c, type, d, c, type, MPI_COMM_WORLD); break;
      case op_kind::reduce_scatter:
      case op_kind::all_reduce:
        if constexpr (sizeof(T) != 4) {
          // MPI has no bf16/half sum: the plain exchange of 16-bit values is the qsdp pipeline unquantized.
          collective(comm, qsdp::identity{}, o.op, s, d, n);
          return;
        } else if (o.op == op_kind::reduce_scatter) {
          rc = MPI_Reduce_scatter_block(s, d, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        } else {
          rc = MPI_Allreduce(s, d, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
        break;
    }
    if (rc != MPI_SUCCESS) throw std::runtime_error("qsdp-bench: plain MPI collective failed");
  };
  const std::vector<row> rows = run_sweep(r, o, q);
  report(comm.rank(), comm.size(), rows);
#else
  throw std::invalid_argument("qsdp-bench: --backend mpi: this build has no MPI (install libopenmpi-dev, reconfigure)");
#endif
}

template <class T>
void dispatch_policy(const options& o) {
  const std::string name = o.quantizer + (o.quantizer == "identity" ? "" : "<" + std::to_string(o.bits) + ">");
  if (o.quantizer == "identity") return run<T>(o, qsdp::identity{}, name);
  auto with_bits = [&]<template <int> class P>() {
    switch (o.bits) {
      case 1:
        if constexpr (!std::is_same_v<P<2>, qsdp::random_shift<2>>)  // random_shift needs 2 bits
          return run<T>(o, P<1>{.bucket_size = o.bucket}, name);
        break;
      case 2: return run<T>(o, P<2>{.bucket_size = o.bucket}, name);
      case 3: return run<T>(o, P<3>{.bucket_size = o.bucket}, name);
      case 4: return run<T>(o, P<4>{.bucket_size = o.bucket}, name);
      case 5: return run<T>(o, P<5>{.bucket_size = o.bucket}, name);
      case 6: return run<T>(o, P<6>{.bucket_size = o.bucket}, name);
      case 7: return run<T>(o, P<7>{.bucket_size = o.bucket}, name);
      case 8: return run<T>(o, P<8>{.bucket_size = o.bucket}, name);
    }
    usage_error("--bits " + std::to_string(o.bits) + " is not available for " + o.quantizer);
  };
  if (o.quantizer == "stochastic") return with_bits.template operator()<qsdp::stochastic>();
  if (o.quantizer == "uniform") return with_bits.template operator()<qsdp::uniform>();
  if (o.quantizer == "symmetric") return with_bits.template operator()<qsdp::symmetric>();
  if (o.quantizer == "random_shift") return with_bits.template operator()<qsdp::random_shift>();
  usage_error("--quantizer " + o.quantizer + ": expected stochastic, uniform, symmetric, random_shift or identity");
}

}  // namespace

int main(int argc, char** argv) {
#if QSDP_BENCH_MPI
  bool mpi = false;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--backend") == 0 && std::strcmp(argv[i + 1], "mpi") == 0) mpi = true;
  if (mpi) {
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
#endif
  int status = 0;
  try {
    const options o = parse(argc, argv);
    if (o.dtype == "float") dispatch_policy<float>(o);
    else if (o.dtype == "bf16") dispatch_policy<__nv_bfloat16>(o);
    else dispatch_policy<__half>(o);
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
