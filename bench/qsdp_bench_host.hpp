// SPDX-License-Identifier: Apache-2.0
//
// qsdp-bench's host backends (local, mpi) and the model: what main runs for --backend local and
// mpi, for one element type. Each element type is instantiated in its own translation unit
// (qsdp_bench_host_<type>.cpp): the sweep of every policy and width is the slowest code of the
// build to compile, and three files compile side by side.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <qsdp/collectives.hpp>
#if QSDP_BENCH_MPI
#include <mpi.h>

#include <qsdp/mpi.hpp>
#endif

#include "qsdp_bench.hpp"
#include "qsdp_bench_many.hpp"

namespace qsdp_bench::host {

// Every width 1..8 (random_shift: 2..8); qsdp::hadamard over 2, 4 and 8 bits (the error table's
// widths: each rotated policy doubles the sweep's compile time).
inline constexpr unsigned all_widths = 0x1FEu;
inline constexpr unsigned rotated_widths = 0x114u;

/// The compressed call of policy q on a host communicator (delta_gather: through `delta`), under
/// the size gate --min-compressed (the identity calls that stand in for a plain exchange too).
template <class T, class Q, class Comm>
void collective(Comm& comm, const Q& q, op_kind op, const T* send, T* recv, std::size_t count,
                qsdp::call_options gate, qsdp::delta_gather<T>* delta = nullptr) {
  switch (op) {
    case op_kind::all_gather: qsdp::all_gather(comm, q, send, recv, count, gate); break;
    case op_kind::delta_gather:
      if constexpr (qsdp::detail::is_identity<Q>)
        qsdp::all_gather(comm, q, send, recv, count, gate);  // the plain exchange
      else
        delta->all_gather(comm, q, send, recv);
      break;
    case op_kind::reduce_scatter:
      qsdp::reduce_scatter(comm, q, send, recv, count, qsdp::reduce_op::sum, gate);
      break;
    case op_kind::all_reduce:
      std::memcpy(static_cast<void*>(recv), send, count * sizeof(T));
      qsdp::all_reduce(comm, q, recv, count, qsdp::reduce_op::sum, gate);
      break;
  }
}

template <class T, class Comm>
void bind_common(runner<T>& r, Comm& comm) {
  r.rank = comm.rank();
  r.world = comm.size();
  r.barrier = [&comm] {
    const std::byte token{1};
    std::vector<std::byte> sink(static_cast<std::size_t>(comm.size()));
    comm.all_gather_bytes(&token, sink.data(), 1);
  };
  r.gather = [&comm](const double* mine, double* all, std::size_t n) {
    comm.all_gather_bytes(reinterpret_cast<const std::byte*>(mine),
                          reinterpret_cast<std::byte*>(all), n * sizeof(double));
  };
}

/// Host buffers of one rank, and the runner's hooks over them: `call(send, recv, count)` for the
/// compressed and the plain exchange.
template <class T>
struct host_buffers {
  std::vector<T> input, result, exact;
};

/// --op delta_gather: one qsdp::delta_gather per size, and weights that drift by 0.5 % of their
/// spread (0.02) per call, in a float master copy (so bf16 and half weights drift too).
template <class T>
struct drifting_weights {
  std::unique_ptr<qsdp::delta_gather<T>> gather;
  std::vector<float> master, drift;

  void reset(const std::vector<T>& input, int rank, int world) {
    gather = std::make_unique<qsdp::delta_gather<T>>(input.size(), world);
    master.resize(input.size());
    for (std::size_t i = 0; i < input.size(); ++i) master[i] = qsdp::to_float(input[i]);
    std::mt19937 rng(2000u + static_cast<unsigned>(rank));
    std::normal_distribution<float> normal(0.0f, 0.005f * 0.02f);
    drift.resize(input.size());
    for (float& d : drift) d = normal(rng);
  }
  void step(std::vector<T>& input) {
    for (std::size_t i = 0; i < input.size(); ++i) {
      master[i] += drift[i];
      input[i] = qsdp::from_float<T>(master[i]);
    }
  }
};

template <class T, class Comm, class Compressed, class Plain>
void bind_host(runner<T>& r, Comm& comm, host_buffers<T>& b, Compressed compressed, Plain plain,
               drifting_weights<T>* weights = nullptr) {
  bind_common(r, comm);
  r.prepare = [&b, &comm, weights](const std::vector<T>& input, std::size_t,
                                   std::size_t out_count) {
    b.input = input;
    b.result.assign(out_count, T{});
    b.exact.assign(out_count, T{});
    if (weights) weights->reset(input, comm.rank(), comm.size());
  };
  if (weights) r.advance = [&b, weights] { weights->step(b.input); };
  r.compressed = [&b, compressed](std::size_t n) {
    compressed(b.input.data(), b.result.data(), n);
  };
  r.plain = [&b, plain](std::size_t n) { plain(b.input.data(), b.exact.data(), n); };
  r.fetch = [&b](std::vector<T>& result, std::vector<T>& exact) {
    result = b.result;
    exact = b.exact;
  };
}

// clang-format off
// ---- --model: alpha-beta prediction ----------------------------------------------------------
// Every exchange is n - 1 messages per rank through the rank's own link (a ring or direct sends:
// each rank sends and receives (n - 1) * bytes), so t_net(bytes) = (n - 1) * (alpha + bytes /
// beta). qsdp runs codec and network one after the other (no overlap), and first exchanges a
// 64-byte descriptor:
//
//   all_gather      plain: t_net(P)
//                   qsdp:  t_net(64) + enc(c) + t_net(W) + n dec(c)
//   reduce_scatter  plain: t_net(P) + (n - 1) sum(c)
//                   qsdp:  t_net(64) + n enc(c) + t_net(W) + acc(n, c)
//   all_reduce      reduce_scatter of the buffer's shards, then all_gather of them
//
// with P = c * sizeof(T), W the packet's bytes, and the codec times measured here on the same data
// (median of 5, `codec_threads` threads encoding at once, since ranks of one machine share its
// cores), or derived from --codec-gbps. The size gate is not modelled: every size is compressed.
// clang-format on
struct codec_times {
  double encode_s = 0, decode_s = 0, accumulate_s = 0,
         add_s = 0;  // per call, one chunk of c values
};

template <class T, class Q>
codec_times time_codec(const options& o, const Q& q, std::size_t count, int ranks) {
  codec_times t;
  const std::size_t wire = qsdp::compressed_size<T>(q, count);
  if (o.codec_gbps > 0) {
    const double rate = o.codec_gbps * 1e9;
    t.encode_s = static_cast<double>(count * sizeof(T) + wire) / rate;
    t.decode_s = t.encode_s;
    t.accumulate_s = static_cast<double>(wire + 2 * count * sizeof(float)) / rate;
    t.add_s = static_cast<double>(3 * count * sizeof(float)) / rate;
    return t;
  }
  const int threads = o.codec_threads > 0 ? o.codec_threads : ranks;
  auto median_seconds = [&](auto&& body) {
    std::vector<double> per_run;
    for (int run = 0; run < 5; ++run) {
      std::vector<double> each(static_cast<std::size_t>(threads));
      std::vector<std::thread> pool;
      for (int k = 0; k < threads; ++k)
        pool.emplace_back([&, k] {
          const auto start = std::chrono::steady_clock::now();
          body(k);
          each[static_cast<std::size_t>(k)] =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        });
      for (auto& th : pool) th.join();
      per_run.push_back(*std::max_element(each.begin(), each.end()));
    }
    return median(per_run);
  };
  std::vector<std::vector<T>> inputs;
  std::vector<std::vector<std::byte>> packets;
  std::vector<std::vector<T>> outputs;
  std::vector<std::vector<float>> sums;
  for (int k = 0; k < threads; ++k) {
    inputs.push_back(make_input<T>(count, k, gradient_data(o)));
    packets.emplace_back(wire);
    outputs.emplace_back(count);
    sums.emplace_back(count, 0.0f);
  }
  t.encode_s = median_seconds([&](int k) {
    qsdp::encode(q, inputs[static_cast<std::size_t>(k)].data(), count,
                 packets[static_cast<std::size_t>(k)].data());
  });
  t.decode_s = median_seconds([&](int k) {
    qsdp::decode(q, packets[static_cast<std::size_t>(k)].data(), count,
                 outputs[static_cast<std::size_t>(k)].data());
  });
  t.accumulate_s = median_seconds([&](int k) {
    qsdp::decode_accumulate(q, packets[static_cast<std::size_t>(k)].data(), count,
                            sums[static_cast<std::size_t>(k)].data());
  });
  t.add_s = median_seconds([&](int k) {
    auto& acc = sums[static_cast<std::size_t>(k)];
    const auto& in = inputs[static_cast<std::size_t>(k)];
    for (std::size_t i = 0; i < count; ++i) acc[i] += qsdp::to_float(in[i]);
  });
  return t;
}

template <class T, class Q>
std::vector<row> model_sweep(const options& o, const Q& q, const std::string& policy) {
  const auto n = static_cast<std::size_t>(o.ranks);
  const double alpha = o.latency_us * 1e-6, beta = o.link_gbps * 1e9 / 8;
  auto net = [&](double bytes) { return static_cast<double>(n - 1) * (alpha + bytes / beta); };
  std::vector<row> rows;
  const std::vector<std::size_t> sizes = sweep_sizes(o);
  console::progress shown(sizes.size());
  for (const std::size_t bytes : sizes) {
    shown.step(std::string("model of ") + op_name(o.op) + " " + policy + ", " +
               std::to_string(bytes) + " B");
    const std::size_t count =
        o.op == op_kind::all_reduce ? bytes / sizeof(T) : bytes / sizeof(T) / n;
    if (count == 0) continue;
    row out;
    out.count = count;
    out.size = (o.op == op_kind::all_reduce ? count : count * n) * sizeof(T);
    const std::size_t chunk = o.op == op_kind::all_reduce ? (count + n - 1) / n : count;
    const codec_times c = time_codec<T>(o, q, chunk, o.ranks);
    out.wire = qsdp::compressed_size<T>(q, chunk);
    out.plain_wire = chunk * sizeof(T);
    const double W = static_cast<double>(out.wire), P = static_cast<double>(out.plain_wire);
    const double nd = static_cast<double>(n);
    const double gather_q = net(64) + c.encode_s + net(W) + nd * c.decode_s;
    const double gather_p = net(P);
    const double scatter_q = net(64) + nd * c.encode_s + net(W) + nd * c.accumulate_s;
    const double scatter_p = net(P) + (nd - 1) * c.add_s;
    const double gather_codec = c.encode_s + nd * c.decode_s;
    const double scatter_codec = nd * c.encode_s + nd * c.accumulate_s;
    double tq = 0, tp = 0, codec = 0;
    switch (o.op) {
      case op_kind::all_gather:
      case op_kind::delta_gather:  // refused by parse
        tq = gather_q, tp = gather_p, codec = gather_codec;
        break;
      case op_kind::reduce_scatter: tq = scatter_q, tp = scatter_p, codec = scatter_codec; break;
      case op_kind::all_reduce:
        tq = scatter_q + gather_q, tp = scatter_p + gather_p, codec = scatter_codec + gather_codec;
        break;
    }
    out.codec_us = codec * 1e6;
    out.network_us = (tq - codec) * 1e6;
    const double factor = o.op == op_kind::all_reduce ? 2.0 * (nd - 1) / nd : (nd - 1) / nd;
    out.time_us = tq * 1e6;
    out.algbw = static_cast<double>(out.size) / tq / 1e9;
    out.busbw = out.algbw * factor;
    out.plain_time_us = tp * 1e6;
    out.plain_busbw = static_cast<double>(out.size) / tp / 1e9 * factor;
    rows.push_back(out);
  }
  return rows;
}

/// Runs the sweep for policy q and element type T on a host backend (or the model); rank 0 prints.
template <class T, class Q>
void run_host(const options& o, const Q& q, const std::string& policy) {
  if (o.model) {
    std::printf(
        "# MODEL (predicted, not measured): links %.3g Gbit/s per rank, latency %.3g us, codec "
        "%s\n",
        o.link_gbps, o.latency_us,
        o.codec_gbps > 0 ? (std::to_string(o.codec_gbps) + " GB/s (given)").c_str()
                         : "timed on this machine");
    report(o, policy, 0, o.ranks, model_sweep<T>(o, q, policy));
    return;
  }
  const qsdp::call_options gate{.min_compressed_bytes = o.min_compressed,
                                .max_pieces = o.max_pieces};
  // The identity calls that stand in for a plain exchange run whole: a plain exchange has no codec
  // to overlap, and the baseline stays the same whatever --max-pieces says.
  const qsdp::call_options plain_gate{.min_compressed_bytes = o.min_compressed, .max_pieces = 1};
  if (o.backend == "local") {
    qsdp::run_local(
        o.ranks,
        [&](qsdp::local_communicator& comm) {
          runner<T> r;
          if (o.many()) {
            bind_common(r, comm);
            run_many<T>(o, q, policy, comm, r, [&](const T* s, T* d, std::size_t n) {
              collective(comm, qsdp::identity{}, o.op, s, d, n, plain_gate);
            });
            return;
          }
          host_buffers<T> buffers;
          drifting_weights<T> weights;
          const bool delta = o.op == op_kind::delta_gather;
          bind_host(
              r, comm, buffers,
              [&](const T* s, T* d, std::size_t n) {
                collective(comm, q, o.op, s, d, n, gate, weights.gather.get());
              },
              [&](const T* s, T* d, std::size_t n) {
                collective(comm, qsdp::identity{}, o.op, s, d, n, plain_gate);
              },
              delta ? &weights : nullptr);
          const std::vector<row> rows = run_sweep(r, o, q, policy);
          report(o, policy, comm.rank(), comm.size(), rows);
        },
        qsdp::fault_options{.timeout = std::chrono::minutes(10)});
    return;
  }
#if QSDP_BENCH_MPI
  qsdp::mpi_communicator comm(MPI_COMM_WORLD);
  runner<T> r;
  host_buffers<T> buffers;
  drifting_weights<T> weights;
  MPI_Datatype type = sizeof(T) == 4 ? MPI_FLOAT : MPI_UINT16_T;
  auto plain = [&](const T* s, T* d, std::size_t n) {
    if (n > static_cast<std::size_t>(INT32_MAX))
      throw std::runtime_error("qsdp-bench: count above INT_MAX for MPI");
    const int c = static_cast<int>(n);
    int rc = MPI_SUCCESS;
    switch (o.op) {
      case op_kind::all_gather:
      case op_kind::delta_gather: rc = MPI_Allgather(s, c, type, d, c, type, MPI_COMM_WORLD); break;
      case op_kind::reduce_scatter:
      case op_kind::all_reduce:
        if constexpr (sizeof(T) != 4) {
          // MPI has no bf16/half sum: the plain exchange of 16-bit values is the qsdp pipeline
          // unquantized.
          collective(comm, qsdp::identity{}, o.op, s, d, n, plain_gate);
          return;
        } else if (o.op == op_kind::reduce_scatter) {
          rc = MPI_Reduce_scatter_block(s, d, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        } else {
          rc = MPI_Allreduce(s, d, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
        break;
    }
    if (rc != MPI_SUCCESS) throw std::runtime_error("qsdp-bench: plain MPI collective failed");
  };
  if (o.many()) {
    bind_common(r, comm);
    run_many<T>(o, q, policy, comm, r, plain);
    return;
  }
  bind_host(
      r, comm, buffers,
      [&](const T* s, T* d, std::size_t n) {
        collective(comm, q, o.op, s, d, n, gate, weights.gather.get());
      },
      plain, o.op == op_kind::delta_gather ? &weights : nullptr);
  const std::vector<row> rows = run_sweep(r, o, q, policy);
  report(o, policy, comm.rank(), comm.size(), rows);
#else
  throw std::invalid_argument(
      "qsdp-bench: --backend mpi: this build has no MPI (install libopenmpi-dev, reconfigure)");
#endif
}

}  // namespace qsdp_bench::host
