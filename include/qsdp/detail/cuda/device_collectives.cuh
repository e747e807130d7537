// SPDX-License-Identifier: Apache-2.0
//
// The collectives on device buffers, over any qsdp::device_communicator (declared and documented in
// qsdp/collectives.hpp, which includes this file when nvcc compiles it). Same pipeline, same random streams and same packets as the host
// collectives; every step is ordered on the caller's stream and nothing waits on the GPU, except
// once per new call signature:
//
// * Agreement. The first call with a given signature (collective, policy, bits, bucket size,
//   element type, count, op, world) exchanges the 64-byte descriptors and compares them on the
//   host, so that ranks that called differently all throw the same qsdp::error instead of hanging
//   in NCCL. That costs one synchronisation; later calls with the same signature skip it and may be
//   captured in a CUDA graph. (Ranks that differ in calls whose signatures were each agreed before
//   are not caught here; docs/cuda.md, "Known limits".)
// * Every received packet's header is still checked, by the decoding kernel: a bad one turns its
//   values into NaN and is reported (naming the field and the rank) by the next collective on the
//   communicator or when run_local_cuda's rank returns.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../../codec.hpp"
#include "../../collectives.hpp"
#include "../../device_communicator.hpp"
#include "../codec/checks.hpp"
#include "../collectives/plan.hpp"
#include "../transport/cuda_runtime.hpp"
#include "device_codec.cuh"

namespace qsdp::detail::cuda {

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
  comm.state().failures.poll(where,
                             "the packet from rank");  // a bad packet seen by an earlier call
}

/// The descriptor agreement, once per call signature (see the file comment). `scratch` holds
/// world + 1 descriptors of device memory (plan_scratch's descriptor section).
template <class Comm>
void agree_once(Comm& comm, const call_descriptor& mine, std::byte* scratch, cudaStream_t stream,
                const char* where) {
  device_state& state = comm.state();
  if (state.agreed(&mine)) return;
  if (capturing(stream, where))
    throw qsdp::error(
        std::string(where) +
        ": the first call with these arguments checks on the host that every rank made the "
        "same call, which cannot happen inside CUDA graph capture; make the call once "
        "before capturing it");
  const auto world = static_cast<std::size_t>(comm.size());
  std::vector<std::byte> all(world * sizeof mine);
  check(cudaMemcpyAsync(scratch, &mine, sizeof mine, cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync", where);
  comm.all_gather_bytes(scratch, scratch + sizeof mine, sizeof mine, stream);
  check(cudaMemcpyAsync(all.data(), scratch + sizeof mine, all.size(), cudaMemcpyDeviceToHost,
                        stream),
        "cudaMemcpyAsync", where);
  // A communicator with a watchdog (nccl_communicator::synchronize) waits with it, so a peer that
  // died before this first call is an error after its timeout rather than a hang here.
  if constexpr (requires { comm.synchronize(stream); }) comm.synchronize(stream);
  else check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", where);
  check_descriptors(all.data(), comm.size(), where);
  state.remember(&mine);
}

/// all_gather's body: `packets` holds (world + 1) packets of device scratch.
template <class Comm, class Q, class T>
void all_gather_packets(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                        std::uint64_t call, std::byte* packets, cudaStream_t stream,
                        const char* where) {
  const int world = comm.size();
  const std::size_t packet_bytes = compressed_size<T>(q, count);
  std::byte* mine = packets;
  std::byte* gathered = packets + packet_bytes;
  launch_encode(q, send, count, mine,
                rng_key{seed_of(q), call, chunk_stream(comm.rank(), world, 0)}, stream, where);
  comm.all_gather_bytes(mine, gathered, packet_bytes, stream);
  const header_expectation want = expectation_for<T>(q, count);
  device_report* failure = comm.state().failures.device_record(where, describe_bad_header);
  for (int r = 0; r < world; ++r) {
    T* out = recv + static_cast<std::size_t>(r) * count;
    launch_decode(q, gathered + static_cast<std::size_t>(r) * packet_bytes, packet_bytes, 1, count,
                  want, static_cast<unsigned>(r), failure, store_sink<T>{out, aligned16(out)},
                  stream, where);
  }
}

/// reduce_scatter's body: `packets` holds 2 * world packets of device scratch.
template <class Comm, class Q, class T>
void reduce_scatter_packets(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                            reduce_op op, std::uint64_t call, std::byte* packets,
                            cudaStream_t stream, const char* where) {
  const int world = comm.size();
  const std::size_t packet_bytes = compressed_size<T>(q, count);
  std::byte* outgoing = packets;
  std::byte* incoming = packets + static_cast<std::size_t>(world) * packet_bytes;
  for (int chunk = 0; chunk < world; ++chunk)
    launch_encode(q, send + static_cast<std::size_t>(chunk) * count, count,
                  outgoing + static_cast<std::size_t>(chunk) * packet_bytes,
                  rng_key{seed_of(q), call, chunk_stream(comm.rank(), world, chunk)}, stream,
                  where);
  comm.all_to_all_bytes(outgoing, incoming, packet_bytes, stream);
  // One kernel reads every rank's packet for my chunk once, sums in fp32 in rank order (as the host
  // does) and writes the result once.
  launch_decode(
      q, incoming, packet_bytes, static_cast<unsigned>(world), count,
      expectation_for<T>(q, count), 0, comm.state().failures.device_record(where, describe_bad_header),
      reduce_sink<T>{recv, aligned16(recv), op == reduce_op::avg, static_cast<float>(world)},
      stream, where);
}

}  // namespace qsdp::detail::cuda

namespace qsdp {

template <device_communicator Comm, class Q, class T>
void all_gather(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count,
                cudaStream_t stream) {
  constexpr const char* where = "qsdp::all_gather (device)";
  detail::cuda::check_device_collective<Comm, Q, T>(comm, q, send, "send", recv, "recv", count,
                                                    stream, where);
  const auto world = static_cast<std::size_t>(comm.size());
  const std::uint64_t call = comm.next_call();
  const detail::scratch_layout l =
      detail::plan_scratch(detail::collective_kind::all_gather, memory_space::device, world, count,
                           sizeof(T), compressed_size<T>(q, count));
  std::byte* scratch = comm.state().workspace.get(l.total, stream, where);
  detail::cuda::agree_once(comm,
                           detail::describe_call<Q, T>(q, detail::collective_kind::all_gather,
                                                       reduce_op::sum, false, count, comm.size()),
                           scratch + l.descriptors, stream, where);
  detail::cuda::all_gather_packets(comm, q, send, recv, count, call, scratch + l.packets, stream,
                                   where);
}

template <device_communicator Comm, class Q, class T>
void reduce_scatter(Comm& comm, const Q& q, const T* send, T* recv, std::size_t count, reduce_op op,
                    cudaStream_t stream) {
  constexpr const char* where = "qsdp::reduce_scatter (device)";
  detail::cuda::check_device_collective<Comm, Q, T>(comm, q, send, "send", recv, "recv", count,
                                                    stream, where);
  detail::check_op(op, where);
  const auto world = static_cast<std::size_t>(comm.size());
  const std::uint64_t call = comm.next_call();
  const detail::scratch_layout l =
      detail::plan_scratch(detail::collective_kind::reduce_scatter, memory_space::device, world,
                           count, sizeof(T), compressed_size<T>(q, count));
  std::byte* scratch = comm.state().workspace.get(l.total, stream, where);
  detail::cuda::agree_once(comm,
                           detail::describe_call<Q, T>(q, detail::collective_kind::reduce_scatter,
                                                       op, true, count, comm.size()),
                           scratch + l.descriptors, stream, where);
  detail::cuda::reduce_scatter_packets(comm, q, send, recv, count, op, call, scratch + l.packets,
                                       stream, where);
}

template <device_communicator Comm, class Q, class T>
void all_reduce(Comm& comm, const Q& q, T* data, std::size_t count, reduce_op op,
                cudaStream_t stream) {
  constexpr const char* where = "qsdp::all_reduce (device)";
  detail::cuda::check_device_collective<Comm, Q, T>(comm, q, data, "data", data, "data", count,
                                                    stream, where);
  detail::check_op(op, where);
  const auto world = static_cast<std::size_t>(comm.size());
  const std::uint64_t scatter_call = comm.next_call();
  const std::uint64_t gather_call = comm.next_call();
  const std::size_t shard = (count + world - 1) / world;
  const std::size_t padded = shard * world;
  const detail::scratch_layout l =
      detail::plan_scratch(detail::collective_kind::all_reduce, memory_space::device, world, shard,
                           sizeof(T), compressed_size<T>(q, shard));
  std::byte* scratch = comm.state().workspace.get(l.total, stream, where);
  detail::cuda::agree_once(comm,
                           detail::describe_call<Q, T>(q, detail::collective_kind::all_reduce, op,
                                                       true, count, comm.size()),
                           scratch + l.descriptors, stream, where);
  T* full = reinterpret_cast<T*>(scratch + l.values);
  T* mine = reinterpret_cast<T*>(scratch + l.reduced);
  if (count)
    detail::cuda::check(
        cudaMemcpyAsync(full, data, count * sizeof(T), cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpyAsync", where);
  if (padded > count)  // all-zero bits are +0 in float, __half and __nv_bfloat16
    detail::cuda::check(cudaMemsetAsync(full + count, 0, (padded - count) * sizeof(T), stream),
                        "cudaMemsetAsync", where);
  detail::cuda::reduce_scatter_packets(comm, q, full, mine, shard, op, scatter_call,
                                       scratch + l.packets, stream, where);
  detail::cuda::all_gather_packets(comm, q, mine, full, shard, gather_call, scratch + l.packets,
                                   stream, where);
  if (count)
    detail::cuda::check(
        cudaMemcpyAsync(data, full, count * sizeof(T), cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpyAsync", where);
}

}  // namespace qsdp
