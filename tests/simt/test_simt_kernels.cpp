// SPDX-License-Identifier: Apache-2.0
// qsdp's CUDA kernels, executed on the host by tests/simt/simt_emulation.hpp (threads of a block as
// std::threads, warps with their own barriers, at most three blocks so that grid-stride loops
// wrap): the packets they write must be the host codec's byte for byte, and their decodes the
// host's values bit for bit. This runs the kernels' own code - thread/bucket mapping, shuffles,
// shared memory, barriers, vector loads and stores, flags and tails - on every build, without a
// GPU.
#define QSDP_SIMT_EMULATION 1
#include "simt_emulation.hpp"  // first: it redefines the CUDA built-ins the kernels use

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <qsdp/codec.hpp>
#include <qsdp/detail/cuda/device_codec.cuh>

#include "spelling_checks.hpp"
#include "support.hpp"

TEST_SUITE_BEGIN("simt");

namespace {

namespace cuda = qsdp::detail::cuda;

/// A "device" buffer: host memory at a chosen byte offset from a 256-byte aligned base, pre-filled
/// with garbage so that every byte a kernel must write is checked.
struct buffer {
  std::vector<unsigned char> storage;
  std::size_t offset;
  buffer(std::size_t bytes, std::size_t off) : storage(bytes + off + 512, 0xCD), offset(off) {}
  std::byte* get() {
    auto base = reinterpret_cast<std::uintptr_t>(storage.data());
    return reinterpret_cast<std::byte*>(storage.data()) + (256 - base % 256) % 256 + offset;
  }
};

template <class T>
bool same_value(T a, T b) {
  const float fa = qsdp_test::to_f(a), fb = qsdp_test::to_f(b);
  if (std::isnan(fa) || std::isnan(fb)) return std::isnan(fa) && std::isnan(fb);
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class Q, class T>
void check(const Q& q, std::size_t count, std::size_t src_offset, std::size_t packet_offset,
           bool non_finite) {
  std::vector<float> values = qsdp_test::make_data(qsdp_test::distribution::mixed_scale, count, 21);
  if (non_finite && count > 10) {
    values[count / 3] = NAN;
    values[count - 1] = INFINITY;
  }
  const std::vector<T> x = qsdp_test::convert<T>(values);
  const qsdp::rng_position position{.call = 4, .stream = 6};
  const qsdp::detail::rng_key key{qsdp::detail::seed_of(q), position.call, position.stream};
  const std::size_t bytes = qsdp::compressed_size<T>(q, count);
  std::vector<std::byte> expected(bytes);
  qsdp::encode(q, x.data(), count, expected.data(), position);

  buffer src(count * sizeof(T), src_offset), packet(bytes, packet_offset);
  if (count) std::memcpy(src.get(), x.data(), count * sizeof(T));
  cuda::launch_encode(q, reinterpret_cast<const T*>(src.get()), count, packet.get(), key,
                      cudaStream_t{}, "simt");
  INFO(qsdp::policy_name<Q>() << "<" << Q::bits << "> bucket " << q.bucket_size << " count "
                              << count << " offsets " << src_offset << "/" << packet_offset);
  const auto* got = packet.get();
  std::size_t first_difference = bytes;
  for (std::size_t i = 0; i < bytes; ++i)
    if (got[i] != expected[i]) {
      first_difference = i;
      break;
    }
  INFO("first differing byte " << first_difference << " of " << bytes);
  CHECK(first_difference == bytes);

  // Decode the host's packet with the decode kernel, into T at the source's offset.
  buffer in(bytes, packet_offset), out(count * sizeof(T), src_offset);
  std::memcpy(in.get(), expected.data(), bytes);
  cuda::device_report failure{};
  const qsdp::detail::header_expectation want = qsdp::detail::expectation_for<T>(q, count);
  T* dst = reinterpret_cast<T*>(out.get());
  cuda::launch_decode(q, in.get(), 0, 1, count, want, 0, &failure,
                      cuda::store_sink<T>{dst, cuda::aligned16(dst)}, cudaStream_t{}, "simt");
  std::vector<T> reference(count), decoded(count);
  qsdp::decode(q, expected.data(), count, reference.data());
  if (count) std::memcpy(decoded.data(), dst, count * sizeof(T));
  std::size_t differing = 0;
  for (std::size_t i = 0; i < count; ++i) differing += !same_value(reference[i], decoded[i]);
  CHECK(differing == 0);
  CHECK(failure.ready == 0);
}

/// Reduce-scatter's fused decode over `world` packets against the host's decode_accumulate + avg.
template <class Q, class T>
void check_reduce(const Q& q, std::size_t count, int world, std::size_t out_offset = 0,
                  bool non_finite = false) {
  const std::size_t bytes = qsdp::compressed_size<T>(q, count);
  buffer packets(bytes * static_cast<std::size_t>(world), 0);
  for (int r = 0; r < world; ++r) {
    std::vector<float> values = qsdp_test::make_data(qsdp_test::distribution::normal, count,
                                                     50 + static_cast<std::uint32_t>(r));
    // Rank 1's bucket holding a NaN and rank 2's holding -inf decode to NaN: the spans that hold
    // them take the value-by-value conversion, which must keep the host's NaN bits.
    if (non_finite && r == 1) values[count / 3] = NAN;
    if (non_finite && r == 2) values[count / 2] = -INFINITY;
    const std::vector<T> x = qsdp_test::convert<T>(values);
    qsdp::encode(q, x.data(), count, packets.get() + static_cast<std::size_t>(r) * bytes,
                 qsdp::rng_position{.call = 2, .stream = static_cast<std::uint32_t>(r)});
  }
  std::vector<float> acc(count, 0.0f);
  qsdp::decode_accumulate(q, packets.get(), static_cast<std::size_t>(world), count, acc.data());
  buffer out(count * sizeof(T), out_offset);
  cuda::device_report failure{};
  T* dst = reinterpret_cast<T*>(out.get());
  cuda::launch_decode(q, packets.get(), bytes, static_cast<unsigned>(world), count,
                      qsdp::detail::expectation_for<T>(q, count), 0, &failure,
                      cuda::reduce_sink<T>{dst, out_offset == 0, true, static_cast<float>(world)},
                      cudaStream_t{}, "simt");
  std::size_t differing = 0, nan = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const T want = qsdp::detail::element_traits<T>::from_float(acc[i] / static_cast<float>(world));
    differing +=
        non_finite ? std::memcmp(&want, &dst[i], sizeof(T)) != 0 : !same_value(want, dst[i]);
    nan += std::isnan(qsdp_test::to_f(dst[i]));
  }
  INFO(qsdp::policy_name<Q>() << " count " << count << " world " << world);
  CHECK(differing == 0);
  CHECK(nan == (non_finite ? 2 * q.bucket_size : 0));
  CHECK(failure.ready == 0);
}

/// QSDP_SIMT_SHORT=1 (the sanitizer build's ctest preset): every kernel path of the sweeps, but not
/// every size and offset. Under ASan and UBSan an emulated launch of 512 std::threads costs about
/// three times what it does in the main build, which runs the full sweeps.
bool short_sweeps() {
  const char* v = std::getenv("QSDP_SIMT_SHORT");
  return v != nullptr && std::string(v) == "1";
}

template <class Q>
void sweep(Q q) {
  // The one-pass kernel (aligned): one thread per bucket (32) up to four warps (4096).
  for (const std::size_t bucket : {32u, 64u, 1024u, 4096u}) {
    if (short_sweeps() && (bucket == 32 || bucket == 1024)) continue;
    q.bucket_size = bucket;
    // 4097: a last bucket of one value; 14003: a cut last span whose last group is partial, in a
    // bucket with a range (the padded values' codes must be 0, as the host's).
    for (const std::size_t count : {0u, 1u, 4097u, 14003u}) {
      if (short_sweeps() && count != 14003) continue;
      check<Q, float>(q, count, 0, 0, count > 100);
      check<Q, __nv_bfloat16>(q, count, 0, 0, false);
    }
  }
  q.bucket_size = 100;  // the general kernels
  check<Q, float>(q, 5003, 0, 0, true);
  check<Q, __half>(q, 777, 2, 0, false);
  q.bucket_size = 1024;  // aligned bucket, unaligned packet: general kernels too
  check<Q, __nv_bfloat16>(q, 9001, 2, 4, true);
  check<Q, __nv_bfloat16>(q, 9001, 1, 0, false);  // input off its element's alignment: general
  // Input off a 16-byte boundary by whole elements, packet aligned: the one-pass kernel's element
  // loads (reduce-scatter's chunks of counts that are no multiple of 16 bytes).
  check<Q, float>(q, 5000, 4, 0, true);
  check<Q, __half>(q, 4097, 6, 0, false);
}

/// Decode into outputs that start off a 16-byte boundary by whole elements (an all_gather chunk of
/// a count that is no multiple of 16 bytes): the span kernel's skewed stores, whose warps' runs
/// of 1024 values end in element-wise stores. Counts that end inside a run and on a run's last
/// span.
template <class Q>
void sweep_skews(Q q) {
  for (const std::size_t skew : {4u, 8u, 12u})
    for (const std::size_t count : {32u * 70 + 5, 32u * 64})
      if (!short_sweeps() || (skew == 4 && count % 32 != 0))
        check<Q, float>(q, count, skew, 0, false);
  for (const std::size_t skew : {2u, 6u, 8u, 10u, 14u}) {
    if (short_sweeps() && skew != 2 && skew != 8) continue;
    check<Q, __nv_bfloat16>(q, 32 * 97 + 17, skew, 0, false);
    check<Q, __half>(q, 32 * 33, skew, 0, false);
  }
}

}  // namespace

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

/// decode_accumulate of three packets (buckets 1 and 3 of the second flagged) against the host's;
/// encoded at one call index, or (calls_differ) at three, which a rotated policy's packets then
/// carry as three different rotations.
template <class Q>
void check_accumulate(const Q& q, std::size_t count, std::size_t acc_offset = 0,
                      bool calls_differ = false) {
  const std::size_t packets = 3;
  const std::size_t bytes = qsdp::compressed_size<float>(q, count);
  buffer in(bytes * packets, 0);
  for (std::size_t p = 0; p < packets; ++p) {
    std::vector<float> x = qsdp_test::make_data(qsdp_test::distribution::mixed_scale, count,
                                                70 + static_cast<std::uint32_t>(p));
    if (p == 1) {  // buckets 1 and 3 of packet 1 are flagged
      x[q.bucket_size + 6] = NAN;
      x[3 * q.bucket_size + 8] = -INFINITY;
    }
    qsdp::encode(q, x.data(), count, in.get() + p * bytes,
                 qsdp::rng_position{.call = calls_differ ? 1 + p : 1});
  }
  std::vector<float> want = qsdp_test::make_data(qsdp_test::distribution::normal, count, 80);
  buffer acc(count * sizeof(float), acc_offset);
  std::memcpy(acc.get(), want.data(), count * sizeof(float));
  qsdp::decode_accumulate(q, in.get(), packets, count, want.data());
  cuda::device_report failure{};
  float* got = reinterpret_cast<float*>(acc.get());
  cuda::launch_decode(q, in.get(), bytes, static_cast<unsigned>(packets), count,
                      qsdp::detail::expectation_for(q, count, -1), 0, &failure,
                      cuda::accumulate_sink{got, acc_offset % 16 == 0}, cudaStream_t{}, "simt");
  std::size_t differing = 0, nan = 0;
  for (std::size_t i = 0; i < count; ++i) {
    differing += !same_value(want[i], got[i]);
    nan += std::isnan(got[i]);
  }
  INFO(std::string(qsdp::policy_name<Q>()) << "<" << Q::bits << "> bucket " << q.bucket_size);
  CHECK(differing == 0);
  CHECK(nan == 2 * q.bucket_size);  // the two flagged buckets
  CHECK(failure.ready == 0);
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

/// A CUDA graph replays the captured launches with their captured arguments. Here the same launches
/// (an encode drawing from a call counter in "device" memory, then the counter's advance) run three
/// times with identical arguments: each run must write the host's packet at the call index the
/// counter held, so replays draw fresh numbers. `phase` is the call's offset from the counter, as
/// all_reduce's second phase uses.
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
  check_replays<qsdp::stochastic<4>, float>(qsdp::stochastic<4>{}, 5000, 0, 0);  // one-pass kernel
  check_replays<qsdp::random_shift<8>, __nv_bfloat16>(qsdp::random_shift<8>{}, 3001, 41, 1);
  // General kernels (bucket 100), and a counter past 2^32.
  check_replays<qsdp::stochastic<8>, float>(qsdp::stochastic<8>{.bucket_size = 100}, 777,
                                            (std::uint64_t{1} << 32) - 2, 0);
}

// ---- qsdp::hadamard<Inner>: the rotation fused into encode and decode (hadamard_kernels.cuh)

/// Every bucket class (in registers only, across lanes, across warps) and short last buckets of
/// several pieces for one policy; `full` false: the buckets at the two ends and the widest count.
template <class Q>
void sweep_rotated(Q q, bool full = true) {
  for (const std::size_t bucket : {16u, 64u, 1024u, 4096u}) {
    if ((short_sweeps() || !full) && (bucket == 64 || bucket == 1024)) continue;
    q.bucket_size = bucket;
    // 100: one short bucket in pieces of 64, 32 and 4; 4097: a last bucket of one value; 14003:
    // four tiles (the grid of three blocks wraps) and a short last bucket of several pieces.
    for (const std::size_t count : {0u, 1u, 100u, 4097u, 14003u}) {
      if ((short_sweeps() || !full) && count != 14003 && count != 100) continue;
      check<Q, float>(q, count, 0, 0, count > 100);
      check<Q, __nv_bfloat16>(q, count, 0, 0, false);
    }
  }
  q.bucket_size = 256;  // unaligned source and packet: byte stores
  check<Q, __half>(q, 5003, 2, 3, true);
  check<Q, __nv_bfloat16>(q, 777, 1, 0, false);  // input off its element's alignment
}

TEST_CASE("emulated kernels: hadamard<Inner> writes the host's rotated packets and decodes them") {
  sweep_rotated(qsdp::hadamard<qsdp::stochastic<4>>{});
  sweep_rotated(qsdp::hadamard<qsdp::uniform<8>>{}, false);
  if (!short_sweeps()) {
    sweep_rotated(qsdp::hadamard<qsdp::random_shift<2>>{}, false);
    sweep_rotated(qsdp::hadamard<qsdp::symmetric<3>>{}, false);
  }
}

TEST_CASE("emulated kernels: rotated packets are summed before one inverse, as on the host") {
  using rotated4 = qsdp::hadamard<qsdp::stochastic<4>>;
  check_reduce<rotated4, __nv_bfloat16>(rotated4{{.bucket_size = 2048}}, 9000, 4);
  check_reduce<rotated4, float>(rotated4{{.bucket_size = 128}}, 3001, 3, 8);  // skewed output
  check_reduce<rotated4, __nv_bfloat16>(rotated4{{.bucket_size = 512}}, 9000, 3, 0, true);
  using rotated8 = qsdp::hadamard<qsdp::random_shift<8>>;
  check_reduce<rotated8, float>(rotated8{{.bucket_size = 4096}}, 20000, 2);
  // decode_accumulate: one rotation (summed, then transformed back), and three (each packet
  // transformed back and added in turn), flagged buckets in both.
  check_accumulate(qsdp::hadamard<qsdp::uniform<4>>{{.bucket_size = 64}}, 64 * 40 + 13);
  check_accumulate(qsdp::hadamard<qsdp::uniform<4>>{{.bucket_size = 64}}, 64 * 40 + 13, 4, true);
  check_accumulate(qsdp::hadamard<qsdp::symmetric<2>>{{.bucket_size = 1024}}, 1024 * 5 + 45, 0,
                   true);
}

// ---- The OCP Microscaling policies: one E8M0 byte per block, element codes (minifloat.hpp)

TEST_CASE("emulated kernels: the MX policies write the host's packets and decode them") {
  using qsdp::rounding;
  using mxfp4_stochastic = qsdp::mxfp4<rounding::stochastic>;
  // Blocks of 32, the spec's: one thread per block in the one-pass encode kernel; the last block
  // short, NaN and inf blocks (E8M0's NaN byte) among them.
  for (const std::size_t count : {31u, 4097u, 14003u}) {
    check<qsdp::mxfp8<>, float>(qsdp::mxfp8<>{}, count, 0, 0, count > 100);
    check<qsdp::mxfp8<>, __nv_bfloat16>(qsdp::mxfp8<>{}, count, 0, 0, false);
    check<mxfp4_stochastic, float>(mxfp4_stochastic{.seed = 5}, count, 0, 0, count > 100);
    check<qsdp::mxfp6<qsdp::e3m2>, __half>(qsdp::mxfp6<qsdp::e3m2>{}, count, 2, 0, false);
  }
  sweep(qsdp::mxfp8<>{});  // one-pass encode kernel (blocks of 64 .. 4096) and general kernels
  sweep(mxfp4_stochastic{.seed = 5});
  if (!short_sweeps()) {
    sweep(qsdp::mxfp8<qsdp::e5m2, rounding::stochastic>{});
    sweep(qsdp::mxfp6<>{});
  }
  check_reduce<qsdp::mxfp8<>, __nv_bfloat16>(qsdp::mxfp8<>{}, 9000, 4);
  check_reduce<mxfp4_stochastic, float>(mxfp4_stochastic{}, 5000, 3, 8, true);
  check_accumulate(qsdp::mxfp4<>{}, 32 * 40 + 13);
  sweep_rotated(qsdp::hadamard<mxfp4_stochastic>{{.seed = 2}}, false);
  check_reduce<qsdp::hadamard<qsdp::mxfp8<>>, float>(
      qsdp::hadamard<qsdp::mxfp8<>>{{.bucket_size = 256}}, 3001, 3);
}

/// The unpack kernel over `world` packets (the encoded all-gather's): the host's layout of each,
/// byte for byte, at its offsets; a bad header instead gives NaN scales, zero elements and one
/// report.
template <class Q>
void check_unpack(const Q& q, std::size_t count, int world, bool bad_header) {
  const auto w = static_cast<std::size_t>(world);
  const std::size_t bytes = qsdp::compressed_size<float>(q, count);
  buffer packets(bytes * w, 0);
  const std::size_t element_bytes = qsdp::block_scaled_element_bytes(q, count);
  const std::size_t blocks = count / q.bucket_size;
  std::vector<std::byte> want_elements(element_bytes * w);
  std::vector<std::uint8_t> want_scales(blocks * w);
  for (std::size_t r = 0; r < w; ++r) {
    auto x = qsdp_test::make_data(qsdp_test::distribution::mixed_scale, count,
                                  60 + static_cast<std::uint32_t>(r));
    x[r * 7] = NAN;  // a NaN block per rank: scale 0xFF
    std::byte* packet = packets.get() + r * bytes;
    qsdp::encode(q, x.data(), count, packet, qsdp::rng_position{.call = 1});
    qsdp::unpack_block_scaled(
        q, packet, count,
        {want_elements.data() + r * element_bytes, want_scales.data() + r * blocks});
  }
  if (bad_header) packets.get()[bytes + 7] = std::byte{0x55};  // rank 1's bits
  buffer elements(element_bytes * w, 3), scales(blocks * w, 1);
  cuda::device_report failure{};
  auto* scale_out = reinterpret_cast<std::uint8_t*>(scales.get());
  cuda::launch_unpack_block_scaled(q, packets.get(), bytes, static_cast<unsigned>(world), count,
                                   qsdp::detail::expectation_for<float>(q, count), 0, &failure,
                                   elements.get(), element_bytes, scale_out, blocks, cudaStream_t{},
                                   "simt");
  INFO(qsdp::policy_name<Q>() << " count " << count << " world " << world);
  if (!bad_header) {
    CHECK(std::memcmp(elements.get(), want_elements.data(), want_elements.size()) == 0);
    CHECK(std::memcmp(scale_out, want_scales.data(), want_scales.size()) == 0);
    CHECK(failure.ready == 0);
    return;
  }
  CHECK(std::count(scale_out, scale_out + blocks * w, std::uint8_t{0xFF}) ==
        static_cast<std::ptrdiff_t>(blocks * w));
  CHECK(std::count(elements.get(), elements.get() + element_bytes * w, std::byte{0}) ==
        static_cast<std::ptrdiff_t>(element_bytes * w));
  CHECK(failure.ready == 1);
  CHECK(failure.index == 1);
}

TEST_CASE("emulated kernels: MX packets unpack to the host's block-scaled layout") {
  using qsdp::rounding;
  check_unpack(qsdp::mxfp8<>{}, 32 * 300, 3, false);
  check_unpack(qsdp::mxfp8<qsdp::e5m2, rounding::stochastic>{.seed = 4}, 32 * 7, 2, false);
  check_unpack(qsdp::mxfp6<qsdp::e3m2>{}, 32 * 129, 3, false);
  check_unpack(qsdp::mxfp6<>{.bucket_size = 64}, 64 * 20, 2, false);
  check_unpack(qsdp::mxfp4<rounding::stochastic>{.seed = 4}, 32 * 65, 4, false);
  check_unpack(qsdp::mxfp4<>{.bucket_size = 16}, 16 * 33, 2, false);
  check_unpack(qsdp::mxfp8<>{}, 32 * 40, 3, true);
  check_unpack(qsdp::mxfp6<>{}, 32 * 40, 2, true);
}

TEST_CASE("emulated kernels: nvfp4 writes the host's packets, tensor record included") {
  using qsdp::rounding;
  using nvfp4_stochastic = qsdp::nvfp4<rounding::stochastic>;
  // Blocks of 16, NVFP4's: the general encode kernels and the group decoder; the tensor record
  // from the magnitude kernel, at packet offsets that leave it unaligned (3) and aligned (0, 4).
  for (const std::size_t count : {0u, 15u, 4097u, 14003u}) {
    if (short_sweeps() && count == 4097) continue;
    check<qsdp::nvfp4<>, float>(qsdp::nvfp4<>{}, count, 0, 0, count > 100);
    check<qsdp::nvfp4<>, __nv_bfloat16>(qsdp::nvfp4<>{}, count, 0, 3, false);
    check<nvfp4_stochastic, float>(nvfp4_stochastic{.seed = 5}, count, 4, 4, count > 100);
    check<nvfp4_stochastic, __half>(nvfp4_stochastic{.seed = 5}, count, 2, 0, false);
  }
  // Larger blocks: the one-pass encode kernel, the span decoders and the shuffled table.
  sweep(qsdp::nvfp4<>{});
  for (const std::size_t bucket : {64u, 1024u}) {
    if (short_sweeps() && bucket == 64) continue;
    check<nvfp4_stochastic, float>(nvfp4_stochastic{.bucket_size = bucket, .seed = 5}, 14003, 0, 0,
                                   true);
    check<nvfp4_stochastic, __nv_bfloat16>(nvfp4_stochastic{.bucket_size = bucket, .seed = 5}, 4097,
                                           0, 0, false);
  }
  // Several packets, each with its own tensor scale: the fused reduce-scatter, decode_accumulate,
  // and rotated packets (summed before one inverse when their rotations agree).
  check_reduce<qsdp::nvfp4<>, __nv_bfloat16>(qsdp::nvfp4<>{}, 9000, 4);
  check_reduce<nvfp4_stochastic, float>(nvfp4_stochastic{}, 5000, 3, 8, true);
  check_reduce<qsdp::nvfp4<>, float>(qsdp::nvfp4<>{.bucket_size = 1024}, 9000, 4);
  check_accumulate(qsdp::nvfp4<>{}, 16 * 40 + 13);
  sweep_rotated(qsdp::hadamard<nvfp4_stochastic>{{.seed = 2}}, false);
  check_reduce<qsdp::hadamard<qsdp::nvfp4<>>, float>(
      qsdp::hadamard<qsdp::nvfp4<>>{{.bucket_size = 256}}, 3001, 3);
}

TEST_SUITE_END();
