// SPDX-License-Identifier: Apache-2.0
//
// The collectives under mpirun, against MPI's own MPI_Allgather / MPI_Reduce_scatter_block on the
// same data: identity bit-exact (all-gather) or within fp32 summation order (reduce-scatter), every
// policy within its bound, all_reduce bit-identical on every rank, each with the size gate off and
// on (call_options), and a rank that calls with another count, or differs in a gated call whose
// signature was agreed before, makes every rank throw; groups of calls give the bits of the calls
// made one by one, and ranks whose groups differ all throw; started collectives (all_gather_async
// and its kin, on the communicator's progress thread: MPI initialised at MPI_THREAD_SERIALIZED)
// give the bits of the blocking calls and throw at wait() on every rank. Prints "N passed, M
// failed" on rank 0; exits nonzero if any rank failed.
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <qsdp/collectives.hpp>
#include <qsdp/mpi.hpp>

#include "in_place_checks.hpp"
#include "mpi_check.hpp"

namespace {

using qsdp_mpi_test::check;
using qsdp_mpi_test::g_rank;
int g_world = 1;

std::vector<float> data_of(int rank, std::size_t n, unsigned salt) {
  std::mt19937 rng(rank * 1009u + salt);
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (auto& v : x) v = (rng() % 50 == 0) ? 20.0f * normal(rng) : normal(rng);
  return x;
}

/// Per-value bound of policy Q on x (bucket by bucket), as README states it, with float rounding.
template <class Q>
std::vector<double> bounds(const Q& q, const std::vector<float>& x) {
  std::vector<double> b(x.size(), 0.0);
  if constexpr (!qsdp::detail::is_identity<Q>) {
    constexpr int B = Q::bits;
    for (std::size_t s = 0; s < x.size(); s += q.bucket_size) {
      const std::size_t e = std::min(x.size(), s + q.bucket_size);
      double lo = INFINITY, hi = -INFINITY;
      for (std::size_t i = s; i < e; ++i)
        lo = std::min<double>(lo, x[i]), hi = std::max<double>(hi, x[i]);
      const double abs_max = std::max(std::abs(lo), std::abs(hi));
      double step = 0;
      if constexpr (Q::wire_id == 1)
        step = (hi - lo) / ((1 << B) - 1) / 2;
      else if constexpr (Q::wire_id == 2)
        step = (hi - lo) / ((1 << B) - 1);
      else if constexpr (Q::wire_id == 3)
        step = abs_max / (B == 1 ? 0.5 : (1 << (B - 1)) - 1) / 2;
      else
        step = (hi - lo) / ((1 << B) - 2) / 2;
      for (std::size_t i = s; i < e; ++i) b[i] = step * (1 + 1e-6) + 1e-6 * abs_max;
    }
  }
  return b;
}

template <class Q>
void check_policy(qsdp::mpi_communicator& comm, const Q& q, const char* name, std::size_t count,
                  qsdp::call_options options) {
  const auto w = static_cast<std::size_t>(g_world);
  const std::string tag = std::string(name) + " count " + std::to_string(count) + " world " +
                          std::to_string(g_world) + " gate " +
                          std::to_string(options.min_compressed_bytes);

  // all_gather vs MPI_Allgather on the same data.
  const auto mine = data_of(g_rank, count, 1);
  std::vector<float> ours(count * w), theirs(count * w);
  qsdp::all_gather(comm, q, mine.data(), ours.data(), count, options);
  MPI_Allgather(mine.data(), static_cast<int>(count), MPI_FLOAT, theirs.data(),
                static_cast<int>(count), MPI_FLOAT, MPI_COMM_WORLD);
  bool ok = true;
  for (int r = 0; r < g_world && ok; ++r) {
    const auto b = bounds(q, data_of(r, count, 1));
    for (std::size_t i = 0; i < count; ++i) {
      const float a = ours[r * count + i], m = theirs[r * count + i];
      if (qsdp::detail::is_identity<Q> ? std::memcmp(&a, &m, 4) != 0
                                       : !(std::abs(double(a) - m) <= b[i])) {
        ok = false;
        break;
      }
    }
  }
  check(ok, "all_gather " + tag);

  // reduce_scatter vs MPI_Reduce_scatter_block (sum) on the same data.
  const auto full = data_of(g_rank, count * w, 2);
  std::vector<float> ours_rs(count), theirs_rs(count);
  qsdp::reduce_scatter(comm, q, full.data(), ours_rs.data(), count, qsdp::reduce_op::sum, options);
  MPI_Reduce_scatter_block(full.data(), theirs_rs.data(), static_cast<int>(count), MPI_FLOAT,
                           MPI_SUM, MPI_COMM_WORLD);
  std::vector<double> allowed(count, 0.0), magnitude(count, 0.0);
  for (int r = 0; r < g_world; ++r) {
    const auto d = data_of(r, count * w, 2);
    const std::vector<float> chunk(d.begin() + g_rank * count, d.begin() + (g_rank + 1) * count);
    const auto b = bounds(q, chunk);
    for (std::size_t i = 0; i < count; ++i)
      allowed[i] += b[i], magnitude[i] += std::abs(chunk[i]) + b[i];
  }
  ok = true;
  for (std::size_t i = 0; i < count; ++i)
    if (!(std::abs(double(ours_rs[i]) - theirs_rs[i]) <=
          allowed[i] + 2 * (g_world + 2) * 0x1p-24 * magnitude[i]))
      ok = false;
  check(ok, "reduce_scatter " + tag);

  // all_reduce: every rank holds the same bytes.
  auto reduced = data_of(g_rank, count, 3);
  qsdp::all_reduce(comm, q, reduced.data(), count, qsdp::reduce_op::avg, options);
  std::vector<float> everyone(count * w);
  MPI_Allgather(reduced.data(), static_cast<int>(count), MPI_FLOAT, everyone.data(),
                static_cast<int>(count), MPI_FLOAT, MPI_COMM_WORLD);
  ok = true;
  for (int r = 1; r < g_world; ++r)
    if (count > 0 && std::memcmp(everyone.data(), everyone.data() + r * count, count * 4) != 0)
      ok = false;  // (count 0: data() may be null, which memcmp must not get even for 0 bytes)
  check(ok, "all_reduce bit-identical " + tag);
}

/// A mix of all_gathers and reduce_scatters (three policies, two counts, one in place) issued one
/// by one or as one group (qsdp::group_start / group_end), then one more call; the bytes of every
/// output, which must be the same both ways.
std::vector<unsigned char> group_sequence(qsdp::mpi_communicator& comm, bool grouped) {
  const auto world = static_cast<std::size_t>(g_world);
  const auto rank = static_cast<std::size_t>(g_rank);
  constexpr qsdp::call_options all{.min_compressed_bytes = 0};
  const auto ag_in = data_of(g_rank, 1000, 21), rs_in = data_of(g_rank, 777 * world, 22);
  std::vector<float> ag_out(1000 * world), rs_out(777), inplace(513 * world), after(300 * world);
  const auto shard = data_of(g_rank, 513, 23), after_in = data_of(g_rank, 300, 24);
  std::copy(shard.begin(), shard.end(), inplace.begin() + static_cast<std::ptrdiff_t>(rank * 513));
  if (grouped) qsdp::group_start(comm);
  qsdp::all_gather(comm, qsdp::uniform<8>{.bucket_size = 128}, ag_in.data(), ag_out.data(), 1000,
                   all);
  qsdp::reduce_scatter(comm, qsdp::stochastic<4>{.bucket_size = 64, .seed = 9}, rs_in.data(),
                       rs_out.data(), 777, qsdp::reduce_op::avg, all);
  qsdp::all_gather(comm, qsdp::random_shift<6>{.bucket_size = 64, .seed = 4},
                   inplace.data() + rank * 513, inplace.data(), 513, all);
  if (grouped) qsdp::group_end(comm);
  qsdp::all_gather(comm, qsdp::stochastic<4>{.bucket_size = 64, .seed = 2}, after_in.data(),
                   after.data(), 300, all);
  std::vector<unsigned char> bytes;
  for (const std::vector<float>* v : {&ag_out, &rs_out, &inplace, &after}) {
    const auto* p = reinterpret_cast<const unsigned char*>(v->data());
    bytes.insert(bytes.end(), p, p + v->size() * sizeof(float));
  }
  return bytes;
}

}  // namespace

/// The same calls blocking, then started (one of them grouped), on fresh communicators so that both
/// draw their random numbers at the same call indices; then a started call with another count on
/// rank 1, which every rank's wait() must throw.
void check_started_collectives(qsdp::call_options options, const char* label) {
  const std::size_t n = 2 * (qsdp::min_piece_bytes / sizeof(float)) + 77;  // two pieces
  const auto world = static_cast<std::size_t>(g_world);
  const std::vector<float> shard = data_of(g_rank, n, 11), full = data_of(g_rank, n * world, 12);
  const qsdp::stochastic<8> q{.bucket_size = 512, .seed = 5};
  auto run = [&](bool started) {
    qsdp::mpi_communicator comm(MPI_COMM_WORLD, {.timeout = std::chrono::seconds(120)});
    std::vector<float> gathered(n * world), scattered(n), reduced = shard, grouped(n * world);
    if (started) {
      qsdp::work a = qsdp::all_gather_async(comm, q, shard.data(), gathered.data(), n, options);
      qsdp::work b = qsdp::reduce_scatter_async(comm, q, full.data(), scattered.data(), n,
                                                qsdp::reduce_op::avg, options);
      qsdp::work c =
          qsdp::all_reduce_async(comm, q, reduced.data(), n, qsdp::reduce_op::sum, options);
      qsdp::group_start(comm);
      qsdp::all_gather(comm, q, shard.data(), grouped.data(), n, options);
      qsdp::work d = qsdp::group_end_async(comm);
      d.wait();
      c.wait();
      b.wait();
      a.wait();
    } else {
      qsdp::all_gather(comm, q, shard.data(), gathered.data(), n, options);
      qsdp::reduce_scatter(comm, q, full.data(), scattered.data(), n, qsdp::reduce_op::avg,
                           options);
      qsdp::all_reduce(comm, q, reduced.data(), n, qsdp::reduce_op::sum, options);
      qsdp::group_start(comm);
      qsdp::all_gather(comm, q, shard.data(), grouped.data(), n, options);
      qsdp::group_end(comm);
    }
    gathered.insert(gathered.end(), scattered.begin(), scattered.end());
    gathered.insert(gathered.end(), reduced.begin(), reduced.end());
    gathered.insert(gathered.end(), grouped.begin(), grouped.end());
    return gathered;
  };
  const std::vector<float> blocking = run(false), started = run(true);
  check(blocking.size() == started.size() &&
            std::memcmp(blocking.data(), started.data(), blocking.size() * sizeof(float)) == 0,
        std::string("started collectives give the blocking calls' bits (") + label + ")");
  if (g_world < 2) return;
  qsdp::mpi_communicator comm(MPI_COMM_WORLD, {.timeout = std::chrono::seconds(120)});
  std::vector<float> in(100, 1.0f), out(100 * world);
  std::string message;
  qsdp::work w =
      qsdp::all_gather_async(comm, q, in.data(), out.data(), g_rank == 1 ? 99 : 100, options);
  try {
    w.wait();
  } catch (const qsdp::error& e) {
    message = e.what();
  }
  check(message.find("rank 1 called with count 99, rank 0 with 100") != std::string::npos,
        std::string("a started call's mismatch is thrown at wait() on every rank (") + label +
            "; got: '" + message + "')");
}

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  {
    qsdp::mpi_communicator comm(MPI_COMM_WORLD);
    // The gate off (every call compressed, the default), then the recommended gate, under which
    // all but the largest count (40 KB) move uncompressed.
    for (const qsdp::call_options options :
         {qsdp::call_options{},
          qsdp::call_options{.min_compressed_bytes = qsdp::recommended_min_compressed_bytes}})
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1000},
                                std::size_t{4099}, std::size_t{10000}}) {
        check_policy(comm, qsdp::identity{}, "identity", count, options);
        check_policy(comm, qsdp::uniform<8>{.bucket_size = 512}, "uniform<8>", count, options);
        check_policy(comm, qsdp::uniform<3>{.bucket_size = 100}, "uniform<3>", count, options);
        check_policy(comm, qsdp::stochastic<4>{.bucket_size = 256, .seed = 3}, "stochastic<4>",
                     count, options);
        check_policy(comm, qsdp::stochastic<1>{.bucket_size = 64, .seed = 3}, "stochastic<1>",
                     count, options);
        check_policy(comm, qsdp::symmetric<2>{.bucket_size = 1024}, "symmetric<2>", count, options);
        check_policy(comm, qsdp::random_shift<8>{.bucket_size = 333, .seed = 3}, "random_shift<8>",
                     count, options);
      }

    // Pipelined calls: pieces of non-blocking exchanges (2 by default; 3 with the last one
    // shorter in the all_reduce), waited for blocking and, with a timeout, polled. (Sizes of two or
    // three minimum pieces: these checks dominate this test's time under the sanitizers.)
    qsdp::mpi_communicator polled(MPI_COMM_WORLD, {.timeout = std::chrono::seconds(120)});
    const std::size_t pieced = 2 * (qsdp::min_piece_bytes / sizeof(float)) + 1000;
    for (qsdp::mpi_communicator* c : {&comm, &polled}) {
      const qsdp::call_options options{.min_compressed_bytes = 0};
      if (c == &comm) {
        check_policy(*c, qsdp::identity{}, "identity (pieces)", pieced, options);
        check_policy(*c, qsdp::stochastic<4>{.bucket_size = 256, .seed = 3},
                     "stochastic<4> (pieces)", pieced, options);
      } else {
        check_policy(*c, qsdp::random_shift<8>{.bucket_size = 333, .seed = 3},
                     "random_shift<8> (pieces, polled)", pieced, options);
      }
      // all_reduce in pieces (its shard, a world-th of the buffer, holds 3 minimum pieces):
      // identity must give MPI_Allreduce's sums exactly (small integers: exact in any order).
      const std::size_t total =
          static_cast<std::size_t>(g_world) * 3 * (qsdp::min_piece_bytes / sizeof(float)) + 5;
      std::vector<float> ours(total), theirs(total);
      for (std::size_t i = 0; i < total; ++i)
        ours[i] = static_cast<float>(static_cast<int>((i * 31 + g_rank * 17) % 64) - 32);
      MPI_Allreduce(ours.data(), theirs.data(), static_cast<int>(total), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      qsdp::all_reduce(*c, qsdp::identity{}, ours.data(), total, qsdp::reduce_op::sum,
                       qsdp::call_options{.min_compressed_bytes = 0, .max_pieces = 8});
      check(ours == theirs, "identity all_reduce in pieces equals MPI_Allreduce");
    }

    // A rank that calls with another count: every rank throws, naming it; nobody hangs.
    if (g_world > 1) {
      std::vector<float> in(200, 1.0f), out(200 * g_world);
      std::string message;
      try {
        qsdp::all_gather(comm, qsdp::uniform<8>{}, in.data(), out.data(), g_rank == 1 ? 99 : 100);
      } catch (const qsdp::error& e) {
        message = e.what();
      }
      check(message.find("rank 1 called with count 99, rank 0 with 100") != std::string::npos,
            "count mismatch reported on every rank (got: '" + message + "')");
      // The communicator is still usable afterwards.
      qsdp::all_gather(comm, qsdp::uniform<8>{}, in.data(), out.data(), 100);
      check(out[100 * (g_world - 1)] == 1.0f, "collective after a mismatch");

      // A gated call whose two signatures were both agreed before, rank 1 with the other op: the
      // descriptors in front of the values stop every rank, with the same message.
      const qsdp::call_options gate{.min_compressed_bytes = qsdp::recommended_min_compressed_bytes};
      for (auto op : {qsdp::reduce_op::sum, qsdp::reduce_op::avg})
        qsdp::reduce_scatter(comm, qsdp::uniform<8>{}, out.data(), in.data(), 50, op, gate);
      message.clear();
      try {
        qsdp::reduce_scatter(comm, qsdp::uniform<8>{}, out.data(), in.data(), 50,
                             g_rank == 1 ? qsdp::reduce_op::avg : qsdp::reduce_op::sum, gate);
      } catch (const qsdp::error& e) {
        message = e.what();
      }
      check(message.find("rank 1 called with reduce_op avg, rank 0 with sum") != std::string::npos,
            "gated op mismatch reported on every rank (got: '" + message + "')");
      qsdp::reduce_scatter(comm, qsdp::uniform<8>{}, out.data(), in.data(), 50,
                           qsdp::reduce_op::sum, gate);
      check(in[0] == static_cast<float>(g_world), "gated collective after a mismatch");
    }
  }
  // Groups: the mix in one agreement and one exchange gives the bits of its calls made one by
  // one, each way on a fresh communicator so that both draw the same call indices; a rank whose
  // group is shorter makes every rank throw, and the communicator goes on.
  {
    std::vector<unsigned char> apart, together;
    {
      qsdp::mpi_communicator fresh(MPI_COMM_WORLD);
      apart = group_sequence(fresh, false);
    }
    {
      qsdp::mpi_communicator fresh(MPI_COMM_WORLD);
      together = group_sequence(fresh, true);
    }
    check(apart == together, "a group gives the bits of its calls made one by one");
    if (g_world > 1) {
      qsdp::mpi_communicator comm(MPI_COMM_WORLD);
      std::vector<float> in(64, 1.0f), out(64 * g_world);
      std::string message;
      try {
        qsdp::group_start(comm);
        for (int i = 0; i < (g_rank == 1 ? 1 : 2); ++i)
          qsdp::all_gather(comm, qsdp::uniform<8>{}, in.data(), out.data(), 64,
                           {.min_compressed_bytes = 0});
        qsdp::group_end(comm);
      } catch (const qsdp::error& e) {
        message = e.what();
      }
      check(message.find("rank 1's group holds 1 calls, rank 0's 2") != std::string::npos,
            "a shorter group reported on every rank (got: '" + message + "')");
      qsdp::group_start(comm);
      qsdp::all_gather(comm, qsdp::uniform<8>{}, in.data(), out.data(), 64,
                       {.min_compressed_bytes = qsdp::recommended_min_compressed_bytes});
      qsdp::group_end(comm);
      check(out[64 * (g_world - 1)] == 1.0f, "a group after a mismatch");
    }
  }
  // NCCL's in-place conventions (tests/support/in_place_checks.hpp): each sequence on a fresh
  // communicator, so that both draw their random numbers at the same call indices.
  qsdp_test::for_each_in_place_check(
      [&]<class Q, class T>(const Q& q, const qsdp_test::in_place_case& c, const char* name, T) {
        // float, without the case of several pieces (megabytes per rank; tests/test_in_place.cpp
        // has
        // it): this program runs at 2, 3 and 4 ranks, and under the sanitizers.
        if (c.count == 0 || sizeof(T) != sizeof(float)) return;
        std::vector<unsigned char> apart, together;
        {
          qsdp::mpi_communicator fresh(MPI_COMM_WORLD);
          apart = qsdp_test::in_place_sequence<qsdp::mpi_communicator, Q, T>(fresh, q, c, false);
        }
        {
          qsdp::mpi_communicator fresh(MPI_COMM_WORLD);
          together = qsdp_test::in_place_sequence<qsdp::mpi_communicator, Q, T>(fresh, q, c, true);
        }
        check(apart == together,
              "in place = out of place: " + qsdp_test::in_place_label<T>(name, c));
      });
  if (provided >= MPI_THREAD_SERIALIZED) {
    check_started_collectives({.min_compressed_bytes = 0}, "compressed");
    check_started_collectives({.min_compressed_bytes = qsdp::recommended_min_compressed_bytes},
                              "the recommended gate");
  } else {
    check(false,
          "MPI_Init_thread provides MPI_THREAD_SERIALIZED (got " + std::to_string(provided) + ")");
  }
  const int status = qsdp_mpi_test::report(MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
