// SPDX-License-Identifier: Apache-2.0
// The checks of the emulated kernels (tests/simt/test_simt_*.cpp): "device" buffers, a kernel's
// packet and decode against the host codec's, the fused reduce-scatter and decode_accumulate
// against the host's, and the sweeps over bucket sizes, counts and offsets that the test cases
// run for each policy.
#pragma once

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

namespace simt_checks {

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

/// The fused reduce-scatter of block-scaled packets (mx, nvfp4) whose scale bytes and element
/// codes are any bytes, not the encoder's: every E8M0 or E4M3 scale (large ones, whose rescaled
/// factor overflows, and the NaN bytes) and every element code (E4M3's NaN and E5M2's infinity
/// and NaN codes among them), so that the spans the block-scaled fold takes and those it leaves to
/// the value-by-value decode both sum bit for bit as the host's decode_accumulate. NVFP4 packets
/// get tensor scales of 1 and 2^-8 as well, whose block factors reach 448 and 1.75.
template <class Q, class T>
void check_reduce_any_bytes(const Q& q, std::size_t count, int world) {
  const std::size_t bytes = qsdp::compressed_size<T>(q, count);
  buffer packets(bytes * static_cast<std::size_t>(world), 0);
  const auto l = qsdp::detail::layout_for<Q, T>(q, count);
  std::uint32_t state = 12345;
  const auto next_byte = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<std::byte>(state >> 24);
  };
  for (int r = 0; r < world; ++r) {
    const std::vector<T> x = qsdp_test::convert<T>(qsdp_test::make_data(
        qsdp_test::distribution::normal, count, 70 + static_cast<std::uint32_t>(r)));
    std::byte* packet = packets.get() + static_cast<std::size_t>(r) * bytes;
    qsdp::encode(q, x.data(), count, packet, qsdp::rng_position{.call = 3});
    for (std::size_t b = 0; b < l.buckets; ++b)  // every scale byte, in turn and shuffled
      packet[l.meta_offset + b] = r % 2 == 0 ? static_cast<std::byte>(b * 7 + r) : next_byte();
    for (std::size_t i = 0; i < l.code_bytes; ++i) packet[l.codes_offset + i] = next_byte();
    if constexpr (requires { q.tensor_meta; }) {
      const float tensor_scale = r == 0 ? 1.0f : 0x1p-8f;
      std::memcpy(packet + qsdp::detail::tensor_record_offset<Q>(), &tensor_scale,
                  sizeof tensor_scale);
    }
  }
  std::vector<float> acc(count, 0.0f);
  qsdp::decode_accumulate(q, packets.get(), static_cast<std::size_t>(world), count, acc.data());
  buffer out(count * sizeof(T), 0);
  cuda::device_report failure{};
  T* dst = reinterpret_cast<T*>(out.get());
  cuda::launch_decode(q, packets.get(), bytes, static_cast<unsigned>(world), count,
                      qsdp::detail::expectation_for<T>(q, count), 0, &failure,
                      cuda::reduce_sink<T>{dst, true, false, 1.0f}, cudaStream_t{}, "simt");
  std::size_t differing = 0, nan = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const T want = qsdp::detail::element_traits<T>::from_float(acc[i]);
    differing += std::memcmp(&want, &dst[i], sizeof(T)) != 0;
    nan += std::isnan(qsdp_test::to_f(dst[i]));
  }
  INFO(qsdp::policy_name<Q>() << " count " << count << " world " << world);
  CHECK(differing == 0);
  CHECK(nan > 0);          // the NaN scales and codes reached the sums
  CHECK(nan < count / 2);  // and most sums are finite
  CHECK(failure.ready == 0);
}

/// QSDP_SIMT_SHORT=1 (the sanitizer build's ctest preset): every kernel path of the sweeps, but not
/// every size and offset. Under ASan and UBSan an emulated launch of 512 std::threads costs about
/// three times what it does in the main build, which runs the full sweeps.
inline bool short_sweeps() {
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

}  // namespace simt_checks
