// SPDX-License-Identifier: Apache-2.0
// Faults among in-process ranks (run_local): a rank that throws, returns early, calls differently
// or is stuck makes every rank end with an error, within the configured timeout, and run_local
// returns. docs/reliability.md lists these cases; the TSan build runs this file too.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <qsdp/collectives.hpp>

TEST_SUITE_BEGIN("local_faults");

namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

/// What a fault does to one rank at one step of a training-like loop of collectives.
enum class fault { throw_before, throw_after, return_early, wrong_count, wrong_policy, stall };

const char* fault_name(fault f) {
  switch (f) {
    case fault::throw_before: return "throws before a collective";
    case fault::throw_after: return "throws right after a collective";
    case fault::return_early: return "returns early";
    case fault::wrong_count: return "calls with another count";
    case fault::wrong_policy: return "calls with another policy";
    case fault::stall: return "stalls past the timeout";
  }
  return "?";
}

/// One step: an all_gather of the weights and a reduce_scatter of the gradients, as in FSDP.
void training_step(qsdp::local_communicator& comm, std::size_t count, bool other_count,
                   bool other_policy) {
  const auto world = static_cast<std::size_t>(comm.size());
  std::vector<float> shard(count, 0.5f), full(count * world), grad(count * world, 0.25f),
      out(count);
  const std::size_t n = other_count ? count - 1 : count;
  if (other_policy)
    qsdp::all_gather(comm, qsdp::uniform<4>{.bucket_size = 64}, shard.data(), full.data(), n);
  else
    qsdp::all_gather(comm, qsdp::random_shift<8>{.bucket_size = 64, .seed = 3}, shard.data(),
                     full.data(), n);
  qsdp::reduce_scatter(comm, qsdp::stochastic<8>{.bucket_size = 64, .seed = 4}, grad.data(),
                       out.data(), n, qsdp::reduce_op::avg);
}

}  // namespace

TEST_CASE("run_local: a stuck rank fails the others after fault_options::timeout, naming it") {
  constexpr auto timeout = milliseconds(300);
  constexpr auto stall = milliseconds(3000);
  std::mutex mutex;
  std::vector<double> released_after;
  std::vector<std::string> messages;
  const auto start = clock_type::now();
  CHECK_THROWS_WITH_AS(qsdp::run_local(
                           4,
                           [&](qsdp::local_communicator& comm) {
                             if (comm.rank() == 1)
                               std::this_thread::sleep_for(stall);  // stuck in its own work
                             try {
                               training_step(comm, 256, false, false);
                             } catch (const qsdp::error& e) {
                               std::lock_guard lock(mutex);
                               if (comm.rank() != 1) released_after.push_back(seconds_since(start));
                               messages.emplace_back(e.what());
                               throw;
                             }
                           },
                           qsdp::fault_options{.timeout = timeout}),
                       doctest::Contains("did not reach the collective within 300 ms"),
                       qsdp::error);
  REQUIRE(released_after.size() == 3);
  for (double t : released_after) {
    INFO("released after " << t << " s");
    CHECK(t >= 0.25);  // not before the timeout
    CHECK(t < 2.5);    // well before the stuck rank came back
  }
  for (const auto& m : messages) {
    INFO(m);
    CHECK(m.find("rank 1 did not reach the collective") != std::string::npos);
  }
  CHECK(messages.size() == 4);  // the stuck rank, once back, gets the error too
}

TEST_CASE("run_local: a rank that throws mid-run releases ranks already waiting at once") {
  std::atomic<int> released{0};
  const auto start = clock_type::now();
  CHECK_THROWS_WITH_AS(qsdp::run_local(5,
                                       [&](qsdp::local_communicator& comm) {
                                         for (int step = 0; step < 6; ++step) {
                                           if (comm.rank() == 3 && step == 4) {
                                             std::this_thread::sleep_for(milliseconds(50));
                                             throw std::runtime_error("rank 3: out of memory");
                                           }
                                           try {
                                             training_step(comm, 300, false, false);
                                           } catch (const qsdp::error&) {
                                             ++released;
                                             throw;
                                           }
                                         }
                                       }),
                       "rank 3: out of memory", std::runtime_error);
  CHECK(released == 4);
  CHECK(seconds_since(start) < 5.0);  // the default timeout is 60 s: release came from the throw
}

TEST_CASE("run_local: fault_options out of range are refused with their values") {
  for (long long ms : {-5LL, 24LL * 3600 * 1000 + 1}) {
    INFO(ms);
    const std::string expected = "qsdp::run_local: fault_options::timeout is " +
                                 std::to_string(ms) +
                                 " ms; expected 0 (no limit) or 1..86400000 ms";
    CHECK_THROWS_WITH_AS(
        qsdp::run_local(
            2, [](qsdp::local_communicator&) {}, qsdp::fault_options{.timeout = milliseconds(ms)}),
        expected.c_str(), qsdp::error);
  }
  CHECK_THROWS_WITH_AS(qsdp::run_local(
                           2, [](qsdp::local_communicator&) {},
                           qsdp::fault_options{.poll_interval = std::chrono::minutes(2)}),
                       "qsdp::run_local: fault_options::poll_interval is 120000000 us; expected "
                       "0..60000000 us (0 polls continuously)",
                       qsdp::error);
}

TEST_CASE("run_local: timeout 0 waits without limit; a timeout is a qsdp::timeout_error") {
  // No limit: a rank 400 ms late is waited for.
  std::atomic<int> steps{0};
  qsdp::run_local(
      3,
      [&](qsdp::local_communicator& comm) {
        if (comm.rank() == 2) std::this_thread::sleep_for(milliseconds(400));
        training_step(comm, 64, false, false);
        ++steps;
      },
      qsdp::fault_options{.timeout = milliseconds(0)});
  CHECK(steps == 3);
  // With a limit, the timed-out rank's error is the timeout_error subclass.
  CHECK_THROWS_AS(qsdp::run_local(
                      2,
                      [&](qsdp::local_communicator& comm) {
                        if (comm.rank() == 0)
                          training_step(comm, 64, false, false);
                        else
                          std::this_thread::sleep_for(milliseconds(300));
                      },
                      qsdp::fault_options{.timeout = milliseconds(50)}),
                  qsdp::timeout_error);
}

TEST_CASE("run_local: 300 random faults in a training loop all end in errors, none hangs") {
  // Each trial: 2..6 ranks run 4 steps; one rank injects a fault at a random step. Every trial must
  // end with an exception from run_local. Only a stall may be ended by the timeout: any other fault
  // releases the others at once, so its message never mentions the timeout.
  std::mt19937 random(20261130);
  constexpr auto timeout = milliseconds(1000);
  int trials = 0, stalls = 0;
  double slowest = 0.0;
  for (int trial = 0; trial < 300; ++trial) {
    const int world = 2 + static_cast<int>(random() % 5);
    const int victim = static_cast<int>(random() % static_cast<unsigned>(world));
    const int at_step = static_cast<int>(random() % 4);
    // Stalls cost a timeout each: one trial in twenty.
    const auto kind = random() % 20 == 0 ? fault::stall : static_cast<fault>(random() % 5);
    const std::size_t count = 64 + random() % 200;
    INFO("trial " << trial << ": rank " << victim << " of " << world << " " << fault_name(kind)
                  << " at step " << at_step);
    const auto start = clock_type::now();
    std::string message = "(nothing thrown)";
    try {
      qsdp::run_local(
          world,
          [&](qsdp::local_communicator& comm) {
            const bool me = comm.rank() == victim;
            for (int step = 0; step < 4; ++step) {
              const bool now = me && step == at_step;
              if (now && kind == fault::throw_before) throw std::runtime_error("injected");
              if (now && kind == fault::return_early) return;
              if (now && kind == fault::stall)
                std::this_thread::sleep_for(timeout + milliseconds(300));
              training_step(comm, count, now && kind == fault::wrong_count,
                            now && kind == fault::wrong_policy);
              if (now && kind == fault::throw_after) throw std::runtime_error("injected");
            }
          },
          qsdp::fault_options{.timeout = timeout});
    } catch (const std::exception& e) {
      message = e.what();
    }
    INFO(message);
    const bool timed_out = message.find("did not reach the collective") != std::string::npos;
    if (kind == fault::stall) {
      ++stalls;
      CHECK(timed_out);
    } else {
      CHECK(message != "(nothing thrown)");
      CHECK_FALSE(timed_out);
      slowest = std::max(slowest, seconds_since(start));
    }
    ++trials;
  }
  MESSAGE(trials << " faults injected (" << stalls << " stalls ended by the timeout); slowest "
                 << "release of the others: " << slowest << " s");
  CHECK(slowest < 5.0);
}

TEST_SUITE_END();
