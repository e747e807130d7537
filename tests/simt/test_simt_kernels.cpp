// SPDX-License-Identifier: Apache-2.0
// qsdp's CUDA kernels, executed on the host by tests/simt/simt_emulation.hpp (threads of a block as
// std::threads, warps with their own barriers, at most three blocks so that grid-stride loops
// wrap): the packets they write must be the host codec's byte for byte, and their decodes the
// host's values bit for bit. This runs the kernels' own code - thread/bucket mapping, shuffles,
// shared memory, barriers, vector loads and stores, flags and tails - on every build, without a
// GPU.
//
// This file: the integer policies; the rotated ones and the block-scaled floats have files of
// their own (test_simt_rotated.cpp, test_simt_block_scaled.cpp), so that they compile in
// parallel.
#define QSDP_SIMT_EMULATION 1
#include "simt_checks.hpp"  // first: it includes simt_emulation.hpp, which redefines CUDA built-ins

TEST_SUITE_BEGIN("simt");

using namespace simt_checks;

TEST_CASE("device spellings: a value grid's step without a division is the division's quotient") {
  qsdp_test::check_quotient_is_the_division();
}

TEST_CASE("device spellings: 16-bit values' statistics in packed pairs are partial_stats'") {
  qsdp_test::check_paired_stats16<true>();
  qsdp_test::check_paired_stats16<false>();
}

TEST_CASE("device spellings: random_shift's grids from packed codes are grid_decode's floats") {
  qsdp_test::check_packed_fraction_decode<8>();
  qsdp_test::check_packed_fraction_decode<4>();
}

TEST_CASE("device spellings: stochastic block-scaled policies' encode_drawn is encode") {
  qsdp_test::check_encode_drawn_of_every_policy();
}

TEST_CASE("device spellings: element codes decode to minifloat_value") {
  qsdp_test::check_minifloat_decode_is_value();
}

TEST_CASE("emulated kernels: uniform<8> writes the host's packets") { sweep(qsdp::uniform<8>{}); }

TEST_CASE("emulated kernels: uniform<4> writes the host's packets") { sweep(qsdp::uniform<4>{}); }

TEST_CASE("emulated kernels: uniform<3> and uniform<1> write the host's packets") {
  sweep(qsdp::uniform<3>{});
  sweep(qsdp::uniform<1>{});
}

TEST_CASE("emulated kernels: stochastic<8> and stochastic<5> write the host's packets") {
  sweep(qsdp::stochastic<8>{});
  sweep(qsdp::stochastic<5>{});
}

TEST_CASE("emulated kernels: symmetric<2> and random_shift<7> write the host's packets") {
  sweep(qsdp::symmetric<2>{});
  sweep(qsdp::random_shift<7>{});
}

TEST_CASE("emulated kernels: decode to outputs off a 16-byte boundary stores every value") {
  sweep_skews(qsdp::uniform<8>{});                     // computed spans
  sweep_skews(qsdp::stochastic<4>{});                  // shuffled table, 16-bit patterns
  sweep_skews(qsdp::symmetric<2>{.bucket_size = 64});  // computed spans, small buckets
  sweep_skews(qsdp::random_shift<3>{});                // codes across words
}

TEST_CASE("emulated kernels: the fused reduce-scatter decode sums like the host") {
  check_reduce<qsdp::stochastic<8>, __nv_bfloat16>(qsdp::stochastic<8>{}, 20000, 4);
  check_reduce<qsdp::uniform<4>, float>(qsdp::uniform<4>{.bucket_size = 100}, 3001, 3);
  check_reduce<qsdp::uniform<4>, __nv_bfloat16>(qsdp::uniform<4>{}, 9000, 8);   // shuffled table
  check_reduce<qsdp::stochastic<8>, float>(qsdp::stochastic<8>{}, 5000, 2, 8);  // skewed output
  check_reduce<qsdp::uniform<2>, __nv_bfloat16>(qsdp::uniform<2>{}, 7000, 4, 6);
  check_reduce<qsdp::uniform<4>, __nv_bfloat16>(qsdp::uniform<4>{}, 9000, 4, 0, true);
  check_reduce<qsdp::stochastic<8>, __nv_bfloat16>(qsdp::stochastic<8>{}, 9000, 3, 0, true);
  // random_shift's grids from packed codes (grid.hpp, packed_fraction_applies): 8 bits, and 4 bits
  // in buckets too small for the shuffled table, flagged buckets among them.
  check_reduce<qsdp::random_shift<8>, __nv_bfloat16>(qsdp::random_shift<8>{}, 9000, 8);
  check_reduce<qsdp::random_shift<4>, float>(qsdp::random_shift<4>{.bucket_size = 256}, 5000, 3, 0,
                                             true);
}

TEST_CASE("emulated kernels: decode_accumulate adds like the host, flagged buckets included") {
  // Spans for all but the last values, which the general kernel adds: computed (bucket 64), and
  // through the shuffled table with 16 lanes per bucket (bucket 512, 2 bits).
  check_accumulate(qsdp::uniform<4>{.bucket_size = 64}, 64 * 40 + 13);
  check_accumulate(qsdp::symmetric<2>{.bucket_size = 512}, 512 * 9 + 45);
  check_accumulate(qsdp::uniform<8>{.bucket_size = 64}, 64 * 40 + 13, 4);  // skewed accumulator
  check_accumulate(qsdp::symmetric<2>{.bucket_size = 512}, 512 * 9 + 45, 12);
}

TEST_CASE("emulated kernels: a bad header is reported once and its values become NaN") {
  const qsdp::uniform<8> q;
  const std::size_t count = 5000;
  std::vector<float> x = qsdp_test::make_data(qsdp_test::distribution::normal, count, 3);
  std::vector<std::byte> packet(qsdp::compressed_size<float>(q, count));
  qsdp::encode(q, x.data(), count, packet.data(), qsdp::rng_position{});
  packet[7] = std::byte{5};  // bits
  std::vector<float> out(count, 0.0f);
  cuda::device_report failure{};
  cuda::launch_decode(q, packet.data(), 0, 1, count, qsdp::detail::expectation_for<float>(q, count),
                      3, &failure, cuda::store_sink<float>{out.data(), false}, cudaStream_t{},
                      "simt");
  CHECK(failure.ready == 1);
  CHECK(failure.index == 3);
  cuda::bad_header reported;
  std::memcpy(&reported, failure.detail, sizeof reported);
  CHECK(reported.seen.bits == 5);
  CHECK(cuda::describe_bad_header(failure, "simt", "packet") ==
        "simt: packet has 5 bits per value, decoder expects 8 (in packet 3, found by the device; "
        "values decoded from it were set to NaN)");
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return std::isnan(v); }));

  // The same packet through the span kernel (aligned output): NaN too, reported once.
  buffer aligned_out(count * sizeof(float), 0);
  cuda::device_report again{};
  float* dst = reinterpret_cast<float*>(aligned_out.get());
  cuda::launch_decode(q, packet.data(), 0, 1, count, qsdp::detail::expectation_for<float>(q, count),
                      3, &again, cuda::store_sink<float>{dst, true}, cudaStream_t{}, "simt");
  CHECK(again.ready == 1);
  CHECK(std::all_of(dst, dst + count, [](float v) { return std::isnan(v); }));
}

/// A CUDA graph replays the captured launches with their captured arguments. Here the same
/// launches (an encode drawing from a call counter in "device" memory, then the counter's
/// advance) run three times with identical arguments: each run must write the host's packet at
/// the call index the counter held, so replays draw fresh numbers. `phase` is the call's offset
/// from the counter, as all_reduce's second phase uses.
template <class Q, class T>
void check_replays(const Q& q, std::size_t count, std::uint64_t first_call, std::uint64_t phase) {
  const std::vector<T> x =
      qsdp_test::convert<T>(qsdp_test::make_data(qsdp_test::distribution::normal, count, 9));
  const std::size_t bytes = qsdp::compressed_size<T>(q, count);
  buffer src(count * sizeof(T), 0), packet(bytes, 0), counter(sizeof(std::uint64_t), 0);
  std::memcpy(src.get(), x.data(), count * sizeof(T));
  auto* calls = reinterpret_cast<std::uint64_t*>(counter.get());
  *calls = first_call;
  const cuda::rng_source source(qsdp::detail::rng_key{qsdp::detail::seed_of(q), phase, 5}, calls);
  std::vector<std::vector<std::byte>> seen;
  for (std::uint64_t replay = 0; replay < 3; ++replay) {
    cuda::launch_encode(q, reinterpret_cast<const T*>(src.get()), count, packet.get(), source,
                        cudaStream_t{}, "simt");
    cuda::launch_advance_calls(calls, 1, cudaStream_t{}, "simt");
    std::vector<std::byte> expected(bytes);
    qsdp::encode(q, x.data(), count, expected.data(),
                 qsdp::rng_position{.call = first_call + replay + phase, .stream = 5});
    INFO(qsdp::policy_name<Q>() << "<" << Q::bits << "> replay " << replay << " phase " << phase);
    CHECK(std::memcmp(packet.get(), expected.data(), bytes) == 0);
    seen.emplace_back(packet.get(), packet.get() + bytes);
  }
  CHECK(*calls == first_call + 3);
  CHECK(seen[0] != seen[1]);  // fresh draws: randomized policies round differently per call
  CHECK(seen[1] != seen[2]);
}

TEST_CASE("emulated kernels: replayed launches draw from the device call counter") {
  check_replays<qsdp::stochastic<4>, float>(qsdp::stochastic<4>{}, 5000, 0,
                                            0);  // one-pass kernel
  check_replays<qsdp::random_shift<8>, __nv_bfloat16>(qsdp::random_shift<8>{}, 3001, 41, 1);
  // General kernels (bucket 100), and a counter past 2^32.
  check_replays<qsdp::stochastic<8>, float>(qsdp::stochastic<8>{.bucket_size = 100}, 777,
                                            (std::uint64_t{1} << 32) - 2, 0);
}

TEST_SUITE_END();
