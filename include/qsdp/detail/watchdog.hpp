// SPDX-License-Identifier: Apache-2.0
//
// The blocking wait of a communicator, kept free of CUDA and NCCL so that the host tests can drive
// it with fake callbacks: poll "is the work done?" and "has the transport reported an asynchronous
// error?" until one of them answers, or until a timeout passes. On an asynchronous error or a
// timeout the communicator is aborted (when the settings say so) and a qsdp::error is thrown whose
// message tells the two apart ("asynchronous error" / "timed out"). Polling the asynchronous error
// is what turns a dead peer into an error rather than a hang, even without a timeout.
#pragma once

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include "../config.hpp"

namespace qsdp::detail {

/// How a communicator waits for its work.
struct watchdog_settings {
  /// Longest wait before giving up; 0 waits without limit (asynchronous errors are still polled).
  std::chrono::milliseconds timeout{0};
  /// Longest sleep between two polls. The first sleeps are shorter (1 us, doubling up to this), so
  /// that a wait which ends in microseconds is not charged a whole interval. 0 polls continuously.
  std::chrono::microseconds poll_interval{100};
  /// On an asynchronous error or a timeout, abort the communicator before throwing.
  bool abort_on_failure = true;
};

/// The end of the message when the failure did not abort the communicator.
inline constexpr const char* not_aborted_note =
    "the communicator was not aborted (aborting on failure is turned off)";

/// Longest poll_interval accepted: a longer sleep would leave a dead peer unnoticed for as long.
inline constexpr std::chrono::microseconds longest_poll_interval = std::chrono::minutes(1);

/// Throws a qsdp::error naming the setting and its value when one is out of range.
inline void check_watchdog_settings(const watchdog_settings& settings, const char* where) {
  if (settings.timeout.count() < 0)
    throw qsdp::error(std::string(where) + ": timeout is " +
                      std::to_string(settings.timeout.count()) +
                      " ms; expected >= 0 (0 waits without limit)");
  if (settings.poll_interval.count() < 0 || settings.poll_interval > longest_poll_interval)
    throw qsdp::error(std::string(where) + ": poll_interval is " +
                      std::to_string(settings.poll_interval.count()) + " us; expected 0 to " +
                      std::to_string(longest_poll_interval.count()) + " us (0 polls continuously)");
}

/// Waits until done() is true.
///   done()               -> bool: whether the awaited work has completed (may throw).
///   async_error()        -> std::optional<std::string>: the transport's asynchronous error,
///                           described, or nothing while there is none (may throw).
///   abort(failure)       -> std::string: aborts the communicator, given the failure's message, and
///                           returns what was done, for the message (e.g. what the caller may no
///                           longer do with the handle). Called at most once, only when
///                           settings.abort_on_failure.
/// Each round first polls async_error(), then done(), then the clock (steady_clock, so that a
/// changed wall clock neither ends nor extends the wait): a failure reported together with the
/// completion still counts, and work done exactly at the deadline still succeeds.
/// Throws qsdp::error "<where>: asynchronous error: <description>; <abort note>" or
/// "<where>: timed out: ... within the timeout of <t> ms ...; <abort note>". Exceptions of done()
/// and async_error() pass through unchanged, without an abort.
template <class Done, class AsyncError, class Abort>
void wait_with_watchdog(Done&& done, AsyncError&& async_error, Abort&& abort,
                        const watchdog_settings& settings, const char* where) {
  using clock = std::chrono::steady_clock;
  check_watchdog_settings(settings, where);
  const clock::time_point start = clock::now();
  // A timeout past what clock::duration holds (about 292 years in nanoseconds) is no limit; capping
  // it keeps start + timeout from overflowing.
  constexpr auto longest =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock::duration::max() / 4);
  const bool limited = settings.timeout.count() > 0 && settings.timeout < longest;
  const clock::time_point deadline =
      limited ? start + std::chrono::duration_cast<clock::duration>(settings.timeout) : start;

  const auto fail = [&](const std::string& failure) {
    std::string note;
    if (!settings.abort_on_failure) {
      note = not_aborted_note;
    } else {
      try {
        note = abort(failure);
      } catch (const std::exception& e) {  // report the failure itself first, the abort's after
        note = std::string("aborting the communicator failed too: ") + e.what();
      }
    }
    throw qsdp::error(failure + "; " + note);
  };

  std::chrono::microseconds pause{1};
  for (;;) {
    if (const std::optional<std::string> error = async_error())
      fail(std::string(where) + ": asynchronous error: " + *error);
    if (done()) return;
    const clock::time_point now = clock::now();
    if (limited && now >= deadline) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
      fail(std::string(where) + ": timed out: the work was not done within the timeout of " +
           std::to_string(settings.timeout.count()) + " ms (waited " +
           std::to_string(waited.count()) +
           " ms); a rank that never joined the collective, or a hung kernel, is the usual cause");
    }
    clock::duration sleep = std::min(pause, settings.poll_interval);
    if (limited) sleep = std::min<clock::duration>(sleep, deadline - now);
    if (sleep.count() > 0)
      std::this_thread::sleep_for(sleep);
    else
      std::this_thread::yield();
    pause = std::min(pause * 2, settings.poll_interval);
  }
}

}  // namespace qsdp::detail
