// SPDX-License-Identifier: Apache-2.0
//
// The collectives on device buffers, over any qsdp::device_communicator (declared and documented in
// qsdp/collectives.hpp, which includes this file when nvcc compiles it): the pipelines of
// detail/collectives/pipeline.hpp, the same as the host's, with the same random streams and the
// same packets; every step is ordered on the caller's stream and nothing waits on the GPU, except
// once per new call signature:
//
// * Agreement. The first call with a given signature (collective, policy, bits, bucket size,
//   element type, count, op, world, size gate, max_pieces) exchanges the 64-byte descriptors and
//   compares them on the host, so that ranks that called differently all throw the same qsdp::error
//   instead of hanging in NCCL. That costs one synchronisation; later calls with the same signature
//   skip it and may be captured in a CUDA graph. (Ranks that differ in calls whose signatures were
//   each agreed before are not caught here; docs/reference/cuda.md, "Known limits".)
// * Every received packet's header is still checked, by the decoding kernel: a bad one turns its
//   values into NaN and is reported (naming the field and the rank) by the next collective on the
//   communicator or when run_local_cuda's rank returns.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../../collective_types.hpp"
#include "../../device_codec.hpp"
#include "../../device_communicator.hpp"
#include "../codec/checks.hpp"
#include "../collectives/pipeline.hpp"
#include "../collectives/plan.hpp"
#include "../transport/cuda_runtime.hpp"
#include "device_call.cuh"
#include "device_codec.cuh"
#include "device_group.cuh"

namespace qsdp::detail::cuda {

/// The descriptor agreement, once per call signature (see the file comment). `scratch` holds
/// world + 1 descriptors of device memory (plan_scratch's descriptor section).
template <class Comm>
void agree_once(Comm& comm, const call_descriptor& mine, std::byte* scratch, cudaStream_t stream,
                const char* where) {
  device_state& state = comm.state();
  if (state.agreed.contains(&mine)) return;
  refuse_first_call_in_capture(stream, where);
  std::vector<std::byte> all(static_cast<std::size_t>(comm.size()) * sizeof mine);
  try {
    gather_to_host(comm, &mine, sizeof mine, scratch, all.data(), stream, where);
  } catch (const qsdp::timeout_error& e) {
    // NCCL offers no way to ask whether the caller has a group open: say what the likely cause is.
    throw qsdp::timeout_error(std::string(e.what()) +
                              " (the first call of each signature waits on the host for the ranks' "
                              "descriptors; over NCCL, a call made inside the caller's "
                              "ncclGroupStart/ncclGroupEnd ends here: NCCL defers the exchange "
                              "to ncclGroupEnd, which the caller cannot reach while the call "
                              "waits. Call qsdp's collectives outside NCCL groups)");
  }
  check_descriptors(all.data(), comm.size(), where);
  state.agreed.remember(&mine);
}

/// The collective pipeline's steps on device buffers (detail/collectives/pipeline.hpp): kernels and
/// the communicator's exchanges, all ordered on `stream`, for a call run_device_collective planned
/// and agreed on, in the scratch it took from the communicator's device workspace. Q is the policy
/// that runs: the caller's, or qsdp::identity for a call the size gate sends uncompressed.
template <class Comm, class Q, class T>
class device_steps {
 public:
  device_steps(Comm& comm, const Q& q, const collective_call& plan, reduce_op op,
               std::byte* scratch, cudaStream_t stream, const char* where)
      : comm_(comm),
        q_(q),
        op_(op),
        stream_(stream),
        where_(where),
        plan_(plan),
        scratch_(scratch),
        exchanges_(comm, stream, plan.pieces.count > 1, where) {
    call_counter_ = comm.state().workspace.call_counter(plan_.calls[0], stream, where);
  }

  int rank() const { return comm_.rank(); }
  int world() const { return comm_.size(); }
  const collective_call& plan() const { return plan_; }
  std::byte* scratch() const { return scratch_; }

  /// The kernels take the call index from the communicator's device counter (plus the piece's and
  /// the phase's offset from the call's first index), not from the host's plan: a CUDA graph that
  /// captured this call then draws fresh numbers at every replay.
  static constexpr std::size_t lead() { return exchange_lead(memory_space::device); }
  void encode(const T* src, std::size_t count, std::byte* packet, const rng_key& key) {
    const rng_key phase{key.seed, key.call - plan_.calls[0], key.stream};
    launch_encode(q_, src, count, packet, rng_source(phase, call_counter_), stream_, where_);
  }
  /// The exchanges (lane_exchanges): a call of one piece orders them on the caller's stream, a call
  /// in pieces on the communicator's second stream where it allows it, so that the next piece's
  /// encode runs while this one is on the wire.
  using ticket = exchange_ticket;
  ticket start_all_gather(const std::byte* send, std::byte* recv, std::size_t n) {
    return exchanges_.start([&](cudaStream_t on) { comm_.all_gather_bytes(send, recv, n, on); });
  }
  ticket start_all_to_all(const std::byte* send, std::byte* recv, std::size_t n) {
    return exchanges_.start([&](cudaStream_t on) { comm_.all_to_all_bytes(send, recv, n, on); });
  }
  void wait(ticket t) { exchanges_.wait(t); }
  void progress() {}  // the GPU and NCCL move on by themselves

  /// Rank r's packet to recv + r * stride; a bad header decodes to NaN and is reported, naming r,
  /// by the next call on the communicator.
  void decode_each(const std::byte* packets, std::size_t packet_bytes, std::size_t count, T* recv,
                   std::size_t stride) {
    for (int r = 0; r < world(); ++r) {
      T* out = recv + static_cast<std::size_t>(r) * stride;
      launch_decode(q_, packets + static_cast<std::size_t>(r) * packet_bytes, packet_bytes, 1,
                    count, expectation_for<T>(q_, count), static_cast<unsigned>(r), report(),
                    store_sink<T>{out, aligned16(out)}, stream_, where_);
    }
  }

  /// The world's packets in the block-scaled layout at recv + r * stride (the encoded all-gather),
  /// in one kernel; a bad header sets every rank's scales to NaN and is reported, naming the rank.
  void decode_each(const std::byte* packets, std::size_t packet_bytes, std::size_t count,
                   block_scaled_cursor<Q> recv, std::size_t stride) {
    const block_scaled_cursor<Q> next = recv + stride;
    launch_unpack_block_scaled(q_, packets, packet_bytes, static_cast<unsigned>(world()), count,
                               expectation_for<T>(q_, count), 0, report(), recv.elements,
                               static_cast<std::size_t>(next.elements - recv.elements), recv.scales,
                               static_cast<std::size_t>(next.scales - recv.scales), stream_,
                               where_);
  }

  /// One kernel reads every rank's packet once, sums in fp32 in rank order (as the host does) and
  /// writes the result once.
  void reduce(const std::byte* packets, std::size_t packet_bytes, std::size_t count, T* recv) {
    const reduce_sink<T> sink{recv, aligned16(recv), op_ == reduce_op::avg,
                              static_cast<float>(world())};
    launch_decode(q_, packets, packet_bytes, static_cast<unsigned>(world()), count,
                  expectation_for<T>(q_, count), 0, report(), sink, stream_, where_);
  }

  void copy(T* to, const T* from, std::size_t n) {
    if (n)
      check(cudaMemcpyAsync(to, from, n * sizeof(T), cudaMemcpyDeviceToDevice, stream_),
            "cudaMemcpyAsync", where_);
  }
  void zero(T* to, std::size_t n) {
    if (n) check(cudaMemsetAsync(to, 0, n * sizeof(T), stream_), "cudaMemsetAsync", where_);
  }
  /// Moves the device call counter past this call's indices, after the encodes that read it.
  void finish() { launch_advance_calls(call_counter_, plan_.call_indices, stream_, where_); }

 private:
  device_report* report() {
    return comm_.state().failures.device_record(where_, describe_bad_header);
  }

  Comm& comm_;
  const Q& q_;
  reduce_op op_;
  cudaStream_t stream_;
  const char* where_;
  const collective_call& plan_;
  std::byte* scratch_;
  std::uint64_t* call_counter_ = nullptr;
  lane_exchanges<Comm> exchanges_;
};

/// Every device collective: checks the arguments, plans the call (drawing its call indices), takes
/// its scratch, has the ranks agree on the call once per signature (the size gate's
/// min_compressed_bytes included, so all ranks gate alike), then runs the pipeline with the
/// caller's policy, or with qsdp::identity where the size gate sends the values uncompressed. On
/// the device the agreement is already folded away after a signature's first call, so the gate
/// only needs the identity pipeline, whose results equal the host's gated ones bit for bit.
/// stream_base: as run_host_collective's (a level of a two-level call).
template <class Comm, class Q, class T>
void run_device_collective(Comm& comm, const Q& q, collective_kind kind, reduce_op op, const T* a,
                           T* b, std::size_t count, call_options options, cudaStream_t stream,
                           const char* where, std::uint32_t stream_base = 0) {
  refuse_in_device_group(comm, where);
  const bool in_place = kind == collective_kind::all_reduce;
  check_device_collective<Comm, Q, T>(comm, q, a, in_place ? "data" : "send", b,
                                      in_place ? "data" : "recv", count, stream, where);
  if (kind != collective_kind::all_gather) check_op(op, where);
  check_max_pieces(options.max_pieces, where);
  const collective_call plan =
      plan_collective<Q, T>(comm, q, kind, op, count, options, stream_base);
  std::byte* const scratch = comm.state().workspace.get(plan.scratch.total, stream, where);
  agree_once(comm, plan.descriptor, scratch + plan.scratch.descriptors, stream, where);
  if (plan.uncompressed) {
    const identity raw{};
    device_steps<Comm, identity, T> steps(comm, raw, plan, op, scratch, stream, where);
    run_collective(steps, raw, a, b, count);
  } else {
    device_steps<Comm, Q, T> steps(comm, q, plan, op, scratch, stream, where);
    run_collective(steps, q, a, b, count);
  }
  comm.state().counters.count(plan.uncompressed, count * sizeof(T));
}

/// The device encoded all-gather: run_device_collective's checks, plan and agreement for an
/// all_gather that always encodes, each rank's packets copied to the block-scaled layout.
template <class Comm, class Q, class T>
void run_device_gather_encoded(Comm& comm, const Q& q, const T* send, block_scaled_buffers recv,
                               std::size_t count, call_options options, cudaStream_t stream,
                               const char* where) {
  refuse_in_device_group(comm, where);
  check_device_collective<Comm, Q, T>(comm, q, send, "send", recv.elements, "recv.elements", count,
                                      stream, where);
  check_buffers(send, "send", recv.scales, "recv.scales", count, where);
  if (count > 0) require_device_pointer(recv.scales, "recv.scales", comm.device(), where);
  check_max_pieces(options.max_pieces, where);
  check_block_scaled_count(q, count, where);
  check_encoded_gate(count, sizeof(T), options, where);
  const collective_call plan =
      plan_collective<Q, T>(comm, q, collective_kind::all_gather, reduce_op::sum, count, options);
  std::byte* const scratch = comm.state().workspace.get(plan.scratch.total, stream, where);
  agree_once(comm, plan.descriptor, scratch + plan.scratch.descriptors, stream, where);
  device_steps<Comm, Q, T> steps(comm, q, plan, reduce_op::sum, scratch, stream, where);
  gather_packets(steps, q, send, block_scaled_cursor<Q>{recv.elements, recv.scales, q.bucket_size},
                 count, plan.calls[0], scratch + plan.scratch.packets);
  steps.finish();
  comm.state().counters.count(false, count * sizeof(T));
}

}  // namespace qsdp::detail::cuda

namespace qsdp {

template <device_communicator Comm, class Q, class T>
void all_gather_encoded(Comm& comm, const Q& q, const T* send, block_scaled_buffers recv,
                        std::size_t count, cudaStream_t stream, call_options options) {
  static_assert(detail::block_scaled_layout_policy<Q>,
                "qsdp::all_gather_encoded: Q must be an MX policy (mxfp8, mxfp6, mxfp4; not "
                "rotated, not nvfp4, whose tensor scale is per packet)");
  detail::cuda::run_device_gather_encoded(comm, q, send, recv, count, options, stream,
                                          "qsdp::all_gather_encoded (device)");
}

template <device_communicator Comm, class Q, class T>
void all_gather(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                cudaStream_t stream, call_options options) {
  constexpr const char* where = "qsdp::all_gather (device)";
  if (comm.state().group.open()) {
    detail::cuda::record_in_device_group(comm, q, detail::collective_kind::all_gather,
                                         reduce_op::sum, send, recv, count, options, stream, where);
    return;
  }
  detail::cuda::run_device_collective(comm, q, detail::collective_kind::all_gather, reduce_op::sum,
                                      send, recv, count, options, stream, where);
}

template <device_communicator Comm, class Q, class T>
void reduce_scatter(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count, reduce_op op,
                    cudaStream_t stream, call_options options) {
  constexpr const char* where = "qsdp::reduce_scatter (device)";
  if (comm.state().group.open()) {
    detail::cuda::record_in_device_group(comm, q, detail::collective_kind::reduce_scatter, op, send,
                                         recv, count, options, stream, where);
    return;
  }
  detail::cuda::run_device_collective(comm, q, detail::collective_kind::reduce_scatter, op, send,
                                      recv, count, options, stream, where);
}

template <device_communicator Comm, class Q, class T>
void all_reduce(Comm& comm, const Q& q, T* data, std::size_t count, reduce_op op,
                cudaStream_t stream, call_options options) {
  detail::cuda::run_device_collective(comm, q, detail::collective_kind::all_reduce, op,
                                      static_cast<const T*>(data), data, count, options, stream,
                                      "qsdp::all_reduce (device)");
}

}  // namespace qsdp
