// SPDX-License-Identifier: Apache-2.0
//
// qsdp::delta_gather (declared and documented in qsdp/collectives.hpp, which includes this file
// after its declarations) on host buffers: the difference against the reconstruction,
// qsdp::all_gather of the differences (its descriptor agreement and packet checks included), and
// the same update of the reconstruction on every rank.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "../../collective_types.hpp"
#include "../codec/checks.hpp"
#include "../codec/float_types.hpp"
#include "../codec/hadamard.hpp"
#include "group.hpp"
#include "plan.hpp"

namespace qsdp::detail {

// The arithmetic of one value, shared by the host loops below and the device kernels
// (detail/cuda/device_delta.cuh), so that both give the same bits.

/// A reconstruction value as the next difference and update read it: non-finite counts as 0.
template <class T>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float reconstructed(T value) {
  const float v = element_traits<T>::to_float(value);
  return (bit_cast<std::uint32_t>(v) & 0x7F800000u) != 0x7F800000u ? v : 0.0f;
}

/// What a rank sends for one value: its shard's value less the reconstruction the receivers hold.
template <class T>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float delta_difference(T shard, T reconstruction) {
  return element_traits<T>::to_float(shard) - reconstructed(reconstruction);
}

/// The reconstruction after a decoded difference: decoded values are finite or NaN (a flagged
/// bucket); a finite sum that overflows saturates, as a decode does, so finite shards never gather
/// to inf.
template <class T>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE T delta_update(T reconstruction, float decoded) {
  return saturating_from_float<T>(saturate_infinite(reconstructed(reconstruction) + decoded));
}

/// The values a delta_gather<T> keeps on a device (detail/cuda/device_delta.cuh allocates them;
/// memory_bytes reports them): the reconstruction of every rank's shard, this rank's difference,
/// the decoded differences (T other than float; a float output holds them itself) and the call
/// counts (this rank's, then every rank's as exchanged).
struct delta_device_sizes {
  std::size_t reconstruction, difference, decoded, calls;

  template <class T>
  static constexpr delta_device_sizes of(std::size_t count, std::size_t ranks) noexcept {
    return {count * ranks, count, std::is_same_v<T, float> ? 0 : count * ranks, ranks + 1};
  }
  template <class T>
  constexpr std::size_t bytes() const noexcept {
    return reconstruction * sizeof(T) + (difference + decoded) * sizeof(float) +
           calls * sizeof(std::uint64_t);
  }
};

/// The message of a rank whose reconstruction has seen another number of calls than rank 0's.
inline std::string delta_calls_message(const char* where, int rank, std::uint64_t calls,
                                       std::uint64_t rank0_calls) {
  return std::string(where) + ": rank " + std::to_string(rank) + "'s reconstruction has seen " +
         std::to_string(calls) + " calls, rank 0's " + std::to_string(rank0_calls) +
         " (every rank must make every call, and reset together)";
}

}  // namespace qsdp::detail

namespace qsdp {

template <class T>
delta_gather<T>::delta_gather(std::size_t count, int world) : count_(count), world_(world) {
  detail::require_element<T>();
  constexpr const char* where = "qsdp::delta_gather";
  detail::check_world(world, where);
  detail::check_count(count, where);
  const auto ranks = static_cast<std::size_t>(world);
  if (count > detail::max_packet_count / ranks)
    throw qsdp::error(std::string(where) + ": count " + std::to_string(count) + " times world " +
                      std::to_string(world) + " is beyond 2^56 values");
  // The buffers come with the first call, in host or device memory (collectives.hpp).
}

template <class T>
void delta_gather<T>::reset() {
  std::fill(reconstruction_.begin(), reconstruction_.end(),
            detail::element_traits<T>::from_float(0.0f));
  reset_pending_ = device_ != nullptr;  // zeroed on the next device call's stream
  calls_ = 0;
}

template <class T>
std::size_t delta_gather<T>::memory_bytes() const noexcept {
  const std::size_t ranks = static_cast<std::size_t>(world_);
  if (device_) return detail::delta_device_sizes::of<T>(count_, ranks).template bytes<T>();
  return reconstruction_.size() * sizeof(T) + difference_.size() * sizeof(float) +
         decoded_.size() * sizeof(float) + peer_calls_.size() * sizeof(std::uint64_t);
}

template <class T>
template <communicator Comm, class Q>
void delta_gather<T>::all_gather(Comm& comm, const Q& q, const T* shard, T* full) {
  constexpr const char* where = "qsdp::delta_gather::all_gather";
  static_assert(std::remove_cvref_t<Comm>::memory == memory_space::host,
                "qsdp::delta_gather::all_gather: device buffers take the overload with a stream");
  detail::enter_host_call(comm, where);
  if (comm.size() != world_)
    throw qsdp::error(std::string(where) + ": communicator has " + std::to_string(comm.size()) +
                      " ranks; this delta_gather was made for world " + std::to_string(world_));
  detail::check_buffers(shard, "shard", full, "full", count_, where);
  if (device_)
    throw qsdp::error(std::string(where) +
                      ": this delta_gather keeps its reconstruction in device memory (earlier "
                      "calls were on a device communicator); use another object for host buffers");
  if (peer_calls_.empty()) {  // the first call: the buffers
    const auto ranks = static_cast<std::size_t>(world_);
    reconstruction_.assign(count_ * ranks, detail::element_traits<T>::from_float(0.0f));
    difference_.assign(count_, 0.0f);
    if constexpr (!std::is_same_v<T, float>) decoded_.assign(count_ * ranks, 0.0f);
    peer_calls_.assign(ranks, 0);
  }
  // Every rank's reconstruction must have seen the same calls: compare the counts first, so that
  // a rank that skipped a call or reset alone stops every rank instead of drifting silently.
  comm.all_gather_bytes(reinterpret_cast<const std::byte*>(&calls_),
                        reinterpret_cast<std::byte*>(peer_calls_.data()), sizeof calls_);
  for (int r = 0; r < world_; ++r) {
    if (peer_calls_[static_cast<std::size_t>(r)] != peer_calls_[0])
      throw qsdp::error(detail::delta_calls_message(
          where, r, peer_calls_[static_cast<std::size_t>(r)], peer_calls_[0]));
  }
  const std::size_t mine = static_cast<std::size_t>(comm.rank()) * count_;
  for (std::size_t i = 0; i < count_; ++i)
    difference_[i] = detail::delta_difference(shard[i], reconstruction_[mine + i]);
  // The differences travel as floats whatever T is: the packet is the same size, and the update
  // below rounds to T once. Always quantized (no size gate): the quantized differences are the
  // point of this call, and its error contract is stated for them.
  float* decoded = std::is_same_v<T, float> ? reinterpret_cast<float*>(full) : decoded_.data();
  qsdp::all_gather(comm, q, difference_.data(), decoded, count_,
                   call_options{.min_compressed_bytes = 0});
  const std::size_t total = reconstruction_.size();
  for (std::size_t i = 0; i < total; ++i)
    reconstruction_[i] = detail::delta_update(reconstruction_[i], decoded[i]);
  if (total) std::memcpy(static_cast<void*>(full), reconstruction_.data(), total * sizeof(T));
  ++calls_;
}

template <class T>
const T* delta_gather<T>::reconstruction() const noexcept {
  if (device_) return device_reconstruction_;
  return reconstruction_.empty() ? nullptr : reconstruction_.data();
}

}  // namespace qsdp
