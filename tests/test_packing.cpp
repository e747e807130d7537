// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include <qsdp/detail/codec/bit_packing.hpp>

TEST_SUITE_BEGIN("packing");

using namespace qsdp::detail;

namespace {

// Reference: set bit i*B + k of the stream for bit k of code i, one bit at a time.
std::vector<std::uint8_t> reference_pack(const std::vector<std::uint8_t>& codes, int bits) {
  std::vector<std::uint8_t> out((codes.size() * bits + 7) / 8, 0);
  for (std::size_t i = 0; i < codes.size(); ++i)
    for (int k = 0; k < bits; ++k)
      if (codes[i] >> k & 1)
        out[(i * bits + k) / 8] |= static_cast<std::uint8_t>(1u << ((i * bits + k) % 8));
  return out;
}

template <int B>
void check_width() {
  std::mt19937 rng(B);
  for (std::size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 100, 2047, 2048, 2049, 4097, 10001}) {
    std::vector<std::uint8_t> codes(n);
    for (auto& c : codes) c = static_cast<std::uint8_t>(rng() & ((1u << B) - 1));
    const auto want = reference_pack(codes, B);

    // The writer, fed in chunks of random size, as the encoder feeds it bucket by bucket.
    std::vector<std::byte> stream(want.size() + 16, std::byte{0xAB});
    code_writer<B> writer(stream.data());
    std::size_t done = 0;
    while (done < n) {
      const std::size_t k = std::min({n - done, writer.space(), std::size_t{1 + rng() % 700}});
      std::copy_n(codes.begin() + done, k, writer.slots());
      writer.commit(k);
      done += k;
    }
    const std::size_t written = writer.finish();
    INFO("bits " << B << " count " << n);
    REQUIRE(written == want.size());
    for (std::size_t j = 0; j < want.size(); ++j) REQUIRE(std::uint8_t(stream[j]) == want[j]);
    REQUIRE(std::uint8_t(stream[want.size()]) == 0xAB);  // nothing written past the codes

    // Unpacking any sub-range, aligned to a group of eight or not.
    for (int trial = 0; trial < 20 && n > 0; ++trial) {
      const std::size_t start = rng() % n, len = rng() % (n - start + 1);
      std::vector<std::uint8_t> got(len + 1, 0xCD);
      unpack_codes<B>(stream.data(), start, len, got.data());
      for (std::size_t j = 0; j < len; ++j) REQUIRE(got[j] == codes[start + j]);
      REQUIRE(got[len] == 0xCD);
    }
  }
}

}  // namespace

TEST_CASE("codes of every width 1..8 pack densely LSB-first and unpack from any offset") {
  check_width<1>();
  check_width<2>();
  check_width<3>();
  check_width<4>();
  check_width<5>();
  check_width<6>();
  check_width<7>();
  check_width<8>();
}

TEST_CASE("packing layout example from docs/reference/wire-format.md") {
  // Three 3-bit codes 5, 3, 7: bits 101 | 011<<3 | 111<<6 -> 0b11'011'101 = 0xDD, then 0b1 -> 0x01.
  const std::vector<std::uint8_t> codes = {5, 3, 7};
  const auto packed = reference_pack(codes, 3);
  REQUIRE(packed.size() == 2);
  CHECK(packed[0] == 0xDD);
  CHECK(packed[1] == 0x01);
  std::vector<std::byte> stream(16);
  code_writer<3> writer(stream.data());
  std::copy(codes.begin(), codes.end(), writer.slots());
  writer.commit(3);
  CHECK(writer.finish() == 2);
  CHECK(std::uint8_t(stream[0]) == 0xDD);
  CHECK(std::uint8_t(stream[1]) == 0x01);
}

TEST_SUITE_END();
