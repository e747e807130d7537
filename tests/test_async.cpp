// SPDX-License-Identifier: Apache-2.0
// Started collectives (qsdp::all_gather_async and its kin) over the in-process communicator: they
// return before the collective is done, give the bytes of the same blocking calls in the same
// order, mix with blocking calls and groups, throw bad arguments at the call and the collective's
// errors at wait() on every rank, and never lose an error whose work was dropped.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <qsdp/collectives.hpp>

#include "rank_checks.hpp"
#include "support.hpp"

TEST_SUITE_BEGIN("async");

using namespace qsdp_test;

namespace {

constexpr qsdp::call_options compress_all{.min_compressed_bytes = 0};
constexpr int world = 3;
constexpr std::size_t count = 1500;

std::vector<float> values(int rank, std::size_t n, std::uint32_t salt) {
  return make_data(distribution::gradient_with_outliers, n,
                   static_cast<std::uint32_t>(rank * 977 + salt));
}

/// Checks that fn throws a qsdp::error whose message contains `needle`.
template <class Fn>
void check_throws(Fn&& fn, const char* needle, const char* what) {
  INFO(what);
  CHECK_THROWS_WITH_AS(fn(), doctest::Contains(needle), qsdp::error);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// One rank's calls: an all_gather, a reduce_scatter, an all_reduce and a grouped pair, with
/// stochastic rounding so that a call run at another call index gives other bytes.
struct outputs {
  std::vector<float> gathered, scattered, reduced, group_gathered, group_scattered;
};

outputs make_outputs(int rank) {
  outputs o;
  o.gathered.assign(count * world, 0.0f);
  o.scattered.assign(count, 0.0f);
  o.reduced = values(rank, count, 3);
  o.group_gathered.assign(count * world, 0.0f);
  o.group_scattered.assign(count, 0.0f);
  return o;
}

/// The calls made blocking, in order.
outputs blocking_calls(qsdp::local_communicator& comm) {
  const int rank = comm.rank();
  outputs o = make_outputs(rank);
  const std::vector<float> shard = values(rank, count, 1), full = values(rank, count * world, 2);
  const qsdp::stochastic<8> q8;
  qsdp::all_gather(comm, q8, shard.data(), o.gathered.data(), count, compress_all);
  qsdp::reduce_scatter(comm, q8, full.data(), o.scattered.data(), count, qsdp::reduce_op::avg,
                       compress_all);
  qsdp::all_reduce(comm, qsdp::stochastic<4>{}, o.reduced.data(), count, qsdp::reduce_op::sum,
                   compress_all);
  qsdp::group_start(comm);
  qsdp::all_gather(comm, q8, shard.data(), o.group_gathered.data(), count, compress_all);
  qsdp::reduce_scatter(comm, q8, full.data(), o.group_scattered.data(), count, qsdp::reduce_op::sum,
                       compress_all);
  qsdp::group_end(comm);
  return o;
}

}  // namespace

TEST_CASE("started collectives give the bytes of the blocking calls, in the order started") {
  std::vector<outputs> blocking(world), started(world), mixed(world);
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    blocking[static_cast<std::size_t>(comm.rank())] = blocking_calls(comm);
  });
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    const int rank = comm.rank();
    outputs o = make_outputs(rank);
    const std::vector<float> shard = values(rank, count, 1), full = values(rank, count * world, 2);
    const qsdp::stochastic<8> q8;
    std::vector<qsdp::work> works;
    works.push_back(
        qsdp::all_gather_async(comm, q8, shard.data(), o.gathered.data(), count, compress_all));
    works.push_back(qsdp::reduce_scatter_async(comm, q8, full.data(), o.scattered.data(), count,
                                               qsdp::reduce_op::avg, compress_all));
    works.push_back(qsdp::all_reduce_async(comm, qsdp::stochastic<4>{}, o.reduced.data(), count,
                                           qsdp::reduce_op::sum, compress_all));
    qsdp::group_start(comm);
    qsdp::all_gather(comm, q8, shard.data(), o.group_gathered.data(), count, compress_all);
    qsdp::reduce_scatter(comm, q8, full.data(), o.group_scattered.data(), count,
                         qsdp::reduce_op::sum, compress_all);
    works.push_back(qsdp::group_end_async(comm));
    for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();  // any order
    started[static_cast<std::size_t>(rank)] = std::move(o);
  });
  // Started and blocking calls mixed: each blocking call waits for the started ones before it.
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    const int rank = comm.rank();
    outputs o = make_outputs(rank);
    const std::vector<float> shard = values(rank, count, 1), full = values(rank, count * world, 2);
    const qsdp::stochastic<8> q8;
    qsdp::work gather =
        qsdp::all_gather_async(comm, q8, shard.data(), o.gathered.data(), count, compress_all);
    qsdp::reduce_scatter(comm, q8, full.data(), o.scattered.data(), count, qsdp::reduce_op::avg,
                         compress_all);
    CHECK(gather.test());  // the blocking call ran after it
    qsdp::work reduce = qsdp::all_reduce_async(comm, qsdp::stochastic<4>{}, o.reduced.data(), count,
                                               qsdp::reduce_op::sum, compress_all);
    qsdp::group_start(comm);
    qsdp::all_gather(comm, q8, shard.data(), o.group_gathered.data(), count, compress_all);
    qsdp::reduce_scatter(comm, q8, full.data(), o.group_scattered.data(), count,
                         qsdp::reduce_op::sum, compress_all);
    qsdp::group_end(comm);
    reduce.wait();
    mixed[static_cast<std::size_t>(rank)] = std::move(o);
  });
  for (std::size_t r = 0; r < world; ++r) {
    INFO("rank " << r);
    for (const std::vector<outputs>* run : {&started, &mixed}) {
      const outputs& a = blocking[r];
      const outputs& b = (*run)[r];
      CHECK(same_bits(a.gathered, b.gathered));
      CHECK(same_bits(a.scattered, b.scattered));
      CHECK(same_bits(a.reduced, b.reduced));
      CHECK(same_bits(a.group_gathered, b.group_gathered));
      CHECK(same_bits(a.group_scattered, b.group_scattered));
    }
  }
  // The calls did something: stochastic rounding of distinct values is not the identity.
  CHECK_FALSE(same_bits(blocking[0].gathered, std::vector<float>(count * world, 0.0f)));
}

TEST_CASE("a started collective returns before its peers have joined, and test() says so") {
  std::atomic<bool> returned_early{false}, pending_seen{false};
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    std::vector<float> shard(count, static_cast<float>(comm.rank() + 1)), full(count * world);
    if (comm.rank() != 0) {
      // The peers join late; rank 0's collective cannot finish before they do.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      qsdp::all_gather(comm, qsdp::uniform<8>{}, shard.data(), full.data(), count, compress_all);
      return;
    }
    const auto before = std::chrono::steady_clock::now();
    qsdp::work w = qsdp::all_gather_async(comm, qsdp::uniform<8>{}, shard.data(), full.data(),
                                          count, compress_all);
    returned_early = std::chrono::steady_clock::now() - before < std::chrono::milliseconds(200);
    pending_seen = !w.test() && !w.wait_for(std::chrono::milliseconds(10));
    w.wait();
    CHECK(w.test());
    for (int r = 0; r < world; ++r)
      CHECK(full[static_cast<std::size_t>(r) * count] == doctest::Approx(r + 1.0f).epsilon(0.01));
  });
  CHECK(returned_early);
  CHECK(pending_seen);
}

TEST_CASE("bad arguments throw at the call; the collective's errors at wait(), on every rank") {
  std::vector<float> send(64, 1.0f), recv(world * 64);
  SUBCASE("a null buffer throws at the call, and nothing is started") {
    qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
      std::vector<float> s(64, 1.0f), r(world * 64);
      check_throws(
          [&] {
            (void)qsdp::all_gather_async(comm, qsdp::uniform<8>{}, s.data(),
                                         static_cast<float*>(nullptr), 64, compress_all);
          },
          "qsdp::all_gather_async", "null recv");
      check_throws(
          [&] {
            (void)qsdp::reduce_scatter_async(comm, qsdp::uniform<8>{}, r.data(), s.data(), 64,
                                             static_cast<qsdp::reduce_op>(7), compress_all);
          },
          "op", "a bad op");
      // The ranks are still in step: a collective after the refusals runs.
      qsdp::all_gather_async(comm, qsdp::uniform<8>{}, s.data(), r.data(), 64, compress_all).wait();
    });
  }
  SUBCASE("ranks that started different collectives all throw at wait()") {
    expect_every_rank_throws(
        [&](qsdp::local_communicator& comm) {
          std::vector<float> s(65, 1.0f), r(world * 65);
          const std::size_t n = comm.rank() == 1 ? 65 : 64;
          qsdp::work w =
              qsdp::all_gather_async(comm, qsdp::uniform<8>{}, s.data(), r.data(), n, compress_all);
          w.wait();
        },
        "ranks disagree");
  }
  SUBCASE("an error rethrown once; the communicator goes on") {
    qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
      std::vector<float> s(65, 1.0f), r(world * 65);
      const std::size_t n = comm.rank() == 1 ? 65 : 64;
      qsdp::work w =
          qsdp::all_gather_async(comm, qsdp::uniform<8>{}, s.data(), r.data(), n, compress_all);
      CHECK_THROWS_AS(w.wait(), qsdp::error);
      CHECK_NOTHROW(w.wait());
      qsdp::all_gather(comm, qsdp::uniform<8>{}, s.data(), r.data(), 64, compress_all);
      CHECK(r[64] == doctest::Approx(1.0f).epsilon(0.01));
    });
  }
  SUBCASE("a dropped work's error is rethrown by the next call, naming what happened") {
    qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
      std::vector<float> s(65, 1.0f), r(world * 65);
      const std::size_t n = comm.rank() == 1 ? 65 : 64;
      {
        qsdp::work dropped =
            qsdp::all_gather_async(comm, qsdp::uniform<8>{}, s.data(), r.data(), n, compress_all);
      }  // destroyed unwaited: waits, keeps the error
      check_throws(
          [&] { qsdp::all_gather(comm, qsdp::uniform<8>{}, s.data(), r.data(), 64, compress_all); },
          "destroyed before wait() rethrew the error", "the next call");
      // Thrown once: the call after it runs.
      qsdp::all_gather(comm, qsdp::uniform<8>{}, s.data(), r.data(), 64, compress_all);
    });
  }
}

TEST_CASE("a collective cannot be started inside a group; the group stays usable") {
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    std::vector<float> s(64, 1.0f), r(world * 64);
    qsdp::group_start(comm);
    check_throws(
        [&] {
          (void)qsdp::all_gather_async(comm, qsdp::uniform<8>{}, s.data(), r.data(), 64,
                                       compress_all);
        },
        "start the whole group with qsdp::group_end_async", "started in a group");
    qsdp::all_gather(comm, qsdp::uniform<8>{}, s.data(), r.data(), 64, compress_all);
    qsdp::group_end_async(comm).wait();
    CHECK(r[2 * 64] == doctest::Approx(1.0f).epsilon(0.01));
  });
}

TEST_CASE("group_end_async without a group throws; an inner group's work is empty") {
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    std::vector<float> s(64, 1.0f), r(world * 64);
    check_throws([&] { (void)qsdp::group_end_async(comm); },
                 "qsdp::group_end_async: no group is open", "no group");
    qsdp::group_start(comm);
    qsdp::group_start(comm);
    qsdp::all_gather(comm, qsdp::uniform<8>{}, s.data(), r.data(), 64, compress_all);
    qsdp::work inner = qsdp::group_end_async(comm);
    CHECK_FALSE(inner.valid());
    qsdp::work outer = qsdp::group_end_async(comm);
    CHECK(outer.valid());
    outer.wait();
    CHECK_FALSE(comm.workspace().group.open());
    CHECK(r[2 * 64] == doctest::Approx(1.0f).epsilon(0.01));
  });
}

TEST_CASE("a work moves; destroying an unfinished one waits for its collective") {
  std::atomic<int> finished_before_scope_end{0};
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    std::vector<float> shard(count, 1.0f), full(count * world, 0.0f);
    {
      qsdp::work a = qsdp::all_gather_async(comm, qsdp::uniform<8>{}, shard.data(), full.data(),
                                            count, compress_all);
      qsdp::work b = std::move(a);
      CHECK_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): moved-from is empty
      CHECK(a.test());
    }  // b waits here
    if (full[(world - 1) * count] == doctest::Approx(1.0f).epsilon(0.01))
      ++finished_before_scope_end;
  });
  CHECK(finished_before_scope_end == world);
}

TEST_SUITE_END();
