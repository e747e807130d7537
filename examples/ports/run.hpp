// SPDX-License-Identifier: Apache-2.0
//
// What the ported training loops on host ranks share (examples/ports/zero1_llmc.cpp,
// bucketed_reducer.cpp): their options, the policies of --bits, the learning-rate schedule,
// the losses of a run, and the comparison of a compressed run with the uncompressed run of the
// same seed that each prints.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <qsdp/config.hpp>
#include <qsdp/quantizers.hpp>

#include "adamw.hpp"
#include "mlp_lm.hpp"

namespace ports {

struct options {
  int ranks = 4;
  long steps = 300;
  std::size_t batch = 64;  // examples per step, all ranks together
  float lr = 2e-3f;
  float weight_decay = 0.1f;
  std::uint64_t seed = 1;
  int bits = 8;
  std::string data = "/usr/share/games/fortunes";
  long eval_every = 50;
  std::size_t val_examples = 2048;
  std::size_t bucket_kib = 256;  // bucketed_reducer only
  bool overlap = true;           // bucketed_reducer only
  model_config model;
};

[[noreturn]] inline void bad(const std::string& program, const std::string& message) {
  throw std::invalid_argument(program + ": " + message + " (--help lists the options)");
}

inline long number(const std::string& program, const std::string& flag, const std::string& text,
                   long lo, long hi) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < lo || v > hi)
    bad(program, flag + " " + text + ": expected an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return v;
}

inline float rate(const std::string& program, const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const float v = std::strtof(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(v >= 0 && v < 1))
    bad(program, flag + " " + text + ": expected a number in [0, 1)");
  return v;
}

/// Parses the options every port takes; `extra` handles a port's own flags (returns false for
/// an unknown one). Returns false after printing `help` for --help.
template <class Extra>
bool parse(int argc, char** argv, const std::string& program, const char* help, options& o,
           Extra&& extra) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(help, stdout);
      return false;
    }
    if (flag == "--no-overlap") {
      o.overlap = false;
      continue;
    }
    if (i + 1 >= argc) bad(program, flag + " needs a value");
    const std::string v = argv[++i];
    if (flag == "--ranks")
      o.ranks = static_cast<int>(number(program, flag, v, 1, 64));
    else if (flag == "--steps")
      o.steps = number(program, flag, v, 1, 1000000);
    else if (flag == "--batch")
      o.batch = static_cast<std::size_t>(number(program, flag, v, 1, 1 << 20));
    else if (flag == "--lr")
      o.lr = rate(program, flag, v);
    else if (flag == "--weight-decay")
      o.weight_decay = rate(program, flag, v);
    else if (flag == "--seed")
      o.seed = static_cast<std::uint64_t>(number(program, flag, v, 0, 1L << 40));
    else if (flag == "--bits") {
      o.bits = static_cast<int>(number(program, flag, v, 4, 8));
      if (o.bits != 4 && o.bits != 8) bad(program, "--bits " + v + ": expected 8 or 4");
    } else if (flag == "--data")
      o.data = v;
    else if (flag == "--eval-every")
      o.eval_every = number(program, flag, v, 1, 1000000);
    else if (flag == "--val-examples")
      o.val_examples = static_cast<std::size_t>(number(program, flag, v, 1, 1 << 24));
    else if (flag == "--width")
      o.model.width = static_cast<int>(number(program, flag, v, 1, 1 << 14));
    else if (flag == "--blocks")
      o.model.blocks = static_cast<int>(number(program, flag, v, 0, 64));
    else if (flag == "--context")
      o.model.context = static_cast<int>(number(program, flag, v, 1, 1024));
    else if (flag == "--bucket-kib")
      o.bucket_kib = static_cast<std::size_t>(number(program, flag, v, 1, 1 << 20));
    else if (!extra(flag, v))
      bad(program, "unknown option " + flag);
  }
  if (o.batch % static_cast<std::size_t>(o.ranks) != 0)
    bad(program, "--batch " + std::to_string(o.batch) + " is not a multiple of --ranks " +
                     std::to_string(o.ranks));
  return true;
}

/// The policies of --bits: 8 bits, random_shift weights and stochastic gradients (QSDP's W8G8); 4
/// bits, random_shift weights and hadamard<stochastic<4>> gradients (rotated buckets of 256).
struct policies8 {
  qsdp::random_shift<8> weights{.bucket_size = 1024, .seed = 11};
  qsdp::stochastic<8> grads{.bucket_size = 1024, .seed = 12};
};
struct policies4 {
  qsdp::random_shift<4> weights{.bucket_size = 1024, .seed = 11};
  qsdp::hadamard<qsdp::stochastic<4>> grads{{.bucket_size = 256, .seed = 12}};
};
struct uncompressed {
  qsdp::identity weights{};
  qsdp::identity grads{};
};

/// A tenth of the steps of linear warmup, then a cosine decay to a tenth of the peak rate.
inline float learning_rate(long step, const options& o) {
  const long warmup = std::max(1L, o.steps / 10);
  if (step < warmup) return o.lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  const double progress =
      static_cast<double>(step - warmup) / static_cast<double>(std::max(1L, o.steps - warmup));
  return o.lr * static_cast<float>(0.1 + 0.45 * (1 + std::cos(3.141592653589793 * progress)));
}

/// What a run reports: every step's training loss (mean over ranks), the validation loss at the
/// evaluations, and the bytes the collectives put on the wire against the same values unpacked.
struct run_log {
  std::vector<double> train;
  std::map<long, double> validation;
  double wire_bytes = 0, value_bytes = 0;
  double seconds = 0;
};

/// Collects a run's figures from its ranks (threads); every member is safe to call from any rank.
class run_recorder {
 public:
  explicit run_recorder(const options& o) : o_(o) {
    log_.train.assign(static_cast<std::size_t>(o.steps), 0.0);
  }
  /// Whether step `step` (0-based) ends with an evaluation.
  bool evaluates(long step) const {
    return (step + 1) % o_.eval_every == 0 || step + 1 == o_.steps;
  }
  /// One rank's training loss of `step`; the log keeps the mean over the `world` ranks.
  void train(long step, int world, double loss) {
    std::lock_guard lock(guard_);
    log_.train[static_cast<std::size_t>(step)] += loss / world;
  }
  /// The validation loss after `step`, printed as it comes.
  void validation(long step, double loss) {
    std::lock_guard lock(guard_);
    log_.validation[step + 1] = loss;
    std::printf("  step %ld/%ld: validation %.4f\n", step + 1, o_.steps, loss);
    std::fflush(stdout);
  }
  /// Adds one collective's bytes of rank 0: `packet` bytes to each of the world - 1 peers, against
  /// `values` bytes of values.
  void bytes(int rank, int world, std::size_t packet, std::size_t values) {
    if (rank != 0) return;
    std::lock_guard lock(guard_);
    log_.wire_bytes += static_cast<double>(world - 1) * static_cast<double>(packet);
    log_.value_bytes += static_cast<double>(world - 1) * static_cast<double>(values);
  }
  run_log finish() {
    log_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    return log_;
  }

 private:
  const options& o_;
  std::mutex guard_;
  run_log log_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

/// Prints the compressed run beside the uncompressed one: losses at the evaluations, the largest
/// relative difference of the training loss over every step and over the last tenth, and the
/// bytes saved; then a "final:" line for scripts.
inline void print_comparison(const char* program, const run_log& ref, const run_log& run,
                             const char* name) {
  std::printf("%6s %10s %10s %8s\n", "step", "val", "uncompr.", "diff");
  for (const auto& [step, v] : run.validation) {
    const double v0 = ref.validation.at(step);
    std::printf("%6ld %10.4f %10.4f %+7.2f%%\n", step, v, v0, 100 * (v - v0) / v0);
  }
  double largest = 0, tail = 0;
  const std::size_t n = std::min(run.train.size(), ref.train.size());
  for (std::size_t i = 0; i < n; ++i) {
    const double d = std::abs(run.train[i] - ref.train[i]) / ref.train[i];
    largest = std::max(largest, d);
    if (i >= n - std::max<std::size_t>(1, n / 10)) tail = std::max(tail, d);
  }
  const double saved = run.value_bytes - run.wire_bytes;
  std::printf(
      "training loss, every step: largest relative difference %.3f %%, %.3f %% over the last "
      "tenth of the steps\n"
      "wire: %.2f MiB sent of %.2f MiB of values (%.3f; %.2f MiB saved) per rank\n",
      100 * largest, 100 * tail, run.wire_bytes / 1048576.0, run.value_bytes / 1048576.0,
      run.wire_bytes / run.value_bytes, saved / 1048576.0);
  const double val = run.validation.rbegin()->second, val0 = ref.validation.rbegin()->second;
  std::printf(
      "final: %s run %s steps %zu val %.4f ref_val %.4f max_step_diff %.5f byte_ratio %.3f "
      "seconds %.1f ref_seconds %.1f\n",
      program, name, run.train.size(), val, val0, largest, run.wire_bytes / run.value_bytes,
      run.seconds, ref.seconds);
}

}  // namespace ports
