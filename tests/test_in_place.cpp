// SPDX-License-Identifier: Apache-2.0
// NCCL's in-place conventions on the in-process transport (tests/support/in_place_checks.hpp):
// all_gather with send == recv + rank * count and reduce_scatter with recv == send + rank * count
// give the out-of-place calls' bytes, and all_reduce the same bytes on every rank.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include <qsdp/collectives.hpp>

#include "in_place_checks.hpp"

TEST_SUITE_BEGIN("collectives");

TEST_CASE("in-place all_gather and reduce_scatter give the out-of-place bytes (threads)") {
  for (int world : {2, 3}) {
    qsdp_test::for_each_in_place_check([&]<class Q, class T>(const Q& q,
                                                             const qsdp_test::in_place_case& c,
                                                             const char* name, T) {
      INFO("world " << world << ", " << qsdp_test::in_place_label<T>(name, c));
      // The case of several pieces (megabytes per rank) once: 3 ranks, float.
      if (c.count == 0 && (world != 3 || sizeof(T) != sizeof(float))) return;
      const auto results = [&](bool in_place) {
        std::vector<std::vector<unsigned char>> bytes(static_cast<std::size_t>(world));
        qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
          bytes[static_cast<std::size_t>(comm.rank())] =
              qsdp_test::in_place_sequence<qsdp::local_communicator, Q, T>(comm, q, c, in_place);
        });
        return bytes;
      };
      const auto apart = results(false);
      const auto together = results(true);
      for (std::size_t r = 0; r < apart.size(); ++r) {
        INFO("rank " << r);
        CHECK(apart[r] == together[r]);
      }
      // all_reduce leaves the same bytes on every rank (the tail of each sequence).
      const std::size_t tail =
          qsdp_test::in_place_count<T>(c) * static_cast<std::size_t>(world) * sizeof(T);
      for (std::size_t r = 1; r < together.size(); ++r)
        CHECK(std::equal(together[r].end() - static_cast<std::ptrdiff_t>(tail), together[r].end(),
                         together[0].end() - static_cast<std::ptrdiff_t>(tail)));
    });
  }
}

TEST_SUITE_END();
