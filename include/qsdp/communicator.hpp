// SPDX-License-Identifier: Apache-2.0
//
// Communicators: what the collectives need from a transport, and the in-process one (ranks as threads).
// A communicator moves bytes and never quantizes; the collectives (collectives.hpp) never move bytes
// themselves.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config.hpp"

namespace qsdp {

/// Where a communicator's buffers live.
enum class memory_space { host, device };

/// Scratch memory a communicator owns for the collectives: grows when a larger call arrives and is
/// reused otherwise, so steady-state calls allocate nothing. `growths()` counts reallocations (tests
/// use it to prove reuse).
class host_workspace {
 public:
  /// A buffer of at least `bytes` bytes, 64-byte aligned; valid until the next call of get().
  std::byte* get(std::size_t bytes) {
    if (bytes > capacity_) {
      const std::size_t grown = std::max(bytes, capacity_ + capacity_ / 2);
      storage_ = std::make_unique<std::byte[]>(grown + 64);
      capacity_ = grown;
      ++growths_;
    }
    auto address = reinterpret_cast<std::uintptr_t>(storage_.get());
    return storage_.get() + ((64 - address % 64) % 64);
  }
  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t growths() const noexcept { return growths_; }

 private:
  std::unique_ptr<std::byte[]> storage_;
  std::size_t capacity_ = 0;
  std::size_t growths_ = 0;
};

/// What the collectives need from a transport (see README "Communicators"):
///   rank(), size()                       this rank and the number of ranks
///   all_gather_bytes(send, recv, n)      every rank contributes n bytes; recv holds size() * n bytes,
///                                        rank r's block at offset r * n
///   all_to_all_bytes(send, recv, n)      send holds size() blocks of n bytes, block j for rank j;
///                                        recv gets block i from rank i at offset i * n
///   workspace()                          scratch owned by the communicator, reused across calls
///   next_call()                          a per-communicator call counter: every rank calls the
///                                        collectives in the same order, so indices agree across ranks
///   memory                               memory_space of the buffers it moves
/// Every call is collective: all ranks make it, in the same order, with the same n.
template <class C>
concept communicator = requires(C& c, const std::byte* send, std::byte* recv, std::size_t n) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  c.all_gather_bytes(send, recv, n);
  c.all_to_all_bytes(send, recv, n);
  { c.workspace() } -> std::same_as<host_workspace&>;
  { c.next_call() } -> std::convertible_to<std::uint64_t>;
  { C::memory } -> std::convertible_to<memory_space>;
};

namespace detail {

/// A reusable barrier for the in-process ranks that can be broken: when a rank fails, every rank
/// waiting in it (or arriving later) gets a qsdp::error instead of waiting forever.
class breakable_barrier {
 public:
  /// `owner` names the communicator in messages.
  explicit breakable_barrier(int parties, const char* owner = "qsdp::local_communicator")
      : parties_(parties), owner_(owner), present_(static_cast<std::size_t>(parties), false) {}

  /// Waits until all parties arrived (returns), the barrier is broken, or `timeout` passed (throws
  /// qsdp::error; the message names the ranks that had not arrived, which are the ones to look at).
  void arrive_and_wait(int rank, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (departed_ > 0 && !broken_) {
      broken_ = true;
      reason_ = "rank " + std::to_string(departed_rank_) + " returned while the others were still "
                "in a collective (every rank must make the same calls)";
      cv_.notify_all();
    }
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
    const bool released = cv_.wait_for(lock, timeout, [&] { return generation_ != generation || broken_; });
    if (generation_ != generation) return;  // released before any failure: this exchange completed
    throw_if_broken();
    if (!released) {
      broken_ = true;
      reason_ = "rank" + absent_ranks() + " did not reach the collective within " +
                std::to_string(timeout.count()) +
                " ms (local_options::timeout; it returned early, hangs, or called another collective)";
      cv_.notify_all();
      throw_if_broken();
    }
  }

  /// A rank finished its work: anyone waiting now, or arriving later, can never be released.
  void depart(int rank) {
    std::lock_guard lock(mutex_);
    if (departed_++ == 0) departed_rank_ = rank;
    if (arrived_ > 0 && !broken_) {
      broken_ = true;
      reason_ = "rank " + std::to_string(rank) + " returned while the others were still in a "
                "collective (every rank must make the same calls)";
      cv_.notify_all();
    }
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
      : barrier(size), posted(static_cast<std::size_t>(size)), posted_bytes(static_cast<std::size_t>(size)),
        timeout(wait_limit) {}
  breakable_barrier barrier;
  std::vector<const std::byte*> posted;
  std::vector<std::size_t> posted_bytes;
  std::chrono::milliseconds timeout;
};

}  // namespace detail

/// Options of run_local.
struct local_options {
  /// How long a rank waits in a collective for the others before every rank gets a qsdp::error that
  /// names the missing ranks. A rank that throws or returns releases the others at once; the timeout
  /// is for a rank that is stuck (or just slow: make it longer than the slowest rank's work between
  /// two collectives). 1 ms .. 24 h.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

namespace detail {

inline void check_local_timeout(std::chrono::milliseconds timeout, const char* where) {
  if (timeout.count() < 1 || timeout > std::chrono::hours(24))
    throw qsdp::error(std::string(where) + ": options.timeout is " + std::to_string(timeout.count()) +
                      " ms; expected 1 ms .. 24 h");
}

}  // namespace detail

/// One rank of an in-process world (ranks are threads of run_local). Host memory.
class local_communicator {
 public:
  static constexpr memory_space memory = memory_space::host;

  local_communicator(detail::local_world& world, int rank) : world_(&world), rank_(rank) {}

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(world_->posted.size()); }
  host_workspace& workspace() noexcept { return workspace_; }
  std::uint64_t next_call() noexcept { return calls_++; }

  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    exchange(send, n, "all_gather_bytes", [&](int peer, const std::byte* data) {
      if (n) std::memcpy(recv + static_cast<std::size_t>(peer) * n, data, n);
    });
  }

  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n) {
    exchange(send, n * static_cast<std::size_t>(size()), "all_to_all_bytes", [&](int peer, const std::byte* data) {
      if (n) std::memcpy(recv + static_cast<std::size_t>(peer) * n, data + static_cast<std::size_t>(rank_) * n, n);
    });
  }

 private:
  /// Post my buffer, wait for all, read every peer's buffer, wait until all have read.
  template <class Read>
  void exchange(const std::byte* send, std::size_t bytes, const char* what, Read&& read) {
    world_->posted[static_cast<std::size_t>(rank_)] = send;
    world_->posted_bytes[static_cast<std::size_t>(rank_)] = bytes;
    world_->barrier.arrive_and_wait(rank_, world_->timeout);
    for (int peer = 0; peer < size(); ++peer) {
      const std::size_t theirs = world_->posted_bytes[static_cast<std::size_t>(peer)];
      if (theirs != bytes) {
        const std::string message = std::string("qsdp::local_communicator::") + what + ": rank " +
                                    std::to_string(rank_) + " sends " + std::to_string(bytes) +
                                    " bytes but rank " + std::to_string(peer) + " sends " +
                                    std::to_string(theirs);
        world_->barrier.break_with(message);
        throw qsdp::error(message);
      }
    }
    for (int peer = 0; peer < size(); ++peer) read(peer, world_->posted[static_cast<std::size_t>(peer)]);
    world_->barrier.arrive_and_wait(rank_, world_->timeout);
  }

  detail::local_world* world_;
  int rank_;
  std::uint64_t calls_ = 0;
  host_workspace workspace_;
};

static_assert(communicator<local_communicator>);

namespace detail {

/// Runs body(rank) on `world` threads (rank 0 on the caller's) and waits for all. When a rank throws,
/// `barrier` is broken so the others leave any collective with a qsdp::error, and the first exception is
/// rethrown here; a rank that returns departs, which releases ranks still waiting for it.
template <class Body>
void run_rank_threads(int world, breakable_barrier& barrier, Body&& body) {
  std::mutex error_mutex;
  std::exception_ptr first_error;
  auto guarded = [&](int rank) {
    try {
      body(rank);
      barrier.depart(rank);
    } catch (...) {
      {
        std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
      barrier.break_with("rank " + std::to_string(rank) + " failed");
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(world - 1));
  for (int rank = 1; rank < world; ++rank) threads.emplace_back(guarded, rank);
  guarded(0);
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace detail

/// Runs fn(comm) on `world` threads, one per rank, and waits for all. If a rank throws, the others are
/// released from any collective with a qsdp::error and the first rank's exception is rethrown here; a
/// rank that returns while others still wait in a collective releases them the same way.
template <class Fn>
void run_local(int world, Fn&& fn, local_options options = {}) {
  if (world < 1)
    throw qsdp::error("qsdp::run_local: world is " + std::to_string(world) + "; expected >= 1");
  detail::check_local_timeout(options.timeout, "qsdp::run_local");
  detail::local_world shared(world, options.timeout);
  detail::run_rank_threads(world, shared.barrier, [&](int rank) {
    local_communicator comm(shared, rank);
    fn(comm);
  });
}

}  // namespace qsdp
