// SPDX-License-Identifier: Apache-2.0
/// @file
/// qsdp::work: a collective started by all_gather_async, reduce_scatter_async, all_reduce_async or
/// group_end_async (collectives.hpp), as torch.distributed's Work or an MPI request: the caller
/// goes on, and wait() returns when the collective is done on this rank, or rethrows its error.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

namespace qsdp {

namespace detail {

/// What a started collective and its work handle share. `observed` says whether an error has
/// reached the caller (wait() rethrew it); one that has not is rethrown by the communicator's next
/// call (detail/collectives/async_lane.hpp), never dropped.
struct work_state {
  std::mutex mutex;
  std::condition_variable changed;
  bool done = false;
  bool observed = false;
  std::exception_ptr error;
  /// Called with the error of a work destroyed before any wait() rethrew it.
  std::function<void(std::exception_ptr)> dropped;

  void finish(std::exception_ptr e) {
    {
      std::lock_guard lock(mutex);
      error = std::move(e);
      done = true;
    }
    changed.notify_all();
  }
};

}  // namespace detail

/// A started collective. Until wait() or test() has returned true, the collective owns the
/// buffers the call named: the caller must neither write them nor read its outputs, nor free them.
/// Collectives started on one communicator run one after another, in the order they were started,
/// on the communicator's progress thread; a blocking call on that communicator first waits for
/// every started one. Destroying an unfinished work waits for the collective (its buffers are
/// still in use); an error that no wait() rethrew is rethrown by the communicator's next call.
class work {
 public:
  /// An empty work: done, with nothing to wait for.
  work() = default;
  /// The work of a started collective (made by the collectives, not by callers).
  /// @param state what the collective and the work share
  explicit work(std::shared_ptr<detail::work_state> state) : state_(std::move(state)) {}
  /// Takes over other's collective; other becomes empty.
  work(work&&) noexcept = default;
  /// Waits for this work's own collective (as the destructor), then takes over other's.
  /// @param other the work whose collective this one takes over
  /// @return this work
  work& operator=(work&& other) noexcept {
    if (this != &other) {
      finish_quietly();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  work(const work&) = delete;
  work& operator=(const work&) = delete;
  ~work() { finish_quietly(); }

  /// Blocks until the collective is done on this rank.
  /// @throws what the collective threw (qsdp::error when the ranks' calls differ, on every rank;
  ///         qsdp::timeout_error; a peer's failure), once: a second wait() returns normally
  void wait() {
    if (!state_) return;
    std::unique_lock lock(state_->mutex);
    state_->changed.wait(lock, [&] { return state_->done; });
    rethrow(lock);
  }

  /// Waits at most `timeout` for the collective.
  /// @param timeout how long to wait at the most
  /// @return true when it is done (as wait(), rethrowing its error), false when it still runs
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) {
    if (!state_) return true;
    std::unique_lock lock(state_->mutex);
    if (!state_->changed.wait_for(lock, timeout, [&] { return state_->done; })) return false;
    rethrow(lock);
    return true;
  }

  /// @return true when the collective is done (rethrowing its error as wait()), false otherwise;
  ///         never blocks on the collective
  bool test() { return wait_for(std::chrono::seconds(0)); }

  /// @return whether the work names a collective (not default-constructed or moved from)
  bool valid() const noexcept { return state_ != nullptr; }

 private:
  void rethrow(std::unique_lock<std::mutex>& lock) {
    if (!state_->error || state_->observed) return;
    state_->observed = true;
    std::exception_ptr e = state_->error;
    lock.unlock();
    std::rethrow_exception(e);
  }
  // The buffers stay in use until the collective is done, whoever holds the work.
  void finish_quietly() noexcept {
    if (!state_) return;
    std::exception_ptr unobserved;
    {
      std::unique_lock lock(state_->mutex);
      state_->changed.wait(lock, [&] { return state_->done; });
      if (state_->error && !state_->observed) {
        state_->observed = true;
        unobserved = state_->error;
      }
    }
    if (unobserved && state_->dropped) state_->dropped(unobserved);
    state_.reset();
  }

  std::shared_ptr<detail::work_state> state_;
};

}  // namespace qsdp
