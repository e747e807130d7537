// SPDX-License-Identifier: Apache-2.0
// The pipelined collectives (call_options::max_pieces) over the in-process communicator, whose
// started exchanges run only when waited for: pieces planned as documented, each piece's packets
// the codec's own at the documented call index and stream (docs/reference/wire-format.md), results
// bit-identical across ranks, the option agreed on like the rest of the call.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include <qsdp/collectives.hpp>

#include "rank_checks.hpp"
#include "support.hpp"

namespace {

using qsdp::detail::piece_plan;
using qsdp::detail::plan_pieces;

constexpr std::size_t floats_per_min_piece = qsdp::min_piece_bytes / sizeof(float);

/// Rank r's input of n values (distinct per rank).
std::vector<float> input_of(int rank, std::size_t n) {
  return qsdp_test::make_data(qsdp_test::distribution::gradient_with_outliers, n,
                              900 + static_cast<std::uint32_t>(rank));
}

/// The codec's own round trip of src[0, n) at call index `call` and stream `stream`.
template <class Q>
std::vector<float> piece_round_trip(const Q& q, const float* src, std::size_t n, std::uint64_t call,
                                    std::uint32_t stream) {
  std::vector<std::byte> packet(qsdp::compressed_size<float>(q, n));
  qsdp::encode(q, src, n, packet.data(), qsdp::rng_position{.call = call, .stream = stream});
  std::vector<float> out(n);
  qsdp::decode(q, packet.data(), n, out.data());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_SUITE("pipeline") {
  TEST_CASE("pieces: at most max_pieces, each at least min_piece_bytes, whole buckets") {
    // Below two minimum pieces a phase runs whole.
    CHECK(plan_pieces(2 * floats_per_min_piece - 1, 4, 256, 8).count == 1);
    CHECK(plan_pieces(2 * floats_per_min_piece - 1, 4, 256, 8).values ==
          2 * floats_per_min_piece - 1);
    CHECK(plan_pieces(0, 4, 256, 8).count == 1);
    // As many pieces as fit, up to max_pieces.
    const piece_plan eight = plan_pieces(8 * floats_per_min_piece, 4, 256, 8);
    CHECK(eight.count == 8);
    CHECK(eight.values == floats_per_min_piece);
    CHECK(plan_pieces(100 * floats_per_min_piece, 4, 256, 8).count == 8);
    CHECK(plan_pieces(100 * floats_per_min_piece, 4, 256, 64).count == 64);
    CHECK(plan_pieces(100 * floats_per_min_piece, 4, 256, 1).count == 1);
    CHECK(plan_pieces(3 * floats_per_min_piece + 5, 4, 256, 8).count == 3);
    // bf16: a minimum piece holds twice the values.
    CHECK(plan_pieces(4 * floats_per_min_piece, 2, 256, 8).count == 2);
    // An odd bucket size: every piece but the last holds whole buckets and 64-value multiples,
    // and the pieces cover the shard exactly.
    const std::size_t shard = 5 * floats_per_min_piece + 77;
    const piece_plan odd = plan_pieces(shard, 4, 333, 8);
    CHECK(odd.count == 5);
    CHECK(odd.values % 333 == 0);
    CHECK(odd.values % 64 == 0);
    std::size_t covered = 0;
    for (std::size_t p = 0; p < odd.count; ++p) {
      CHECK(odd.values_of(p, shard) > 0);
      covered += odd.values_of(p, shard);
    }
    CHECK(covered == shard);
  }

  TEST_CASE("all_gather: piece p of rank r is the codec's packet at call p, stream r x world") {
    const qsdp::stochastic<8> q{.bucket_size = 256, .seed = 5};
    const int world = 3;
    const std::size_t count = 3 * floats_per_min_piece + 1000;  // 3 pieces, the last shorter
    for (const std::size_t max_pieces : {std::size_t{1}, std::size_t{8}}) {
      const piece_plan pieces = plan_pieces(count, sizeof(float), q.bucket_size, max_pieces);
      CHECK(pieces.count == (max_pieces == 1 ? 1u : 3u));
      std::vector<std::vector<float>> got(world);
      std::vector<std::uint64_t> next(world);
      qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
        const auto r = static_cast<std::size_t>(comm.rank());
        const std::vector<float> mine = input_of(comm.rank(), count);
        std::vector<float> out(count * world);
        qsdp::all_gather(comm, q, mine.data(), out.data(), count,
                         {.min_compressed_bytes = 0, .max_pieces = max_pieces});
        got[r] = out;
        next[r] = comm.next_call();
      });
      std::vector<float> expected;
      for (int r = 0; r < world; ++r) {
        const std::vector<float> data = input_of(r, count);
        for (std::size_t p = 0; p < pieces.count; ++p) {
          const std::vector<float> piece =
              piece_round_trip(q, data.data() + p * pieces.values, pieces.values_of(p, count), p,
                               qsdp::detail::chunk_stream(r, world, 0));
          expected.insert(expected.end(), piece.begin(), piece.end());
        }
      }
      for (int r = 0; r < world; ++r) {
        INFO("max_pieces " << max_pieces << " rank " << r);
        CHECK(same_bits(got[static_cast<std::size_t>(r)], expected));
        CHECK(next[static_cast<std::size_t>(r)] == pieces.count);  // one call index per piece
      }
    }
  }

  TEST_CASE("reduce_scatter: piece p sums the codec's packets at call p in rank order") {
    const qsdp::hadamard<qsdp::stochastic<4>> q{{.bucket_size = 128, .seed = 9}};
    const int world = 3;
    const std::size_t count = 2 * floats_per_min_piece + 333;  // 2 pieces
    const piece_plan pieces = plan_pieces(count, sizeof(float), 128, qsdp::default_max_pieces);
    REQUIRE(pieces.count == 2);
    std::vector<std::vector<float>> inputs(world), got(world);
    for (int r = 0; r < world; ++r)
      inputs[static_cast<std::size_t>(r)] = input_of(r, count * world);
    qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
      const std::vector<float>& all = inputs[static_cast<std::size_t>(comm.rank())];
      std::vector<float> out(count);
      qsdp::reduce_scatter(comm, q, all.data(), out.data(), count, qsdp::reduce_op::sum);
      got[static_cast<std::size_t>(comm.rank())] = out;
    });
    for (int me = 0; me < world; ++me) {
      std::vector<float> expected;
      for (std::size_t p = 0; p < pieces.count; ++p) {
        const std::size_t n = pieces.values_of(p, count);
        // The world's packets back to back, summed by the codec in rank order (a rotated policy
        // sums the rotated values and turns the sum back once).
        const std::size_t packet_bytes = qsdp::compressed_size<float>(q, n);
        std::vector<std::byte> packets(world * packet_bytes);
        for (int r = 0; r < world; ++r) {
          const std::vector<float>& data = inputs[static_cast<std::size_t>(r)];
          qsdp::encode(
              q, data.data() + static_cast<std::size_t>(me) * count + p * pieces.values, n,
              packets.data() + static_cast<std::size_t>(r) * packet_bytes,
              qsdp::rng_position{.call = p, .stream = qsdp::detail::chunk_stream(r, world, me)});
        }
        std::vector<float> acc(n, 0.0f);
        qsdp::decode_accumulate(q, packets.data(), world, n, acc.data());
        expected.insert(expected.end(), acc.begin(), acc.end());
      }
      INFO("rank " << me);
      CHECK(same_bits(got[static_cast<std::size_t>(me)], expected));
    }
  }

  TEST_CASE("all_reduce in pieces: every rank the same bits, within the bound, 2 x pieces calls") {
    const qsdp::stochastic<8> q{.bucket_size = 512};
    const int world = 3;
    const std::size_t count = 3 * 3 * floats_per_min_piece + 17;  // shards of 3 pieces
    const piece_plan pieces = plan_pieces((count + world - 1) / world, sizeof(float), 512, 8);
    REQUIRE(pieces.count == 3);
    std::vector<std::vector<float>> got(world);
    std::vector<std::uint64_t> next(world);
    qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
      std::vector<float> data = qsdp_test::exact_sum_values(comm.rank(), count);
      qsdp::all_reduce(comm, q, data.data(), count, qsdp::reduce_op::sum, {.max_pieces = 8});
      got[static_cast<std::size_t>(comm.rank())] = data;
      next[static_cast<std::size_t>(comm.rank())] = comm.next_call();
    });
    std::vector<float> exact(count, 0.0f);
    for (int r = 0; r < world; ++r) {
      const std::vector<float> v = qsdp_test::exact_sum_values(r, count);
      for (std::size_t i = 0; i < count; ++i) exact[i] += v[i];
    }
    // Each value is quantized twice in 8 bits: once on its rank (values in [-512, 512), a step
    // of at most 1024 / 255), once in the sum of three (a step of at most 3 x that): stochastic
    // rounding errs by less than a step each time.
    double worst = 0, error2 = 0, norm2 = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const double e = static_cast<double>(got[0][i]) - exact[i];
      worst = std::max(worst, std::fabs(e));
      error2 += e * e;
      norm2 += static_cast<double>(exact[i]) * exact[i];
    }
    CHECK(worst < 4 * 1024.0 / 255);
    CHECK(std::sqrt(error2 / norm2) < 0.02);
    for (int r = 0; r < world; ++r) {
      CHECK(same_bits(got[static_cast<std::size_t>(r)], got[0]));
      CHECK(next[static_cast<std::size_t>(r)] == 2 * pieces.count);
    }
  }

  TEST_CASE("a gated call draws the call indices its compressed pieces would") {
    const std::size_t count = 4 * floats_per_min_piece;  // 4 pieces when compressed
    std::vector<std::uint64_t> next(2);
    qsdp::run_local(2, [&](qsdp::local_communicator& comm) {
      const std::vector<float> mine = input_of(comm.rank(), count);
      std::vector<float> out(2 * count);
      qsdp::all_gather(comm, qsdp::stochastic<8>{}, mine.data(), out.data(), count,
                       {.min_compressed_bytes = count * sizeof(float) + 1,  // gated
                        .max_pieces = 8});
      CHECK(std::memcmp(out.data() + static_cast<std::size_t>(comm.rank()) * count, mine.data(),
                        count * sizeof(float)) == 0);
      next[static_cast<std::size_t>(comm.rank())] = comm.next_call();
    });
    CHECK(next[0] == 4);
    CHECK(next[1] == 4);
  }

  TEST_CASE("max_pieces out of range, or different on one rank, makes every rank throw") {
    for (const std::size_t bad : {std::size_t{0}, qsdp::max_pieces_limit + 1}) {
      const std::string message = qsdp_test::error_of([&] {
        qsdp::run_local(1, [&](qsdp::local_communicator& comm) {
          float x[4] = {1, 2, 3, 4};
          qsdp::all_reduce(comm, qsdp::stochastic<8>{}, x, 4, qsdp::reduce_op::sum,
                           {.max_pieces = bad});
        });
      });
      INFO(message);
      CHECK(qsdp_test::contains(message, "call_options::max_pieces is " + std::to_string(bad)));
    }
    qsdp_test::expect_every_rank_throws(
        [](qsdp::local_communicator& comm) {
          std::vector<float> x(64, 1.0f), out(64 * 3);
          qsdp::all_gather(comm, qsdp::stochastic<8>{}, x.data(), out.data(), x.size(),
                           {.max_pieces = comm.rank() == 2 ? 4u : 8u});
        },
        "call_options::max_pieces");
  }

  TEST_CASE("a repeated call: one exchange per piece, the ranks' descriptors checked in them") {
    const qsdp::stochastic<8> q{.bucket_size = 256, .seed = 5};
    const std::size_t count = 2 * floats_per_min_piece;  // 2 pieces
    const qsdp::call_options options{.min_compressed_bytes = 0, .max_pieces = 2};
    for (const int kind : {0, 1, 2}) {
      INFO("collective " << kind);
      qsdp::run_local(3, [&](qsdp::local_communicator& local) {
        qsdp_test::counting_communicator comm{local};
        const std::vector<float> mine = input_of(comm.rank(), 3 * count);
        std::vector<float> out(3 * count), again(3 * count);
        auto call = [&](std::vector<float>& to) {
          if (kind == 0) qsdp::all_gather(comm, q, mine.data(), to.data(), count, options);
          if (kind == 1)
            qsdp::reduce_scatter(comm, q, mine.data(), to.data(), count, qsdp::reduce_op::sum,
                                 options);
          if (kind == 2) {
            to = mine;
            qsdp::all_reduce(comm, q, to.data(), 3 * count, qsdp::reduce_op::sum, options);
          }
        };
        call(out);
        const int first = comm.exchanges;
        call(again);
        const int phases = kind == 2 ? 2 : 1;
        CHECK(first == 1 + 2 * phases);               // the signature's agreement, then the pieces
        CHECK(comm.exchanges - first == 2 * phases);  // the pieces alone
        CHECK_FALSE(same_bits(out, again));           // fresh random numbers: the second call ran
      });
    }
    // Both signatures agreed before; then rank 1 makes the other one (another op, the same bytes
    // on the wire): the descriptors in front of the packets catch it, before any is summed.
    qsdp_test::expect_every_rank_throws(
        [&](qsdp::local_communicator& comm) {
          const std::vector<float> in(3 * 4096, 1.0f);
          std::vector<float> out(4096);
          for (auto op : {qsdp::reduce_op::sum, qsdp::reduce_op::avg})
            qsdp::reduce_scatter(comm, q, in.data(), out.data(), 4096, op, options);
          qsdp::reduce_scatter(comm, q, in.data(), out.data(), 4096,
                               comm.rank() == 1 ? qsdp::reduce_op::avg : qsdp::reduce_op::sum,
                               options);
        },
        "rank 1 called with reduce_op avg, rank 0 with sum");
    // Another seed is not part of the call's signature; another bucket size is, and changes the
    // packets' size, which the transport refuses.
    qsdp_test::expect_every_rank_throws(
        [&](qsdp::local_communicator& comm) {
          const std::vector<float> in(4096, 1.0f);
          std::vector<float> out(3 * 4096);
          for (const std::size_t bucket : {std::size_t{256}, std::size_t{512}})
            qsdp::all_gather(comm, qsdp::uniform<8>{.bucket_size = bucket}, in.data(), out.data(),
                             4096, options);
          qsdp::all_gather(comm, qsdp::uniform<8>{.bucket_size = comm.rank() == 0 ? 512u : 256u},
                           in.data(), out.data(), 4096, options);
        },
        "bytes but rank");
  }

  TEST_CASE("local_communicator: started exchanges run in start order when waited for") {
    qsdp::run_local(3, [](qsdp::local_communicator& comm) {
      const auto r = static_cast<std::byte>(comm.rank());
      const std::byte first[1] = {r};
      const std::byte second[3] = {r, r, r};
      std::byte gathered[3] = {}, scattered[3] = {};
      const qsdp::exchange_ticket a = comm.start_all_gather_bytes(first, gathered, 1);
      const qsdp::exchange_ticket b = comm.start_all_to_all_bytes(second, scattered, 1);
      CHECK(b.id == a.id + 1);
      CHECK(gathered[1] == std::byte{0});  // nothing has moved before a wait
      comm.wait(b);                        // runs a, then b
      for (int peer = 0; peer < 3; ++peer) {
        CHECK(gathered[peer] == static_cast<std::byte>(peer));
        CHECK(scattered[peer] == static_cast<std::byte>(peer));
      }
      comm.wait(a);  // already done: nothing more runs
      // A blocking exchange runs the started ones first, in order.
      std::byte late[3] = {};
      comm.start_all_gather_bytes(first, late, 1);
      std::byte now[3] = {};
      comm.all_gather_bytes(second, now, 1);
      CHECK(late[2] == std::byte{2});
      CHECK(now[1] == std::byte{1});
    });
  }

  TEST_CASE("two-level calls in pieces: all_reduce the same bits on every rank") {
    const std::size_t count = 4 * 2 * floats_per_min_piece + 3;
    std::vector<std::vector<float>> got(4);
    qsdp::run_local_nodes(4, 2, [&](auto& pair) {
      std::vector<float> data = qsdp_test::exact_sum_values(pair.rank(), count);
      qsdp::all_reduce(pair, qsdp::level_policies{qsdp::stochastic<8>{}, qsdp::stochastic<4>{}},
                       data.data(), count, qsdp::reduce_op::sum);
      got[static_cast<std::size_t>(pair.rank())] = data;
    });
    for (std::size_t r = 1; r < 4; ++r) CHECK(same_bits(got[r], got[0]));
    // With identity at both levels the pieces must put every value back where it belongs: the
    // exact sum (every partial sum of these values is exact in fp32).
    std::vector<float> exact(count, 0.0f);
    for (int r = 0; r < 4; ++r) {
      const std::vector<float> v = qsdp_test::exact_sum_values(r, count);
      for (std::size_t i = 0; i < count; ++i) exact[i] += v[i];
    }
    qsdp::run_local_nodes(4, 2, [&](auto& pair) {
      std::vector<float> data = qsdp_test::exact_sum_values(pair.rank(), count);
      qsdp::all_reduce(pair, qsdp::level_policies{qsdp::identity{}, qsdp::identity{}}, data.data(),
                       count, qsdp::reduce_op::sum, {.min_compressed_bytes = 0, .max_pieces = 8});
      CHECK(same_bits(data, exact));
    });
  }
}
