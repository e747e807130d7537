// SPDX-License-Identifier: Apache-2.0
//
// The in-process transport's machinery (qsdp::local_communicator and the one-GPU cuda_local
// communicator): a barrier that can be broken, so that a rank that fails, returns early or hangs
// releases the others with a qsdp::error instead of leaving them waiting forever, and the rank
// threads of run_local.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../../config.hpp"

namespace qsdp::detail {

/// A reusable barrier for the in-process ranks that can be broken: when a rank fails, every rank
/// waiting in it (or arriving later) gets a qsdp::error instead of waiting forever.
class breakable_barrier {
 public:
  /// `owner` names the communicator in messages.
  explicit breakable_barrier(int parties, const char* owner = "qsdp::local_communicator")
      : parties_(parties), owner_(owner), present_(static_cast<std::size_t>(parties), false) {}

  /// Waits until all parties arrived (returns), the barrier is broken, or `timeout` passed (0: no
  /// limit; throws qsdp::timeout_error naming the ranks that had not arrived, the ones to look at).
  void arrive_and_wait(int rank, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (departed_ > 0 && !broken_) break_for_departure(departed_rank_);
    throw_if_broken();
    const std::uint64_t generation = generation_;
    present_[static_cast<std::size_t>(rank)] = true;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      std::fill(present_.begin(), present_.end(), false);
      ++generation_;
      cv_.notify_all();
      return;
    }
    const auto released_or_broken = [&] { return generation_ != generation || broken_; };
    bool released = true;
    if (timeout.count() > 0)
      released = cv_.wait_for(lock, timeout, released_or_broken);
    else
      cv_.wait(lock, released_or_broken);
    if (generation_ != generation) return;  // released before any failure: this exchange completed
    throw_if_broken();
    if (!released) {
      broken_ = true;
      reason_ =
          "rank" + absent_ranks() + " did not reach the collective within " +
          std::to_string(timeout.count()) +
          " ms (fault_options::timeout; it returned early, hangs, or called another collective)";
      cv_.notify_all();
      throw qsdp::timeout_error(std::string(owner_) + ": collective abandoned: " + reason_);
    }
  }

  /// A rank finished its work: anyone waiting now, or arriving later, can never be released.
  void depart(int rank) {
    std::lock_guard lock(mutex_);
    if (departed_++ == 0) departed_rank_ = rank;
    if (arrived_ > 0 && !broken_) break_for_departure(rank);
  }

  void break_with(const std::string& reason) {
    std::lock_guard lock(mutex_);
    if (!broken_) {
      broken_ = true;
      reason_ = reason;
    }
    cv_.notify_all();
  }

 private:
  /// A rank that returned can never arrive again: whoever waits, or comes, cannot be released.
  void break_for_departure(int rank) {
    broken_ = true;
    reason_ = "rank " + std::to_string(rank) +
              " returned while the others were still in a collective (every rank must make the "
              "same calls)";
    cv_.notify_all();
  }

  /// " 1" or "s 1, 3": the ranks that have not arrived in the current generation.
  std::string absent_ranks() const {
    std::string list;
    int absent = 0;
    for (std::size_t r = 0; r < present_.size(); ++r) {
      if (present_[r]) continue;
      list += (absent++ ? ", " : " ") + std::to_string(r);
    }
    return absent > 1 ? "s" + list : list;
  }

  void throw_if_broken() const {
    if (broken_) throw qsdp::error(std::string(owner_) + ": collective abandoned: " + reason_);
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  const int parties_;
  const char* owner_;
  int arrived_ = 0;
  int departed_ = 0;
  int departed_rank_ = -1;
  std::uint64_t generation_ = 0;
  bool broken_ = false;
  std::string reason_;
  std::vector<bool> present_;  // who has arrived in the current generation
};

/// What the threads of one run_local share: the barrier and each rank's posted send buffer.
struct local_world {
  explicit local_world(int size, std::chrono::milliseconds wait_limit)
      : barrier(size),
        posted(static_cast<std::size_t>(size)),
        posted_bytes(static_cast<std::size_t>(size)),
        timeout(wait_limit) {}
  breakable_barrier barrier;
  std::vector<const std::byte*> posted;
  std::vector<std::size_t> posted_bytes;
  std::chrono::milliseconds timeout;  // 0: no limit
};

/// Runs body(rank) on `world` threads (rank 0 on the caller's) and waits for all. When a rank
/// throws, fail(rank, reason) breaks the barriers it shares with others, so they leave any
/// collective with a qsdp::error (and, failing in turn, release theirs), and the first exception is
/// rethrown here; a rank that returns calls depart(rank), which releases ranks still waiting for
/// it.
template <class Body, class Depart, class Fail>
void run_rank_threads(int world, Body&& body, Depart&& depart, Fail&& fail) {
  std::mutex error_mutex;
  std::exception_ptr first_error;
  auto guarded = [&](int rank) {
    try {
      body(rank);
      depart(rank);
    } catch (...) {
      {
        std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
      fail(rank, "rank " + std::to_string(rank) + " failed");
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(world - 1));
  for (int rank = 1; rank < world; ++rank) threads.emplace_back(guarded, rank);
  guarded(0);
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

/// run_rank_threads for the ranks of one world that share `barrier`.
template <class Body>
void run_rank_threads(int world, breakable_barrier& barrier, Body&& body) {
  run_rank_threads(
      world, body, [&](int rank) { barrier.depart(rank); },
      [&](int, const std::string& reason) { barrier.break_with(reason); });
}

/// A rank of an in-process world (local_communicator, cuda_local_communicator): its place among the
/// threads, its call counter, and the meeting of all ranks at an exchange. World has `posted` and
/// `posted_bytes` (one entry per rank), `barrier` and `timeout`.
template <class World>
class in_process_rank {
 public:
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(world_->posted.size()); }
  std::uint64_t next_call() noexcept { return calls_++; }

 protected:
  in_process_rank(World& world, int rank) : world_(&world), rank_(rank) {}

  /// Posts this rank's send buffer of `bytes`, waits until every rank has, and checks that all post
  /// as many bytes: a rank that sends another amount breaks the world, and every rank throws.
  /// `owner` and `what` name the call in the message (built only then: no allocation per call).
  void post_and_meet(const std::byte* send, std::size_t bytes, const char* owner,
                     const char* what) {
    const auto me = static_cast<std::size_t>(rank_);
    world_->posted[me] = send;
    world_->posted_bytes[me] = bytes;
    meet();
    for (int peer = 0; peer < size(); ++peer) {
      const std::size_t theirs = world_->posted_bytes[static_cast<std::size_t>(peer)];
      if (theirs == bytes) continue;
      const std::string message = std::string(owner) + "::" + what + ": rank " +
                                  std::to_string(rank_) + " sends " + std::to_string(bytes) +
                                  " bytes but rank " + std::to_string(peer) + " sends " +
                                  std::to_string(theirs);
      world_->barrier.break_with(message);
      throw qsdp::error(message);
    }
  }

  /// The send buffer rank `peer` posted.
  const std::byte* posted(int peer) const { return world_->posted[static_cast<std::size_t>(peer)]; }

  /// Waits until every rank has arrived here too.
  void meet() { world_->barrier.arrive_and_wait(rank_, world_->timeout); }

  World* world_;
  int rank_;

 private:
  std::uint64_t calls_ = 0;
};

}  // namespace qsdp::detail
