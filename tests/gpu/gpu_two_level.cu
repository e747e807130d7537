// SPDX-License-Identifier: Apache-2.0
// Two-level device collectives: among the ranks of run_local_cuda_nodes (one GPU, nodes of
// in-process ranks), and over a pair of one-rank NCCL communicators.
#include <thrust/device_vector.h>

#include <algorithm>
#include <stdexcept>

#include <qsdp/collectives.hpp>
#include <qsdp/cuda_local.hpp>
#if QSDP_TEST_NCCL
#include <qsdp/nccl.hpp>
#endif

#include "codec_helpers.cuh"
#include "gpu_support.hpp"

namespace gpu_test {

namespace {

template <class Pair, class Inside, class Across, class T>
void call_two_level(collective kind, Pair& pair, const qsdp::level_policies<Inside, Across>& q,
                    const T* send, T* recv, std::size_t count, qsdp::reduce_op op,
                    cudaStream_t stream, qsdp::call_options options) {
  switch (kind) {
    case collective::all_gather:
      qsdp::all_gather(pair, q, send, recv, count, stream, options);
      break;
    case collective::reduce_scatter:
      qsdp::reduce_scatter(pair, q, send, recv, count, op, stream, options);
      break;
    case collective::all_reduce:
      cuda_ok(cudaMemcpyAsync(recv, send, count * sizeof(T), cudaMemcpyDeviceToDevice, stream),
              "copy");  // in place: every call starts from the input
      qsdp::all_reduce(pair, q, recv, count, op, stream, options);
      break;
  }
}

std::size_t output_count(collective kind, std::size_t count, std::size_t world) {
  return kind == collective::all_gather ? count * world : count;
}

}  // namespace

template <class Inside, class Across, class T>
std::vector<std::vector<T>> device_two_level(
    collective kind, const qsdp::level_policies<Inside, Across>& q, int world, int node_size,
    std::size_t count, const std::vector<std::vector<T>>& inputs, qsdp::reduce_op op, int calls,
    qsdp::call_options options, std::vector<std::string>* errors, int odd_rank) {
  const auto w = static_cast<std::size_t>(world);
  std::vector<std::vector<T>> outputs(w);
  if (errors) errors->assign(w, "");
  qsdp::run_local_cuda_nodes(
      world, node_size,
      [&](qsdp::two_level<qsdp::cuda_local_communicator, qsdp::cuda_local_communicator>& pair) {
        const auto r = static_cast<std::size_t>(pair.rank());
        const cudaStream_t stream = pair.node().stream();
        const std::size_t mine = pair.rank() == odd_rank ? count + 1 : count;
        thrust::device_vector<T> send(inputs[r].begin(), inputs[r].end());
        send.resize(std::max(send.size(), kind == collective::reduce_scatter ? mine * w : mine));
        thrust::device_vector<T> recv(output_count(kind, mine, w));
        try {
          for (int c = 0; c < calls; ++c)
            call_two_level(kind, pair, q, thrust::raw_pointer_cast(send.data()),
                           thrust::raw_pointer_cast(recv.data()), mine, op, stream, options);
          cuda_ok(cudaStreamSynchronize(stream), "sync");
        } catch (const qsdp::error& e) {
          if (!errors) throw;
          (*errors)[r] = e.what();
          return;
        }
        outputs[r].resize(recv.size());
        thrust::copy(recv.begin(), recv.end(), outputs[r].begin());
      });
  return outputs;
}

template <class Inside, class Across, class T>
std::vector<std::vector<T>> nccl_two_level_one_rank(const qsdp::level_policies<Inside, Across>& q,
                                                    const std::vector<T>& x, bool graph_replay) {
#if QSDP_TEST_NCCL
  ncclComm_t raw[2] = {nullptr, nullptr};
  int devices[1] = {0};
  for (ncclComm_t& c : raw)
    if (ncclCommInitAll(&c, 1, devices) != ncclSuccess)
      throw std::runtime_error("ncclCommInitAll failed");
  struct closer {
    ncclComm_t (&c)[2];
    ~closer() {
      for (ncclComm_t one : c)
        if (one) (void)ncclCommDestroy(one);
    }
  } close{raw};
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreate(&stream), "stream");
  std::vector<std::vector<T>> out;
  {
    qsdp::nccl_communicator node(raw[0]), cross(raw[1]);
    qsdp::two_level pair(node, cross);
    thrust::device_vector<T> send(x.begin(), x.end()), recv(x.size());
    T* s = thrust::raw_pointer_cast(send.data());
    T* d = thrust::raw_pointer_cast(recv.data());
    for (collective kind :
         {collective::all_gather, collective::reduce_scatter, collective::all_reduce}) {
      call_two_level(kind, pair, q, s, d, x.size(), qsdp::reduce_op::sum, stream, {});
      if (graph_replay) {  // the first call agreed and sized the scratch: capture the same call
        cuda_ok(cudaStreamSynchronize(stream), "sync");
        cuda_ok(cudaMemsetAsync(d, 0, x.size() * sizeof(T), stream), "clear");
        captured_graph graph(stream, [&] {
          call_two_level(kind, pair, q, s, d, x.size(), qsdp::reduce_op::sum, stream, {});
        });
        graph.launch();
        cuda_ok(cudaStreamSynchronize(stream), "sync");
      }
      cuda_ok(cudaStreamSynchronize(stream), "sync");
      node.check_async_error();
      cross.check_async_error();
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

}  // namespace gpu_test

#define GPU_TEST_TWO_LEVEL_INSTANCES(Inside, Across, T)                                      \
  template std::vector<std::vector<T>> gpu_test::device_two_level<Inside, Across, T>(        \
      collective, const qsdp::level_policies<Inside, Across>&, int, int, std::size_t,        \
      const std::vector<std::vector<T>>&, qsdp::reduce_op, int, qsdp::call_options,          \
      std::vector<std::string>*, int);                                                       \
  template std::vector<std::vector<T>> gpu_test::nccl_two_level_one_rank<Inside, Across, T>( \
      const qsdp::level_policies<Inside, Across>&, const std::vector<T>&, bool);

using gpu_test::collective;
// The policy and type pairs of the flat tests (every new one compiles whole device pipelines).
GPU_TEST_TWO_LEVEL_INSTANCES(qsdp::stochastic<4>, qsdp::hadamard<qsdp::stochastic<4>>, float)
GPU_TEST_TWO_LEVEL_INSTANCES(qsdp::random_shift<8>, qsdp::stochastic<8>, __nv_bfloat16)
