// SPDX-License-Identifier: Apache-2.0
// The mix of grouped calls that tests/gpu/test_gpu_group.cpp runs on the host (g++) and
// tests/gpu/gpu_group.cu on the device (nvcc): inputs, the calls on any communicator, the outputs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <qsdp/collectives.hpp>

namespace gpu_test::mix {

constexpr std::size_t ag_count = 1000, rs_count = 777, bf_count = 4096, hrs_count = 2048,
                      inplace_count = 513, inplace_rs_count = 300, after_count = 300;
// Two pipeline pieces: at least twice qsdp::min_piece_bytes of floats per peer.
constexpr std::size_t big_count = 2 * qsdp::min_piece_bytes / sizeof(float) + 4321;

/// Deterministic values of rank r for member m: a mix of scales and signs.
template <class T>
std::vector<T> mix_values(int rank, std::size_t n, std::uint32_t member) {
  std::vector<T> v(n);
  std::uint32_t state = 0x9e3779b9u * (static_cast<std::uint32_t>(rank) + 1) + member * 7919u;
  for (std::size_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    const float unit = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
    const float scale = (i % 97 == 0) ? 40.0f : (member % 2 ? 1.0f : 0.01f);
    if constexpr (std::is_same_v<T, float>)
      v[i] = unit * scale;
    else
      v[i] = __float2bfloat16(unit * scale);
  }
  return v;
}

/// One rank's buffers of the mix: inputs and outputs of every member, in host vectors.
struct mix_host {
  std::vector<float> ag_send, ag_recv, rs_send, rs_recv, big_send, big_recv, inplace, inplace_rs,
      after_send, after_recv;
  std::vector<__nv_bfloat16> bf_send, bf_recv, hrs_send, hrs_recv;
};

inline mix_host make_mix(int rank, int world) {
  const auto w = static_cast<std::size_t>(world);
  const auto r = static_cast<std::size_t>(rank);
  mix_host b;
  b.ag_send = mix_values<float>(rank, ag_count, 1);
  b.ag_recv.assign(ag_count * w, 0.0f);
  b.rs_send = mix_values<float>(rank, rs_count * w, 2);
  b.rs_recv.assign(rs_count, 0.0f);
  b.bf_send = mix_values<__nv_bfloat16>(rank, bf_count, 3);
  b.bf_recv.assign(bf_count * w, __nv_bfloat16{});
  b.hrs_send = mix_values<__nv_bfloat16>(rank, hrs_count * w, 4);
  b.hrs_recv.assign(hrs_count, __nv_bfloat16{});
  b.big_send = mix_values<float>(rank, big_count * w, 5);
  b.big_recv.assign(big_count, 0.0f);
  b.inplace.assign(inplace_count * w, 0.0f);
  const auto shard = mix_values<float>(rank, inplace_count, 6);
  std::copy(shard.begin(), shard.end(),
            b.inplace.begin() + static_cast<std::ptrdiff_t>(r * inplace_count));
  b.inplace_rs = mix_values<float>(rank, inplace_rs_count * w, 7);
  b.after_send = mix_values<float>(rank, after_count, 8);
  b.after_recv.assign(after_count * w, 0.0f);
  return b;
}

/// The mix's calls on any communicator: `at(v)` gives the buffer the calls take for host vector v
/// (itself on the host, its device copy on the device), `extra` the device overloads' stream.
template <class Comm, class At, class... Stream>
void issue_mix(Comm& comm, mix_host& b, At&& at, qsdp::call_options options, Stream... stream) {
  const auto rank = static_cast<std::size_t>(comm.rank());
  qsdp::all_gather(comm, qsdp::uniform<8>{.bucket_size = 128}, at(b.ag_send), at(b.ag_recv),
                   ag_count, stream..., options);
  qsdp::reduce_scatter(comm, qsdp::stochastic<4>{.bucket_size = 64, .seed = 9}, at(b.rs_send),
                       at(b.rs_recv), rs_count, qsdp::reduce_op::avg, stream..., options);
  qsdp::all_gather(comm, qsdp::symmetric<4>{.bucket_size = 32}, at(b.bf_send), at(b.bf_recv),
                   bf_count, stream..., options);
  qsdp::reduce_scatter(comm, qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = 256, .seed = 3}},
                       at(b.hrs_send), at(b.hrs_recv), hrs_count, qsdp::reduce_op::sum, stream...,
                       options);
  qsdp::reduce_scatter(comm, qsdp::stochastic<8>{.bucket_size = 512, .seed = 1}, at(b.big_send),
                       at(b.big_recv), big_count, qsdp::reduce_op::sum, stream..., options);
  float* const inplace = at(b.inplace);
  qsdp::all_gather(comm, qsdp::random_shift<6>{.bucket_size = 64, .seed = 4},
                   inplace + rank * inplace_count, inplace, inplace_count, stream..., options);
  float* const inplace_rs = at(b.inplace_rs);
  qsdp::reduce_scatter(comm, qsdp::uniform<8>{.bucket_size = 64}, inplace_rs,
                       inplace_rs + rank * inplace_rs_count, inplace_rs_count, qsdp::reduce_op::avg,
                       stream..., options);
}

/// The call after the group: its random numbers show that the call indices stayed in step.
template <class Comm, class At, class... Stream>
void issue_after(Comm& comm, mix_host& b, At&& at, Stream... stream) {
  qsdp::all_gather(comm, qsdp::stochastic<4>{.bucket_size = 64, .seed = 2}, at(b.after_send),
                   at(b.after_recv), after_count, stream..., qsdp::call_options{});
}

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

/// Every output of the mix, in member order, then the after call's; the in-place reduce_scatter's
/// output is its chunk of the buffer.
inline std::vector<std::vector<std::byte>> outputs_of(const mix_host& b, int rank) {
  const auto r = static_cast<std::size_t>(rank);
  std::vector<float> inplace_rs_out(
      b.inplace_rs.begin() + static_cast<std::ptrdiff_t>(r * inplace_rs_count),
      b.inplace_rs.begin() + static_cast<std::ptrdiff_t>((r + 1) * inplace_rs_count));
  return {bytes_of(b.ag_recv),      bytes_of(b.rs_recv),   bytes_of(b.bf_recv),
          bytes_of(b.hrs_recv),     bytes_of(b.big_recv),  bytes_of(b.inplace),
          bytes_of(inplace_rs_out), bytes_of(b.after_recv)};
}

}  // namespace gpu_test::mix
