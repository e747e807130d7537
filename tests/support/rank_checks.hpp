// SPDX-License-Identifier: Apache-2.0
// Checks over in-process ranks for the doctest suites: a body that every rank must leave with the
// same qsdp::error, and a communicator that counts the exchanges a collective makes.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include <qsdp/communicator.hpp>

namespace qsdp_test {

/// A local_communicator that counts the exchanges the collectives make through it (it starts none:
/// a call in pieces runs them one after another).
struct counting_communicator {
  static constexpr qsdp::memory_space memory = qsdp::memory_space::host;
  qsdp::local_communicator& inner;
  int exchanges = 0;
  int rank() const { return inner.rank(); }
  int size() const { return inner.size(); }
  qsdp::host_workspace& workspace() { return inner.workspace(); }
  std::uint64_t next_call() { return inner.next_call(); }
  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    ++exchanges;
    inner.all_gather_bytes(send, recv, n);
  }
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    ++exchanges;
    inner.all_to_all_bytes(send, recv, n);
  }
};
static_assert(qsdp::communicator<counting_communicator>);

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
