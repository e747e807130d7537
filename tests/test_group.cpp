// SPDX-License-Identifier: Apache-2.0
// Groups of host collectives (qsdp::group_start / qsdp::group_end) over the in-process
// communicator: a group gives every member the bits of the same call made alone, in one agreement
// and one exchange; the size gate applies to the group's total; every way ranks can disagree on a
// group ends in an error on every rank; calls that cannot be grouped are refused.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include <qsdp/collectives.hpp>

#include "rank_checks.hpp"
#include "support.hpp"

TEST_SUITE_BEGIN("group");

using namespace qsdp_test;

namespace {

constexpr qsdp::call_options compress_all{.min_compressed_bytes = 0};

template <class T>
std::vector<T> rank_values(int rank, std::size_t n, std::uint32_t salt) {
  return convert<T>(
      make_data(rank % 2 ? distribution::normal : distribution::gradient_with_outliers, n,
                static_cast<std::uint32_t>(rank * 131 + salt)));
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

/// One rank's buffers for a mix of collectives: every member's input and output, and a follow-up
/// call after the group (or the single calls) that shows the call indices stayed in step.
struct mix_buffers {
  std::vector<float> ag_send, ag_recv, rs_send, rs_recv, big_send, big_recv, after_send, after_recv;
  std::vector<__nv_bfloat16> bf_send, bf_recv, hrs_send, hrs_recv;
  std::vector<float> inplace;  // an in-place all_gather: this rank's shard at rank * count
};

constexpr std::size_t ag_count = 1000, rs_count = 777, bf_count = 4096, hrs_count = 2048,
                      inplace_count = 513;
// Two pipeline pieces: at least twice qsdp::min_piece_bytes of floats per peer.
constexpr std::size_t big_count = 2 * qsdp::min_piece_bytes / sizeof(float) + 4321;

mix_buffers make_mix(int rank, int world, bool big) {
  const auto w = static_cast<std::size_t>(world);
  mix_buffers b;
  b.ag_send = rank_values<float>(rank, ag_count, 1);
  b.ag_recv.assign(ag_count * w, 0.0f);
  b.rs_send = rank_values<float>(rank, rs_count * w, 2);
  b.rs_recv.assign(rs_count, 0.0f);
  b.bf_send = rank_values<__nv_bfloat16>(rank, bf_count, 3);
  b.bf_recv.assign(bf_count * w, __nv_bfloat16{});
  b.hrs_send = rank_values<__nv_bfloat16>(rank, hrs_count * w, 4);
  b.hrs_recv.assign(hrs_count, __nv_bfloat16{});
  if (big) {
    b.big_send = rank_values<float>(rank, big_count * w, 5);
    b.big_recv.assign(big_count, 0.0f);
  }
  b.inplace.assign(inplace_count * w, 0.0f);
  const auto shard = rank_values<float>(rank, inplace_count, 6);
  std::copy(shard.begin(), shard.end(), b.inplace.begin() + rank * inplace_count);
  b.after_send = rank_values<float>(rank, 300, 7);
  b.after_recv.assign(300 * w, 0.0f);
  return b;
}

/// The mix's calls, on any communicator, all with the same call options.
template <class Comm>
void issue_mix(Comm& comm, mix_buffers& b, qsdp::call_options options) {
  const std::size_t rank = static_cast<std::size_t>(comm.rank());
  qsdp::all_gather(comm, qsdp::uniform<8>{.bucket_size = 128}, b.ag_send.data(), b.ag_recv.data(),
                   ag_count, options);
  qsdp::reduce_scatter(comm, qsdp::stochastic<4>{.bucket_size = 64, .seed = 9}, b.rs_send.data(),
                       b.rs_recv.data(), rs_count, qsdp::reduce_op::avg, options);
  qsdp::all_gather(comm, qsdp::symmetric<4>{.bucket_size = 32}, b.bf_send.data(), b.bf_recv.data(),
                   bf_count, options);
  qsdp::reduce_scatter(comm, qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = 256, .seed = 3}},
                       b.hrs_send.data(), b.hrs_recv.data(), hrs_count, qsdp::reduce_op::sum,
                       options);
  if (!b.big_send.empty())
    qsdp::reduce_scatter(comm, qsdp::stochastic<8>{.bucket_size = 512, .seed = 1},
                         b.big_send.data(), b.big_recv.data(), big_count, qsdp::reduce_op::sum,
                         options);
  qsdp::all_gather(comm, qsdp::random_shift<6>{.bucket_size = 64, .seed = 4},
                   b.inplace.data() + rank * inplace_count, b.inplace.data(), inplace_count,
                   options);
}

template <class Comm>
void issue_after(Comm& comm, mix_buffers& b) {
  qsdp::all_gather(comm, qsdp::stochastic<4>{.bucket_size = 64, .seed = 2}, b.after_send.data(),
                   b.after_recv.data(), 300, compress_all);
}

void check_same(const mix_buffers& a, const mix_buffers& b) {
  CHECK(same_bits(a.ag_recv, b.ag_recv));
  CHECK(same_bits(a.rs_recv, b.rs_recv));
  CHECK(same_bits(a.bf_recv, b.bf_recv));
  CHECK(same_bits(a.hrs_recv, b.hrs_recv));
  CHECK(same_bits(a.big_recv, b.big_recv));
  CHECK(same_bits(a.inplace, b.inplace));
  CHECK(same_bits(a.after_recv, b.after_recv));
}

struct mix_result {
  mix_buffers single, grouped;
  int group_exchanges = 0;
};

/// Every rank runs the mix twice, one call at a time and then as a group, on fresh communicators
/// (run_local) so that both start from the same call index.
std::vector<mix_result> run_mix(int world, bool big, qsdp::call_options options,
                                bool overlapping = false) {
  std::vector<mix_result> results(static_cast<std::size_t>(world));
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    mix_buffers& b = results[static_cast<std::size_t>(comm.rank())].single;
    b = make_mix(comm.rank(), world, big);
    issue_mix(comm, b, options);
    issue_after(comm, b);
  });
  if (overlapping) {  // local_communicator itself: segments, each its own started exchange
    qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
      mix_result& r = results[static_cast<std::size_t>(comm.rank())];
      r.grouped = make_mix(comm.rank(), world, big);
      qsdp::group_start(comm);
      issue_mix(comm, r.grouped, options);
      qsdp::group_end(comm);
      issue_after(comm, r.grouped);
    });
    return results;
  }
  qsdp::run_local(world, [&](qsdp::local_communicator& local) {
    counting_communicator comm{local};
    mix_result& r = results[static_cast<std::size_t>(comm.rank())];
    r.grouped = make_mix(comm.rank(), world, big);
    qsdp::group_start(comm);
    issue_mix(comm, r.grouped, options);
    CHECK(comm.exchanges == 0);  // recorded, not run
    qsdp::group_end(comm);
    r.group_exchanges = comm.exchanges;
    issue_after(comm, r.grouped);
  });
  return results;
}

}  // namespace

TEST_CASE("a group gives every member the bits of the call made alone, in two exchanges") {
  for (int world : {1, 2, 3}) {
    CAPTURE(world);
    for (const mix_result& r : run_mix(world, false, compress_all)) {
      check_same(r.single, r.grouped);
      CHECK(r.group_exchanges == 2);  // the agreement and the data
    }
  }
}

TEST_CASE("a member the pipeline would split into pieces keeps the pieces' random streams") {
  for (const mix_result& r : run_mix(3, true, compress_all)) {
    check_same(r.single, r.grouped);
    CHECK(r.group_exchanges == 2);
  }
}

TEST_CASE("on an overlapping communicator the group's segments give the same bits") {
  // The 2-piece member fills a segment (group_segment_bytes) of its own; the calls after it
  // start another, exchanged while the first is finished.
  static_assert(qsdp::overlapping_communicator<qsdp::local_communicator>);
  for (const mix_result& r : run_mix(3, true, compress_all, true)) check_same(r.single, r.grouped);
  for (const mix_result& r : run_mix(2, false, compress_all, true)) check_same(r.single, r.grouped);
}

TEST_CASE("below the gate, a group gives every member the gated call's bits") {
  // Each member is below a gate of 1 MiB, and so is the group's total.
  constexpr qsdp::call_options gate{.min_compressed_bytes = std::size_t{1} << 20};
  for (const mix_result& r : run_mix(3, false, gate)) {
    check_same(r.single, r.grouped);
    CHECK(r.group_exchanges == 2);
  }
  // Gated means exact: every rank's all_gather shard arrives unchanged.
  qsdp::run_local(3, [&](qsdp::local_communicator& comm) {
    const auto mine = rank_values<float>(comm.rank(), ag_count, 1);
    std::vector<float> all(3 * ag_count);
    qsdp::group_start(comm);
    qsdp::all_gather(comm, qsdp::uniform<2>{}, mine.data(), all.data(), ag_count, gate);
    qsdp::group_end(comm);
    for (int r = 0; r < 3; ++r)
      CHECK(same_bits(
          std::vector<float>(all.begin() + r * ag_count, all.begin() + (r + 1) * ag_count),
          rank_values<float>(r, ag_count, 1)));
  });
}

TEST_CASE("the gate applies to the group's total: small members of a large group are compressed") {
  // Every member alone is below a gate of 8 KiB per peer, the group above it: each member gets
  // the bits of its call made alone with the gate off.
  constexpr qsdp::call_options gate{.min_compressed_bytes = 8 * 1024};
  std::vector<std::vector<float>> alone(3), grouped(3);
  constexpr std::size_t n = 1500;  // 6000 bytes per member per peer, 12000 for the group
  const qsdp::stochastic<4> q{.bucket_size = 64, .seed = 5};
  auto body = [&](qsdp::local_communicator& comm, bool group, std::vector<float>& out) {
    const auto a = rank_values<float>(comm.rank(), n, 1), b = rank_values<float>(comm.rank(), n, 2);
    out.assign(6 * n, 0.0f);
    if (group) qsdp::group_start(comm);
    qsdp::all_gather(comm, q, a.data(), out.data(), n, group ? gate : compress_all);
    qsdp::all_gather(comm, q, b.data(), out.data() + 3 * n, n, group ? gate : compress_all);
    if (group) qsdp::group_end(comm);
  };
  qsdp::run_local(3, [&](qsdp::local_communicator& comm) {
    body(comm, false, alone[static_cast<std::size_t>(comm.rank())]);
  });
  qsdp::run_local(3, [&](qsdp::local_communicator& comm) {
    body(comm, true, grouped[static_cast<std::size_t>(comm.rank())]);
  });
  for (int r = 0; r < 3; ++r) CHECK(same_bits(alone[r], grouped[r]));
  // Compressed, not exact: 4-bit values differ from the inputs.
  CHECK_FALSE(same_bits(std::vector<float>(grouped[0].begin(), grouped[0].begin() + n),
                        rank_values<float>(0, n, 1)));
}

TEST_CASE("an empty group and nested groups") {
  qsdp::run_local(3, [&](qsdp::local_communicator& local) {
    counting_communicator comm{local};
    qsdp::group_start(comm);
    qsdp::group_end(comm);
    CHECK(comm.exchanges == 1);  // the agreement only: a rank with calls would be caught there
    const auto mine = rank_values<float>(comm.rank(), 100, 1);
    std::vector<float> all(300), alone(300);
    qsdp::group_start(comm);
    qsdp::group_start(comm);
    qsdp::all_gather(comm, qsdp::uniform<8>{}, mine.data(), all.data(), 100, compress_all);
    qsdp::group_end(comm);  // the inner end runs nothing
    CHECK(comm.exchanges == 1);
    qsdp::group_end(comm);
    CHECK(comm.exchanges == 3);
    CHECK(all[static_cast<std::size_t>(comm.rank()) * 100] != 0.0f);
  });
}

TEST_CASE("a group run again moves in one exchange, its descriptor in front") {
  qsdp::run_local(3, [&](qsdp::local_communicator& local) {
    counting_communicator comm{local};
    const auto mine = rank_values<float>(comm.rank(), 3 * 100, 1);
    std::vector<float> all(300), first(300), shard(100);
    auto group = [&] {
      qsdp::group_start(comm);
      qsdp::all_gather(comm, qsdp::uniform<8>{}, mine.data(), all.data(), 100, compress_all);
      qsdp::reduce_scatter(comm, qsdp::stochastic<4>{}, mine.data(), shard.data(), 100,
                           qsdp::reduce_op::avg, compress_all);
      qsdp::group_end(comm);
    };
    group();
    CHECK(comm.exchanges == 2);  // the group's first run agrees on it first
    first = all;
    group();
    CHECK(comm.exchanges == 3);
    CHECK(same_bits(all, first));  // uniform<8>: the same packets, decoded after the check
    // An empty group agrees every time: a rank with calls would be caught there.
    for (int i = 0; i < 2; ++i) {
      qsdp::group_start(comm);
      qsdp::group_end(comm);
    }
    CHECK(comm.exchanges == 5);
  });
}

TEST_CASE("a group_end without a group_start throws, and so do calls a group cannot hold") {
  qsdp::run_local(1, [&](qsdp::local_communicator& comm) {
    CHECK_THROWS_WITH_AS(qsdp::group_end(comm), doctest::Contains("no group is open"), qsdp::error);
    std::vector<float> data(64, 1.0f);
    qsdp::group_start(comm);
    CHECK_THROWS_WITH_AS(qsdp::all_reduce(comm, qsdp::uniform<8>{}, data.data(), data.size(),
                                          qsdp::reduce_op::sum, compress_all),
                         doctest::Contains("qsdp::all_reduce: called while a group is open"),
                         qsdp::error);
    qsdp::delta_gather<float> delta(data.size(), comm.size());
    std::vector<float> out(64);
    CHECK_THROWS_WITH_AS(delta.all_gather(comm, qsdp::uniform<8>{}, data.data(), out.data()),
                         doctest::Contains("group is open"), qsdp::error);
    // A gate other than the group's first call's.
    qsdp::all_gather(comm, qsdp::uniform<8>{}, data.data(), out.data(), 64, compress_all);
    CHECK_THROWS_WITH_AS(qsdp::all_gather(comm, qsdp::uniform<8>{}, data.data(), out.data(), 64,
                                          qsdp::call_options{.min_compressed_bytes = 1}),
                         doctest::Contains("a group has one size gate"), qsdp::error);
    // A bad argument is refused when the call is recorded, as the single call refuses it.
    CHECK_THROWS_AS(qsdp::all_gather(comm, qsdp::uniform<8>{}, data.data(),
                                     static_cast<float*>(nullptr), 64, compress_all),
                    qsdp::error);
    qsdp::group_end(comm);  // the one good call runs
    CHECK(out[0] == doctest::Approx(1.0f));
    // The communicator is back to single calls.
    qsdp::all_reduce(comm, qsdp::uniform<8>{}, data.data(), data.size(), qsdp::reduce_op::sum,
                     compress_all);
  });
}

TEST_CASE("ranks that disagree on a group all throw, and can go on") {
  std::vector<float> buf(3 * 4096, 0.5f);
  auto grouped = [&](qsdp::local_communicator& comm, int calls, std::size_t count) {
    std::vector<float> send(count, 1.0f), recv(3 * count);
    qsdp::group_start(comm);
    for (int i = 0; i < calls; ++i)
      qsdp::all_gather(comm, qsdp::uniform<8>{}, send.data(), recv.data(), count, compress_all);
    qsdp::group_end(comm);
  };
  SUBCASE("one rank's group is shorter") {
    expect_every_rank_throws(
        [&](qsdp::local_communicator& comm) { grouped(comm, comm.rank() == 1 ? 1 : 2, 64); },
        "rank 1's group holds 1 calls, rank 0's 2");
  }
  SUBCASE("one rank's group is empty") {
    expect_every_rank_throws(
        [&](qsdp::local_communicator& comm) { grouped(comm, comm.rank() == 1 ? 0 : 2, 64); },
        "rank 1's group holds 0 calls, rank 0's 2");
  }
  SUBCASE("one rank's member has another count") {
    expect_every_rank_throws(
        [&](qsdp::local_communicator& comm) { grouped(comm, 2, comm.rank() == 2 ? 65 : 64); },
        "ranks disagree on call 0 of the group (all_gather)");
  }
  SUBCASE("one rank's member has another policy") {
    expect_every_rank_throws(
        [&](qsdp::local_communicator& comm) {
          std::vector<float> send(64, 1.0f), recv(3 * 64);
          qsdp::group_start(comm);
          qsdp::all_gather(comm, qsdp::uniform<8>{}, send.data(), recv.data(), 64, compress_all);
          if (comm.rank() == 1)
            qsdp::all_gather(comm, qsdp::uniform<4>{}, send.data(), recv.data(), 64, compress_all);
          else
            qsdp::all_gather(comm, qsdp::uniform<8>{}, send.data(), recv.data(), 64, compress_all);
          qsdp::group_end(comm);
        },
        "call 1 of the group");
  }
  SUBCASE("groups agreed before, then one rank runs the other: the descriptors in front catch it") {
    expect_every_rank_throws(
        [&](qsdp::local_communicator& comm) {
          std::vector<float> send(3 * 64, 1.0f), recv(64);
          auto group = [&](qsdp::reduce_op op) {
            qsdp::group_start(comm);
            qsdp::reduce_scatter(comm, qsdp::uniform<8>{}, send.data(), recv.data(), 64, op,
                                 compress_all);
            qsdp::group_end(comm);
          };
          group(qsdp::reduce_op::sum);
          group(qsdp::reduce_op::avg);
          group(comm.rank() == 1 ? qsdp::reduce_op::avg : qsdp::reduce_op::sum);
        },
        "ranks disagree on the group: a call in it differs from rank 0's");
  }
  SUBCASE("one rank makes a single call where the others end a group") {
    expect_every_rank_throws(
        [&](qsdp::local_communicator& comm) {
          std::vector<float> send(64, 1.0f), recv(3 * 64);
          if (comm.rank() != 0) qsdp::group_start(comm);
          qsdp::all_gather(comm, qsdp::uniform<8>{}, send.data(), recv.data(), 64, compress_all);
          if (comm.rank() != 0) qsdp::group_end(comm);
        },
        "ranks disagree");
  }
  SUBCASE("after the error, the ranks go on with single calls and groups") {
    qsdp::run_local(3, [&](qsdp::local_communicator& comm) {
      try {
        grouped(comm, comm.rank() == 1 ? 1 : 2, 64);
      } catch (const qsdp::error&) {
      }
      CHECK_FALSE(comm.workspace().group.open());
      grouped(comm, 2, 64);
      std::vector<float> data(64, 1.0f);
      qsdp::all_reduce(comm, qsdp::uniform<8>{}, data.data(), 64, qsdp::reduce_op::sum,
                       compress_all);
      CHECK(data[0] == doctest::Approx(3.0f).epsilon(0.01));
    });
  }
}

TEST_CASE("in-place members: all_gather from the rank's shard, reduce_scatter into it") {
  constexpr std::size_t n = 700;
  std::vector<std::vector<float>> single(3), grouped(3);
  auto body = [&](qsdp::local_communicator& comm, bool group, std::vector<float>& out) {
    const auto rank = static_cast<std::size_t>(comm.rank());
    std::vector<float> grads = rank_values<float>(comm.rank(), 3 * n, 11);
    std::vector<float> params(3 * n, 0.0f);
    const auto shard = rank_values<float>(comm.rank(), n, 12);
    std::copy(shard.begin(), shard.end(), params.begin() + rank * n);
    if (group) qsdp::group_start(comm);
    qsdp::reduce_scatter(comm, qsdp::stochastic<8>{.seed = 2}, grads.data(),
                         grads.data() + rank * n, n, qsdp::reduce_op::avg, compress_all);
    qsdp::all_gather(comm, qsdp::uniform<8>{}, params.data() + rank * n, params.data(), n,
                     compress_all);
    if (group) qsdp::group_end(comm);
    out.assign(grads.begin() + rank * n, grads.begin() + (rank + 1) * n);
    out.insert(out.end(), params.begin(), params.end());
  };
  qsdp::run_local(3, [&](qsdp::local_communicator& comm) {
    body(comm, false, single[static_cast<std::size_t>(comm.rank())]);
  });
  qsdp::run_local(3, [&](qsdp::local_communicator& comm) {
    body(comm, true, grouped[static_cast<std::size_t>(comm.rank())]);
  });
  for (int r = 0; r < 3; ++r) CHECK(same_bits(single[r], grouped[r]));
}

TEST_SUITE_END();
