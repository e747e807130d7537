// SPDX-License-Identifier: Apache-2.0
// The size gate (call_options::min_compressed_bytes) over the in-process communicator: gated calls
// give the policy qsdp::identity's results bit for bit, in one exchange once their signature is
// agreed; ungated calls are untouched; call indices stay in step; every way ranks can disagree
// ends in an error on every rank.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include <qsdp/collectives.hpp>

#include "rank_checks.hpp"
#include "support.hpp"

TEST_SUITE_BEGIN("size gate");

using namespace qsdp_test;

namespace {

constexpr qsdp::call_options compress_all{.min_compressed_bytes = 0};
constexpr qsdp::call_options recommended{.min_compressed_bytes =
                                             qsdp::recommended_min_compressed_bytes};

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

/// What one rank got from a gated call and from the same call through the identity pipeline, and
/// how many exchanges each of two repeated gated calls made.
template <class T>
struct gated_run {
  std::vector<T> gated, identity, second;
  int first_exchanges = 0, repeat_exchanges = 0;
};

/// Each rank runs the collective `kind` (0 all_gather, 1 reduce_scatter, 2 all_reduce) on `count`
/// values three ways: gated (the recommended gate, which gates this count), gated again, and with
/// qsdp::identity and the gate off.
template <class T>
std::vector<gated_run<T>> run_three_ways(int world, int kind, std::size_t count,
                                         qsdp::reduce_op op) {
  std::vector<gated_run<T>> runs(static_cast<std::size_t>(world));
  const auto w = static_cast<std::size_t>(world);
  const qsdp::stochastic<4> q{.bucket_size = 64, .seed = 3};
  qsdp::run_local(world, [&](qsdp::local_communicator& local) {
    counting_communicator comm{local};
    gated_run<T>& run = runs[static_cast<std::size_t>(comm.rank())];
    const std::size_t in_count = kind == 1 ? count * w : count;
    const std::size_t out_count = kind == 0 ? count * w : count;
    const auto input = rank_values<T>(comm.rank(), in_count, 7);
    auto once = [&](const auto& policy, qsdp::call_options options) {
      std::vector<T> out(out_count);
      if (kind == 0) qsdp::all_gather(comm, policy, input.data(), out.data(), count, options);
      if (kind == 1)
        qsdp::reduce_scatter(comm, policy, input.data(), out.data(), count, op, options);
      if (kind == 2) {
        out = input;
        qsdp::all_reduce(comm, policy, out.data(), count, op, options);
      }
      return out;
    };
    int before = comm.exchanges;
    run.gated = once(q, recommended);
    run.first_exchanges = comm.exchanges - before;
    before = comm.exchanges;
    run.second = once(q, recommended);
    run.repeat_exchanges = comm.exchanges - before;
    run.identity = once(qsdp::identity{}, compress_all);
  });
  return runs;
}

template <class T>
void check_gated_equals_identity(int world, int kind, std::size_t count, qsdp::reduce_op op) {
  INFO("world " << world << " collective " << kind << " count " << count << " op "
                << static_cast<int>(op) << " element size " << sizeof(T));
  REQUIRE(count * sizeof(T) < qsdp::recommended_min_compressed_bytes);
  const auto runs = run_three_ways<T>(world, kind, count, op);
  for (const auto& run : runs) {
    CHECK(same_bits(run.gated, run.identity));
    CHECK(same_bits(run.second, run.gated));
    CHECK(run.first_exchanges == 2);   // the signature's first call agrees first
    CHECK(run.repeat_exchanges == 1);  // then one exchange, its descriptor in front
  }
  if (kind != 1)  // all_gather and all_reduce: every rank ends with the same bits
    for (const auto& run : runs) CHECK(same_bits(run.gated, runs[0].gated));
}

}  // namespace

TEST_CASE("the gate is off by default; the recommended one is the documented 32 KiB") {
  CHECK(qsdp::recommended_min_compressed_bytes == 32 * 1024);
  CHECK(qsdp::call_options{}.min_compressed_bytes == 0);
  // With the default options the caller's policy applies at any size: a 4-bit all_gather of 100
  // values is not exact, and the counters say it was compressed; the recommended gate sends it
  // exactly, and the counters say so too.
  qsdp::run_local(2, [&](qsdp::local_communicator& comm) {
    const auto in = rank_values<float>(comm.rank(), 100, 1);
    std::vector<float> plain(200), gated(200), exact(200);
    const qsdp::uniform<4> q{.bucket_size = 64};
    comm.workspace().counters = {};
    qsdp::all_gather(comm, q, in.data(), plain.data(), 100);
    qsdp::all_gather(comm, q, in.data(), gated.data(), 100, recommended);
    qsdp::reduce_scatter(comm, q, plain.data(), exact.data(), 100, qsdp::reduce_op::sum,
                         recommended);
    const qsdp::call_counters& n = comm.workspace().counters;
    CHECK(n.compressed_calls == 1);
    CHECK(n.compressed_bytes == 100 * sizeof(float));
    CHECK(n.gated_calls == 2);
    CHECK(n.gated_bytes == 2 * 100 * sizeof(float));
    qsdp::all_gather(comm, qsdp::identity{}, in.data(), exact.data(), 100);
    CHECK_FALSE(same_bits(plain, exact));
    CHECK(same_bits(gated, exact));
    CHECK(n.compressed_calls == 2);  // identity is the caller's policy here, not the gate's
  });
}

TEST_CASE("gated calls give identity's results bit for bit, in one exchange once agreed") {
  for (int world : {1, 2, 3, 5})
    for (int kind : {0, 1, 2})
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{77}, std::size_t{1000}})
        for (auto op : {qsdp::reduce_op::sum, qsdp::reduce_op::avg}) {
          if (kind == 0 && op == qsdp::reduce_op::avg) continue;
          check_gated_equals_identity<float>(world, kind, count, op);
#if QSDP_HAS_CUDA_HALF
          check_gated_equals_identity<__nv_bfloat16>(world, kind, count, op);
          check_gated_equals_identity<__half>(world, kind, count, op);
#endif
        }
}

TEST_CASE("the gate's edge: count * sizeof(T) below min_compressed_bytes goes uncompressed") {
  // 8191 floats (32764 bytes) are gated at 32 KiB; 8192 (32768) are compressed, so they differ
  // from the exact identity result. Repeated, either takes one exchange (a compressed one of one
  // piece), its descriptors in front.
  for (const std::size_t count : {std::size_t{8191}, std::size_t{8192}}) {
    const bool gated = count * sizeof(float) < qsdp::recommended_min_compressed_bytes;
    std::vector<std::vector<float>> by_options[2];
    qsdp::run_local(2, [&](qsdp::local_communicator& local) {
      counting_communicator comm{local};
      const auto in = rank_values<float>(comm.rank(), count, 1);
      std::vector<float> full(2 * count), exact(2 * count);
      const qsdp::uniform<8> q{.bucket_size = 256};
      qsdp::all_gather(comm, q, in.data(), full.data(), count, recommended);
      const int before = comm.exchanges;
      qsdp::all_gather(comm, q, in.data(), full.data(), count, recommended);
      CHECK(comm.exchanges - before == 1);
      qsdp::all_gather(comm, qsdp::identity{}, in.data(), exact.data(), count, compress_all);
      CHECK(same_bits(full, exact) == gated);
    });
  }
  // A gate of 1 byte sends only count 0 uncompressed; a gate of 0 none.
  CHECK(qsdp::detail::gated_uncompressed(0, 4, 1));
  CHECK_FALSE(qsdp::detail::gated_uncompressed(1, 4, 1));
  CHECK_FALSE(qsdp::detail::gated_uncompressed(0, 4, 0));
  CHECK(qsdp::detail::gated_uncompressed(SIZE_MAX / 8, 2, SIZE_MAX));
  CHECK(qsdp::detail::gated_uncompressed(SIZE_MAX / 2, 2, SIZE_MAX));  // SIZE_MAX - 1 bytes
  CHECK_FALSE(qsdp::detail::gated_uncompressed(SIZE_MAX / 2 + 1, 2, SIZE_MAX));
}

TEST_CASE("a gated call draws the call indices a compressed one would: later calls are the same") {
  // Sequence: a small call (gated or not), then a large compressed one. The large one's random
  // numbers depend only on its call index, so its results are identical either way.
  std::vector<float> after[2];
  for (int gate = 0; gate < 2; ++gate) {
    qsdp::run_local(3, [&](qsdp::local_communicator& comm) {
      const qsdp::stochastic<4> q{.bucket_size = 128, .seed = 11};
      auto small = rank_values<float>(comm.rank(), 300, 2);
      qsdp::all_reduce(comm, q, small.data(), 300, qsdp::reduce_op::sum,
                       gate ? recommended : compress_all);
      const auto big = rank_values<float>(comm.rank(), 3 * 20000, 3);
      std::vector<float> out(20000);
      qsdp::reduce_scatter(comm, q, big.data(), out.data(), 20000, qsdp::reduce_op::sum,
                           compress_all);
      if (comm.rank() == 1) after[gate] = out;
    });
  }
  CHECK(same_bits(after[0], after[1]));
}

TEST_CASE("ranks that gate differently, or differ in a gated call, all throw") {
  const std::vector<float> in(3 * 4000, 1.0f);  // read by every rank; each writes its own out
  const qsdp::uniform<8> q{};
  // Another gate on rank 1, below it on every rank: named at the first call's agreement.
  expect_every_rank_throws(
      [&](qsdp::local_communicator& c) {
        std::vector<float> out(3 * 4000);
        qsdp::all_gather(c, q, in.data(), out.data(), 100,
                         qsdp::call_options{.min_compressed_bytes = c.rank() == 1 ? 1024u : 2048u});
      },
      "rank 1 called with call_options::min_compressed_bytes 1024, rank 0 with 2048");
  // Rank 2 compresses (gate 0) what the others gate: the same agreement catches it.
  expect_every_rank_throws(
      [&](qsdp::local_communicator& c) {
        std::vector<float> out(3 * 4000);
        qsdp::reduce_scatter(c, q, in.data(), out.data(), 100, qsdp::reduce_op::sum,
                             c.rank() == 2 ? compress_all : recommended);
      },
      "rank 2 called with call_options::min_compressed_bytes 0, rank 0 with 32768");
  // Both signatures agreed before; then rank 1 makes the other one (another op): the descriptors in
  // front of the values catch it, before any value is used.
  expect_every_rank_throws(
      [&](qsdp::local_communicator& c) {
        std::vector<float> out(3 * 4000);
        for (auto op : {qsdp::reduce_op::sum, qsdp::reduce_op::avg})
          qsdp::reduce_scatter(c, q, in.data(), out.data(), 100, op, recommended);
        qsdp::reduce_scatter(c, q, in.data(), out.data(), 100,
                             c.rank() == 1 ? qsdp::reduce_op::avg : qsdp::reduce_op::sum,
                             recommended);
      },
      "rank 1 called with reduce_op avg, rank 0 with sum");
  // The same with another count: the blocks differ in size, which the transport refuses.
  expect_every_rank_throws(
      [&](qsdp::local_communicator& c) {
        std::vector<float> out(3 * 4000);
        for (std::size_t n : {100, 200})
          qsdp::all_gather(c, q, in.data(), out.data(), n, recommended);
        qsdp::all_gather(c, q, in.data(), out.data(), c.rank() == 0 ? 200 : 100, recommended);
      },
      "bytes but rank");
}

TEST_CASE("a gated all_gather may run in place, as FSDP's does") {
  qsdp::run_local(3, [&](qsdp::local_communicator& comm) {
    const std::size_t count = 50;
    const auto mine = rank_values<float>(comm.rank(), count, 4);
    std::vector<float> full(3 * count, -1.0f);
    std::copy(mine.begin(), mine.end(), full.begin() + comm.rank() * 50);
    qsdp::all_gather(comm, qsdp::random_shift<8>{}, full.data() + comm.rank() * 50, full.data(),
                     count, recommended);
    for (int r = 0; r < 3; ++r)
      CHECK(std::memcmp(full.data() + r * 50, rank_values<float>(r, count, 4).data(),
                        count * sizeof(float)) == 0);
  });
}

TEST_CASE("call_timings: the codec's share of the time inside the collectives") {
  // A compressed call encodes and decodes; a gated one only counts its wall time; a group's
  // members count in encode and decode too. Every share is within the calls' total.
  qsdp::run_local(2, [&](qsdp::local_communicator& comm) {
    const qsdp::call_timings& t = comm.workspace().timings;
    CHECK(t.calls_seconds == 0.0);
    const auto in = rank_values<float>(comm.rank(), 200000, 1);
    std::vector<float> full(2 * in.size()), shard(in.size() / 2);
    qsdp::all_gather(comm, qsdp::stochastic<8>{}, in.data(), full.data(), in.size());
    const double encode = t.encode_seconds, decode = t.decode_seconds;
    CHECK(encode > 0.0);
    CHECK(decode > 0.0);
    CHECK(t.calls_seconds >= encode + decode);
    CHECK(t.exchange_seconds() >= 0.0);
    qsdp::reduce_scatter(comm, qsdp::uniform<8>{}, in.data(), shard.data(), 64,
                         qsdp::reduce_op::sum, recommended);  // gated: no codec
    CHECK(t.encode_seconds == encode);
    CHECK(t.decode_seconds == decode);
    qsdp::group_start(comm);
    qsdp::reduce_scatter(comm, qsdp::stochastic<4>{}, in.data(), shard.data(), shard.size(),
                         qsdp::reduce_op::avg);
    qsdp::group_end(comm);
    CHECK(t.encode_seconds > encode);
    CHECK(t.decode_seconds > decode);
    CHECK(t.calls_seconds >= t.encode_seconds + t.decode_seconds);
  });
}

TEST_SUITE_END();
