// SPDX-License-Identifier: Apache-2.0
// Checks over in-process ranks for the doctest suites: a body that every rank must leave with the
// same qsdp::error.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <string>

#include <qsdp/communicator.hpp>

namespace qsdp_test {

/// Runs body(comm) on 3 in-process ranks and checks that every rank throws a qsdp::error, the
/// message (of the last rank to throw) containing `needle`.
template <class Body>
void expect_every_rank_throws(Body body, const char* needle) {
  std::atomic<int> thrown{0};
  std::string message;
  std::mutex m;
  CHECK_THROWS_AS(qsdp::run_local(3,
                                  [&](qsdp::local_communicator& comm) {
                                    try {
                                      body(comm);
                                    } catch (const qsdp::error& e) {
                                      ++thrown;
                                      std::lock_guard lock(m);
                                      message = e.what();
                                      throw;
                                    }
                                  }),
                  qsdp::error);
  CHECK(thrown == 3);
  INFO(message);
  CHECK(message.find(needle) != std::string::npos);
}

}  // namespace qsdp_test
