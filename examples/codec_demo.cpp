// SPDX-License-Identifier: Apache-2.0
//
// qsdp codec demo: what each built-in quantizer does to a realistic buffer of weights or gradients.
// For every policy it prints the bytes it would put on the wire, the compression against the input,
// the error against the exact values, and how fast the host codec runs next to a plain memcpy.
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

#include "demo_main.hpp"

namespace {

struct options {
  std::size_t size = std::size_t{1} << 24;
  std::string dtype = "float";
  std::string data = "gradient";
  std::size_t bucket = 1024;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "qsdp_codec_demo: %s\n"
               "usage: qsdp_codec_demo [--size N] [--dtype float|bf16] [--data normal|gradient] "
               "[--bucket B]\n"
               "  --size    values in the buffer (default 16777216)\n"
               "  --dtype   element type (default float)\n"
               "  --data    normal: N(0,1) weights; gradient: small values with rare outliers\n"
               "  --bucket  values per bucket, >= 1 (default 1024)\n",
               why);
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
    if (a == "--help" || a == "-h") usage("help");
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
  if (o.dtype == "bf16") usage("this build has no CUDA headers, so no __nv_bfloat16");
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

template <class T>
void run(const options& o) {
  std::printf("qsdp codec demo: %zu %s values (%.1f MiB), %s data, bucket %zu, host path %s\n\n",
              o.size, o.dtype.c_str(), o.size * sizeof(T) / 1048576.0, o.data.c_str(), o.bucket,
              qsdp::host_codec_isa());
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

  std::printf("%-24s %12s %9s %9s %12s %8s %12s %10s %10s\n", "policy", "wire bytes", "bits/val",
              "ratio", "rel. L2 err", "SQNR dB", "max abs err", "enc GB/s", "dec GB/s");
  std::printf("%-24s %12s %9s %9s %12s %8s %12s %10s %10s\n", "", "", "", "", "", "", "",
              "(x memcpy)", "(x memcpy)");
  auto row = [&](auto q) {
    using Q = decltype(q);
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
    const std::string name = display_name<Q>();
    const double rel_l2 = std::sqrt(err2 / norm2);
    std::printf("%-24s %12zu %9.4f %8.2fx %12.3e %8.1f %12.3e %5.2f (%.2f) %5.2f (%.2f)\n",
                name.c_str(), packet.size(), 8.0 * packet.size() / o.size,
                double(o.size * sizeof(T)) / packet.size(), rel_l2, -20.0 * std::log10(rel_l2),
                max_err, moved / enc_s / 1e9, moved / enc_s / 1e9 / memcpy_gbs, moved / dec_s / 1e9,
                moved / dec_s / 1e9 / memcpy_gbs);
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
  if (std::has_single_bit(b) && b >= 16 && b <= 4096) {
    row(qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = b, .seed = 1}});
    row(qsdp::hadamard<qsdp::random_shift<4>>{{.bucket_size = b, .seed = 1}});
    row(qsdp::hadamard<qsdp::stochastic<2>>{{.bucket_size = b, .seed = 1}});
  } else {
    std::printf("(hadamard rows left out: bucket %zu is not a power of two from 16 to 4096)\n", b);
  }
  std::printf(
      "\nwire bytes: packet size (header + per-bucket metadata + codes); ratio: input bytes / wire "
      "bytes.\nrel. L2 err: ||x - decode(encode(x))|| / ||x||; SQNR dB: -20 log10(rel. L2 err); "
      "max abs err: largest |x_i - y_i|.\n"
      "GB/s: (input + packet bytes) per second on one core; (x memcpy): that over memcpy of the "
      "input, %.2f GB/s (bytes read + written).\n",
      memcpy_gbs);
}

}  // namespace

int main(int argc, char** argv) {
  return run_demo("qsdp_codec_demo", argc, argv, parse,
                  [](auto element, const options& o) { run<decltype(element)>(o); });
}
