// SPDX-License-Identifier: Apache-2.0
//
// qsdp::delta_gather (declared and documented in qsdp/collectives.hpp) on host buffers: the
// difference against the reconstruction, qsdp::all_gather of the differences (its descriptor
// agreement and packet checks included), and the same update of the reconstruction on every rank.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "../../collectives.hpp"
#include "../codec/checks.hpp"
#include "../codec/float_types.hpp"
#include "../codec/hadamard.hpp"
#include "plan.hpp"

namespace qsdp::detail {

/// A reconstruction value as the next difference and update read it: non-finite counts as 0.
template <class T>
float reconstructed(T value) {
  const float v = element_traits<T>::to_float(value);
  return std::isfinite(v) ? v : 0.0f;
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
  reconstruction_.assign(count * ranks, detail::element_traits<T>::from_float(0.0f));
  difference_.assign(count, 0.0f);
  if constexpr (!std::is_same_v<T, float>) decoded_.assign(count * ranks, 0.0f);
  peer_calls_.assign(ranks, 0);
}

template <class T>
void delta_gather<T>::reset() {
  std::fill(reconstruction_.begin(), reconstruction_.end(),
            detail::element_traits<T>::from_float(0.0f));
  calls_ = 0;
}

template <class T>
std::size_t delta_gather<T>::memory_bytes() const noexcept {
  return reconstruction_.size() * sizeof(T) + difference_.size() * sizeof(float) +
         decoded_.size() * sizeof(float) + peer_calls_.size() * sizeof(std::uint64_t);
}

template <class T>
template <communicator Comm, class Q>
void delta_gather<T>::all_gather(Comm& comm, const Q& q, const T* shard, T* full) {
  constexpr const char* where = "qsdp::delta_gather::all_gather";
  static_assert(std::remove_cvref_t<Comm>::memory == memory_space::host,
                "qsdp::delta_gather takes host buffers; its device version is not written yet");
  if (comm.size() != world_)
    throw qsdp::error(std::string(where) + ": communicator has " + std::to_string(comm.size()) +
                      " ranks; this delta_gather was made for world " + std::to_string(world_));
  detail::check_buffers(shard, "shard", full, "full", count_, where);
  // Every rank's reconstruction must have seen the same calls: compare the counts first, so that
  // a rank that skipped a call or reset alone stops every rank instead of drifting silently.
  comm.all_gather_bytes(reinterpret_cast<const std::byte*>(&calls_),
                        reinterpret_cast<std::byte*>(peer_calls_.data()), sizeof calls_);
  for (int r = 0; r < world_; ++r) {
    if (peer_calls_[static_cast<std::size_t>(r)] != peer_calls_[0])
      throw qsdp::error(std::string(where) + ": rank " + std::to_string(r) + "'s reconstruction " +
                        "has seen " + std::to_string(peer_calls_[static_cast<std::size_t>(r)]) +
                        " calls, rank 0's " + std::to_string(peer_calls_[0]) +
                        " (every rank must make every call, and reset together)");
  }
  const std::size_t mine = static_cast<std::size_t>(comm.rank()) * count_;
  for (std::size_t i = 0; i < count_; ++i)
    difference_[i] = detail::element_traits<T>::to_float(shard[i]) -
                     detail::reconstructed(reconstruction_[mine + i]);
  // The differences travel as floats whatever T is: the packet is the same size, and the update
  // below rounds to T once.
  float* decoded = std::is_same_v<T, float> ? reinterpret_cast<float*>(full) : decoded_.data();
  qsdp::all_gather(comm, q, difference_.data(), decoded, count_);
  const std::size_t total = reconstruction_.size();
  for (std::size_t i = 0; i < total; ++i) {
    // Decoded values are finite or NaN (a flagged bucket); a finite sum that overflows saturates,
    // as a decode does, so finite shards never gather to inf.
    const float updated =
        detail::saturate_infinite(detail::reconstructed(reconstruction_[i]) + decoded[i]);
    reconstruction_[i] = detail::saturating_from_float<T>(updated);
  }
  if (total) std::memcpy(static_cast<void*>(full), reconstruction_.data(), total * sizeof(T));
  ++calls_;
}

}  // namespace qsdp
