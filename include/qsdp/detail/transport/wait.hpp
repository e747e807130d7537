// SPDX-License-Identifier: Apache-2.0
//
// The one blocking wait of the communicators that poll (MPI's non-blocking collectives, NCCL's
// stream and asynchronous errors), kept free of MPI, CUDA and NCCL so that the host tests drive it
// with fake callbacks: poll "has the transport reported an asynchronous error?" and "is the work
// done?" until one of them answers, or until the timeout of fault_options passes. On an
// asynchronous error or a timeout the communicator is aborted (fault_options::abort_on_failure) and
// a qsdp::error is thrown (qsdp::timeout_error for a timeout). Polling the asynchronous error is
// what turns a dead peer into an error rather than a hang, even without a timeout. run_local's
// ranks wait on a condition variable instead (detail/transport/local.hpp), under the same options.
#pragma once

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "../../communicator.hpp"
#include "../../config.hpp"

namespace qsdp::detail {

/// The end of the message when the failure did not abort the communicator.
inline constexpr const char* not_aborted_note =
    "the communicator was not aborted (fault_options::abort_on_failure is false)";

/// What a wait is for (for its messages) and how it polls.
struct wait_context {
  const char* where;             // the qsdp call that waits
  std::string_view what;         // what it waits for: "<what> did not complete within ..."
  std::string_view usual_cause;  // the timeout message's last words: what usually causes one
  /// Polls back to back for this long before the first sleep: MPI progresses a non-blocking
  /// collective only inside MPI calls, so an MPI wait that sleeps at once would slow every call.
  std::chrono::microseconds spin{0};
};

/// Waits until done() is true.
///   async_error()   -> std::optional<std::string>: the transport's asynchronous error, described,
///                      or nothing while there is none (may throw).
///   done()          -> bool: whether the awaited work has completed (may throw).
///   abort(failure)  -> std::string: aborts the communicator, given the failure's message, and
///   returns
///                      what was done, for the message. Called at most once, only when
///                      options.abort_on_failure; it may also end the process (MPI_Abort).
/// `timeout` is options.timeout resolved against the transport's default (0: no limit). Each round
/// polls async_error(), then done(), then the clock (steady_clock: a changed wall clock neither
/// ends nor extends the wait): a failure reported together with the completion still counts, and
/// work done exactly at the deadline still succeeds. After context.spin, sleeps start at 1 us and
/// double up to options.poll_interval, so a wait that ends in microseconds is not charged a whole
/// interval. Throws qsdp::error "<where>: asynchronous error: <description>; <abort note>" or
/// qsdp::timeout_error
/// "<where>: timed out: <what> did not complete within <t> ms (fault_options::timeout; waited <w>
/// ms): <usual cause>; <abort note>". Exceptions of done() and async_error() pass through
/// unchanged, without an abort.
template <class Done, class AsyncError, class Abort>
void wait_until_done(Done&& done, AsyncError&& async_error, Abort&& abort,
                     const fault_options& options, std::chrono::milliseconds timeout,
                     const wait_context& context) {
  using clock = std::chrono::steady_clock;
  check_fault_options(options, context.where);
  const clock::time_point start = clock::now();
  const bool limited = timeout.count() > 0;  // at most max_fault_timeout: start + timeout is safe
  const clock::time_point deadline =
      limited ? start + std::chrono::duration_cast<clock::duration>(timeout) : start;

  const auto fail = [&](const std::string& failure, bool timed_out) {
    std::string note;
    if (!options.abort_on_failure) {
      note = not_aborted_note;
    } else {
      try {
        note = abort(failure);
      } catch (const std::exception& e) {  // report the failure itself first, the abort's after
        note = std::string("aborting the communicator failed too: ") + e.what();
      }
    }
    if (timed_out) throw qsdp::timeout_error(failure + "; " + note);
    throw qsdp::error(failure + "; " + note);
  };

  std::chrono::microseconds pause{1};
  for (;;) {
    if (const std::optional<std::string> error = async_error())
      fail(std::string(context.where) + ": asynchronous error: " + *error, false);
    if (done()) return;
    const clock::time_point now = clock::now();
    if (limited && now >= deadline) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
      fail(std::string(context.where) + ": timed out: " + std::string(context.what) +
               " did not complete within " + std::to_string(timeout.count()) +
               " ms (fault_options::timeout; waited " + std::to_string(waited.count()) +
               " ms): " + std::string(context.usual_cause),
           true);
    }
    if (now - start < context.spin) continue;
    clock::duration sleep = std::min(pause, options.poll_interval);
    if (limited) sleep = std::min<clock::duration>(sleep, deadline - now);
    if (sleep.count() > 0)
      std::this_thread::sleep_for(sleep);
    else
      std::this_thread::yield();
    pause = std::min(pause * 2, options.poll_interval);
  }
}

}  // namespace qsdp::detail
