// SPDX-License-Identifier: Apache-2.0
// The collectives over the in-process communicator: results against a float64 reference within the
// policies' bounds, identity bit-exact, unbiasedness, agreement checks, failures that end in
// errors.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>

#include <qsdp/collectives.hpp>

#include "rank_checks.hpp"
#include "support.hpp"

TEST_SUITE_BEGIN("collectives");

using namespace qsdp_test;

namespace {

/// The size gate off: the tests of the compressed paths compress even their small calls.
constexpr qsdp::call_options compress_all{.min_compressed_bytes = 0};

std::vector<float> rank_data(int rank, std::size_t n, std::uint32_t salt) {
  return make_data(rank % 2 ? distribution::normal : distribution::gradient_with_outliers, n,
                   static_cast<std::uint32_t>(rank * 7919 + salt));
}

template <class Q>
std::string describe_policy(const Q& q) {
  if constexpr (qsdp::detail::is_identity<Q>)
    return "identity";
  else
    return describe(q);
}

/// Bound on |decoded - x| of every value of `x` as policy q quantizes it (per bucket).
template <class Q>
std::vector<double> per_value_bounds(const Q& q, const std::vector<float>& x) {
  std::vector<double> bound(x.size(), 0.0);
  if constexpr (!qsdp::detail::is_identity<Q>) {
    for (std::size_t b = 0; b < x.size(); b += q.bucket_size) {
      const std::size_t e = std::min(x.size(), b + q.bucket_size);
      double lo = INFINITY, hi = -INFINITY;
      for (std::size_t i = b; i < e; ++i)
        lo = std::min<double>(lo, x[i]), hi = std::max<double>(hi, x[i]);
      for (std::size_t i = b; i < e; ++i) bound[i] = error_bound<Q, float>(lo, hi);
    }
  }
  return bound;
}

template <class Q>
void check_all_gather(const Q& q, int world, std::size_t count) {
  std::mutex m;
  std::string failure;
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    const auto mine = rank_data(comm.rank(), count, 1);
    std::vector<float> full(count * static_cast<std::size_t>(world), -1.0f);
    qsdp::all_gather(comm, q, mine.data(), full.data(), count, compress_all);
    for (int r = 0; r < world; ++r) {
      const auto theirs = rank_data(r, count, 1);
      const auto bound = per_value_bounds(q, theirs);
      for (std::size_t i = 0; i < count; ++i) {
        const float got = full[static_cast<std::size_t>(r) * count + i];
        const bool ok =
            qsdp::detail::is_identity<Q>
                ? std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(theirs[i])
                : std::abs(double(got) - theirs[i]) <= bound[i];
        if (!ok) {
          std::lock_guard lock(m);
          failure = "rank " + std::to_string(comm.rank()) + " value " + std::to_string(i) +
                    " from rank " + std::to_string(r) + ": " + std::to_string(got) + " vs " +
                    std::to_string(theirs[i]);
          return;
        }
      }
    }
  });
  INFO(describe_policy(q) << " world " << world << " count " << count);
  REQUIRE(failure == "");
}

template <class Q>
void check_reduce_scatter(const Q& q, int world, std::size_t count, qsdp::reduce_op op) {
  std::mutex m;
  std::string failure;
  const auto w = static_cast<std::size_t>(world);
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    const auto mine = rank_data(comm.rank(), count * w, 2);
    std::vector<float> out(count, -1.0f);
    qsdp::reduce_scatter(comm, q, mine.data(), out.data(), count, op, compress_all);
    // Reference: float64 sum over ranks of my chunk; bound: sum of the per-rank quantization bounds
    // plus fp32 accumulation rounding.
    std::vector<double> sum(count, 0.0), bound(count, 0.0), magnitude(count, 0.0);
    for (int r = 0; r < world; ++r) {
      const auto data = rank_data(r, count * w, 2);
      const std::vector<float> chunk(data.begin() + static_cast<long>(comm.rank() * count),
                                     data.begin() + static_cast<long>((comm.rank() + 1) * count));
      const auto b = per_value_bounds(q, chunk);
      for (std::size_t i = 0; i < count; ++i) {
        sum[i] += chunk[i];
        bound[i] += b[i];
        magnitude[i] += std::abs(chunk[i]) + b[i];
      }
    }
    const double scale = op == qsdp::reduce_op::avg ? 1.0 / world : 1.0;
    for (std::size_t i = 0; i < count; ++i) {
      const double allowed = (bound[i] + (world + 2) * 0x1p-24 * magnitude[i]) * scale + 1e-30;
      if (!(std::abs(out[i] - sum[i] * scale) <= allowed)) {
        std::lock_guard lock(m);
        failure = "rank " + std::to_string(comm.rank()) + " value " + std::to_string(i) + ": " +
                  std::to_string(out[i]) + " vs " + std::to_string(sum[i] * scale) + " allowed " +
                  std::to_string(allowed);
        return;
      }
    }
  });
  INFO(describe_policy(q) << " world " << world << " count " << count);
  REQUIRE(failure == "");
}

/// identity and every built-in policy at 1, 2, 3, 4 and 8 bits (random_shift from 2).
template <class Fn>
void for_each_tested_policy(std::size_t bucket, Fn&& fn) {
  fn(qsdp::identity{});
  [&]<int... B>(std::integer_sequence<int, B...>) {
    (fn(qsdp::uniform<B>{.bucket_size = bucket}), ...);
    (fn(qsdp::stochastic<B>{.bucket_size = bucket, .seed = 5}), ...);
    (fn(qsdp::symmetric<B>{.bucket_size = bucket}), ...);
  }
  (std::integer_sequence<int, 1, 2, 3, 4, 8>{});
  [&]<int... B>(std::integer_sequence<int, B...>) {
    (fn(qsdp::random_shift<B>{.bucket_size = bucket, .seed = 5}), ...);
  }
  (std::integer_sequence<int, 2, 3, 4, 8>{});
}

}  // namespace

TEST_CASE(
    "all_gather: every policy at 1, 2, 3, 4, 8 bits, world sizes 1..8, counts on and off the "
    "bucket grid") {
  for (int world = 1; world <= 8; ++world)
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{128}, std::size_t{133}})
      for_each_tested_policy(64, [&](auto q) { check_all_gather(q, world, count); });
}

TEST_CASE(
    "reduce_scatter: every policy at 1, 2, 3, 4, 8 bits, world sizes 1..8, sum and avg, within the "
    "summed bounds") {
  for (int world = 1; world <= 8; ++world)
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{128}, std::size_t{130}})
      for (auto op : {qsdp::reduce_op::sum, qsdp::reduce_op::avg})
        for_each_tested_policy(64, [&](auto q) { check_reduce_scatter(q, world, count, op); });
}

TEST_CASE("stochastic reduce_scatter is unbiased over many calls") {
  const int world = 3, calls = 2000;
  const std::size_t count = 32;
  std::vector<double> mean(count, 0.0), exact(count, 0.0);
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    std::vector<float> x(count * world);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = std::fmod(0.37f * (i + 1) + 0.1f * comm.rank(), 1.0f);
    x[0] = 0.0f, x[count] = 0.0f, x[2 * count] = 0.0f;  // each chunk spans [0, ~1)
    x[1] = 1.0f, x[count + 1] = 1.0f, x[2 * count + 1] = 1.0f;
    qsdp::stochastic<2> q{.bucket_size = 64, .seed = 9};
    std::vector<float> out(count);
    std::vector<double> local(count, 0.0);
    for (int c = 0; c < calls; ++c) {
      qsdp::reduce_scatter(comm, q, x.data(), out.data(), count, qsdp::reduce_op::sum,
                           compress_all);
      for (std::size_t i = 0; i < count; ++i) local[i] += out[i];
    }
    if (comm.rank() == 0) mean = local;
  });
  // Rank 0's chunk: the exact sum over ranks of their first `count` values.
  for (int r = 0; r < world; ++r)
    for (std::size_t i = 0; i < count; ++i) {
      float v = std::fmod(0.37f * (i + 1) + 0.1f * r, 1.0f);
      if (i == 0) v = 0.0f;
      if (i == 1) v = 1.0f;
      exact[i] += v;
    }
  // Each rank's rounding has variance <= step^2/4 (step 1/3): standard error of the mean of the
  // sum.
  const double standard_error = std::sqrt(world * (1.0 / 9) / 4 / calls);
  for (std::size_t i = 0; i < count; ++i)
    CHECK(std::abs(mean[i] / calls - exact[i]) < 5 * standard_error);
}

TEST_CASE("all_reduce leaves every rank bit-identical and within bounds") {
  for (int world : {1, 2, 3, 5}) {
    const std::size_t count = 1001;
    std::vector<std::vector<float>> results(static_cast<std::size_t>(world));
    qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
      auto data = rank_data(comm.rank(), count, 3);
      qsdp::all_reduce(comm, qsdp::stochastic<8>{.bucket_size = 128, .seed = 1}, data.data(), count,
                       qsdp::reduce_op::avg, compress_all);
      results[static_cast<std::size_t>(comm.rank())] = data;
    });
    std::vector<double> exact(count, 0.0);
    double largest = 0;
    for (int r = 0; r < world; ++r) {
      const auto d = rank_data(r, count, 3);
      for (std::size_t i = 0; i < count; ++i)
        exact[i] += double(d[i]) / world, largest = std::max(largest, double(std::abs(d[i])));
    }
    for (int r = 1; r < world; ++r)
      REQUIRE(std::memcmp(results[0].data(), results[static_cast<std::size_t>(r)].data(),
                          count * 4) == 0);
    // Two quantizations of 8 bits (scatter, then gather of the reduced shard): a loose but failing
    // bound.
    for (std::size_t i = 0; i < count; ++i)
      REQUIRE(std::abs(results[0][i] - exact[i]) < 4 * 2 * largest / 255);
  }
}

TEST_CASE("identity all_reduce sums exactly what a plain fp32 exchange would, for every rank") {
  const int world = 4;
  const std::size_t count = 77;
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    std::vector<float> data(count);
    for (std::size_t i = 0; i < count; ++i) data[i] = float(i) + 0.25f * comm.rank();  // exact sums
    qsdp::all_reduce(comm, qsdp::identity{}, data.data(), count, qsdp::reduce_op::sum,
                     compress_all);
    for (std::size_t i = 0; i < count; ++i) REQUIRE(data[i] == 4.0f * float(i) + 0.25f * 6);
  });
}

TEST_CASE("a rank that calls differently makes every rank throw an error naming the mismatch") {
  std::vector<float> in(3000, 1.0f), out(3000);
  expect_every_rank_throws(
      [&](qsdp::local_communicator& c) {
        qsdp::all_gather(c, qsdp::uniform<8>{}, in.data(), out.data(), c.rank() == 1 ? 99 : 100);
      },
      "rank 1 called with count 99, rank 0 with 100");
  expect_every_rank_throws(
      [&](qsdp::local_communicator& c) {
        if (c.rank() == 2)
          qsdp::all_gather(c, qsdp::uniform<4>{}, in.data(), out.data(), 100);
        else
          qsdp::all_gather(c, qsdp::uniform<8>{}, in.data(), out.data(), 100);
      },
      "rank 2 called with bits 4, rank 0 with 8");
  expect_every_rank_throws(
      [&](qsdp::local_communicator& c) {
        qsdp::reduce_scatter(c, qsdp::symmetric<8>{.bucket_size = c.rank() == 1 ? 512u : 1024u},
                             in.data(), out.data(), 100, qsdp::reduce_op::sum);
      },
      "rank 1 called with bucket_size 512, rank 0 with 1024");
  expect_every_rank_throws(
      [&](qsdp::local_communicator& c) {
        if (c.rank() == 0)
          qsdp::reduce_scatter(c, qsdp::stochastic<8>{}, in.data(), out.data(), 100,
                               qsdp::reduce_op::sum);
        else
          qsdp::reduce_scatter(c, qsdp::uniform<8>{}, in.data(), out.data(), 100,
                               qsdp::reduce_op::sum);
      },
      "called with quantizer uniform");
  expect_every_rank_throws(
      [&](qsdp::local_communicator& c) {
        qsdp::reduce_scatter(c, qsdp::uniform<8>{}, in.data(), out.data(), 100,
                             c.rank() == 2 ? qsdp::reduce_op::avg : qsdp::reduce_op::sum);
      },
      "rank 2 called with reduce_op avg, rank 0 with sum");
}

TEST_CASE("run_local: a throwing rank is rethrown and releases the others, no hang") {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<int> released{0};
  CHECK_THROWS_WITH_AS(qsdp::run_local(4,
                                       [&](qsdp::local_communicator& comm) {
                                         std::vector<float> in(10, 1.0f), out(40);
                                         if (comm.rank() == 2)
                                           throw std::runtime_error("rank two fails");
                                         try {
                                           qsdp::all_gather(comm, qsdp::uniform<8>{}, in.data(),
                                                            out.data(), 10);
                                         } catch (const qsdp::error&) {
                                           ++released;
                                           throw;
                                         }
                                       }),
                       "rank two fails", std::runtime_error);
  CHECK(released == 3);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("run_local: a rank that returns early releases the others with an error, no hang") {
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(
      qsdp::run_local(3,
                      [&](qsdp::local_communicator& comm) {
                        if (comm.rank() == 1) return;
                        std::vector<float> in(10, 1.0f), out(30);
                        qsdp::all_gather(comm, qsdp::uniform<8>{}, in.data(), out.data(), 10);
                      }),
      doctest::Contains("rank 1 returned while the others were still in a collective"),
      qsdp::error);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK_THROWS_WITH_AS(qsdp::run_local(0, [](qsdp::local_communicator&) {}),
                       doctest::Contains("world is 0; expected >= 1"), qsdp::error);
}

TEST_CASE("scratch is reused: no allocation per call in steady state, compressed or gated") {
  for (const qsdp::call_options options :
       {compress_all,
        qsdp::call_options{.min_compressed_bytes = qsdp::recommended_min_compressed_bytes}}) {
    qsdp::run_local(3, [&](qsdp::local_communicator& comm) {
      std::vector<float> in(3 * 5000, 1.0f), out(3 * 5000);
      qsdp::stochastic<4> q{.seed = 1};
      qsdp::reduce_scatter(comm, q, in.data(), out.data(), 5000, qsdp::reduce_op::sum, options);
      qsdp::all_gather(comm, q, in.data(), out.data(), 5000, options);
      const std::size_t growths = comm.workspace().growths();
      for (int i = 0; i < 20; ++i) {
        qsdp::reduce_scatter(comm, q, in.data(), out.data(), 5000, qsdp::reduce_op::sum, options);
        qsdp::all_gather(comm, q, in.data(), out.data(), 5000, options);
        qsdp::reduce_scatter(comm, q, in.data(), out.data(), 100, qsdp::reduce_op::avg,
                             options);  // smaller: reuse
      }
      CHECK(comm.workspace().growths() == growths);
      CHECK(growths >= 1);
    });
  }
}

TEST_CASE("bad arguments of the collectives are refused with a qsdp::error") {
  qsdp::run_local(2, [&](qsdp::local_communicator& comm) {
    std::vector<float> in(20, 1.0f), out(20);
    CHECK_THROWS_WITH_AS(qsdp::reduce_scatter(comm, qsdp::uniform<8>{}, in.data(), out.data(), 10,
                                              static_cast<qsdp::reduce_op>(7)),
                         doctest::Contains("reduce_op 7 is not sum (1) or avg (2)"), qsdp::error);
    CHECK_THROWS_WITH_AS(
        qsdp::all_reduce(comm, qsdp::uniform<8>{}, in.data(), 10, static_cast<qsdp::reduce_op>(0)),
        doctest::Contains("reduce_op 0 is not sum"), qsdp::error);
    CHECK_THROWS_WITH_AS(qsdp::all_gather(comm, qsdp::uniform<8>{},
                                          static_cast<const float*>(nullptr), out.data(), 10),
                         doctest::Contains("send is null with count 10"), qsdp::error);
    CHECK_THROWS_WITH_AS(
        qsdp::all_gather(comm, qsdp::uniform<8>{.bucket_size = 0}, in.data(), out.data(), 10),
        doctest::Contains("bucket_size is 0"), qsdp::error);
    // Refused before any exchange, on every rank alike: the communicator is still in step.
    qsdp::all_gather(comm, qsdp::uniform<8>{}, in.data(), out.data(), 10);
    CHECK(out[19] == 1.0f);
  });
}

namespace {

/// A transport that damages rank 1's packet on its way (every second all-gather is a payload
/// exchange, after the descriptor exchange; its blocks are [call descriptor | packet]), to show
/// that receivers check what they get.
struct corrupting_communicator {
  static constexpr qsdp::memory_space memory = qsdp::memory_space::host;
  qsdp::local_communicator& inner;
  int gathers = 0;
  int rank() const { return inner.rank(); }
  int size() const { return inner.size(); }
  qsdp::host_workspace& workspace() { return inner.workspace(); }
  std::uint64_t next_call() { return inner.next_call(); }
  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    inner.all_gather_bytes(send, recv, n);
    if (++gathers % 2 == 0) recv[n + 64 + 16] ^= std::byte{1};  // rank 1's header: bucket_size
  }
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    inner.all_to_all_bytes(send, recv, n);
  }
};
static_assert(qsdp::communicator<corrupting_communicator>);

}  // namespace

TEST_CASE("every rank checks the packets it receives and names the sender of a damaged one") {
  std::atomic<int> reported{0};
  CHECK_THROWS_AS(
      qsdp::run_local(
          3,
          [&](qsdp::local_communicator& local) {
            corrupting_communicator comm{local};
            std::vector<float> in(100, 1.0f), out(300);
            try {
              qsdp::all_gather(comm, qsdp::uniform<8>{.bucket_size = 64}, in.data(), out.data(),
                               100, compress_all);
            } catch (const qsdp::error& e) {
              const std::string m = e.what();
              if (m.find("packet bucket_size 65, decoder expects 64 (in the packet from rank 1)") !=
                  std::string::npos)
                ++reported;
              throw;
            }
          }),
      qsdp::error);
  CHECK(reported == 3);
}

TEST_SUITE_END();

TEST_CASE(
    "hadamard<stochastic<4>>: collectives agree across ranks, beat plain 4-bit, refuse a mix") {
  // The demo's gradients (examples/collectives_demo.cpp): N(0, 1e-3), one value in 1000 a 100x
  // outlier; each rank its own.
  auto gradients = [](int rank, std::size_t n) {
    std::mt19937 rng(1234u + static_cast<unsigned>(rank));
    std::normal_distribution<float> normal;
    std::vector<float> v(n);
    for (float& x : v) {
      const float f = normal(rng);
      x = rng() % 1000 == 0 ? 0.1f * f : 1e-3f * f;
    }
    return v;
  };
  for (const int world : {3, 4}) {
    const std::size_t count = 256 * 40 + 77;  // a short last bucket in every chunk
    // Relative L2 error of the reduce-scatter's sums against float64 ones, all ranks together.
    const std::size_t total = count * static_cast<std::size_t>(world);
    std::vector<double> want(total, 0.0);
    for (int r = 0; r < world; ++r) {
      const auto g = gradients(r, total);
      for (std::size_t i = 0; i < total; ++i) want[i] += g[i];
    }
    auto reduce_error = [&](const auto& q) {
      std::mutex m;
      double err2 = 0, norm2 = 0;
      qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
        const auto grad = gradients(comm.rank(), total);
        std::vector<float> out(count);
        qsdp::reduce_scatter(comm, q, grad.data(), out.data(), count, qsdp::reduce_op::sum,
                             compress_all);
        double e = 0, t = 0;
        for (std::size_t i = 0; i < count; ++i) {
          const double w = want[static_cast<std::size_t>(comm.rank()) * count + i];
          e += (out[i] - w) * (out[i] - w);
          t += w * w;
        }
        std::lock_guard lock(m);
        err2 += e, norm2 += t;
      });
      return std::sqrt(err2 / norm2);
    };
    const double plain = reduce_error(qsdp::stochastic<4>{.bucket_size = 256, .seed = 3});
    const double rotated =
        reduce_error(qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = 256, .seed = 3}});
    MESSAGE(world << " ranks: reduce_scatter rel. L2, stochastic<4> " << plain
                  << ", hadamard<stochastic<4>> " << rotated);
    CHECK(plain / rotated >= 3.0);

    // all_gather and all_reduce: every rank ends with the same bits.
    std::mutex m;
    std::vector<std::vector<float>> gathered(static_cast<std::size_t>(world)),
        reduced(static_cast<std::size_t>(world));
    qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
      const qsdp::hadamard<qsdp::random_shift<4>> w{{.bucket_size = 64, .seed = 5}};
      const auto shard = rank_data(comm.rank(), count, 2);
      std::vector<float> full(count * static_cast<std::size_t>(world));
      qsdp::all_gather(comm, w, shard.data(), full.data(), count, compress_all);
      auto data = gradients(comm.rank(), count);
      qsdp::all_reduce(comm, qsdp::hadamard<qsdp::stochastic<8>>{{.bucket_size = 128, .seed = 6}},
                       data.data(), count, qsdp::reduce_op::avg, compress_all);
      std::lock_guard lock(m);
      gathered[static_cast<std::size_t>(comm.rank())] = full;
      reduced[static_cast<std::size_t>(comm.rank())] = data;
    });
    for (int r = 1; r < world; ++r) {
      CHECK(std::memcmp(gathered[0].data(), gathered[static_cast<std::size_t>(r)].data(),
                        gathered[0].size() * sizeof(float)) == 0);
      CHECK(std::memcmp(reduced[0].data(), reduced[static_cast<std::size_t>(r)].data(),
                        reduced[0].size() * sizeof(float)) == 0);
    }
    // The gathered shards are the shards, to 4-bit random_shift's accuracy carried through the
    // rotation (rel. L2 well under 0.2 on these data).
    for (int r = 0; r < world; ++r) {
      const auto shard = rank_data(r, count, 2);
      double e = 0, t = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const double d = gathered[0][static_cast<std::size_t>(r) * count + i] - shard[i];
        e += d * d, t += double(shard[i]) * shard[i];
      }
      CHECK(std::sqrt(e / t) < 0.2);
    }
  }
  // Rank 0 rotates, the others do not: every rank throws, naming the policies.
  std::atomic<int> refused{0};
  qsdp::run_local(3, [&](qsdp::local_communicator& comm) {
    const auto grad = gradients(comm.rank(), 3 * 512);
    std::vector<float> out(512);
    try {
      if (comm.rank() == 0)
        qsdp::reduce_scatter(comm, qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = 256}},
                             grad.data(), out.data(), 512, qsdp::reduce_op::sum);
      else
        qsdp::reduce_scatter(comm, qsdp::stochastic<4>{.bucket_size = 256}, grad.data(), out.data(),
                             512, qsdp::reduce_op::sum);
    } catch (const qsdp::error& e) {
      const std::string what = e.what();
      CHECK(what.find("hadamard<stochastic>") != std::string::npos);
      ++refused;
    }
  });
  CHECK(refused == 3);
}

namespace {

/// Slowly moving weights: N(0, 0.02) shards, each step a N(0, 1e-4) change.
struct drifting_weights {
  std::vector<float> start, steps;  // start: count * world; steps: count * world per step
  drifting_weights(std::size_t count, int world, int step_count) {
    std::mt19937 rng(21);
    std::normal_distribution<float> normal;
    start.resize(count * static_cast<std::size_t>(world));
    for (float& x : start) x = 0.02f * normal(rng);
    steps.resize(start.size() * static_cast<std::size_t>(step_count));
    for (float& x : steps) x = 1e-4f * normal(rng);
  }
};

}  // namespace

TEST_CASE(
    "delta_gather: bit-identical on every rank, 5x+ more accurate than plain after 40 steps") {
  const int world = 3, step_count = 40;
  const std::size_t count = 3000;
  const drifting_weights data(count, world, step_count);
  const std::size_t total = count * static_cast<std::size_t>(world);
  auto run = [&](auto type_tag) {
    using T = decltype(type_tag);
    std::mutex m;
    std::vector<std::vector<T>> fulls(static_cast<std::size_t>(world));
    double delta_err = 0, plain_err = 0, norm = 0;
    qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
      const qsdp::random_shift<4> w{.bucket_size = 2048, .seed = 3};  // SDP4Bit's W4 scale group
      qsdp::delta_gather<T> gather(count, comm.size());
      const std::size_t mine = static_cast<std::size_t>(comm.rank()) * count;
      std::vector<float> exact(data.start.begin() + static_cast<std::ptrdiff_t>(mine),
                               data.start.begin() + static_cast<std::ptrdiff_t>(mine + count));
      std::vector<T> shard(count), full(total), plain(total);
      for (int step = 0; step < step_count; ++step) {
        for (std::size_t i = 0; i < count; ++i) {
          exact[i] += data.steps[static_cast<std::size_t>(step) * total + mine + i];
          shard[i] = from_f<T>(exact[i]);
        }
        gather.all_gather(comm, w, shard.data(), full.data());
        qsdp::all_gather(comm, w, shard.data(), plain.data(), count, compress_all);
      }
      CHECK(gather.calls() == static_cast<std::uint64_t>(step_count));
      CHECK(std::memcmp(gather.reconstruction(), full.data(), total * sizeof(T)) == 0);
      // Errors against the shards every rank sent (as T), gathered exactly.
      std::vector<T> truth(total);
      qsdp::all_gather(comm, qsdp::identity{}, shard.data(), truth.data(), count);
      double d = 0, p = 0, t = 0;
      for (std::size_t i = 0; i < total; ++i) {
        const double x = to_f(truth[i]);
        d += (to_f(full[i]) - x) * (to_f(full[i]) - x);
        p += (to_f(plain[i]) - x) * (to_f(plain[i]) - x);
        t += x * x;
      }
      std::lock_guard lock(m);
      fulls[static_cast<std::size_t>(comm.rank())] = full;
      if (comm.rank() == 0) delta_err = std::sqrt(d / t), plain_err = std::sqrt(p / t);
      norm = t;
    });
    for (int r = 1; r < world; ++r)
      CHECK(std::memcmp(fulls[0].data(), fulls[static_cast<std::size_t>(r)].data(),
                        total * sizeof(T)) == 0);
    MESSAGE("after " << step_count << " steps, rel. L2: delta_gather " << delta_err
                     << ", plain all_gather " << plain_err << " (" << plain_err / delta_err
                     << "x)");
    CHECK(norm > 0);
    return plain_err / delta_err;
  };
  CHECK(run(float{}) >= 5.0);
#if QSDP_HAS_CUDA_HALF
  // bf16 weights: the reconstruction is rounded to bf16 once per call, so the gain stops at bf16's
  // own rounding of the moving weights, still far below 4-bit's error.
  CHECK(run(__nv_bfloat16{}) >= 5.0);
#endif
}

TEST_CASE("delta_gather: NaN recovers at the next call, and ranks that diverge all throw") {
  const std::size_t count = 700;
  const qsdp::stochastic<8> q{.bucket_size = 256, .seed = 1};
  std::atomic<int> threw{0};
  qsdp::run_local(3, [&](qsdp::local_communicator& comm) {
    qsdp::delta_gather<float> gather(count, 3);
    CHECK(gather.memory_bytes() == 0);  // allocated by the first call, where it runs
    CHECK(gather.reconstruction() == nullptr);
    auto shard = rank_data(comm.rank(), count, 9);
    std::vector<float> full(count * 3);
    gather.all_gather(comm, q, shard.data(), full.data());
    CHECK(gather.memory_bytes() == count * 3 * 4 + count * 4 + 3 * 8);
    // A NaN in rank 1's shard: its bucket is NaN everywhere, then recovers.
    if (comm.rank() == 1) shard[300] = std::numeric_limits<float>::quiet_NaN();
    gather.all_gather(comm, q, shard.data(), full.data());
    for (std::size_t i = 0; i < count * 3; ++i) {
      const bool in_bad_bucket = i / count == 1 && (i % count) / 256 == 1;
      REQUIRE(std::isnan(full[i]) == in_bad_bucket);
    }
    if (comm.rank() == 1) shard[300] = 0.5f;
    gather.all_gather(comm, q, shard.data(), full.data());
    for (float v : full) REQUIRE(std::isfinite(v));
    CHECK(std::abs(full[count + 300] - 0.5f) < 0.01f);
    // Rank 2 resets alone: every rank throws, naming the call counts.
    if (comm.rank() == 2) gather.reset();
    try {
      gather.all_gather(comm, q, shard.data(), full.data());
    } catch (const qsdp::error& e) {
      CHECK(std::string(e.what()).find("rank 2's reconstruction has seen 0 calls, rank 0's 3") !=
            std::string::npos);
      ++threw;
    }
  });
  CHECK(threw == 3);
  // Another policy on one rank: all_gather's agreement stops every rank, state untouched.
  threw = 0;
  qsdp::run_local(2, [&](qsdp::local_communicator& comm) {
    qsdp::delta_gather<float> gather(count, 2);
    const auto shard = rank_data(comm.rank(), count, 3);
    std::vector<float> full(count * 2);
    try {
      if (comm.rank() == 0)
        gather.all_gather(comm, q, shard.data(), full.data());
      else
        gather.all_gather(comm, qsdp::stochastic<4>{.bucket_size = 256, .seed = 1}, shard.data(),
                          full.data());
    } catch (const qsdp::error&) {
      ++threw;
    }
    CHECK(gather.calls() == 0);
  });
  CHECK(threw == 2);
  // Arguments.
  CHECK_THROWS_WITH_AS(qsdp::delta_gather<float>(10, 0),
                       doctest::Contains("communicator size is 0"), qsdp::error);
  qsdp::run_local(2, [&](qsdp::local_communicator& comm) {
    qsdp::delta_gather<float> gather(count, 3);
    std::vector<float> shard(count), full(count * 3);
    CHECK_THROWS_WITH_AS(gather.all_gather(comm, q, shard.data(), full.data()),
                         doctest::Contains("communicator has 2 ranks; this delta_gather was made "
                                           "for world 3"),
                         qsdp::error);
    qsdp::delta_gather<float> right(count, 2);
    CHECK_THROWS_WITH_AS(right.all_gather(comm, q, nullptr, full.data()),
                         doctest::Contains("shard is null"), qsdp::error);
  });
}

namespace {

double relative_l2(const float* got, const std::vector<double>& want) {
  double err = 0, ref = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    ref += want[i] * want[i];
  }
  return std::sqrt(err / ref);
}

}  // namespace

// The value the block-scaled layout holds for value i (element times the block's E8M0 scale).
template <class Q>
float layout_value(const Q& q, const std::vector<std::byte>& elements,
                   const std::vector<std::uint8_t>& scales, std::size_t i) {
  using F = typename Q::element_format;
  const unsigned byte = std::to_integer<unsigned>(elements[Q::bits == 4 ? i / 2 : i]);
  const unsigned code = Q::bits == 4 ? (byte >> (4 * (i % 2))) & 0xFu : byte;
  return qsdp::detail::minifloat_decode<F>(code) *
         qsdp::detail::e8m0_value(scales[i / q.bucket_size]);
}

// Rank 0 takes the decoded all_gather, the others the encoded one, in the same calls: every rank's
// layout holds the values rank 0 decoded, bit for bit, and a nearest-rounding layout is what
// unpacking each rank's own packet gives.
template <class Q>
void check_all_gather_encoded(const Q& q, int world, std::size_t count) {
  const auto w = static_cast<std::size_t>(world);
  std::vector<float> decoded(count * w);
  std::vector<std::vector<std::byte>> elements(w);
  std::vector<std::vector<std::uint8_t>> scales(w);
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    const auto me = static_cast<std::size_t>(comm.rank());
    const auto mine = rank_data(comm.rank(), count, 4);
    for (int call = 0; call < 2; ++call) {  // the second call draws other numbers, alike
      if (me == 0) {
        qsdp::all_gather(comm, q, mine.data(), decoded.data(), count, compress_all);
        continue;
      }
      elements[me].assign(qsdp::block_scaled_element_bytes(q, count * w), std::byte{0});
      scales[me].assign(count * w / q.bucket_size, 0);
      qsdp::all_gather_encoded(comm, q, mine.data(), {elements[me].data(), scales[me].data()},
                               count);
    }
  });
  INFO(describe_policy(q) << " world " << world << " count " << count);
  for (std::size_t r = 1; r < w; ++r) {
    std::size_t same = 0;
    for (std::size_t i = 0; i < count * w; ++i)
      same += std::bit_cast<std::uint32_t>(layout_value(q, elements[r], scales[r], i)) ==
                      std::bit_cast<std::uint32_t>(decoded[i])
                  ? 1
                  : 0;
    CHECK(same == count * w);
  }
  if constexpr (!Q::randomized) {
    for (std::size_t r = 0; r < w; ++r) {
      const auto theirs = rank_data(static_cast<int>(r), count, 4);
      std::vector<std::byte> packet(qsdp::compressed_size<float>(q, count));
      qsdp::encode(q, theirs.data(), count, packet.data());
      std::vector<std::byte> own(qsdp::block_scaled_element_bytes(q, count));
      std::vector<std::uint8_t> own_scales(count / q.bucket_size);
      qsdp::unpack_block_scaled(q, packet.data(), count, {own.data(), own_scales.data()});
      const std::size_t at = qsdp::block_scaled_element_bytes(q, r * count);
      CHECK(std::equal(own.begin(), own.end(), elements[1].begin() + static_cast<long>(at)));
      CHECK(std::equal(own_scales.begin(), own_scales.end(),
                       scales[1].begin() + static_cast<long>(r * count / q.bucket_size)));
    }
  }
}

TEST_CASE("all_gather_encoded: the world's MX elements and scales, mixable with all_gather") {
  check_all_gather_encoded(qsdp::mxfp8<qsdp::e4m3>{}, 3, 32 * 70);
  check_all_gather_encoded(qsdp::mxfp6<qsdp::e3m2, qsdp::rounding::stochastic>{.seed = 2}, 4,
                           32 * 33);
  check_all_gather_encoded(qsdp::mxfp4<qsdp::rounding::stochastic>{.seed = 3}, 3, 32 * 50);
  // 2 MiB of values per rank: two pieces, each its own packet, joined in the layout.
  check_all_gather_encoded(qsdp::mxfp4<>{}, 3, std::size_t{1} << 19);

  qsdp::run_local(2, [&](qsdp::local_communicator& comm) {
    const auto mine = rank_data(comm.rank(), 100, 5);
    std::vector<std::byte> elements(200);
    std::vector<std::uint8_t> scales(8);
    CHECK_THROWS_WITH_AS(qsdp::all_gather_encoded(comm, qsdp::mxfp8<>{}, mine.data(),
                                                  {elements.data(), scales.data()}, 100),
                         doctest::Contains("count is 100; the block-scaled layout needs whole "
                                           "blocks, a multiple of bucket_size 32"),
                         qsdp::error);
    CHECK_THROWS_WITH_AS(
        qsdp::all_gather_encoded(comm, qsdp::mxfp8<>{}, mine.data(),
                                 {elements.data(), scales.data()}, 64,
                                 {.min_compressed_bytes = 1024}),
        doctest::Contains("min_compressed_bytes is 1024, which would send these 256 bytes of "
                          "values uncompressed"),
        qsdp::error);
    CHECK_THROWS_WITH_AS(
        qsdp::all_gather_encoded(comm, qsdp::mxfp8<>{}, mine.data(), {nullptr, scales.data()}, 64),
        doctest::Contains("recv.elements is null with count 64"), qsdp::error);
  });
}

TEST_CASE("nvfp4 through all_gather, reduce_scatter and delta_gather: a tensor scale per packet") {
  const int world = 4;
  const std::size_t count = 1000;
  // Ranks whose data differ by 2^20 in magnitude: each packet's tensor scale fits its own rank.
  auto data = [&](int rank) {
    auto x = rank_data(rank, count * world, 3);
    for (float& v : x) v *= std::ldexp(1.0f, 20 * (rank % 2) - 10);
    return x;
  };
  std::mutex m;
  std::vector<std::string> failures;
  auto fail_if = [&](bool bad, const std::string& what) {
    if (!bad) return;
    std::lock_guard lock(m);
    failures.push_back(what);
  };
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    const int me = comm.rank();
    const auto at = [](int r) { return static_cast<std::size_t>(r) * count; };
    const std::string who = "rank " + std::to_string(me) + ": ";
    std::vector<float> full(count * world);
    qsdp::nvfp4<> w{};
    const auto mine = data(me);
    qsdp::all_gather(comm, w, mine.data(), full.data(), count, compress_all);
    for (int r = 0; r < world; ++r) {
      const auto theirs = data(r);
      const std::vector<double> want(theirs.begin(), theirs.begin() + count);
      const double e = relative_l2(full.data() + at(r), want);
      fail_if(!(e < 0.15),
              who + "all_gather of rank " + std::to_string(r) + ": rel. L2 " + std::to_string(e));
    }

    qsdp::hadamard<qsdp::nvfp4<qsdp::rounding::stochastic>> g{{.seed = 5}};
    std::vector<float> out(count);
    qsdp::reduce_scatter(comm, g, mine.data(), out.data(), count, qsdp::reduce_op::sum,
                         compress_all);
    std::vector<double> sum(count, 0.0);
    for (int r = 0; r < world; ++r) {
      const auto theirs = data(r);
      for (std::size_t i = 0; i < count; ++i) sum[i] += theirs[at(me) + i];
    }
    const double e = relative_l2(out.data(), sum);
    fail_if(!(e < 0.3), who + "reduce_scatter: rel. L2 " + std::to_string(e));

    // delta_gather: the second call sends the first call's error, whose own tensor scale is far
    // smaller, so the reconstruction's error shrinks.
    qsdp::delta_gather<float> gather(count, world);
    gather.all_gather(comm, w, mine.data(), full.data());
    const std::vector<double> exact(mine.begin(), mine.begin() + count);
    const double first = relative_l2(full.data() + at(me), exact);
    gather.all_gather(comm, w, mine.data(), full.data());
    const double second = relative_l2(full.data() + at(me), exact);
    fail_if(!(second < first / 4), who + "delta_gather: rel. L2 " + std::to_string(first) +
                                       " then " + std::to_string(second));
  });
  for (const auto& f : failures) FAIL_CHECK(f);
  CHECK(failures.empty());
}
