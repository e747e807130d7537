// SPDX-License-Identifier: Apache-2.0
// Golden packets: small packets of every built-in policy at every bit width (and of hadamard<>
// over six of them, and of mxfp8, mxfp4 and nvfp4), for every element type, compared byte for byte
// with the hex committed in tests/golden/packets.txt, and the values they decode to, bit for bit.
// Refactors of the codec must not change a single byte of what goes on the wire (peers running
// another build would then disagree); a deliberate change of the format bumps the packet version
// and regenerates the file:
//
//   QSDP_WRITE_GOLDEN=tests/golden/packets.txt build/release/tests/qsdp_tests_codec -tc='golden*'
//
// The inputs are made from integer hashes, not <random>'s distributions (whose output differs
// between standard libraries), and cover mixed scales, negative zero, a bucket of equal values, a
// bucket holding NaN, one holding inf, and a short last bucket; randomized policies encode at a
// fixed rng_position, so the bytes depend on nothing but the code.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "support.hpp"

TEST_SUITE_BEGIN("golden_packets");

namespace {

/// 32-bit integer hash (splitmix-like finalizer).
std::uint32_t mix(std::uint32_t v) {
  v ^= v >> 16;
  v *= 0x7feb352dU;
  v ^= v >> 15;
  v *= 0x846ca68bU;
  v ^= v >> 16;
  return v;
}

/// `count` values in buckets of `bucket`: bucket 0 mixed scales, bucket 1 all equal, the others
/// hashed values in [-2, 2), with a negative zero in bucket 2, a NaN in bucket 3 and an inf in
/// bucket 4.
std::vector<float> golden_inputs(std::size_t count, std::size_t bucket) {
  std::vector<float> x(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint32_t h = mix(static_cast<std::uint32_t>(i) * 2654435761U + 12345U);
    const float unit = static_cast<float>(h >> 8) * 0x1p-24f;  // [0, 1), exact
    const std::size_t b = i / bucket;
    if (b == 0)
      x[i] = (unit - 0.5f) * static_cast<float>(1u << (h % 12));
    else if (b == 1)
      x[i] = 0.375f;
    else
      x[i] = 4.0f * unit - 2.0f;
  }
  if (count > 2 * bucket + 3) x[2 * bucket + 3] = -0.0f;
  if (count > 3 * bucket + 1) x[3 * bucket + 1] = std::numeric_limits<float>::quiet_NaN();
  if (count > 4 * bucket + 2) x[4 * bucket + 2] = -std::numeric_limits<float>::infinity();
  return x;
}

std::string hex(const void* data, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::string s;
  s.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    s += digits[bytes[i] >> 4];
    s += digits[bytes[i] & 15];
  }
  return s;
}

struct golden_case {
  std::size_t count;
  std::size_t bucket;
};
constexpr golden_case golden_cases[] = {{70, 16}, {27, 5}};  // short last buckets

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, float>)
    return "float";
  else if constexpr (std::is_same_v<T, double>)
    return "double";
#if QSDP_HAS_CUDA_HALF
  else if constexpr (std::is_same_v<T, __half>)
    return "half";
  else
    return "bf16";
#endif
}

/// key -> "packet <hex>" and "decoded <hex>" lines for every policy, width, type and case.
template <class T>
void add_entries(std::map<std::string, std::string>& out) {
  for (const golden_case c : golden_cases) {
    const std::vector<T> x = qsdp_test::convert<T>(golden_inputs(c.count, c.bucket));
    auto add = [&](const auto& q, const std::string& policy) {
      using Q = std::remove_cvref_t<decltype(q)>;
      std::vector<std::byte> packet(qsdp::compressed_size<T>(q, x.size()));
      qsdp::encode(q, x.data(), x.size(), packet.data(),
                   qsdp::rng_position{.call = 3, .stream = 1});
      std::vector<T> y(x.size());
      qsdp::decode(q, packet.data(), x.size(), y.data());
      const std::string key = policy + " " + type_name<T>() + " count " + std::to_string(c.count) +
                              " bucket " + std::to_string(c.bucket);
      out[key + " packet"] = hex(packet.data(), packet.size());
      out[key + " decoded"] = hex(y.data(), y.size() * sizeof(T));
      (void)sizeof(Q);
    };
    qsdp_test::for_each_policy(c.bucket, 7, [&](auto q) { add(q, qsdp_test::describe(q)); });
    add(qsdp::identity{}, "identity");
    // Block-scaled floats, in blocks of the case's bucket (NVFP4 with its tensor record).
    using qsdp::rounding;
    add(qsdp::mxfp8<qsdp::e4m3>{.bucket_size = c.bucket}, "mxfp8<e4m3>");
    add(qsdp::mxfp4<rounding::stochastic>{.bucket_size = c.bucket, .seed = 7}, "mxfp4<stochastic>");
    add(qsdp::nvfp4<>{.bucket_size = c.bucket}, "nvfp4");
    add(qsdp::nvfp4<rounding::stochastic>{.bucket_size = c.bucket, .seed = 7}, "nvfp4<stochastic>");
    if (qsdp::detail::hadamard_bucket_ok(c.bucket)) {  // rotated buckets: a power of two
      add(qsdp::hadamard<qsdp::uniform<4>>{{.bucket_size = c.bucket}, 7}, "hadamard<uniform<4>>");
      add(qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = c.bucket, .seed = 7}},
          "hadamard<stochastic<4>>");
      add(qsdp::hadamard<qsdp::stochastic<8>>{{.bucket_size = c.bucket, .seed = 7}},
          "hadamard<stochastic<8>>");
      add(qsdp::hadamard<qsdp::symmetric<2>>{{.bucket_size = c.bucket}, 7},
          "hadamard<symmetric<2>>");
      add(qsdp::hadamard<qsdp::random_shift<4>>{{.bucket_size = c.bucket, .seed = 7}},
          "hadamard<random_shift<4>>");
      add(qsdp::hadamard<qsdp::nvfp4<rounding::stochastic>>{{.bucket_size = c.bucket, .seed = 7}},
          "hadamard<nvfp4<stochastic>>");
    }
  }
}

std::map<std::string, std::string> current_entries() {
  std::map<std::string, std::string> entries;
  add_entries<float>(entries);
  add_entries<double>(entries);
#if QSDP_HAS_CUDA_HALF
  add_entries<__half>(entries);
  add_entries<__nv_bfloat16>(entries);
#endif
  return entries;
}

constexpr const char* golden_path = QSDP_SOURCE_DIR "/tests/golden/packets.txt";

std::map<std::string, std::string> read_committed() {
  std::ifstream file(golden_path);
  REQUIRE_MESSAGE(file.good(), "cannot read " << golden_path);
  std::map<std::string, std::string> committed;
  for (std::string line; std::getline(file, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t space = line.rfind(' ');
    REQUIRE(space != std::string::npos);
    committed[line.substr(0, space)] = line.substr(space + 1);
  }
  return committed;
}

}  // namespace

TEST_CASE("golden packets: every built-in policy and width writes the committed bytes") {
  if (const char* target = std::getenv("QSDP_WRITE_GOLDEN")) {
    const std::map<std::string, std::string> now = current_entries();
    std::ofstream file(target);
    REQUIRE(file.good());
    file << "# Golden packets (tests/test_golden_packets.cpp): <policy> <type> count <n> bucket <b>"
            " packet|decoded <hex>\n";
    for (const auto& [key, value] : now) file << key << " " << value << "\n";
    MESSAGE("wrote " << now.size() << " golden entries to " << std::string(target));
    return;
  }
  const std::map<std::string, std::string> committed = read_committed();
#if QSDP_HAS_CUDA_HALF
  // 31 integer policies, identity and 4 block-scaled ones, 2 cases, 4 element types, a packet and
  // its decoded values each; and 6 rotated policies in the case whose bucket size hadamard takes.
  CHECK(committed.size() == (36 * 2 + 6) * 4 * 2);
#endif
  // Every host path: the AVX-512 and AVX2 loops (where the CPU has them) and the baseline loops.
  for (const int path : {0, 1, 2}) {
    qsdp::detail::host_allow_avx512 = path == 0;
    qsdp::detail::host_force_baseline = path == 2;
    const std::string isa = qsdp::detail::host_codec_isa();
    const std::map<std::string, std::string> now = current_entries();
    qsdp::detail::host_allow_avx512 = true;
    qsdp::detail::host_force_baseline = false;
    INFO("host path: " << isa);
    std::size_t compared = 0;
    for (const auto& entry : now) {  // not a structured binding: INFO captures it (clang 14)
      const std::string& key = entry.first;
      const auto it = committed.find(key);
      INFO(key);
      REQUIRE_MESSAGE(it != committed.end(), "no committed golden entry for this case");
      CHECK(it->second == entry.second);
      ++compared;
    }
    CHECK(compared == now.size());
  }
}

TEST_CASE("golden packets: the inputs reach every special case they are meant to") {
  for (const golden_case c : golden_cases) {
    const std::vector<float> x = golden_inputs(c.count, c.bucket);
    const std::size_t b = c.bucket;
    CHECK(x[2 * b + 3] == 0.0f);
    CHECK(std::signbit(x[2 * b + 3]));
    CHECK(std::isnan(x[3 * b + 1]));
    CHECK(std::isinf(x[4 * b + 2]));
    CHECK(c.count % b != 0);
    float lo = x[0], hi = x[0];
    for (std::size_t i = 0; i < b; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    CHECK(hi - lo > 4.0f);  // bucket 0 spans scales (the hashed buckets lie in [-2, 2))
    for (std::size_t i = b; i < 2 * b; ++i) CHECK(x[i] == 0.375f);
  }
}

TEST_SUITE_END();
