// SPDX-License-Identifier: Apache-2.0
// The two-level collectives over run_local_nodes: every grid shape (a node of one, one node, odd
// node sizes), exact with identity at both levels, within bounds and bit-identical across ranks
// where the flat calls are, every rank throwing when one calls differently, and pairs that do not
// form a grid refused.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>

#include <qsdp/collectives.hpp>

#include "support.hpp"

TEST_SUITE_BEGIN("two-level");

using namespace qsdp_test;

namespace {

using local_pair = qsdp::two_level<qsdp::local_communicator, qsdp::local_communicator>;
constexpr qsdp::call_options compress_all{.min_compressed_bytes = 0};

std::vector<float> gradients(int rank, std::size_t n) {
  return make_data(distribution::gradient_with_outliers, n, static_cast<std::uint32_t>(50 + rank));
}

double rel_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0, t = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    e += (got[i] - want[i]) * (got[i] - want[i]);
    t += want[i] * want[i];
  }
  return std::sqrt(e / t);
}

struct shape {
  int world, node_size;
};
constexpr shape shapes[] = {{1, 1}, {2, 1}, {2, 2}, {3, 1}, {3, 3}, {4, 2},
                            {6, 2}, {6, 3}, {8, 4}, {8, 2}, {5, 5}};

}  // namespace

TEST_CASE("identity at both levels: reduce_scatter and all_gather are exact, every grid shape") {
  for (const shape s : shapes) {
    INFO("world " << s.world << " node size " << s.node_size);
    const std::size_t count = 300;
    std::atomic<int> wrong{0};
    qsdp::run_local_nodes(s.world, s.node_size, [&](local_pair& comm) {
      const auto w = static_cast<std::size_t>(comm.size());
      const qsdp::level_policies q{qsdp::identity{}, qsdp::identity{}};
      // reduce_scatter: my chunk of the sum of every rank's values.
      const auto mine = exact_sum_values(comm.rank(), count * w);
      std::vector<float> out(count);
      qsdp::reduce_scatter(comm, q, mine.data(), out.data(), count, qsdp::reduce_op::sum,
                           compress_all);
      for (std::size_t i = 0; i < count; ++i) {
        float exact = 0;
        for (int r = 0; r < comm.size(); ++r)
          exact +=
              exact_sum_values(r, count * w)[static_cast<std::size_t>(comm.rank()) * count + i];
        if (out[i] != exact) ++wrong;
      }
      // all_reduce: the exact sum, a count that is not a multiple of the world (padded shards).
      auto data = exact_sum_values(comm.rank(), count + 1);
      qsdp::all_reduce(comm, q, data.data(), count + 1, qsdp::reduce_op::sum, compress_all);
      for (std::size_t i = 0; i <= count; ++i) {
        float exact = 0;
        for (int r = 0; r < comm.size(); ++r) exact += exact_sum_values(r, count + 1)[i];
        if (data[i] != exact) ++wrong;
      }
      // all_gather: every rank's shard in rank order.
      std::vector<float> full(count * w);
      qsdp::all_gather(comm, q, mine.data(), full.data(), count, compress_all);
      for (int r = 0; r < comm.size(); ++r)
        if (std::memcmp(full.data() + static_cast<std::size_t>(r) * count,
                        exact_sum_values(r, count * w).data(), count * sizeof(float)) != 0)
          ++wrong;
    });
    CHECK(wrong == 0);
  }
}

TEST_CASE(
    "quantized levels: within bounds, all_gather and all_reduce bit-identical on every rank") {
  for (const shape s : shapes) {
    INFO("world " << s.world << " node size " << s.node_size);
    const std::size_t count = 4099;
    const auto w = static_cast<std::size_t>(s.world);
    std::vector<std::vector<float>> gathered(w), reduced(w);
    std::vector<double> scatter_error(w);
    std::mutex m;
    qsdp::run_local_nodes(s.world, s.node_size, [&](local_pair& comm) {
      const auto me = static_cast<std::size_t>(comm.rank());
      const qsdp::level_policies q{qsdp::stochastic<8>{.bucket_size = 256, .seed = 1},
                                   qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = 256}}};
      const auto grads = gradients(comm.rank(), count * w);
      std::vector<float> out(count);
      qsdp::reduce_scatter(comm, q, grads.data(), out.data(), count, qsdp::reduce_op::avg,
                           compress_all);
      std::vector<double> want(count, 0.0);
      for (std::size_t r = 0; r < w; ++r) {
        const auto theirs = gradients(static_cast<int>(r), count * w);
        for (std::size_t i = 0; i < count; ++i) want[i] += theirs[me * count + i] / double(w);
      }
      const qsdp::level_policies wq{qsdp::random_shift<8>{.bucket_size = 512, .seed = 2},
                                    qsdp::random_shift<8>{.bucket_size = 512, .seed = 3}};
      const auto shard = make_data(distribution::normal, count, 7 + static_cast<unsigned>(me));
      std::vector<float> full(count * w);
      qsdp::all_gather(comm, wq, shard.data(), full.data(), count, compress_all);
      auto data = gradients(comm.rank(), count);
      qsdp::all_reduce(comm, q, data.data(), count, qsdp::reduce_op::sum, compress_all);
      std::lock_guard lock(m);
      scatter_error[me] = rel_l2(out, want);
      gathered[me] = full;
      reduced[me] = data;
    });
    for (std::size_t r = 0; r < w; ++r) {
      INFO("rank " << r);
      CHECK(scatter_error[r] > 0);     // quantized ...
      CHECK(scatter_error[r] < 0.25);  // ... at 8 bits within nodes and rotated 4 bits across
      CHECK(std::memcmp(gathered[r].data(), gathered[0].data(), count * w * sizeof(float)) == 0);
      CHECK(std::memcmp(reduced[r].data(), reduced[0].data(), count * sizeof(float)) == 0);
    }
    // The gathered shards are the shards, to two 8-bit quantizations.
    for (std::size_t r = 0; r < w; ++r) {
      const auto shard = make_data(distribution::normal, count, 7 + static_cast<unsigned>(r));
      std::vector<double> want(shard.begin(), shard.end());
      const std::vector<float> got(gathered[0].begin() + static_cast<long>(r * count),
                                   gathered[0].begin() + static_cast<long>((r + 1) * count));
      CHECK(rel_l2(got, want) < 0.02);
    }
  }
}

TEST_CASE("the levels' random streams never overlap, for any rank of any grid shape") {
  for (const shape s : shapes) {
    const auto S = static_cast<std::size_t>(s.node_size), W = static_cast<std::size_t>(s.world);
    const std::size_t N = W / S;
    // Every (rank, level, stream) a call can draw: inside [base, base + S^2), across [base, + N^2).
    std::vector<int> owner(W * (S + N), -1);
    for (std::size_t rank = 0; rank < W; ++rank) {
      const qsdp::detail::grid g{S, N, W, rank / S, rank % S};
      const auto bases = qsdp::detail::level_stream_bases(g);
      for (std::size_t k = 0; k < S * S; ++k) {  // the streams of node rank / S's reduce_scatter
        int& o = owner[bases.inside + k];
        CHECK((o == -1 || o == static_cast<int>(g.node)));  // shared only within one node's call
        o = static_cast<int>(g.node);
      }
      for (std::size_t k = 0; k < N * N; ++k) {  // the streams of place rank % S across nodes
        int& o = owner[bases.across + k];
        CHECK((o == -1 || o == 1000 + static_cast<int>(g.place)));
        o = 1000 + static_cast<int>(g.place);
      }
    }
    qsdp::detail::check_level_streams({S, N, W, 0, 0}, "test");
  }
  CHECK_THROWS_WITH_AS(qsdp::detail::check_level_streams({1, 50000, 50000, 0, 0}, "where"),
                       doctest::Contains("needs more random streams than there are"), qsdp::error);
}

TEST_CASE("below the size gate both levels move exact values") {
  qsdp::run_local_nodes(6, 3, [&](local_pair& comm) {
    const std::size_t count = 100;  // 400 bytes per peer at both levels: gated
    const qsdp::level_policies q{qsdp::stochastic<4>{}, qsdp::stochastic<2>{}};
    const auto mine = exact_sum_values(comm.rank(), count);
    std::vector<float> full(count * 6);
    qsdp::all_gather(comm, q, mine.data(), full.data(), count,
                     {.min_compressed_bytes = qsdp::recommended_min_compressed_bytes});
    for (int r = 0; r < 6; ++r)
      CHECK(std::memcmp(full.data() + r * 100, exact_sum_values(r, count).data(), 400) == 0);
  });
}

TEST_CASE("a rank that calls differently at either level makes every rank throw") {
  std::atomic<int> thrown{0}, named{0};
  CHECK_THROWS_AS(
      qsdp::run_local_nodes(
          4, 2,
          [&](local_pair& comm) {
            std::vector<float> in(4 * 500, 1.0f), out(500);
            try {
              if (comm.rank() == 3)
                qsdp::reduce_scatter(
                    comm, qsdp::level_policies{qsdp::stochastic<8>{}, qsdp::uniform<4>{}},
                    in.data(), out.data(), 500, qsdp::reduce_op::sum);
              else
                qsdp::reduce_scatter(
                    comm, qsdp::level_policies{qsdp::stochastic<8>{}, qsdp::stochastic<4>{}},
                    in.data(), out.data(), 500, qsdp::reduce_op::sum);
            } catch (const qsdp::error& e) {
              ++thrown;
              const std::string m = e.what();
              // Rank 3's node names the policies; node 0 names node 1.
              if (m.find(comm.cross().rank() == 1
                             ? "called with quantizer"
                             : "on node 1, rank 1 of the node") != std::string::npos)
                ++named;
              throw;
            }
          }),
      qsdp::error);
  CHECK(thrown == 4);
  CHECK(named == 4);
}

TEST_CASE("run_local_nodes: a rank that throws or returns early releases every other rank") {
  for (const bool returns : {false, true}) {
    const auto start = std::chrono::steady_clock::now();
    std::atomic<int> released{0};
    CHECK_THROWS_AS(qsdp::run_local_nodes(
                        6, 3,
                        [&](local_pair& comm) {
                          if (comm.rank() == 4) {
                            if (returns) return;
                            throw qsdp::error("rank four fails");
                          }
                          std::vector<float> in(100, 1.0f), out(600);
                          try {
                            qsdp::all_gather(
                                comm, qsdp::level_policies{qsdp::uniform<8>{}, qsdp::uniform<4>{}},
                                in.data(), out.data(), 100);
                          } catch (const qsdp::error&) {
                            ++released;
                            throw;
                          }
                        }),
                    qsdp::error);
    CHECK(released == 5);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  }
}

TEST_CASE("pairs that do not form a grid are refused on every rank") {
  CHECK_THROWS_WITH_AS(qsdp::run_local_nodes(6, 4, [](local_pair&) {}),
                       doctest::Contains("node_size is 4; expected a divisor of the world size 6"),
                       qsdp::error);
  CHECK_THROWS_WITH_AS(qsdp::run_local_nodes(4, 0, [](local_pair&) {}),
                       doctest::Contains("node_size is 0"), qsdp::error);
  // Three ranks as a node of two and a node of one: the cross communicator of place 0 joins nodes
  // of different sizes, that of place 1 has one rank.
  const auto limit = std::chrono::milliseconds(10000);
  qsdp::detail::local_world node_a(2, limit), node_b(1, limit), place_0(2, limit),
      place_1(1, limit);
  std::atomic<int> refused{0};
  std::vector<qsdp::detail::local_world*> all{&node_a, &node_b, &place_0, &place_1};
  qsdp::detail::run_rank_threads(
      3,
      [&](int rank) {
        qsdp::local_communicator node(rank < 2 ? node_a : node_b, rank < 2 ? rank : 0);
        qsdp::local_communicator cross(rank == 1 ? place_1 : place_0, rank == 2 ? 1 : 0);
        try {
          local_pair pair(node, cross);
        } catch (const qsdp::error& e) {
          if (std::string(e.what()).find("every node must have as many ranks") != std::string::npos)
            ++refused;
        }
      },
      [&](int) {},
      [&](int, const std::string& reason) {
        for (auto* w : all) w->barrier.break_with(reason);
      });
  CHECK(refused == 3);
}

TEST_SUITE_END();
