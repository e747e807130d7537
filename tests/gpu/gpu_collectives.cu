// SPDX-License-Identifier: Apache-2.0
// Device collectives among the ranks of run_local_cuda (one GPU), and a one-rank NCCL communicator.
#include <thrust/device_vector.h>

#include <cstring>
#include <mutex>
#include <stdexcept>

#include <qsdp/collectives.hpp>
#include <qsdp/cuda_local.hpp>
#if QSDP_TEST_NCCL
#include <qsdp/nccl.hpp>
#endif

#include "codec_helpers.cuh"
#include "gpu_support.hpp"

namespace gpu_test {

bool device_present() { return qsdp::detail::cuda::device_available(); }

template <class Comm, class Q, class T>
void call(collective kind, Comm& comm, const Q& q, T* send, T* recv, std::size_t count,
          qsdp::reduce_op op, cudaStream_t stream, qsdp::call_options options = {}) {
  switch (kind) {
    case collective::all_gather:
      qsdp::all_gather(comm, q, send, recv, count, stream, options);
      break;
    case collective::reduce_scatter:
      qsdp::reduce_scatter(comm, q, send, recv, count, op, stream, options);
      break;
    case collective::all_reduce: qsdp::all_reduce(comm, q, recv, count, op, stream, options); break;
  }
}

template <class Q, class T>
std::vector<std::vector<T>> device_collective(collective kind, const Q& q, int world,
                                              std::size_t count,
                                              const std::vector<std::vector<T>>& inputs,
                                              qsdp::reduce_op op, int calls, std::size_t* growths,
                                              qsdp::call_options options) {
  const auto w = static_cast<std::size_t>(world);
  const std::size_t in_count = kind == collective::reduce_scatter ? count * w : count;
  const std::size_t out_count = kind == collective::all_gather ? count * w : count;
  std::vector<std::vector<T>> outputs(w);
  qsdp::run_local_cuda(world, [&](qsdp::cuda_local_communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    thrust::device_vector<T> send(inputs[r].begin(), inputs[r].end());
    thrust::device_vector<T> recv(out_count);
    T* s = thrust::raw_pointer_cast(send.data());
    T* d = thrust::raw_pointer_cast(recv.data());
    (void)in_count;
    auto one_call = [&] {
      if (kind == collective::all_reduce)  // in place: start from the input every time
        cuda_ok(cudaMemcpyAsync(d, s, count * sizeof(T), cudaMemcpyDeviceToDevice, comm.stream()),
                "copy");
      call(kind, comm, q, s, d, count, op, comm.stream(), options);
    };
    for (int c = 0; c < calls; ++c) one_call();
    cuda_ok(cudaStreamSynchronize(comm.stream()), "sync");
    if (growths && r == 0) *growths = comm.state().workspace.growths();
    outputs[r].resize(out_count);
    thrust::copy(recv.begin(), recv.end(), outputs[r].begin());
  });
  return outputs;
}

template <class Q, class T>
std::vector<std::vector<std::vector<T>>> device_delta_gather(
    const Q& q, int world, std::size_t count,
    const std::vector<std::vector<std::vector<T>>>& shards, int reset_alone,
    std::vector<std::string>* errors) {
  const auto w = static_cast<std::size_t>(world);
  std::vector<std::vector<std::vector<T>>> outputs(shards.size(), std::vector<std::vector<T>>(w));
  if (errors) errors->assign(w, "");
  qsdp::run_local_cuda(world, [&](qsdp::cuda_local_communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    qsdp::delta_gather<T> gather(count, world);
    thrust::device_vector<T> shard(count), full(count * w);
    for (std::size_t c = 0; c < shards.size(); ++c) {
      if (reset_alone >= 0 && c + 1 == shards.size() && comm.rank() == reset_alone) gather.reset();
      thrust::copy(shards[c][r].begin(), shards[c][r].end(), shard.begin());
      gather.all_gather(comm, q, thrust::raw_pointer_cast(shard.data()),
                        thrust::raw_pointer_cast(full.data()), comm.stream());
      cuda_ok(cudaStreamSynchronize(comm.stream()), "sync");
      outputs[c][r].resize(count * w);
      thrust::copy(full.begin(), full.end(), outputs[c][r].begin());
    }
    if (reset_alone >= 0) {  // the mismatch the last call's kernel found is thrown now
      try {
        gather.all_gather(comm, q, thrust::raw_pointer_cast(shard.data()),
                          thrust::raw_pointer_cast(full.data()), comm.stream());
        cuda_ok(cudaStreamSynchronize(comm.stream()), "sync");
      } catch (const qsdp::error& e) {
        if (errors) (*errors)[r] = e.what();
      }
    }
  });
  return outputs;
}

template <class Q, class T>
std::vector<std::pair<std::vector<std::byte>, std::vector<std::uint8_t>>> device_gather_encoded(
    const Q& q, int world, std::size_t count, const std::vector<std::vector<T>>& inputs) {
  const auto w = static_cast<std::size_t>(world);
  std::vector<std::pair<std::vector<std::byte>, std::vector<std::uint8_t>>> outputs(w);
  const std::size_t element_bytes = qsdp::block_scaled_element_bytes(q, count * w);
  const std::size_t scale_bytes = count * w / q.bucket_size;
  qsdp::run_local_cuda(world, [&](qsdp::cuda_local_communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    thrust::device_vector<T> send(inputs[r].begin(), inputs[r].end());
    thrust::device_vector<unsigned char> elements(element_bytes), scales(scale_bytes);
    qsdp::all_gather_encoded(
        comm, q, thrust::raw_pointer_cast(send.data()),
        {reinterpret_cast<std::byte*>(thrust::raw_pointer_cast(elements.data())),
         thrust::raw_pointer_cast(scales.data())},
        count, comm.stream());
    cuda_ok(cudaStreamSynchronize(comm.stream()), "sync");
    std::vector<unsigned char> e(element_bytes);
    outputs[r].second.resize(scale_bytes);
    thrust::copy(elements.begin(), elements.end(), e.begin());
    thrust::copy(scales.begin(), scales.end(), outputs[r].second.begin());
    outputs[r].first.resize(element_bytes);
    if (element_bytes) std::memcpy(outputs[r].first.data(), e.data(), element_bytes);
  });
  return outputs;
}

bool nccl_built() { return QSDP_TEST_NCCL != 0; }

template <class Q, class T>
std::vector<std::vector<T>> nccl_one_rank(const Q& q, const std::vector<T>& x, bool graph_replay) {
#if QSDP_TEST_NCCL
  ncclComm_t raw = nullptr;
  int devices[1] = {0};
  if (ncclCommInitAll(&raw, 1, devices) != ncclSuccess)
    throw std::runtime_error("ncclCommInitAll failed");
  struct closer {
    ncclComm_t c;
    ~closer() { (void)ncclCommDestroy(c); }
  } close{raw};
  qsdp::nccl_communicator comm(raw);
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreate(&stream), "stream");
  std::vector<std::vector<T>> out;
  {
    thrust::device_vector<T> send(x.begin(), x.end()), recv(x.size());
    T* s = thrust::raw_pointer_cast(send.data());
    T* d = thrust::raw_pointer_cast(recv.data());
    for (collective kind :
         {collective::all_gather, collective::reduce_scatter, collective::all_reduce}) {
      if (kind == collective::all_reduce)
        cuda_ok(cudaMemcpyAsync(d, s, x.size() * sizeof(T), cudaMemcpyDeviceToDevice, stream),
                "copy");
      call(kind, comm, q, s, d, x.size(), qsdp::reduce_op::sum, stream);
      if (graph_replay) {  // the first call agreed and sized the scratch; capture the same call
                           // again
        cuda_ok(cudaStreamSynchronize(stream), "sync");
        cuda_ok(cudaMemsetAsync(d, 0, x.size() * sizeof(T), stream), "clear");
        if (kind == collective::all_reduce)
          cuda_ok(cudaMemcpyAsync(d, s, x.size() * sizeof(T), cudaMemcpyDeviceToDevice, stream),
                  "copy");
        captured_graph graph(
            stream, [&] { call(kind, comm, q, s, d, x.size(), qsdp::reduce_op::sum, stream); });
        graph.launch();
        cuda_ok(cudaStreamSynchronize(stream), "sync");
      }
      cuda_ok(cudaStreamSynchronize(stream), "sync");
      comm.check_async_error();
      out.emplace_back(x.size());
      thrust::copy(recv.begin(), recv.end(), out.back().begin());
    }
  }
  (void)cudaStreamDestroy(stream);
  return out;
#else
  (void)q;
  (void)x;
  (void)graph_replay;
  throw std::runtime_error("NCCL was not found when the tests were built");
#endif
}

template <class Q, class T>
std::vector<std::vector<T>> nccl_graph_replays(collective kind, const Q& q, const std::vector<T>& x,
                                               int replays) {
#if QSDP_TEST_NCCL
  ncclComm_t raw = nullptr;
  int devices[1] = {0};
  if (ncclCommInitAll(&raw, 1, devices) != ncclSuccess)
    throw std::runtime_error("ncclCommInitAll failed");
  struct closer {
    ncclComm_t c;
    ~closer() { (void)ncclCommDestroy(c); }
  } close{raw};
  std::vector<std::vector<T>> out;
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreate(&stream), "stream");
  {
    qsdp::nccl_communicator comm(raw);
    thrust::device_vector<T> send(x.begin(), x.end()), recv(x.size());
    T* s = thrust::raw_pointer_cast(send.data());
    T* d = thrust::raw_pointer_cast(recv.data());
    auto fetch = [&] {
      cuda_ok(cudaStreamSynchronize(stream), "sync");
      comm.check_async_error();
      out.emplace_back(x.size());
      thrust::copy(recv.begin(), recv.end(), out.back().begin());
    };
    // all_reduce works in place: every call (and every replay) starts from x.
    auto restart = [&] {
      if (kind == collective::all_reduce)
        cuda_ok(cudaMemcpyAsync(d, s, x.size() * sizeof(T), cudaMemcpyDeviceToDevice, stream),
                "copy");
    };
    restart();
    call(kind, comm, q, s, d, x.size(), qsdp::reduce_op::sum, stream);
    fetch();
    {
      captured_graph graph(stream, [&] {
        restart();
        call(kind, comm, q, s, d, x.size(), qsdp::reduce_op::sum, stream);
      });
      for (int r = 0; r < replays; ++r) {
        graph.launch();
        fetch();
      }
    }
    restart();
    call(kind, comm, q, s, d, x.size(), qsdp::reduce_op::sum, stream);
    fetch();
  }
  (void)cudaStreamDestroy(stream);
  return out;
#else
  (void)kind;
  (void)q;
  (void)x;
  (void)replays;
  throw std::runtime_error("NCCL was not found when the tests were built");
#endif
}

}  // namespace gpu_test

#define GPU_TEST_COLLECTIVE_INSTANCES(Q, T)                                                        \
  template std::vector<std::vector<T>> gpu_test::device_collective<Q, T>(                          \
      collective, const Q&, int, std::size_t, const std::vector<std::vector<T>>&, qsdp::reduce_op, \
      int, std::size_t*, qsdp::call_options);                                                      \
  template std::vector<std::vector<T>> gpu_test::nccl_one_rank<Q, T>(const Q&,                     \
                                                                     const std::vector<T>&, bool); \
  template std::vector<std::vector<T>> gpu_test::nccl_graph_replays<Q, T>(                         \
      collective, const Q&, const std::vector<T>&, int);                                           \
  template std::vector<std::vector<std::vector<T>>> gpu_test::device_delta_gather<Q, T>(           \
      const Q&, int, std::size_t, const std::vector<std::vector<std::vector<T>>>&, int,            \
      std::vector<std::string>*);

using gpu_test::collective;
GPU_TEST_COLLECTIVE_INSTANCES(qsdp::random_shift<8>, __nv_bfloat16)
GPU_TEST_COLLECTIVE_INSTANCES(qsdp::stochastic<8>, __nv_bfloat16)
GPU_TEST_COLLECTIVE_INSTANCES(qsdp::stochastic<4>, float)
GPU_TEST_COLLECTIVE_INSTANCES(qsdp::uniform<2>, __half)
GPU_TEST_COLLECTIVE_INSTANCES(qsdp::symmetric<8>, float)
GPU_TEST_COLLECTIVE_INSTANCES(qsdp::identity, float)
GPU_TEST_COLLECTIVE_INSTANCES(qsdp::hadamard<qsdp::stochastic<4>>, float)

#define GPU_TEST_ENCODED_INSTANCES(Q, T)                                             \
  template std::vector<std::pair<std::vector<std::byte>, std::vector<std::uint8_t>>> \
  gpu_test::device_gather_encoded<Q, T>(const Q&, int, std::size_t,                  \
                                        const std::vector<std::vector<T>>&);
GPU_TEST_ENCODED_INSTANCES(qsdp::mxfp8<>, float)
GPU_TEST_ENCODED_INSTANCES(qsdp::mxfp6<qsdp::e3m2>, __nv_bfloat16)
GPU_TEST_ENCODED_INSTANCES(qsdp::mxfp4<qsdp::rounding::stochastic>, float)
