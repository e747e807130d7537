// SPDX-License-Identifier: Apache-2.0
//
// qsdp codec demo: what each built-in quantizer does to a realistic buffer of weights or gradients.
// For every policy it prints the bytes it would put on the wire, the compression against the input,
// the error against the exact values, and how fast the host codec runs next to a plain memcpy; then
// a verdict computed from the rows. Progress lines go to stderr once the run takes more than a few
// seconds.
//
//   qsdp_codec_demo [--size N] [--dtype float|bf16] [--data normal|gradient] [--bucket B]
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <qsdp/codec.hpp>

#include "console.hpp"
#include "demo_main.hpp"

namespace {

struct options {
  std::size_t size = std::size_t{1} << 24;
  std::string dtype = "float";
  std::string data = "gradient";
  std::size_t bucket = 1024;
};

const char* help_text =
    "usage: qsdp_codec_demo [--size N] [--dtype float|bf16] [--data normal|gradient] [--bucket B]\n"
    "\n"
    "Encodes and decodes one buffer with every built-in policy (qsdp::encode, qsdp::decode on\n"
    "this host) and prints, for each, the packet's bytes, the compression, the error against the\n"
    "input and the codec's speed next to memcpy, then a verdict.\n"
    "\n"
    "  --size N     Values in the buffer, N >= 1 (default 16777216, 64 MiB of float).\n"
    "  --dtype T    The element type: float, or bf16 where the CUDA headers are (default float).\n"
    "  --data D     normal: values from N(0, 1); gradient: values from N(0, 1e-3) with one in\n"
    "               1000 a 50000x outlier (default gradient).\n"
    "  --bucket B   Values per bucket, B >= 1 (default 1024). The hadamard policies need a power\n"
    "               of two from 16 to 4096 and are left out otherwise.\n"
    "  -h, --help   Prints this text.\n";

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "qsdp_codec_demo: %s (qsdp_codec_demo --help lists the options)\n", why);
  std::exit(2);
}

std::size_t parse_count(const char* flag, const char* text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (!end || *end != '\0' || v == 0 || text[0] == '-')
    usage((std::string(flag) + " needs a positive integer, got '" + text + "'").c_str());
  return static_cast<std::size_t>(v);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(help_text, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    const char* v = argv[++i];
    if (a == "--size")
      o.size = parse_count("--size", v);
    else if (a == "--bucket")
      o.bucket = parse_count("--bucket", v);
    else if (a == "--dtype")
      o.dtype = v;
    else if (a == "--data")
      o.data = v;
    else
      usage(("unknown option " + a).c_str());
  }
  if (o.dtype != "float" && o.dtype != "bf16")
    usage(("--dtype must be float or bf16, got " + o.dtype).c_str());
  if (o.data != "normal" && o.data != "gradient")
    usage(("--data must be normal or gradient, got " + o.data).c_str());
#if !QSDP_HAS_CUDA_HALF
  if (o.dtype == "bf16") usage("--dtype bf16: this build has no CUDA headers, so no bf16 type");
#endif
  return o;
}

template <class F>
double median_seconds(F&& f, int repeats) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// "stochastic<4>", "hadamard<stochastic<4>>", "identity".
template <class Q>
std::string display_name() {
  if constexpr (requires { typename Q::inner_policy; }) {
    return "hadamard<" + display_name<typename Q::inner_policy>() + ">";
  } else {
    std::string name = qsdp::policy_name<Q>();
    if constexpr (qsdp::quantizer<Q>) name += "<" + std::to_string(Q::bits) + ">";
    return name;
  }
}

/// One row of the table.
struct result {
  std::string policy;
  std::size_t wire = 0;
  double ratio = 0, rel_l2 = 0, max_err = 0, encode_gbs = 0, decode_gbs = 0;
};

/// The error the verdict allows: the policy with the fewest bytes within it is named first.
constexpr double verdict_error = 0.01;

template <class T>
void run(const options& o) {
  std::printf("qsdp codec demo: %zu %s values (%.2f MiB), %s data, bucket %zu, host path %s\n\n",
              o.size, o.dtype.c_str(), o.size * sizeof(T) / 1048576.0, o.data.c_str(), o.bucket,
              qsdp::host_codec_isa());
  const bool rotated = std::has_single_bit(o.bucket) && o.bucket >= 16 && o.bucket <= 4096;
  console::progress shown(rotated ? 16 : 13);
  shown.step("input and memcpy");
  std::mt19937 rng(2023);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<T> x(o.size);
  for (auto& v : x) {
    float f = normal(rng);
    if (o.data == "gradient") f = (rng() % 1000 == 0) ? 50.0f * f : 1e-3f * f;
    v = qsdp::from_float<T>(f);
  }
  double norm2 = 0;
  for (const auto& v : x) norm2 += double(qsdp::to_float(v)) * qsdp::to_float(v);

  std::vector<T> copy(o.size), y(o.size);
  const int repeats = 5;
  const double memcpy_s = median_seconds(
      [&] { std::memcpy(static_cast<void*>(copy.data()), x.data(), o.size * sizeof(T)); }, repeats);
  const double memcpy_gbs = 2.0 * o.size * sizeof(T) / memcpy_s / 1e9;

  std::printf("%-24s %12s %9s %8s %12s %8s %12s %9s %9s %9s %9s\n", "policy", "wire", "bits per",
              "ratio", "rel. L2 err", "SQNR", "max abs err", "encode", "vs", "decode", "vs");
  std::printf("%-24s %12s %9s %8s %12s %8s %12s %9s %9s %9s %9s\n", "", "(B)", "value", "(x)", "",
              "(dB)", "", "(GB/s)", "memcpy", "(GB/s)", "memcpy");
  std::vector<result> results;
  auto row = [&](auto q) {
    using Q = decltype(q);
    const std::string name = display_name<Q>();
    shown.step(name);
    std::vector<std::byte> packet(qsdp::compressed_size<T>(q, o.size));
    const double enc_s =
        median_seconds([&] { qsdp::encode(q, x.data(), o.size, packet.data()); }, repeats);
    const double dec_s =
        median_seconds([&] { qsdp::decode(q, packet.data(), o.size, y.data()); }, repeats);
    double err2 = 0, max_err = 0;
    for (std::size_t i = 0; i < o.size; ++i) {
      const double e = double(qsdp::to_float(x[i])) - qsdp::to_float(y[i]);
      err2 += e * e;
      max_err = std::max(max_err, std::abs(e));
    }
    const double moved = double(o.size * sizeof(T) + packet.size());
    result r{.policy = name,
             .wire = packet.size(),
             .ratio = double(o.size * sizeof(T)) / packet.size(),
             .rel_l2 = std::sqrt(err2 / norm2),
             .max_err = max_err,
             .encode_gbs = moved / enc_s / 1e9,
             .decode_gbs = moved / dec_s / 1e9};
    char sqnr[16] = "exact";
    if (r.rel_l2 > 0) std::snprintf(sqnr, sizeof sqnr, "%.1f", -20.0 * std::log10(r.rel_l2));
    std::printf("%-24s %12zu %9.4f %7.2fx %12.3e %8s %12.3e %9.2f %8.2fx %9.2f %8.2fx\n",
                name.c_str(), r.wire, 8.0 * r.wire / o.size, r.ratio, r.rel_l2, sqnr, r.max_err,
                r.encode_gbs, r.encode_gbs / memcpy_gbs, r.decode_gbs, r.decode_gbs / memcpy_gbs);
    results.push_back(r);
  };
  const std::size_t b = o.bucket;
  row(qsdp::identity{});
  row(qsdp::uniform<8>{.bucket_size = b});
  row(qsdp::stochastic<8>{.bucket_size = b, .seed = 1});
  row(qsdp::symmetric<8>{.bucket_size = b});
  row(qsdp::random_shift<8>{.bucket_size = b, .seed = 1});
  row(qsdp::uniform<4>{.bucket_size = b});
  row(qsdp::stochastic<4>{.bucket_size = b, .seed = 1});
  row(qsdp::symmetric<4>{.bucket_size = b});
  row(qsdp::random_shift<4>{.bucket_size = b, .seed = 1});
  row(qsdp::stochastic<2>{.bucket_size = b, .seed = 1});
  row(qsdp::random_shift<2>{.bucket_size = b, .seed = 1});
  row(qsdp::symmetric<1>{.bucket_size = b});
  // Rotated buckets need a power of two from 16 to 4096.
  if (rotated) {
    row(qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = b, .seed = 1}});
    row(qsdp::hadamard<qsdp::random_shift<4>>{{.bucket_size = b, .seed = 1}});
    row(qsdp::hadamard<qsdp::stochastic<2>>{{.bucket_size = b, .seed = 1}});
  } else {
    std::printf("(hadamard rows left out: bucket %zu is not a power of two from 16 to 4096)\n", b);
  }
  std::printf(
      "\nwire: packet bytes (header, per-bucket metadata and codes); ratio: input bytes / wire "
      "bytes.\n"
      "rel. L2 err: ||x - y|| / ||x|| (relative RMS error), y = decode(encode(x)); max abs err: "
      "the "
      "largest |x_i - y_i|;\n"
      "SQNR: -20 log10(rel. L2 err). GB/s: input + packet bytes per second on one core; vs memcpy: "
      "that over\n"
      "memcpy of the input, %.2f GB/s (bytes read + written).\n\n",
      memcpy_gbs);

  // The verdict, from the compressed rows (all but identity's).
  const result* fewest = nullptr;
  const result* accurate = &results[1];
  const result* fastest = &results[1];
  for (std::size_t i = 1; i < results.size(); ++i) {
    const result& r = results[i];
    if (r.rel_l2 <= verdict_error && (!fewest || r.wire < fewest->wire)) fewest = &r;
    if (r.rel_l2 < accurate->rel_l2) accurate = &r;
    if (r.encode_gbs > fastest->encode_gbs) fastest = &r;
  }
  std::printf("verdict: ");
  if (fewest)
    std::printf(
        "%s sends %.2fx fewer bytes than %s at %s rel. L2 error (the fewest bytes within "
        "%s)",
        fewest->policy.c_str(), fewest->ratio, o.dtype.c_str(),
        console::percent_text(fewest->rel_l2).c_str(),
        console::percent_text(verdict_error).c_str());
  else
    std::printf(
        "no policy stays within %s rel. L2 error on this data; the most accurate, %s, "
        "sends %.2fx fewer bytes than %s at %s",
        console::percent_text(verdict_error).c_str(), accurate->policy.c_str(), accurate->ratio,
        o.dtype.c_str(), console::percent_text(accurate->rel_l2).c_str());
  std::printf("; fastest encoder: %s, %.2f GB/s (%.2fx memcpy)\n", fastest->policy.c_str(),
              fastest->encode_gbs, fastest->encode_gbs / memcpy_gbs);
}

}  // namespace

int main(int argc, char** argv) {
  return run_demo("qsdp_codec_demo", argc, argv, parse,
                  [](auto element, const options& o) { run<decltype(element)>(o); });
}
