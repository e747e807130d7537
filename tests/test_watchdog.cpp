// SPDX-License-Identifier: Apache-2.0
// The communicators' one blocking wait (qsdp/detail/transport/wait.hpp), driven by fake callbacks:
// no GPU, no NCCL, no MPI. What nccl_communicator::synchronize does on a dead peer or a rank that
// never arrives, and what a timed mpi_communicator does on a hung peer, is decided here.
#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include <qsdp/detail/transport/wait.hpp>

#include "support.hpp"

TEST_SUITE_BEGIN("watchdog");

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using qsdp::fault_options;

/// The wait under test, with a context whose words the messages below check.
template <class Done, class AsyncError, class Abort>
void wait_with(Done&& done, AsyncError&& async_error, Abort&& abort, const fault_options& options,
               std::chrono::microseconds spin = std::chrono::microseconds(0)) {
  qsdp::detail::wait_until_done(done, async_error, abort, options,
                                options.timeout.value_or(std::chrono::milliseconds(0)),
                                {.where = "test::wait",
                                 .what = "the fake work",
                                 .usual_cause = "a fake peer hangs",
                                 .spin = spin});
}

/// Fake transport: done after `done_after` polls (never when negative), an asynchronous error from
/// poll `error_at` on (never when negative); counts every call.
struct fake_transport {
  int done_after = -1;
  int error_at = -1;
  std::string error_text = "peer 3 died";
  int done_polls = 0;
  int error_polls = 0;
  int aborts = 0;
  std::string abort_failure{};

  auto done() {
    return [this] { return done_after >= 0 && ++done_polls >= done_after; };
  }
  auto async_error() {
    return [this]() -> std::optional<std::string> {
      ++error_polls;
      if (error_at >= 0 && error_polls >= error_at) return error_text;
      return std::nullopt;
    };
  }
  auto abort() {
    return [this](const std::string& failure) {
      ++aborts;
      abort_failure = failure;
      return std::string("fake communicator aborted");
    };
  }
  void wait(const fault_options& options) { wait_with(done(), async_error(), abort(), options); }
};

using qsdp_test::contains;
using qsdp_test::error_of;

}  // namespace

TEST_CASE("watchdog: work that completes returns without an abort") {
  fake_transport t{.done_after = 3};
  t.wait({.timeout = 10s, .poll_interval = 100us});
  CHECK(t.done_polls == 3);
  CHECK(t.error_polls == 3);  // asynchronous errors are polled in every round
  CHECK(t.aborts == 0);
}

TEST_CASE("watchdog: an asynchronous error aborts once and throws its text") {
  fake_transport t{.done_after = -1, .error_at = 2};
  const std::string m = error_of([&] { t.wait({.timeout = 10s, .poll_interval = 100us}); });
  CHECK(m == "test::wait: asynchronous error: peer 3 died; fake communicator aborted");
  CHECK(t.aborts == 1);
  CHECK(t.abort_failure == "test::wait: asynchronous error: peer 3 died");
  CHECK_FALSE(contains(m, "timed out"));
}

TEST_CASE("watchdog: an asynchronous error wins over completion in the same round") {
  fake_transport t{.done_after = 1, .error_at = 1};
  const std::string m = error_of([&] { t.wait({.timeout = 10s}); });
  CHECK(contains(m, "asynchronous error: peer 3 died"));
  CHECK(t.aborts == 1);
  CHECK(t.done_polls == 0);
}

TEST_CASE("watchdog: work that never completes times out, within the timeout plus slack") {
  fake_transport t;  // never done, never an error
  const auto start = clock_type::now();
  const std::string m = error_of([&] { t.wait({.timeout = 200ms, .poll_interval = 1ms}); });
  const auto elapsed = clock_type::now() - start;
  CHECK(elapsed >= 200ms);
  CHECK(elapsed < 200ms + 2s);
  CHECK(contains(m,
                 "test::wait: timed out: the fake work did not complete within 200 ms "
                 "(fault_options::timeout; waited "));
  CHECK(contains(m, " ms): a fake peer hangs; fake communicator aborted"));
  CHECK(contains(m, "; fake communicator aborted"));
  CHECK_FALSE(contains(m, "asynchronous error"));
  CHECK(t.aborts == 1);
  CHECK(contains(t.abort_failure, "timed out"));
  CHECK(t.error_polls > 1);  // it kept polling while it waited
}

TEST_CASE("watchdog: a poll interval longer than the timeout does not extend it") {
  fake_transport t;
  const auto start = clock_type::now();
  const std::string m =
      error_of([&] { t.wait({.timeout = 100ms, .poll_interval = qsdp::max_poll_interval}); });
  const auto elapsed = clock_type::now() - start;
  CHECK(contains(m, "timed out"));
  CHECK(elapsed >= 100ms);
  CHECK(elapsed < 100ms + 2s);
}

TEST_CASE("watchdog: work found done after the deadline has passed still succeeds") {
  int polls = 0;
  int aborts = 0;
  // The second poll itself outlasts the timeout, then reports completion: done() is asked before
  // the clock, so the work counts as done, not timed out.
  wait_with(
      [&] {
        if (++polls < 2) return false;
        std::this_thread::sleep_for(80ms);
        return true;
      },
      [] { return std::optional<std::string>(); },
      [&](const std::string&) {
        ++aborts;
        return std::string();
      },
      {.timeout = 50ms, .poll_interval = 1ms});
  CHECK(aborts == 0);
  CHECK(polls == 2);
}

TEST_CASE("watchdog: timeout 0 waits without limit, still polling, until the work is done") {
  fake_transport t{.done_after = 50};
  t.wait({.timeout = 0ms, .poll_interval = 200us});
  CHECK(t.done_polls == 50);
  CHECK(t.error_polls == 50);
  CHECK(t.aborts == 0);

  fake_transport failing{.done_after = -1, .error_at = 40};  // no limit, yet a dead peer is found
  CHECK(contains(error_of([&] { failing.wait({.timeout = 0ms, .poll_interval = 200us}); }),
                 "asynchronous error: peer 3 died"));
  CHECK(failing.aborts == 1);

  fake_transport longest{.done_after = 3};  // no overflow of start + timeout
  longest.wait({.timeout = qsdp::max_fault_timeout, .poll_interval = 10us});
  CHECK(longest.done_polls == 3);
}

TEST_CASE("watchdog: with aborting turned off, failures still throw but nothing is aborted") {
  fake_transport slow;
  const std::string timed_out = error_of(
      [&] { slow.wait({.timeout = 50ms, .poll_interval = 1ms, .abort_on_failure = false}); });
  CHECK(contains(timed_out, "timed out"));
  CHECK(contains(timed_out,
                 "the communicator was not aborted (fault_options::abort_on_failure is false)"));
  CHECK(slow.aborts == 0);

  fake_transport broken{.done_after = -1, .error_at = 1};
  const std::string async =
      error_of([&] { broken.wait({.timeout = 10s, .abort_on_failure = false}); });
  CHECK(async ==
        "test::wait: asynchronous error: peer 3 died; the communicator was not aborted "
        "(fault_options::abort_on_failure is false)");
  CHECK(broken.aborts == 0);
}

TEST_CASE("watchdog: a failing abort is reported after the failure that caused it") {
  const std::string m = error_of([] {
    wait_with([] { return false; }, [] { return std::optional<std::string>("link down"); },
              [](const std::string&) -> std::string {
                throw qsdp::error("ncclCommAbort failed: internal error");
              },
              {.timeout = 1s});
  });
  CHECK(m ==
        "test::wait: asynchronous error: link down; aborting the communicator failed too: "
        "ncclCommAbort failed: internal error");
}

TEST_CASE("watchdog: errors of the polls themselves pass through without an abort") {
  int aborts = 0;
  const auto abort = [&](const std::string&) {
    ++aborts;
    return std::string();
  };
  CHECK_THROWS_WITH_AS(
      wait_with([]() -> bool { throw std::runtime_error("event lost"); },
                [] { return std::optional<std::string>(); }, abort, {.timeout = 1s}),
      "event lost", std::runtime_error);
  CHECK(aborts == 0);
}

TEST_CASE("watchdog: polls back off to the poll interval instead of spinning") {
  fake_transport t;
  const auto start = clock_type::now();
  wait_with([&] { return clock_type::now() - start >= 200ms; }, t.async_error(), t.abort(),
            {.timeout = 10s, .poll_interval = 20ms});
  // 1 us doubling to 20 ms covers the first ~33 ms in 15 sleeps, then 20 ms each: about 25 polls.
  CHECK(t.error_polls <= 40);
  CHECK(t.error_polls >= 5);
  CHECK(t.aborts == 0);
}

TEST_CASE("watchdog: negative or too long settings are refused, naming the value") {
  fake_transport t{.done_after = 1};
  CHECK(error_of([&] { t.wait({.timeout = -1ms}); }) ==
        "test::wait: fault_options::timeout is -1 ms; expected 0 (no limit) or 1..86400000 ms");
  CHECK(
      error_of([&] { t.wait({.timeout = 25h}); }) ==
      "test::wait: fault_options::timeout is 90000000 ms; expected 0 (no limit) or 1..86400000 ms");
  CHECK(error_of([&] { t.wait({.poll_interval = -5us}); }) ==
        "test::wait: fault_options::poll_interval is -5 us; expected 0..60000000 us (0 polls "
        "continuously)");
  CHECK(
      error_of([&] { t.wait({.poll_interval = std::chrono::minutes(2)}); }) ==
      "test::wait: fault_options::poll_interval is 120000000 us; expected 0..60000000 us (0 polls "
      "continuously)");
  CHECK(t.done_polls == 0);  // refused before the first poll
  CHECK_NOTHROW(t.wait({.timeout = 0ms, .poll_interval = 0us}));
}

TEST_CASE("watchdog: a timeout is a qsdp::timeout_error, an asynchronous error is not") {
  fake_transport never;
  CHECK_THROWS_AS(never.wait({.timeout = 20ms, .poll_interval = 1ms}), qsdp::timeout_error);
  fake_transport dead{.done_after = -1, .error_at = 1};
  bool timeout_class = false;
  try {
    dead.wait({.timeout = 10s});
  } catch (const qsdp::timeout_error&) {
    timeout_class = true;
  } catch (const qsdp::error&) {
  }
  CHECK_FALSE(timeout_class);
}

TEST_CASE("watchdog: the spin polls back to back before the first sleep (MPI's progress)") {
  fake_transport spinning;
  const auto start = clock_type::now();
  wait_with([&] { return clock_type::now() - start >= 20ms; }, spinning.async_error(),
            spinning.abort(), {.timeout = 10s, .poll_interval = 20ms}, 5ms);
  fake_transport sleeping;
  const auto start2 = clock_type::now();
  wait_with([&] { return clock_type::now() - start2 >= 20ms; }, sleeping.async_error(),
            sleeping.abort(), {.timeout = 10s, .poll_interval = 20ms});
  // 5 ms back to back are hundreds of polls at least; without the spin, fewer than 20.
  CHECK(spinning.error_polls > 100);
  CHECK(sleeping.error_polls < 20);
}

TEST_SUITE_END();
