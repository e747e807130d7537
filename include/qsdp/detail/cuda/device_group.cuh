// SPDX-License-Identifier: Apache-2.0
//
// Groups of device collectives (qsdp::group_start / qsdp::group_end on a device communicator,
// declared and documented in qsdp/collectives.hpp): the host groups' plan and run
// (detail/collectives/group.hpp's run_group) with kernels and the communicator's exchanges ordered
// on the members' one stream. A member is planned when it is recorded (its call indices drawn, as
// a single call's), encodes its pieces with the random streams of the single call, and decodes or
// sums its packets from the group's blocks with the single call's kernels. The group's 64-byte
// descriptor is agreed on once per group signature (the members' descriptors, in order): later
// groups of the same calls cost no host synchronisation and may be captured in a CUDA graph, as
// single device calls.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../../collective_types.hpp"
#include "../../device_codec.hpp"
#include "../../device_communicator.hpp"
#include "../collectives/group.hpp"
#include "../collectives/plan.hpp"
#include "../transport/cuda_runtime.hpp"
#include "device_call.cuh"
#include "device_codec.cuh"

namespace qsdp::detail::cuda {

/// An all_gather or reduce_scatter of device buffers recorded in a group: the single call's plan,
/// packets and kernels, at its place in the group's blocks.
template <class Comm, class Q, class T>
class device_group_member final : public planned_group_member<Comm, Q, T> {
  using base = planned_group_member<Comm, Q, T>;
  using base::comm_, base::q_, base::op_, base::recv_, base::count_, base::where_, base::plan_,
      base::scatters;

 public:
  device_group_member(Comm& comm, const Q& q, collective_kind kind, reduce_op op, const T* send,
                      T* recv, std::size_t count, const call_options& options, cudaStream_t stream,
                      const char* where)
      : base(comm, q, kind, op, send, recv, count, options, where), stream_(stream) {}

  std::size_t accumulator_floats(bool) const override { return 0; }  // sums stay in registers

  /// The kernels draw their call index from the communicator's device counter, as a single
  /// call's (device_steps::encode), and move it past the member's indices after its encodes.
  void encode(std::byte* blocks, std::size_t stride, std::size_t offset, bool gated) override {
    std::uint64_t* const counter =
        comm_.state().workspace.call_counter(plan_.calls[0], stream_, where_);
    for (std::size_t chunk = 0; chunk < this->chunks(); ++chunk) {
      std::byte* out = blocks + chunk * stride + offset;
      const T* src = this->chunk_values(chunk);
      const std::uint32_t stream = this->chunk_random_stream(chunk);
      if (gated) {
        launch_encode(identity{}, src, count_, out, rng_source(rng_key{0, 0, stream}), stream_,
                      where_);
        continue;
      }
      for (std::size_t p = 0; p < plan_.pieces.count; ++p) {
        const std::size_t n = plan_.pieces.values_of(p, count_);
        launch_encode(q_, src + p * plan_.pieces.values, n, out,
                      rng_source(rng_key{seed_of(q_), p, stream}, counter), stream_, where_);
        out += layout_for<Q, T>(q_, n).total;
      }
    }
    launch_advance_calls(counter, plan_.call_indices, stream_, where_);
  }

  void finish(const std::byte* blocks, std::size_t stride, std::size_t offset, bool gated,
              float*) override {
    if (gated)
      finish_pieces(identity{}, piece_plan{count_, 1}, blocks + offset, stride);
    else
      finish_pieces(q_, plan_.pieces, blocks + offset, stride);
  }

 private:
  /// Rank r's packet of piece p lies at packets + r * stride: the kernels take the stride where a
  /// single call passes its packet size.
  template <class P>
  void finish_pieces(const P& q, const piece_plan& pieces, const std::byte* packets,
                     std::size_t stride) {
    const int world = comm_.size();
    device_report* const report = comm_.state().failures.device_record(where_, describe_bad_header);
    for (std::size_t p = 0; p < pieces.count; ++p) {
      const std::size_t n = pieces.values_of(p, count_);
      T* const out = recv_ + p * pieces.values;
      if (scatters()) {
        const reduce_sink<T> sink{out, aligned16(out), op_ == reduce_op::avg,
                                  static_cast<float>(world)};
        launch_decode(q, packets, stride, static_cast<unsigned>(world), n, expectation_for<T>(q, n),
                      0, report, sink, stream_, where_);
      } else {
        for (int r = 0; r < world; ++r) {
          T* const to = out + static_cast<std::size_t>(r) * count_;
          launch_decode(q, packets + static_cast<std::size_t>(r) * stride, stride, 1, n,
                        expectation_for<T>(q, n), static_cast<unsigned>(r), report,
                        store_sink<T>{to, aligned16(to)}, stream_, where_);
        }
      }
      packets += layout_for<P, T>(q, n).total;
    }
  }

  cudaStream_t stream_;
};

/// Records a device call made while a group is open on `comm`, after the checks of a single call:
/// the group's calls share one stream and one size gate.
template <class Comm, class Q, class T>
void record_in_device_group(Comm& comm, const Q& q, collective_kind kind, reduce_op op,
                            const T* send, T* recv, std::size_t count, const call_options& options,
                            cudaStream_t stream, const char* where) {
  check_device_collective<Comm, Q, T>(comm, q, send, "send", recv, "recv", count, stream, where);
  if (kind != collective_kind::all_gather) check_op(op, where);
  check_max_pieces(options.max_pieces, where);
  group_state& group = comm.state().group;
  if (!group.members.empty() && group.stream != static_cast<void*>(stream))
    throw qsdp::error(std::string(where) + " in a group: the stream is " + address(stream) +
                      ", the group's first call's " +
                      address(static_cast<cudaStream_t>(group.stream)) +
                      "; a group's calls are ordered on one stream");
  check_group_gate(group, options, where);
  group.members.push_back(std::make_unique<device_group_member<Comm, Q, T>>(
      comm, q, kind, op, send, recv, count, options, stream, where));
  group.stream = static_cast<void*>(stream);
}

/// run_group's transport on a device communicator (detail/collectives/group.hpp): scratch from the
/// communicator's device workspace, exchanges on the group's stream or, in segments, on the
/// communicator's second stream (lane_exchanges), and the agreement once per group signature.
template <class Comm>
class device_group_transport {
 public:
  device_group_transport(Comm& comm, cudaStream_t stream, bool segments)
      : comm_(comm), stream_(stream), exchanges_(comm, stream, segments, group_end_where) {}

  /// Segments only where the exchanges may leave the caller's stream: on it they would run one
  /// after another anyway.
  bool overlaps() const { return exchanges_.overlaps(); }
  int world() const { return comm_.size(); }

  /// Bare blocks: the signature was agreed on, and the kernels check the packet headers.
  static constexpr std::size_t lead() { return 0; }
  void agree(const std::vector<std::unique_ptr<group_member>>& members) {
    const group_descriptor mine = describe_group(members, comm_.size());
    device_state& state = comm_.state();
    if (state.agreed.contains(&mine)) return;
    refuse_first_call_in_capture(stream_, group_end_where);
    device_gather gather(stream_, &state.workspace, group_end_where);
    try {
      agree_on_group(members, comm_.size(),
                     [&](const void* bytes, std::size_t n) { return gather(comm_, bytes, n); });
    } catch (const qsdp::timeout_error& e) {
      throw qsdp::timeout_error(std::string(e.what()) +
                                " (a group's first run waits on the host for the ranks' group "
                                "descriptors; over NCCL, a qsdp::group_end inside the caller's "
                                "ncclGroupStart/ncclGroupEnd ends here: call it outside NCCL "
                                "groups)");
    }
    state.agreed.remember(&mine);
  }
  std::byte* scratch(std::size_t bytes) {
    return comm_.state().workspace.get(bytes, stream_, group_end_where);
  }
  void replicate(std::byte* blocks, std::size_t stride, std::size_t offset, std::size_t n) {
    if (n == 0) return;
    for (std::size_t peer = 1; peer < static_cast<std::size_t>(comm_.size()); ++peer)
      check(cudaMemcpyAsync(blocks + peer * stride + offset, blocks + offset, n,
                            cudaMemcpyDeviceToDevice, stream_),
            "cudaMemcpyAsync", group_end_where);
  }
  exchange_ticket start(bool scatters, const std::byte* out, std::byte* in, std::size_t block,
                        bool) {
    return exchanges_.start([&](cudaStream_t on) {
      if (scatters)
        comm_.all_to_all_bytes(out, in, block, on);
      else
        comm_.all_gather_bytes(out, in, block, on);
    });
  }
  void wait(exchange_ticket ticket, bool) { exchanges_.wait(ticket); }
  void count(bool gated, std::size_t bytes) { comm_.state().counters.count(gated, bytes); }

 private:
  Comm& comm_;
  cudaStream_t stream_;
  lane_exchanges<Comm> exchanges_;
};

}  // namespace qsdp::detail::cuda

namespace qsdp {

template <device_communicator Comm>
void group_start(Comm& comm) {
  detail::open_group(comm.state().group);
}

template <device_communicator Comm>
void group_end(Comm& comm) {
  detail::group_state& group = comm.state().group;
  const auto stream = static_cast<cudaStream_t>(group.stream);
  std::vector<std::unique_ptr<detail::group_member>> members = detail::close_group(group);
  if (group.open()) return;  // an inner group: the outermost one runs
  group.stream = nullptr;
  comm.state().failures.poll(detail::group_end_where, "the packet from rank");
  // An empty group has no stream of its own: its agreement (once) runs on a stream of the
  // communicator's device (detail::cuda::device_gather).
  detail::cuda::device_group_transport<Comm> transport(comm, stream, members.size() > 1);
  detail::run_group(transport, std::move(members));
}

}  // namespace qsdp
