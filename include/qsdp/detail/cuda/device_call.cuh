// SPDX-License-Identifier: Apache-2.0
//
// What single device collectives (device_collectives.cuh) and groups of them (device_group.cuh)
// share: the argument checks, the refusal of a first call inside CUDA graph capture, the refusal of
// ungroupable calls inside a group, and the exchanges on the caller's stream or the communicator's
// second one.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "../../device_communicator.hpp"
#include "../codec/checks.hpp"
#include "../collectives/plan.hpp"
#include "../transport/cuda_runtime.hpp"

namespace qsdp::detail::cuda {

/// The stream's device is the communicator's and both buffers (count values, not overlapping
/// unless equal) are device memory there; returns the device.
template <class Comm>
int check_device_buffers(Comm& comm, const void* a, const char* a_name, const void* b,
                         const char* b_name, std::size_t count, cudaStream_t stream,
                         const char* where) {
  const int device = stream_device(stream, where);
  if (device != comm.device())
    throw qsdp::error(std::string(where) + ": the stream belongs to device " +
                      std::to_string(device) + ", the communicator to device " +
                      std::to_string(comm.device()));
  check_buffers(a, a_name, b, b_name, count, where);
  if (count > 0) {
    require_device_pointer(a, a_name, device, where);
    require_device_pointer(b, b_name, device, where);
  }
  return device;
}

/// Argument checks shared by the device collectives.
template <class Comm, class Q, class T>
void check_device_collective(Comm& comm, const Q& q, const void* a, const char* a_name,
                             const void* b, const char* b_name, std::size_t count,
                             cudaStream_t stream, const char* where) {
  require_policy<Q>();
  require_device_element<T>();
  check_bucket_size(q, where);
  check_count(count, where);
  check_world(comm.size(), where);
  check_device_buffers(comm, a, a_name, b, b_name, count, stream, where);
  comm.state().failures.poll(where,
                             "the packet from rank");  // a bad packet seen by an earlier call
}

/// The first call of a signature checks on the host that every rank made it, which a CUDA graph
/// capture cannot contain: refuse it there, with what to do instead.
inline void refuse_first_call_in_capture(cudaStream_t stream, const char* where) {
  if (capturing(stream, where))
    throw qsdp::error(
        std::string(where) +
        ": the first call with these arguments checks on the host that every rank made the "
        "same call, which cannot happen inside CUDA graph capture; make the call once "
        "before capturing it");
}

/// Throws when a device collective that cannot be grouped is called while a group is open on
/// `comm` (qsdp::group_start).
template <class Comm>
void refuse_in_device_group(Comm& comm, const char* where) {
  if (comm.state().group.open())
    throw qsdp::error(std::string(where) +
                      ": called while a group is open on this communicator (qsdp::group_start); "
                      "a group holds qsdp::all_gather and qsdp::reduce_scatter calls: make this "
                      "call after qsdp::group_end");
}

/// The exchanges of one call or group on a device communicator. Without overlap they are ordered
/// on the caller's stream. With it (the call has pieces, or the group segments, and the
/// communicator's exchanges may run on any stream: device_communicator's exchanges_on_any_stream)
/// they run on the communicator's second stream (exchange_lane), each after an event recorded
/// behind the encode that wrote its packets; wait() makes the caller's stream wait for the event
/// recorded behind the exchange, so the next encode runs while this exchange is on the wire.
template <class Comm>
class lane_exchanges {
 public:
  lane_exchanges(Comm& comm, cudaStream_t stream, bool overlap, const char* where)
      : comm_(comm), stream_(stream), where_(where), overlaps_(overlap && any_stream()) {}

  /// Whether exchanges go to the lane.
  bool overlaps() const { return overlaps_; }

  /// Runs exchange(stream) on the caller's stream or on the lane, which first waits for what the
  /// caller's stream has queued up to now and then marks the exchange's end for wait().
  template <class Exchange>
  exchange_ticket start(Exchange&& exchange) {
    if (!overlaps_) {
      exchange(stream_);
      return {};
    }
    const exchange_ticket t{next_ticket_++};
    const cudaEvent_t encoded = lane_event(2 * t.id), exchanged = lane_event(2 * t.id + 1);
    check(cudaEventRecord(encoded, stream_), "cudaEventRecord", where_);
    check(cudaStreamWaitEvent(lane_stream(), encoded, 0), "cudaStreamWaitEvent", where_);
    try {
      exchange(lane_stream());
    } catch (...) {  // join the lane back all the same: a capture must not end with it forked
      (void)cudaEventRecord(exchanged, lane_stream());
      (void)cudaStreamWaitEvent(stream_, exchanged, 0);
      throw;
    }
    check(cudaEventRecord(exchanged, lane_stream()), "cudaEventRecord", where_);
    return t;
  }
  void wait(exchange_ticket t) {
    if (overlaps_)
      check(cudaStreamWaitEvent(stream_, lane_event(2 * t.id + 1), 0), "cudaStreamWaitEvent",
            where_);
  }

 private:
  static constexpr bool any_stream() {
    if constexpr (requires { Comm::exchanges_on_any_stream; })
      return Comm::exchanges_on_any_stream;
    else
      return false;
  }
  exchange_lane& lane() { return comm_.state().lane; }
  cudaStream_t lane_stream() { return lane().stream(comm_.device(), where_); }
  cudaEvent_t lane_event(std::size_t i) { return lane().event(i, comm_.device(), where_); }

  Comm& comm_;
  cudaStream_t stream_;
  const char* where_;
  bool overlaps_;
  std::uint64_t next_ticket_ = 0;  // the exchanges started on the lane
};

}  // namespace qsdp::detail::cuda
