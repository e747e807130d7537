// SPDX-License-Identifier: Apache-2.0
// What the demos (examples/) and the benchmark programs (bench/) print for people besides their
// tables: progress lines on stderr for long runs, and relative errors as percentages.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

namespace console {

/// Progress lines on stderr, "[3/18] all_gather stochastic<8>", once the run has taken more than a
/// few seconds (short runs stay quiet); stdout is flushed first, so that a progress line never
/// lands inside a line of a table. `enabled` false (a rank other than 0, say) prints nothing.
class progress {
 public:
  explicit progress(std::size_t steps, bool enabled = true) : steps_(steps), enabled_(enabled) {}
  void step(const std::string& what) {
    ++done_;
    if (!enabled_ || std::chrono::steady_clock::now() - start_ < std::chrono::seconds(2)) return;
    std::fflush(stdout);
    std::fprintf(stderr, "[%zu/%zu] %s\n", done_, steps_, what.c_str());
    std::fflush(stderr);
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::size_t done_ = 0, steps_;
  bool enabled_;
};

/// A relative error as a percentage: "0.41 %", "3.8 %", "86 %".
inline std::string percent_text(double rel) {
  char text[32];
  std::snprintf(text, sizeof text, rel * 100 >= 10 ? "%.0f %%" : "%.2g %%", rel * 100);
  return text;
}

}  // namespace console
