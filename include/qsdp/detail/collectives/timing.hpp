// SPDX-License-Identifier: Apache-2.0
//
// The clock of the host collectives' call_timings (qsdp/call_options.hpp): a scope that adds its
// wall time to one of the totals, also when it is left by an exception.
#pragma once

#include <chrono>

namespace qsdp::detail {

class add_seconds_on_exit {
 public:
  explicit add_seconds_on_exit(double& total) noexcept
      : total_(total), start_(std::chrono::steady_clock::now()) {}
  add_seconds_on_exit(const add_seconds_on_exit&) = delete;
  add_seconds_on_exit& operator=(const add_seconds_on_exit&) = delete;
  ~add_seconds_on_exit() {
    total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace qsdp::detail
