// SPDX-License-Identifier: Apache-2.0
//
// qsdp-bench's parts that every backend shares: options, the timed sweep, the table and the JSON
// (bench/qsdp_bench.cpp runs the host backends and the model, bench/qsdp_bench_nccl.cu the NCCL
// one).
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <qsdp/codec.hpp>
#include <qsdp/collectives.hpp>
#include <qsdp/quantizers.hpp>

#include "codec_instances.hpp"  // the codec's loops, compiled once (tests/support)
#include "console.hpp"          // progress lines, percentages (examples/)

namespace qsdp_bench {

#if QSDP_BENCH_NCCL
inline constexpr bool nccl_backend_built = true;
#else
inline constexpr bool nccl_backend_built = false;
#endif

/// delta_gather: qsdp::delta_gather's all-gather of weight differences (host backends), on weights
/// that drift between calls.
enum class op_kind { all_gather, reduce_scatter, all_reduce, delta_gather };

struct options {
  std::size_t min_bytes = std::size_t{1} << 20;
  std::size_t max_bytes = std::size_t{64} << 20;
  double factor = 2;
  int iterations = 20;
  int warmup = 5;
  bool check = true;
  op_kind op = op_kind::all_gather;
  std::string quantizer = "stochastic";
  std::string inner;  // --quantizer hadamard: the rotated policy (default stochastic)
  int bits = 8;
  bool bits_given = false;
  std::string element;   // MX policies: the element format (empty: the family's default)
  std::string rounding;  // MX policies: nearest (default) or stochastic
  std::size_t bucket = 1024;
  std::string dtype = "float";
  std::string data;  // weights | gradients; empty: weights for the gathers, gradients otherwise
  std::string backend = "local";
  int ranks = 4;
  bool ranks_given = false;
  std::string json;
  std::size_t min_compressed = 0;                     // the size gate, per call
  std::size_t max_pieces = qsdp::default_max_pieces;  // the pipeline, per call
  // --model: predict instead of measure (alpha-beta network, codec timed here or given).
  bool model = false;
  double link_gbps = 0;   // per-rank link rate, Gbit/s
  double latency_us = 0;  // per message
  double codec_gbps = 0;  // codec throughput (bytes read + written per second / 1e9); 0: measure
  int codec_threads = 0;  // threads sharing the CPU while the codec is timed (0: --ranks)
  // Many tensors (--tensors N --sizes A..B, or --mix gpt): one call per tensor, a group, one call
  // over the concatenation; see qsdp_bench_many.hpp.
  int tensors = 0;
  std::size_t tensor_min = 4 * 1024, tensor_max = 1024 * 1024;  // bytes per rank, log-spaced
  std::string mix;                                              // "gpt", or empty
  bool many() const { return tensors > 0 || !mix.empty(); }
};

/// Bytes of the packets a rank sends each peer for `count` values: one packet per pipeline piece
/// (call_options::max_pieces; docs/reference/wire-format.md, "Pieces").
template <class T, class Q>
std::size_t wire_bytes(const Q& q, std::size_t count, std::size_t max_pieces) {
  const qsdp::detail::piece_plan pieces =
      qsdp::detail::plan_pieces(count, sizeof(T), qsdp::detail::piece_alignment(q), max_pieces);
  std::size_t total = 0;
  for (std::size_t p = 0; p < pieces.count; ++p)
    total += qsdp::compressed_size<T>(q, pieces.values_of(p, count));
  return total;
}

[[noreturn]] inline void usage_error(const std::string& message) {
  throw std::invalid_argument("qsdp-bench: " + message + " (qsdp-bench --help lists the options)");
}

/// Refuses a --dtype that CMake's QSDP_BENCH_DTYPES left out of this build, naming the ones in it.
[[noreturn]] inline void dtype_not_built(const std::string& dtype) {
  usage_error("--dtype " + dtype + ": not built into this qsdp-bench (it has " +
              QSDP_BENCH_DTYPES_BUILT + "; CMake's QSDP_BENCH_DTYPES)");
}

/// "64M", "1G", "4096", "1.5K" -> bytes.
inline std::size_t parse_size(const std::string& text, const char* flag) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(value >= 0))
    usage_error(std::string(flag) + " " + text + ": expected a size such as 1M or 4096");
  double scale = 1;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k")
    scale = 1024.0;
  else if (suffix == "M" || suffix == "m")
    scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g")
    scale = 1024.0 * 1024 * 1024;
  else if (!suffix.empty())
    usage_error(std::string(flag) + " " + text + ": unknown suffix '" + suffix + "'");
  return static_cast<std::size_t>(value * scale);
}

inline int parse_int(const std::string& text, const char* flag, int lo, int hi) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < lo || v > hi)
    usage_error(std::string(flag) + " " + text + ": expected an integer in [" + std::to_string(lo) +
                ", " + std::to_string(hi) + "]");
  return static_cast<int>(v);
}

inline const char* help_text =
    "usage: qsdp-bench [options]\n"
    "\n"
    "Times one compressed collective of qsdp against the same exchange uncompressed (\"plain\") "
    "on\n"
    "the same ranks, over a sweep of buffer sizes, and prints one table row per size: time,\n"
    "bandwidth, bytes sent, compression ratio and error. Sizes and bandwidths follow nccl-tests.\n"
    "\n"
    "Sizes:\n"
    "  -b, --minbytes SIZE    The smallest buffer, in bytes; K, M and G multiply by 1024, 1024^2\n"
    "                         and 1024^3 (default 1M).\n"
    "  -e, --maxbytes SIZE    The largest buffer (default 64M).\n"
    "  -f, --stepfactor F     Each size is F times the one before, F > 1 (default 2).\n"
    "                         The buffer is the whole gathered output of all_gather, the whole\n"
    "                         input of reduce_scatter and the buffer of all_reduce.\n"
    "Timing:\n"
    "  -n, --iters N          Timed calls per size; the table shows their median (default 20).\n"
    "  -w, --warmup_iters N   Untimed calls before them (default 5).\n"
    "  -c, --check 0|1        1 compares the compressed result with the plain one and prints the\n"
    "                         errors; 0 leaves the error columns empty (default 1).\n"
    "The collective:\n"
    "  --op OP                all_gather, reduce_scatter, all_reduce or delta_gather (default\n"
    "                         all_gather). delta_gather is qsdp::delta_gather on weights that\n"
    "                         drift by 0.5 % of their spread before every call (outside the timed\n"
    "                         part); it runs on the local and mpi backends.\n"
    "  --quantizer Q          stochastic, uniform, symmetric, random_shift, mxfp8, mxfp6, mxfp4,\n"
    "                         nvfp4, identity or hadamard (default stochastic).\n"
    "  --inner Q              The policy that hadamard rotates: stochastic, uniform, symmetric,\n"
    "                         random_shift, mxfp8, mxfp4 or nvfp4 (default stochastic). hadamard\n"
    "                         takes 2, 4 or 8 bits and a bucket of 16 to 4096 values that is a\n"
    "                         power of two; the nccl backend has no hadamard.\n"
    "  --bits B               Bits per value, 1 to 8; random_shift takes 2 to 8, the nccl backend\n"
    "                         2, 4 or 8 (default 8; the MX policies' own width).\n"
    "  --element E            MX policies' element format: mxfp8 e4m3 (default) or e5m2, mxfp6\n"
    "                         e2m3 (default) or e3m2, mxfp4 and nvfp4 e2m1. Blocks are --bucket\n"
    "                         values (32 is the OCP spec's, 16 NVFP4's); the local and mpi\n"
    "                         backends have them.\n"
    "  --rounding R           MX and NVFP4 rounding: nearest (default) or stochastic.\n"
    "  --bucket N             Values per bucket, N >= 1 (default 1024).\n"
    "  --data D               weights: N(0, 0.02); gradients: N(0, 1e-3) with one value in 97\n"
    "                         drawn from N(0, 1) (default: weights for all_gather and\n"
    "                         delta_gather, gradients for reduce_scatter and all_reduce).\n"
    "  --dtype T              float, bf16 or half (default float).\n"
    "  --min-compressed SIZE  The size gate, call_options::min_compressed_bytes: a call in which\n"
    "                         each rank sends each peer fewer bytes of values than this\n"
    "                         (all_reduce: the whole buffer) goes uncompressed, and its row says\n"
    "                         \"gated\"; 32K is the recommended gate (default 0, the library's:\n"
    "                         every size compressed).\n"
    "  --max-pieces N         The pipeline, call_options::max_pieces: pieces per phase, 1 to 64;\n"
    "                         1 runs each phase whole (default 2, the library's default).\n"
    "Many tensors (all_gather, reduce_scatter; local and mpi):\n"
    "  --tensors N            N tensors per call, each rank's part log-spaced over --sizes;\n"
    "                         times one qsdp call per tensor, one qsdp group of them, one qsdp\n"
    "                         call and the plain exchange over their concatenation.\n"
    "  --sizes A..B           Bytes per rank of the smallest and largest tensor (4K..1M).\n"
    "  --mix gpt              Instead of --tensors: the parameters of a 6-layer GPT (width 384,\n"
    "                         vocabulary 8192, 76 tensors, 13.9 M values), each sharded over the\n"
    "                         ranks as FSDP shards them.\n"
    "Ranks:\n"
    "  --backend B            local: ranks are threads of this process; mpi: ranks are MPI\n"
    "                         processes (start it with mpirun); nccl: ranks are GPUs, one process\n"
    "                         per GPU under mpirun, else one thread per GPU (default local).\n"
    "  --ranks N              Ranks of the local backend, GPUs of the threaded nccl backend\n"
    "                         (default 4 for local, every visible GPU for nccl; mpi: the job's).\n"
    "Output:\n"
    "  --json FILE            Also writes every row to FILE as JSON (default: no file).\n"
    "Prediction instead of measurement:\n"
    "  --model                Predicts the times from an alpha-beta model of the links and the\n"
    "                         codec instead of running the collective; --ranks is the number of\n"
    "                         ranks to predict for. Needs --link-gbps (default off).\n"
    "  --link-gbps G          The link rate of each rank, in Gbit/s (no default).\n"
    "  --latency-us A         The latency of each message, in microseconds (default 0).\n"
    "  --codec-gbps C         The codec's throughput, in GB/s of bytes read and written; 0 times\n"
    "                         the codec on this machine (default 0).\n"
    "  --codec-threads K      Threads that run the codec at once while it is timed, as ranks of\n"
    "                         one machine share its cores (default: --ranks).\n"
    "  -h, --help             Prints this text.\n"
    "\n"
    "Progress lines go to stderr once a run takes more than a few seconds; the table goes to "
    "stdout.\n";

/// The block-scaled float family (MX or NVFP4) that --quantizer (or hadamard's --inner) names, or
/// "" for the others.
inline std::string mx_family(const options& o) {
  const std::string& f = o.quantizer == "hadamard" ? o.inner : o.quantizer;
  return f == "mxfp8" || f == "mxfp6" || f == "mxfp4" || f == "nvfp4" ? f : std::string();
}

/// --element and --rounding belong to the MX policies, which fix the width: a --bits that differs
/// is refused, and o.bits becomes the policy's.
inline void check_mx_options(options& o) {
  const std::string family = mx_family(o);
  if (family.empty()) {
    if (!o.element.empty() || !o.rounding.empty())
      usage_error(
          std::string(o.element.empty() ? "--rounding " + o.rounding : "--element " + o.element) +
          ": only the MX and NVFP4 policies take it (--quantizer mxfp8, mxfp6, mxfp4 or "
          "nvfp4, or hadamard with --inner mxfp8, mxfp4 or nvfp4)");
    return;
  }
  const bool fp8 = family == "mxfp8", fp6 = family == "mxfp6";
  if (o.element.empty()) o.element = fp8 ? "e4m3" : fp6 ? "e2m3" : "e2m1";
  if (o.rounding.empty()) o.rounding = "nearest";
  const bool fits = fp8   ? o.element == "e4m3" || o.element == "e5m2"
                    : fp6 ? o.element == "e2m3" || o.element == "e3m2"
                          : o.element == "e2m1";
  if (!fits)
    usage_error("--element " + o.element + ": " + family + " takes " +
                (fp8   ? "e4m3 or e5m2"
                 : fp6 ? "e2m3 or e3m2"
                       : "e2m1"));
  const int width = fp8 ? 8 : fp6 ? 6 : 4;
  if (o.bits_given && o.bits != width)
    usage_error("--bits " + std::to_string(o.bits) + ": " + family + " has " +
                std::to_string(width) + " bits per value");
  if (o.quantizer == "hadamard" && o.element != "e4m3" && o.element != "e2m1")
    usage_error("--inner " + family + " --element " + o.element +
                ": hadamard takes mxfp8 (e4m3), mxfp4 or nvfp4");
  o.bits = width;
}

inline options parse(int argc, char** argv) {
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
    if (flag == "-b" || flag == "--minbytes")
      o.min_bytes = parse_size(value, "-b");
    else if (flag == "-e" || flag == "--maxbytes")
      o.max_bytes = parse_size(value, "-e");
    else if (flag == "-f" || flag == "--stepfactor") {
      o.factor = std::strtod(value.c_str(), nullptr);
      if (!(o.factor > 1)) usage_error("-f " + value + ": expected a factor > 1");
    } else if (flag == "-n" || flag == "--iters")
      o.iterations = parse_int(value, "-n", 1, 1 << 20);
    else if (flag == "-w" || flag == "--warmup_iters")
      o.warmup = parse_int(value, "-w", 0, 1 << 20);
    else if (flag == "-c" || flag == "--check")
      o.check = parse_int(value, "-c", 0, 1) == 1;
    else if (flag == "--op") {
      if (value == "all_gather")
        o.op = op_kind::all_gather;
      else if (value == "reduce_scatter")
        o.op = op_kind::reduce_scatter;
      else if (value == "all_reduce")
        o.op = op_kind::all_reduce;
      else if (value == "delta_gather")
        o.op = op_kind::delta_gather;
      else
        usage_error("--op " + value +
                    ": expected all_gather, reduce_scatter, all_reduce or delta_gather");
    } else if (flag == "--quantizer")
      o.quantizer = value;
    else if (flag == "--inner")
      o.inner = value;
    else if (flag == "--data") {
      if (value != "weights" && value != "gradients")
        usage_error("--data " + value + ": expected weights or gradients");
      o.data = value;
    } else if (flag == "--bits") {
      o.bits = parse_int(value, "--bits", 1, 8);
      o.bits_given = true;
    } else if (flag == "--element")
      o.element = value;
    else if (flag == "--rounding") {
      if (value != "nearest" && value != "stochastic")
        usage_error("--rounding " + value + ": expected nearest or stochastic");
      o.rounding = value;
    } else if (flag == "--bucket")
      o.bucket = static_cast<std::size_t>(parse_int(value, "--bucket", 1, 1 << 30));
    else if (flag == "--dtype")
      o.dtype = value;
    else if (flag == "--backend")
      o.backend = value;
    else if (flag == "--ranks") {
      o.ranks = parse_int(value, "--ranks", 1, 1024);
      o.ranks_given = true;
    } else if (flag == "--json")
      o.json = value;
    else if (flag == "--min-compressed")
      o.min_compressed = parse_size(value, "--min-compressed");
    else if (flag == "--max-pieces")
      o.max_pieces = static_cast<std::size_t>(
          parse_int(value, "--max-pieces", 1, static_cast<int>(qsdp::max_pieces_limit)));
    else if (flag == "--link-gbps")
      o.link_gbps = std::strtod(value.c_str(), nullptr);
    else if (flag == "--latency-us")
      o.latency_us = std::strtod(value.c_str(), nullptr);
    else if (flag == "--codec-gbps")
      o.codec_gbps = std::strtod(value.c_str(), nullptr);
    else if (flag == "--codec-threads")
      o.codec_threads = parse_int(value, "--codec-threads", 1, 1024);
    else if (flag == "--tensors")
      o.tensors = parse_int(value, "--tensors", 1, 1 << 16);
    else if (flag == "--sizes") {
      const std::size_t dots = value.find("..");
      if (dots == std::string::npos)
        usage_error("--sizes " + value + ": expected A..B, e.g. 4K..1M");
      o.tensor_min = parse_size(value.substr(0, dots), "--sizes");
      o.tensor_max = parse_size(value.substr(dots + 2), "--sizes");
      if (o.tensor_min == 0 || o.tensor_min > o.tensor_max)
        usage_error("--sizes " + value + ": expected 0 < A <= B");
    } else if (flag == "--mix") {
      if (value != "gpt") usage_error("--mix " + value + ": expected gpt");
      o.mix = value;
    } else
      usage_error("unknown option " + flag);
  }
  if (o.min_bytes > o.max_bytes)
    usage_error("-b " + std::to_string(o.min_bytes) + " is larger than -e " +
                std::to_string(o.max_bytes));
  if (o.dtype != "float" && o.dtype != "bf16" && o.dtype != "half")
    usage_error("--dtype " + o.dtype + ": expected float, bf16 or half");
  if (o.backend != "local" && o.backend != "mpi" && o.backend != "nccl")
    usage_error("--backend " + o.backend + ": expected local, mpi or nccl");
  if (o.backend == "nccl" && !nccl_backend_built)
    usage_error(
        "--backend nccl: this qsdp-bench was built without CUDA and NCCL (configure with "
        "QSDP_ENABLE_CUDA=ON where nvcc and NCCL are found; -DNCCL_ROOT=... points at NCCL)");
  if (!o.inner.empty() && o.quantizer != "hadamard")
    usage_error("--inner " + o.inner +
                ": only --quantizer hadamard has an inner policy (--quantizer is " + o.quantizer +
                ")");
  if (o.quantizer == "random_shift" && o.bits < 2) usage_error("--bits 1: random_shift needs 2..8");
  check_mx_options(o);
  if (o.op == op_kind::delta_gather && (o.model || o.backend == "nccl"))
    usage_error(std::string("--op delta_gather: ") +
                (o.model ? "--model has no delta_gather" : "host backends only (local, mpi)"));
  if (o.many() && (o.model || o.backend == "nccl" ||
                   (o.op != op_kind::all_gather && o.op != op_kind::reduce_scatter)))
    usage_error("--tensors and --mix: all_gather or reduce_scatter on a host backend (local, mpi)");
  if (o.tensors > 0 && !o.mix.empty()) usage_error("--tensors and --mix: one or the other");
  if (o.model && !(o.link_gbps > 0))
    usage_error("--model needs --link-gbps > 0 (the link rate to predict for)");
  if (o.model && (o.latency_us < 0 || o.codec_gbps < 0))
    usage_error("--latency-us and --codec-gbps must be >= 0");
  return o;
}

inline const char* op_name(op_kind op) {
  switch (op) {
    case op_kind::all_gather: return "all_gather";
    case op_kind::reduce_scatter: return "reduce_scatter";
    case op_kind::all_reduce: return "all_reduce";
    case op_kind::delta_gather: return "delta_gather";
  }
  return "?";
}

/// Gathers (all_gather, delta_gather): every rank's shard to every rank.
inline bool gathers(op_kind op) { return op == op_kind::all_gather || op == op_kind::delta_gather; }

/// The data an operation runs on: --data, or weights for the gathers and gradients otherwise.
inline bool gradient_data(const options& o) {
  return o.data.empty() ? !gathers(o.op) : o.data == "gradients";
}

/// Signal-to-quantization-noise ratio in dB from a relative L2 error (the metric inference stacks
/// quote): 10 log10(sum x^2 / sum (x - y)^2) = -20 log10(rel. L2).
inline double sqnr_db(double rel_l2) { return -20.0 * std::log10(rel_l2); }

/// One row of the table.
struct row {
  std::size_t size = 0, count = 0, wire = 0, plain_wire = 0;
  bool gated = false;  // below the size gate (--min-compressed): sent uncompressed
  double time_us = 0, algbw = 0, busbw = 0, plain_time_us = 0, plain_busbw = 0;
  double rel_l2 = NAN, max_error = NAN;
  double codec_us = NAN, network_us = NAN;  // --model: qsdp's time split into codec and network
};

/// What a backend provides to the sweep, on every rank. `prepare` puts one size's input where the
/// calls read it (host or device memory) and sizes the outputs; `compressed` and `plain` run one
/// call each and return when its results are complete (a device backend synchronises its stream);
/// `fetch` copies both results to host vectors; `barrier` and `gather` (n doubles per rank, in rank
/// order) are collective on the same ranks. `advance` (delta_gather only) moves the input one step
/// before each compressed call, outside the timed region.
template <class T>
struct runner {
  int rank = 0, world = 1;
  std::function<void(const std::vector<T>& input, std::size_t in_count, std::size_t out_count)>
      prepare;
  std::function<void(std::size_t count)> compressed, plain;
  std::function<void(std::vector<T>& result, std::vector<T>& exact)> fetch;
  std::function<void()> barrier;
  std::function<void(const double*, double*, std::size_t)> gather;
  std::function<void()> advance;
};

/// Weights, N(0, 0.02), or gradients: small, N(0, 1e-3), with rare outliers (one in 97, N(0, 1)).
template <class T>
std::vector<T> make_input(std::size_t n, int rank, bool gradients) {
  std::mt19937 rng(1000u + static_cast<unsigned>(rank));
  std::normal_distribution<float> normal;
  std::vector<T> v(n);
  for (auto& x : v) {
    const float value =
        gradients ? (rng() % 97 == 0 ? 1.0f : 1e-3f) * normal(rng) : 0.02f * normal(rng);
    x = qsdp::from_float<T>(value);
  }
  return v;
}

/// Times `call` for warm-up + iterations runs, each after a barrier (and after r.advance where
/// `advance`); returns each iteration's slowest-rank time in microseconds (the same on every rank).
template <class T>
std::vector<double> time_iterations(runner<T>& r, const options& o,
                                    const std::function<void()>& call, bool advance) {
  const bool step = advance && r.advance;
  for (int i = 0; i < o.warmup; ++i) {
    if (step) r.advance();
    r.barrier();
    call();
  }
  std::vector<double> mine(static_cast<std::size_t>(o.iterations));
  for (int i = 0; i < o.iterations; ++i) {
    if (step) r.advance();
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

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The sizes of the sweep, -b to -e by -f, in bytes.
inline std::vector<std::size_t> sweep_sizes(const options& o) {
  std::vector<std::size_t> sizes;
  for (double size = static_cast<double>(o.min_bytes);
       size <= static_cast<double>(o.max_bytes) * 1.0000001; size *= o.factor)
    sizes.push_back(static_cast<std::size_t>(size));
  return sizes;
}

/// Whether the size gate sends a call of `count` values per rank uncompressed (all_gather,
/// reduce_scatter: count values to each peer; all_reduce: the whole buffer). delta_gather's
/// exchange of differences is never gated.
template <class T>
bool below_gate(const options& o, std::size_t count) {
  return o.op != op_kind::delta_gather &&
         qsdp::detail::gated_uncompressed(count, sizeof(T), o.min_compressed);
}

template <class T, class Q>
std::vector<row> run_sweep(runner<T>& r, const options& o, const Q& q, const std::string& policy) {
  const std::size_t world = static_cast<std::size_t>(r.world);
  std::vector<row> rows;
  const std::vector<std::size_t> sizes = sweep_sizes(o);
  console::progress shown(sizes.size(), r.rank == 0);
  for (const std::size_t bytes : sizes) {
    shown.step(std::string(op_name(o.op)) + " " + policy + ", " + std::to_string(bytes) + " B");
    row out;
    // Counts as nccl-tests derives them, rounded down to whole values per rank.
    const std::size_t count =
        o.op == op_kind::all_reduce ? bytes / sizeof(T) : bytes / sizeof(T) / world;
    if (count == 0) continue;
    const std::size_t in_count = o.op == op_kind::reduce_scatter ? count * world : count;
    const std::size_t out_count = gathers(o.op) ? count * world : count;
    out.count = count;
    out.size = (o.op == op_kind::all_reduce ? count : count * world) * sizeof(T);
    r.prepare(make_input<T>(in_count, r.rank, gradient_data(o)), in_count, out_count);

    const double t = median(time_iterations(
        r, o, [&] { r.compressed(count); }, true));
    const double tp = median(time_iterations(
        r, o, [&] { r.plain(count); }, false));
    const double algbw = static_cast<double>(out.size) / (t * 1e-6) / 1e9;
    const double algbw_plain = static_cast<double>(out.size) / (tp * 1e-6) / 1e9;
    const double factor = o.op == op_kind::all_reduce
                              ? 2.0 * static_cast<double>(world - 1) / static_cast<double>(world)
                              : static_cast<double>(world - 1) / static_cast<double>(world);
    out.time_us = t;
    out.algbw = algbw;
    out.busbw = algbw * factor;
    out.plain_time_us = tp;
    out.plain_busbw = algbw_plain * factor;
    const std::size_t packet_count =
        o.op == op_kind::all_reduce ? (count + world - 1) / world : count;
    // all_reduce is a reduce_scatter and an all_gather: one packet of count / world values to each
    // peer in each. delta_gather sends float differences, in the library's default pieces.
    const std::size_t phases = o.op == op_kind::all_reduce ? 2 : 1;
    out.wire = phases * (o.op == op_kind::delta_gather
                             ? wire_bytes<float>(q, packet_count, qsdp::default_max_pieces)
                             : wire_bytes<T>(q, packet_count, o.max_pieces));
    out.plain_wire = phases * packet_count * sizeof(T);
    out.gated = below_gate<T>(o, count);
    // Gated: each peer gets a call descriptor and the values as they are (all_reduce: the buffer).
    if (out.gated) out.wire = sizeof(qsdp::detail::call_descriptor) + count * sizeof(T);
    if (o.check) {
      if (r.advance) r.advance();
      r.compressed(count);
      r.plain(count);
      std::vector<T> result(out_count), exact(out_count);
      r.fetch(result, exact);
      double err = 0, norm = 0, worst = 0;
      for (std::size_t i = 0; i < out_count; ++i) {
        const double a = qsdp::to_float(result[i]);
        const double b = qsdp::to_float(exact[i]);
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

inline const char* dtype_label(const std::string& d) {
  return d == "float" ? "float" : d == "bf16" ? "bf16" : "half";
}

/// What "plain" is on this backend: the uncompressed exchange the compressed one is measured
/// against.
inline std::string plain_exchange(const options& o) {
  const bool reduction = o.op == op_kind::reduce_scatter || o.op == op_kind::all_reduce;
  if (o.model) return "the same exchange uncompressed, predicted the same way";
  if (o.backend == "nccl")
    return o.op == op_kind::all_gather       ? "ncclAllGather"
           : o.op == op_kind::reduce_scatter ? "ncclReduceScatter"
                                             : "ncclAllReduce";
  if (o.backend == "mpi" && !(reduction && o.dtype != "float"))
    return o.op == op_kind::reduce_scatter ? "MPI_Reduce_scatter_block"
           : o.op == op_kind::all_reduce   ? "MPI_Allreduce"
                                           : "MPI_Allgather";
  return "qsdp::identity, the values uncompressed through the same pipeline";
}

/// Columns: their names on the first header line, their units on the second, the widths of both
/// and of the rows.
inline void print_columns(const char* lead, const char* const (&names)[14]) {
  std::printf("%s %12s %12s %6s | %11s %9s %9s | %13s %8s | %9s %6s %9s | %11s %9s | %7s\n", lead,
              names[0], names[1], names[2], names[3], names[4], names[5], names[6], names[7],
              names[8], names[9], names[10], names[11], names[12], names[13]);
}

inline void print_header(const options& o, const std::string& policy, int world) {
  std::printf(
      "# qsdp-bench: op %s, quantizer %s, bucket %zu, dtype %s, data %s, backend %s, %d ranks\n",
      op_name(o.op), policy.c_str(), o.bucket, o.dtype.c_str(),
      gradient_data(o) ? "gradients (N(0, 1e-3), one value in 97 from N(0, 1))"
                       : "weights (N(0, 0.02))",
      o.model ? "model" : o.backend.c_str(), world);
  if (o.op == op_kind::delta_gather)
    std::printf(
        "# delta_gather: the weights drift by 0.5 %% of their spread before every compressed call "
        "(untimed); errors after %d calls\n",
        o.warmup + o.iterations + 1);
  if (o.model)
    std::printf(
        "# times predicted from the link and the codec; no error columns (nothing is exchanged)\n");
  else
    std::printf(
        "# time: the slowest rank's, median of %d call%s after %d warm-up call%s, each after a "
        "barrier\n",
        o.iterations, o.iterations == 1 ? "" : "s", o.warmup, o.warmup == 1 ? "" : "s");
  std::printf("# plain: %s\n#\n", plain_exchange(o).c_str());
  print_columns("#", {"size", "count", "type", "time", "algbw", "busbw", "wire", "ratio", "rel. L2",
                      "SQNR", "max abs", "plain time", "plain bw", "speedup"});
  print_columns("#", {"(B)", "(values)", "", "(us)", "(GB/s)", "(GB/s)", "(B/peer)", "(x)", "err",
                      "(dB)", "err", "(us)", "(GB/s)", "(x)"});
}

/// "3.94x", or "gated" where the size gate sent the call uncompressed (no compression ratio).
inline std::string ratio_text(const row& r) {
  if (r.gated) return "gated";
  char text[32];
  std::snprintf(text, sizeof text, "%.2fx",
                static_cast<double>(r.plain_wire) / static_cast<double>(r.wire));
  return text;
}

inline std::string number_text(const char* format, double v) {
  if (!std::isfinite(v)) return "-";
  char text[32];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

inline void print_row(const row& r, const options& o) {
  std::printf(
      "  %12zu %12zu %6s | %11.1f %9.3f %9.3f | %13zu %8s | %9s %6s %9s | %11.1f %9.3f | "
      "%6.2fx\n",
      r.size, r.count, dtype_label(o.dtype), r.time_us, r.algbw, r.busbw, r.wire,
      ratio_text(r).c_str(), number_text("%.2e", r.rel_l2).c_str(),
      number_text("%.1f", sqnr_db(r.rel_l2)).c_str(), number_text("%.2e", r.max_error).c_str(),
      r.plain_time_us, r.plain_busbw, r.plain_time_us / r.time_us);
}

/// What the columns mean, after the table.
inline void print_legend(const options& o, const std::vector<row>& rows) {
  std::printf(
      "#\n"
      "# wire: bytes each rank sends each peer per call (packets with their headers); ratio: plain "
      "bytes / wire bytes.\n");
  if (!o.model && o.check)
    std::printf(
        "# rel. L2 err: ||y - x|| / ||x|| (relative RMS error) of the worst rank, y its compressed "
        "result and x its plain one;\n"
        "# SQNR: -20 log10(rel. L2 err); max abs err: the largest |y_i - x_i| of any rank.\n");
  std::printf(
      "# algbw: size / time; busbw: algbw (n - 1) / n, all_reduce 2 (n - 1) / n (as nccl-tests); "
      "speedup: plain time / time;\n# plain time, plain bw: the plain exchange's time and "
      "busbw.\n");
  if (std::any_of(rows.begin(), rows.end(), [](const row& r) { return r.gated; }))
    std::printf(
        "# gated: below the size gate (--min-compressed %zu B of values per peer), so sent "
        "uncompressed, the policy not applied.\n",
        o.min_compressed);
  if (!o.model && o.backend == "local")
    std::printf(
        "# local backend: the ranks are threads sharing memory, so the exchange is a memcpy and "
        "the "
        "times mostly\n# measure the codec; --backend mpi (bench/net/run.sh) or nccl times a "
        "network.\n");
}

/// The link of the run as JSON: what bench/net/run.sh shaped (QSDP_NET_RATE, QSDP_NET_DELAY), the
/// model's own, or null.
inline std::string link_json(const options& o) {
  const char* rate = std::getenv("QSDP_NET_RATE");
  const char* delay = std::getenv("QSDP_NET_DELAY");
  if (o.model)
    return "{\"rate_gbps\": " + std::to_string(o.link_gbps) +
           ", \"latency_us\": " + std::to_string(o.latency_us) + "}";
  if (rate)
    return std::string("{\"rate\": \"") + rate + "\", \"delay\": \"" + (delay ? delay : "0ms") +
           "\"}";
  return "null";
}

/// One line from the rows: the bytes saved and the error at the largest compressed size, and
/// where the compressed exchange beats the plain one.
inline std::string verdict(const options& o, const std::string& policy,
                           const std::vector<row>& rows) {
  if (rows.empty()) return "no size of the sweep holds one value per rank: raise -b and -e";
  std::string text = policy;
  const auto last = std::find_if(rows.rbegin(), rows.rend(), [](const row& r) { return !r.gated; });
  if (last == rows.rend()) {
    text += " ran uncompressed at every size: each is below the size gate (--min-compressed " +
            std::to_string(o.min_compressed) + " B per peer; 0 compresses every size)";
  } else {
    const double ratio = static_cast<double>(last->plain_wire) / static_cast<double>(last->wire);
    char part[160];
    if (ratio >= 1.005)
      std::snprintf(part, sizeof part, " sends %.2fx fewer bytes than plain %s", ratio,
                    dtype_label(o.dtype));
    else
      std::snprintf(part, sizeof part, " sends about as many bytes as plain %s (%.3fx)",
                    dtype_label(o.dtype), ratio);
    text += part;
    if (std::isfinite(last->rel_l2))
      text += last->rel_l2 == 0 ? " with no error"
                                : " at " + console::percent_text(last->rel_l2) + " rel. L2 error";
    text += " (" + std::to_string(last->size) + " B" +
            (std::isfinite(last->rel_l2) ? ", worst rank)" : ")");
  }
  std::size_t faster = 0;
  const row* best = &rows.front();
  for (const row& r : rows) {
    if (r.plain_time_us > r.time_us) ++faster;
    if (r.plain_time_us / r.time_us > best->plain_time_us / best->time_us) best = &r;
  }
  char part[200];
  const double speedup = best->plain_time_us / best->time_us;
  const char* predicted = o.model ? "predicted " : "";
  if (faster == 0)
    std::snprintf(part, sizeof part, "; %sslower than plain at every size (at best %.2fx, %zu B)",
                  predicted, speedup, best->size);
  else
    std::snprintf(part, sizeof part,
                  "; %sfaster than plain at %zu of %zu sizes, up to %.2fx (%zu B)", predicted,
                  faster, rows.size(), speedup, best->size);
  return text + part;
}

inline void write_json(const std::string& path, const options& o, const std::string& policy,
                       int world, const std::vector<row>& rows) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f)
    throw std::runtime_error("qsdp-bench: cannot write --json " + path + ": " +
                             std::strerror(errno));
  const std::string link = link_json(o);
  std::fprintf(
      f,
      "{\"op\": \"%s\", \"quantizer\": \"%s\", \"bits\": %d, \"bucket\": %zu, \"dtype\": \"%s\", "
      "\"data\": \"%s\", \"backend\": \"%s\", \"ranks\": %d, \"iterations\": %d, \"warmup\": %d, "
      "\"min_compressed_bytes\": %zu, \"max_pieces\": %zu, \"link\": %s, \"rows\": [",
      op_name(o.op), policy.c_str(), o.quantizer == "identity" ? 0 : o.bits, o.bucket,
      o.dtype.c_str(), gradient_data(o) ? "gradients" : "weights",
      o.model ? "model" : o.backend.c_str(), world, o.iterations, o.warmup, o.min_compressed,
      o.max_pieces, link.c_str());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    // Nine significant digits: std::to_string's fixed six decimals would turn an error of 4.8e-08
    // into 0.
    auto number = [](double v) {
      if (!std::isfinite(v)) return std::string("null");
      char text[32];
      std::snprintf(text, sizeof text, "%.9g", v);
      return std::string(text);
    };
    std::fprintf(
        f,
        "%s\n  {\"size\": %zu, \"count\": %zu, \"time_us\": %s, \"algbw\": %s, \"busbw\": %s, "
        "\"wire_bytes\": %zu, \"plain_wire_bytes\": %zu, \"rel_l2\": %s, \"sqnr_db\": %s, "
        "\"max_error\": %s, "
        "\"plain_time_us\": %s, \"plain_busbw\": %s, \"speedup\": %s, \"codec_us\": %s, "
        "\"network_us\": %s, \"gated\": %s}",
        i ? "," : "", r.size, r.count, number(r.time_us).c_str(), number(r.algbw).c_str(),
        number(r.busbw).c_str(), r.wire, r.plain_wire, number(r.rel_l2).c_str(),
        number(sqnr_db(r.rel_l2)).c_str(), number(r.max_error).c_str(),
        number(r.plain_time_us).c_str(), number(r.plain_busbw).c_str(),
        number(r.plain_time_us / r.time_us).c_str(), number(r.codec_us).c_str(),
        number(r.network_us).c_str(), r.gated ? "true" : "false");
  }
  std::fprintf(f, "\n]}\n");
  std::fclose(f);
}

/// The processes a multi-process backend runs in (MPI's world when started by mpirun): rank, size
/// and a broadcast from rank 0, so that device code needs no MPI headers.
struct process_group {
  int rank = 0, world = 1;
  std::function<void(void* data, std::size_t bytes)> broadcast_from_0;
};

#if QSDP_BENCH_NCCL
/// --backend nccl (bench/qsdp_bench_nccl.cu: the GPU check, then --dtype's file).
void run_nccl(const options& o, const process_group& group);
/// The NCCL backend for --dtype float, bf16 and half, each in its own translation unit
/// (qsdp_bench_nccl_<type>.cu), on `devices` visible GPUs.
void run_nccl_float(const options& o, const process_group& group, int devices);
void run_nccl_bf16(const options& o, const process_group& group, int devices);
void run_nccl_half(const options& o, const process_group& group, int devices);
#endif

/// Prints the table (and writes --json) on rank 0.
inline void report(const options& o, const std::string& policy, int rank, int world,
                   const std::vector<row>& rows) {
  if (rank != 0) return;
  print_header(o, policy, world);
  for (const row& r : rows) print_row(r, o);
  if (o.model) {
    std::printf("#\n# where qsdp's predicted time goes:\n");
    for (const row& r : rows)
      std::printf("#   size %zu B: codec %.1f us, network %.1f us (plain: %.1f us)\n", r.size,
                  r.codec_us, r.network_us, r.plain_time_us);
  }
  print_legend(o, rows);
  std::printf("# verdict: %s\n", verdict(o, policy, rows).c_str());
  std::fflush(stdout);
  if (!o.json.empty()) write_json(o.json, o, policy, world, rows);
}

/// Calls run(q, name) with the MX or NVFP4 policy of --quantizer (or hadamard's --inner),
/// --element and --rounding (check_mx_options has filled and checked them).
template <class Run>
void dispatch_mx(const options& o, bool rotated, Run&& run) {
  // The policy, or hadamard<> over it where this binary builds that rotation.
  auto with_policy = [&]<class Plain, bool Rotatable>() {
    if constexpr (Rotatable) {
      if (rotated) {
        qsdp::hadamard<Plain> q{};
        q.bucket_size = o.bucket;
        return run(q, std::string(qsdp::policy_name<qsdp::hadamard<Plain>>()));
      }
    }
    Plain q{};
    q.bucket_size = o.bucket;
    run(q, std::string(qsdp::policy_name<Plain>()));
  };
  auto by_rounding = [&](auto with_rounding) {
    if (o.rounding == "stochastic")
      with_rounding.template operator()<qsdp::rounding::stochastic>();
    else
      with_rounding.template operator()<qsdp::rounding::nearest>();
  };
  if (mx_family(o) == "nvfp4")
    return by_rounding(
        [&]<qsdp::rounding R>() { with_policy.template operator()<qsdp::nvfp4<R>, true>(); });
  auto with_element = [&]<class E>() {
    by_rounding([&]<qsdp::rounding R>() {
      constexpr bool rotatable = std::is_same_v<E, qsdp::e4m3> || std::is_same_v<E, qsdp::e2m1>;
      with_policy.template operator()<qsdp::mx<E, R>, rotatable>();
    });
  };
  if (o.element == "e4m3")
    with_element.template operator()<qsdp::e4m3>();
  else if (o.element == "e5m2")
    with_element.template operator()<qsdp::e5m2>();
  else if (o.element == "e2m3")
    with_element.template operator()<qsdp::e2m3>();
  else if (o.element == "e3m2")
    with_element.template operator()<qsdp::e3m2>();
  else
    with_element.template operator()<qsdp::e2m1>();
}

/// Calls run(q, name) with the policy --quantizer (and --inner) and --bits name (WithMx: the MX
/// and NVFP4 policies of --element and --rounding too). `Widths` has bit b set for every width
/// this binary instantiates, `RotatedWidths` for qsdp::hadamard over each
/// policy (the device build keeps fewer widths and no rotation, for compile time); others are
/// refused.
template <unsigned Widths, unsigned RotatedWidths, bool WithMx, class Run>
void dispatch_policy(const options& o, Run&& run) {
  if (o.quantizer == "identity") return run(qsdp::identity{}, std::string("identity"));
  const bool rotated = o.quantizer == "hadamard";
  if (!mx_family(o).empty()) {
    if constexpr (WithMx) {
      return dispatch_mx(o, rotated, run);
    } else {
      usage_error("--quantizer " + o.quantizer +
                  ": the nccl backend of qsdp-bench has no MX or NVFP4 policies (left out to "
                  "keep nvcc's compile time down); the local and mpi backends have them");
    }
  }
  const std::string family = rotated ? (o.inner.empty() ? "stochastic" : o.inner) : o.quantizer;
  const std::string plain_name = family + "<" + std::to_string(o.bits) + ">";
  const std::string name = rotated ? "hadamard<" + plain_name + ">" : plain_name;
  if (rotated && RotatedWidths == 0)
    usage_error(
        "--quantizer hadamard: the nccl backend of qsdp-bench has no rotated policies (they are "
        "left out to keep nvcc's compile time down); the local and mpi backends have them, and "
        "qsdp_gpu_codec_bench times the rotated device kernels");
  bool ran = false;
  auto each_width = [&]<template <int> class P, unsigned Allowed, unsigned AllowedRotated>() {
    [&]<int... B>(std::integer_sequence<int, B...>) {
      (
          [&] {
            if (o.bits != B) return;
            if constexpr (((Allowed >> B) & 1u) != 0) {
              if (!rotated) {
                run(P<B>{.bucket_size = o.bucket}, name);
                ran = true;
              }
            }
            if constexpr (((AllowedRotated >> B) & 1u) != 0) {
              if (rotated) {
                qsdp::hadamard<P<B>> q{};
                q.bucket_size = o.bucket;
                run(q, name);
                ran = true;
              }
            }
          }(),
          ...);
    }
    (std::integer_sequence<int, 1, 2, 3, 4, 5, 6, 7, 8>{});
  };
  if (family == "stochastic")
    each_width.template operator()<qsdp::stochastic, Widths, RotatedWidths>();
  else if (family == "uniform")
    each_width.template operator()<qsdp::uniform, Widths, RotatedWidths>();
  else if (family == "symmetric")
    each_width.template operator()<qsdp::symmetric, Widths, RotatedWidths>();
  else if (family == "random_shift")
    each_width.template operator()<qsdp::random_shift, (Widths & ~2u), (RotatedWidths & ~2u)>();
  else if (rotated)
    usage_error("--inner " + family +
                ": expected stochastic, uniform, symmetric, random_shift, mxfp8, mxfp4 or nvfp4");
  else
    usage_error("--quantizer " + o.quantizer +
                ": expected stochastic, uniform, symmetric, random_shift, mxfp8, mxfp6, mxfp4, "
                "nvfp4, identity or hadamard");
  if (!ran) {
    const unsigned built_widths = rotated ? RotatedWidths : Widths;
    std::string built;
    for (int b = 1; b <= 8; ++b)
      if ((built_widths >> b) & 1u) built += (built.empty() ? "" : ",") + std::to_string(b);
    usage_error("--bits " + std::to_string(o.bits) +
                " is not built into this backend of qsdp-bench" + (rotated ? " for hadamard" : "") +
                " (it has " + built + ")");
  }
}

/// Calls dispatch_policy for --dtype's element type: run.template operator()<T>(q, name).
template <unsigned Widths, unsigned RotatedWidths, class Run>
void dispatch(const options& o, Run&& run) {
  auto typed = [&]<class T>() {
    dispatch_policy<Widths, RotatedWidths, true>(
        o, [&](const auto& q, const std::string& name) { run.template operator()<T>(q, name); });
  };
  if (o.dtype == "float")
    typed.template operator()<float>();
  else if (o.dtype == "bf16")
    typed.template operator()<__nv_bfloat16>();
  else
    typed.template operator()<__half>();
}

/// The host backends (local, mpi) and the model for --dtype float, bf16 and half, each in its own
/// translation unit (qsdp_bench_host_<type>.cpp).
void run_host_float(const options& o);
void run_host_bf16(const options& o);
void run_host_half(const options& o);

}  // namespace qsdp_bench
