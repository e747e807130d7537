// SPDX-License-Identifier: Apache-2.0
//
// qsdp-bench --backend nccl (included by qsdp_bench_nccl_<type>.cu, one element type each, so that
// the three compile in parallel; qsdp_bench_nccl.cu checks for GPUs and picks the type): the same
// sweep as the host backends (bench/qsdp_bench.hpp) on device buffers, qsdp's device collectives
// against ncclAllGather / ncclReduceScatter / ncclAllReduce on the same NCCL communicator and
// stream.
//
// Ranks: under mpirun (and built with MPI), one process per GPU (the node-local rank picks the
// device; rank 0's ncclUniqueId is broadcast by main's MPI, so this file needs no MPI); otherwise
// one thread per GPU of this process (ncclCommInitAll over --ranks GPUs, default every visible
// one). Every call is followed by a stream synchronisation, so an iteration's time is the host's
// view of a finished collective, as for the host backends; qsdp's calls also check the codec's
// failure records (qsdp::synchronize_and_check).
//
// Only the widths 2, 4 and 8 are instantiated here: each (policy, width, type) adds device kernels
// for every architecture, and all of them would make this one file take most of CI's build time.
// Other widths are refused with a message naming the ones built.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <qsdp/collectives.hpp>
#include <qsdp/nccl.hpp>

#include "qsdp_bench.hpp"

namespace qsdp_bench {
// Internal to each including file (one element type each): no definition is shared across files.
namespace {

constexpr unsigned device_widths = (1u << 2) | (1u << 4) | (1u << 8);

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("qsdp-bench (nccl): ") + what + ": " +
                             cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

void nccl_ok(ncclResult_t r, ncclComm_t comm, const char* what) {
  if (r == ncclSuccess) return;
  std::string message = std::string("qsdp-bench (nccl): ") + what + ": " + ncclGetErrorString(r);
  const char* last = comm ? ncclGetLastError(comm) : nullptr;
  if (last && *last) message += std::string(" (") + last + ")";
  throw std::runtime_error(message);
}

template <class T>
ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>)
    return ncclFloat32;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return ncclBfloat16;
  else
    return ncclFloat16;
}

/// Device memory that grows only (cudaMalloc: the sweep's buffers live across many calls).
template <class T>
class device_buffer : qsdp::detail::no_copies {
 public:
  ~device_buffer() {
    if (ptr_) (void)cudaFree(ptr_);
  }
  T* get(std::size_t n) {
    if (n > capacity_) {
      if (ptr_) cuda_ok(cudaFree(ptr_), "cudaFree");
      ptr_ = nullptr;
      capacity_ = 0;
      cuda_ok(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<std::size_t>(n, 1) * sizeof(T)),
              ("cudaMalloc of " + std::to_string(n * sizeof(T)) + " bytes").c_str());
      capacity_ = n;
    }
    return ptr_;
  }
  T* data() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
  std::size_t capacity_ = 0;
};

/// One rank's sweep on `device` over `comm`; returns the rows (meaningful on rank 0).
template <class T, class Q>
std::vector<row> rank_sweep(const options& o, const Q& q, const std::string& policy,
                            ncclComm_t comm, int device) {
  cuda_ok(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  struct stream_guard {
    cudaStream_t s;
    ~stream_guard() { (void)cudaStreamDestroy(s); }
  } guard{stream};

  qsdp::nccl_communicator qcomm(comm);
  runner<T> r;
  r.rank = qcomm.rank();
  r.world = qcomm.size();
  device_buffer<T> input, result, exact;
  device_buffer<std::byte> token;
  device_buffer<double> doubles;
  std::size_t out_values = 0;
  auto sync = [&] {
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    qcomm.check_async_error();
  };

  r.barrier = [&] {
    std::byte* t = token.get(static_cast<std::size_t>(r.world) + 1);
    nccl_ok(ncclAllGather(t, t + 1, 1, ncclUint8, comm, stream), comm, "ncclAllGather (barrier)");
    sync();
  };
  r.gather = [&](const double* mine, double* all, std::size_t n) {
    double* d = doubles.get(n * (static_cast<std::size_t>(r.world) + 1));
    cuda_ok(cudaMemcpyAsync(d, mine, n * sizeof(double), cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync");
    nccl_ok(ncclAllGather(d, d + n, n, ncclFloat64, comm, stream), comm, "ncclAllGather (gather)");
    cuda_ok(cudaMemcpyAsync(all, d + n, n * static_cast<std::size_t>(r.world) * sizeof(double),
                            cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync");
    sync();
  };
  r.prepare = [&](const std::vector<T>& host_input, std::size_t in_count, std::size_t out_count) {
    cuda_ok(cudaMemcpyAsync(input.get(in_count), host_input.data(), in_count * sizeof(T),
                            cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync (input)");
    result.get(out_count);
    exact.get(out_count);
    out_values = out_count;
    sync();
  };
  const qsdp::call_options gate{.min_compressed_bytes = o.min_compressed,
                                .max_pieces = o.max_pieces};
  r.compressed = [&](std::size_t count) {
    switch (o.op) {
      case op_kind::all_gather:
        qsdp::all_gather(qcomm, q, input.data(), result.data(), count, stream, gate);
        break;
      case op_kind::reduce_scatter:
        qsdp::reduce_scatter(qcomm, q, input.data(), result.data(), count, qsdp::reduce_op::sum,
                             stream, gate);
        break;
      case op_kind::all_reduce:
        // In place, as ncclAllReduce is not here: the copy is part of the timed call, as on the
        // host.
        cuda_ok(cudaMemcpyAsync(result.data(), input.data(), count * sizeof(T),
                                cudaMemcpyDeviceToDevice, stream),
                "cudaMemcpyAsync (all_reduce input)");
        qsdp::all_reduce(qcomm, q, result.data(), count, qsdp::reduce_op::sum, stream, gate);
        break;
      case op_kind::delta_gather: throw std::logic_error("qsdp-bench: no delta_gather on NCCL");
    }
    qsdp::synchronize_and_check(stream);
    qcomm.check_async_error();
  };
  r.plain = [&](std::size_t count) {
    switch (o.op) {
      case op_kind::all_gather:
        nccl_ok(ncclAllGather(input.data(), exact.data(), count, nccl_type<T>(), comm, stream),
                comm, "ncclAllGather");
        break;
      case op_kind::reduce_scatter:
        nccl_ok(ncclReduceScatter(input.data(), exact.data(), count, nccl_type<T>(), ncclSum, comm,
                                  stream),
                comm, "ncclReduceScatter");
        break;
      case op_kind::all_reduce:
        nccl_ok(
            ncclAllReduce(input.data(), exact.data(), count, nccl_type<T>(), ncclSum, comm, stream),
            comm, "ncclAllReduce");
        break;
      case op_kind::delta_gather: throw std::logic_error("qsdp-bench: no delta_gather on NCCL");
    }
    sync();
  };
  r.fetch = [&](std::vector<T>& host_result, std::vector<T>& host_exact) {
    host_result.resize(out_values);
    host_exact.resize(out_values);
    cuda_ok(cudaMemcpyAsync(host_result.data(), result.data(), out_values * sizeof(T),
                            cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync (result)");
    cuda_ok(cudaMemcpyAsync(host_exact.data(), exact.data(), out_values * sizeof(T),
                            cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync (plain result)");
    sync();
  };
  return run_sweep(r, o, q, policy);
}

void print_devices(int ranks) {
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int nccl_version = 0;
  (void)ncclGetVersion(&nccl_version);
  std::printf("# %d rank(s) over NCCL %d; device 0: %s\n", ranks, nccl_version, prop.name);
}

/// One process, one thread per GPU. A rank that fails aborts every communicator, so the others
/// return from NCCL with an error instead of waiting for it forever.
template <class T, class Q>
void run_threads(const options& o, const Q& q, const std::string& policy, int devices) {
  const int ranks = o.ranks_given ? o.ranks : devices;
  if (ranks > devices)
    usage_error(
        "--ranks " + std::to_string(ranks) + ": this process sees " + std::to_string(devices) +
        " GPU(s); the threaded NCCL backend runs one rank per GPU (more ranks: run under mpirun)");
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(ranks));
  std::vector<int> ids(static_cast<std::size_t>(ranks));
  for (int d = 0; d < ranks; ++d) ids[static_cast<std::size_t>(d)] = d;
  nccl_ok(ncclCommInitAll(comms.data(), ranks, ids.data()), nullptr, "ncclCommInitAll");
  std::vector<std::string> failures(static_cast<std::size_t>(ranks));
  std::vector<std::vector<row>> rows(static_cast<std::size_t>(ranks));
  std::atomic<int> finished{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int d = 0; d < ranks; ++d)
    threads.emplace_back([&, d] {
      const auto k = static_cast<std::size_t>(d);
      try {
        rows[k] = rank_sweep<T>(o, q, policy, comms[k], d);
      } catch (const std::exception& e) {
        failures[k] = e.what();
        failed = true;
      }
      ++finished;
    });
  bool aborted = false;
  while (finished.load() < ranks) {
    if (failed.load() && !aborted) {
      for (ncclComm_t c : comms) (void)ncclCommAbort(c);
      aborted = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& t : threads) t.join();
  if (!aborted)
    for (ncclComm_t c : comms) (void)ncclCommDestroy(c);
  for (int d = 0; d < ranks; ++d)
    if (!failures[static_cast<std::size_t>(d)].empty())
      throw std::runtime_error("rank " + std::to_string(d) + ": " +
                               failures[static_cast<std::size_t>(d)]);
  print_devices(ranks);
  report(o, policy, 0, ranks, rows[0]);
}

/// One process per GPU (under mpirun): rank 0's ncclUniqueId goes to the others through `group`.
template <class T, class Q>
void run_processes(const options& o, const Q& q, const std::string& policy, int devices,
                   const process_group& group) {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const int device = (local ? std::atoi(local) : group.rank) % devices;
  ncclUniqueId id{};
  if (group.rank == 0) nccl_ok(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId");
  group.broadcast_from_0(&id, sizeof id);
  cuda_ok(cudaSetDevice(device), "cudaSetDevice");
  ncclComm_t comm = nullptr;
  nccl_ok(ncclCommInitRank(&comm, group.world, id, group.rank), nullptr, "ncclCommInitRank");
  std::vector<row> rows;
  try {
    rows = rank_sweep<T>(o, q, policy, comm, device);
  } catch (...) {
    (void)ncclCommAbort(comm);  // main() then ends the job with MPI_Abort
    throw;
  }
  (void)ncclCommDestroy(comm);
  if (group.rank == 0) print_devices(group.world);
  report(o, policy, group.rank, group.world, rows);
}

/// The sweep for one element type on `devices` GPUs (threads) or one per process (mpirun).
template <class T>
void run_typed(const options& o, const process_group& group, int devices) {
  dispatch_policy<device_widths, 0u, false>(o, [&](const auto& q, const std::string& name) {
    if (group.world > 1) return run_processes<T>(o, q, name, devices, group);
    run_threads<T>(o, q, name, devices);
  });
}

}  // namespace
}  // namespace qsdp_bench
