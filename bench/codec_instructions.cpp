// SPDX-License-Identifier: Apache-2.0
//
// One host encode or decode under valgrind's callgrind, counted from the call's first instruction
// to its last (the input is made and a first call warms the code before collection starts). Run by
// bench/codec_instructions.py, which divides the count by the number of values; run alone, it
// just encodes or decodes once.
//
//   codec_instructions POLICY encode|decode VALUES [baseline]
//
// POLICY: uniform8, stochastic8, symmetric8, random_shift8, uniform4, stochastic4, uniform2,
// hadamard_stochastic4 (buckets of 1024); mxfp8, mxfp8_stochastic, mxfp6, mxfp4, mxfp4_stochastic
// (blocks of 32), nvfp4, nvfp4_stochastic (blocks of 16). "baseline" runs the portable loops
// instead of AVX2.
#include <valgrind/callgrind.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <qsdp/codec.hpp>

namespace {

template <class Q>
int count(const Q& q, bool encode, std::size_t values) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> x(values), out(values);
  for (auto& v : x) v = normal(rng);
  std::vector<std::byte> packet(qsdp::compressed_size<float>(q, values));
  qsdp::encode(q, x.data(), values, packet.data());
  qsdp::decode(q, packet.data(), values, out.data());
  CALLGRIND_ZERO_STATS;
  CALLGRIND_TOGGLE_COLLECT;
  if (encode)
    qsdp::encode(q, x.data(), values, packet.data());
  else
    qsdp::decode(q, packet.data(), values, out.data());
  CALLGRIND_TOGGLE_COLLECT;
  CALLGRIND_DUMP_STATS_AT("codec call");
  return out[values / 2] == out[values / 2] ? 0 : 1;  // keeps the output alive
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || (std::strcmp(argv[2], "encode") != 0 && std::strcmp(argv[2], "decode") != 0)) {
    std::fprintf(stderr, "usage: codec_instructions POLICY encode|decode VALUES [baseline]\n");
    return 2;
  }
  const std::string policy = argv[1];
  const bool encode = std::strcmp(argv[2], "encode") == 0;
  const std::size_t values = std::strtoull(argv[3], nullptr, 10);
  if (values == 0) {
    std::fprintf(stderr, "codec_instructions: VALUES must be a positive integer, got %s\n",
                 argv[3]);
    return 2;
  }
  if (argc > 4 && std::strcmp(argv[4], "baseline") == 0) qsdp::detail::host_force_baseline = true;
  if (policy == "uniform8") return count(qsdp::uniform<8>{}, encode, values);
  if (policy == "stochastic8") return count(qsdp::stochastic<8>{.seed = 1}, encode, values);
  if (policy == "symmetric8") return count(qsdp::symmetric<8>{}, encode, values);
  if (policy == "random_shift8") return count(qsdp::random_shift<8>{.seed = 1}, encode, values);
  if (policy == "uniform4") return count(qsdp::uniform<4>{}, encode, values);
  if (policy == "stochastic4") return count(qsdp::stochastic<4>{.seed = 1}, encode, values);
  if (policy == "uniform2") return count(qsdp::uniform<2>{}, encode, values);
  if (policy == "hadamard_stochastic4")
    return count(qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = 1024, .seed = 1}}, encode,
                 values);
  using qsdp::rounding;
  if (policy == "mxfp8") return count(qsdp::mxfp8<qsdp::e4m3>{}, encode, values);
  if (policy == "mxfp8_stochastic")
    return count(qsdp::mxfp8<qsdp::e4m3, rounding::stochastic>{.seed = 1}, encode, values);
  if (policy == "mxfp6") return count(qsdp::mxfp6<qsdp::e2m3>{}, encode, values);
  if (policy == "mxfp4") return count(qsdp::mxfp4<>{}, encode, values);
  if (policy == "mxfp4_stochastic")
    return count(qsdp::mxfp4<rounding::stochastic>{.seed = 1}, encode, values);
  if (policy == "nvfp4") return count(qsdp::nvfp4<>{}, encode, values);
  if (policy == "nvfp4_stochastic")
    return count(qsdp::nvfp4<rounding::stochastic>{.seed = 1}, encode, values);
  std::fprintf(stderr, "codec_instructions: unknown policy '%s'\n", policy.c_str());
  return 2;
}
