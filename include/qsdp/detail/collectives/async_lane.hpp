// SPDX-License-Identifier: Apache-2.0
//
// The progress thread of a host communicator (its host_workspace's `lane`): the collectives
// started by qsdp::all_gather_async and its kin (declared in qsdp/collectives.hpp) run on it, one
// after another in the order they were started, so that every rank runs its calls in the same
// order, as the blocking calls do. A blocking call on the communicator first waits for the lane to
// be empty (drain), so that the communicator is never used by two threads at once; on the lane's
// own thread, where the started collectives call the blocking ones, drain returns at once. The
// thread starts with the first started collective and ends with the communicator, after the last.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "../../config.hpp"
#include "../../work.hpp"

namespace qsdp::detail {

/// The thread and its queue; on the heap behind async_lane, which moves with its communicator.
class lane_thread {
 public:
  lane_thread() = default;
  lane_thread(const lane_thread&) = delete;
  lane_thread& operator=(const lane_thread&) = delete;
  ~lane_thread() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  /// Queues `job` behind the collectives already started and returns its work. Throws, before
  /// queueing, the error of a dropped work (see work's destructor).
  qsdp::work submit(std::function<void()> job, const char* where) {
    rethrow_dropped(where);
    auto state = std::make_shared<work_state>();
    state->dropped = [slot = dropped_](std::exception_ptr e) {
      std::lock_guard lock(slot->mutex);
      if (!slot->error) slot->error = std::move(e);
    };
    {
      std::lock_guard lock(mutex_);
      if (!thread_.joinable()) {
        thread_ = std::thread([this] { run(); });
        thread_id_ = thread_.get_id();
      }
      queue_.push_back({std::move(job), state});
    }
    changed_.notify_all();
    return qsdp::work(std::move(state));
  }

  /// Waits until every started collective is done (not on the lane's own thread, where it returns
  /// at once), then throws the error of a dropped work, if any.
  void drain(const char* where) {
    if (on_lane()) return;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return queue_.empty() && !running_; });
    }
    rethrow_dropped(where);
  }

  /// @return whether the calling thread is the lane's (a started collective runs on it)
  bool on_lane() const noexcept { return std::this_thread::get_id() == thread_id_; }

 private:
  struct job_entry {
    std::function<void()> job;
    std::shared_ptr<work_state> state;
  };
  struct dropped_slot {
    std::mutex mutex;
    std::exception_ptr error;
  };

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job_entry entry = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      lock.unlock();
      std::exception_ptr error;
      try {
        entry.job();
      } catch (...) {
        error = std::current_exception();
      }
      entry.job = nullptr;  // the job's captures (the caller's tensors in Python) go before done
      entry.state->finish(error);
      lock.lock();
      running_ = false;
      changed_.notify_all();
    }
  }

  void rethrow_dropped(const char* where) {
    std::exception_ptr e;
    {
      std::lock_guard lock(dropped_->mutex);
      e = std::exchange(dropped_->error, nullptr);
    }
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& failure) {
      throw qsdp::error(std::string(where) +
                        ": a collective started earlier on this communicator failed and its "
                        "qsdp::work was destroyed before wait() rethrew the error: " +
                        failure.what());
    } catch (...) {
      throw;
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<job_entry> queue_;
  bool running_ = false;
  bool stopping_ = false;
  std::shared_ptr<dropped_slot> dropped_ = std::make_shared<dropped_slot>();
  std::atomic<std::thread::id> thread_id_{};
  std::thread thread_;
};

/// A communicator's lane: no thread until the first started collective. Moves with the
/// communicator, which may not be moved while a started collective has not finished.
class async_lane {
 public:
  qsdp::work submit(std::function<void()> job, const char* where) {
    if (!thread_) thread_ = std::make_unique<lane_thread>();
    return thread_->submit(std::move(job), where);
  }
  void drain(const char* where) {
    if (thread_) thread_->drain(where);
  }
  bool on_lane() const noexcept { return thread_ && thread_->on_lane(); }

 private:
  std::unique_ptr<lane_thread> thread_;
};

}  // namespace qsdp::detail
