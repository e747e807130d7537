// SPDX-License-Identifier: Apache-2.0
//
// Sharded training of a character-level language model with quantized weights and gradients
// (examples/fsdp_train/README.md): FSDP over qsdp's collectives, in-process ranks (threads) by
// default, MPI processes with --mpi.
//
// `qsdp_fsdp_train --help` prints the options (the usage text below).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <qsdp/communicator.hpp>
#if QSDP_EXAMPLE_MPI
#include <mpi.h>

#include <qsdp/mpi.hpp>
#endif

#include "data.hpp"
#include "fsdp.hpp"

namespace {

struct options {
  std::string weights = "fp32", grads = "fp32", store = "fp32";
  int ranks = 4;
  long steps = 3000;
  std::size_t batch = 256;
  float lr = 3e-3f;
  std::uint64_t seed = 1;
  std::size_t bucket = 1024;
  std::string data = "/usr/share/games/fortunes";
  long eval_every = 250;
  std::size_t val_examples = 8192;
  fsdp_train::model_config model;
  std::string log;
  bool mpi = false;
  bool profile = false;
};

constexpr const char* usage = R"(usage: qsdp_fsdp_train [options]

Trains a character-level language model sharded over ranks, FSDP-style, with qsdp's collectives
quantizing the gathered weights and the reduce-scattered gradients.

  --weights Q       weight all_gather: fp32, stochasticB, random_shiftB, nearestB, symmetricB
                    (B in 2, 4, 8), mxfp8, mxfp4, mxfp8_stochastic, mxfp4_stochastic, nvfp4,
                    nvfp4_stochastic; a delta_ prefix (delta_random_shift4) gathers weight
                    differences (default fp32)
  --grads Q         gradient reduce_scatter: the same names, and hadamard_stochastic4,
                    hadamard_stochastic8, hadamard_mxfp4_stochastic, hadamard_nvfp4_stochastic
                    (default fp32)
  --store Q         how the master weights are stored between steps (default fp32)
  --ranks N         in-process ranks (threads) (default 4)
  --steps N         optimizer steps (default 3000)
  --batch N         examples per step over all ranks, a multiple of them (default 256)
  --lr R            Adam's learning rate, decayed linearly to a tenth (default 3e-3)
  --seed N          (default 1)
  --bucket N        values per bucket of the integer policies (default 1024)
  --data PATH       a text file or a folder of them (default /usr/share/games/fortunes)
  --eval-every N    steps between progress lines (default 250)
  --val-examples N  validation examples (default 8192)
  --hidden N, --embed N, --context N   the model (defaults 384, 16, 16)
  --log FILE        step,train,val rows for plots
  --mpi             ranks are MPI processes (start under mpirun)
  --profile         a line of per-step medians on rank 0
  --help            this text

Prints progress every --eval-every steps and a final line
  final: steps S train T val V val_quantized Q seconds X
(train: mean loss of the last eval window's batches; val: validation loss with the exact master
weights; val_quantized: with the weights through the training's weight quantizer). --profile adds
  breakdown: step S compute C collectives K encode E decode D exchange W
(seconds per step, medians, evaluation not counted: the step; the part outside qsdp's collectives;
inside them; their host codec's encode and decode; the rest of them, the exchanges and waiting for
the peers; qsdp::call_timings).
)";

[[noreturn]] void bad(const std::string& message) {
  throw std::invalid_argument("qsdp_fsdp_train: " + message +
                              " (qsdp_fsdp_train --help lists the options)");
}

long number(const char* flag, const std::string& text, long lo, long hi) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < lo || v > hi)
    bad(std::string(flag) + " " + text + ": expected an integer in [" + std::to_string(lo) + ", " +
        std::to_string(hi) + "]");
  return v;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    }
    if (flag == "--profile") {
      o.profile = true;
      continue;
    }
    if (flag == "--mpi") {
      o.mpi = true;
      continue;
    }
    if (i + 1 >= argc) bad(flag + " needs a value");
    const std::string v = argv[++i];
    if (flag == "--weights")
      o.weights = v;
    else if (flag == "--grads")
      o.grads = v;
    else if (flag == "--store")
      o.store = v;
    else if (flag == "--ranks")
      o.ranks = static_cast<int>(number("--ranks", v, 1, 256));
    else if (flag == "--steps")
      o.steps = number("--steps", v, 1, 100000000);
    else if (flag == "--batch")
      o.batch = static_cast<std::size_t>(number("--batch", v, 1, 1 << 20));
    else if (flag == "--lr") {
      o.lr = std::strtof(v.c_str(), nullptr);
      if (!(o.lr > 0 && o.lr < 1)) bad("--lr " + v + ": expected a rate in (0, 1)");
    } else if (flag == "--seed")
      o.seed = static_cast<std::uint64_t>(number("--seed", v, 0, 1L << 40));
    else if (flag == "--bucket")
      o.bucket = static_cast<std::size_t>(number("--bucket", v, 1, 1 << 24));
    else if (flag == "--data")
      o.data = v;
    else if (flag == "--eval-every")
      o.eval_every = number("--eval-every", v, 1, 100000000);
    else if (flag == "--val-examples")
      o.val_examples = static_cast<std::size_t>(number("--val-examples", v, 1, 1 << 24));
    else if (flag == "--hidden")
      o.model.hidden = static_cast<int>(number("--hidden", v, 1, 1 << 16));
    else if (flag == "--embed")
      o.model.embed = static_cast<int>(number("--embed", v, 1, 1024));
    else if (flag == "--context")
      o.model.context = static_cast<int>(number("--context", v, 1, 1024));
    else if (flag == "--log")
      o.log = v;
    else
      bad("unknown option " + flag);
  }
  return o;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const auto middle = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), middle, v.end());
  return *middle;
}

template <class Comm>
void train(Comm& comm, const options& o, const fsdp_train::corpus& text) {
  const int rank = comm.rank(), world = comm.size();
  if (o.batch % static_cast<std::size_t>(world) != 0)
    bad("--batch " + std::to_string(o.batch) + " is not a multiple of the " +
        std::to_string(world) + " ranks");
  fsdp_train::fsdp_model<Comm> model(comm, o.model, o.seed, o.weights, o.grads, o.bucket, o.store);
  const fsdp_train::batch validation =
      fsdp_train::validation_batch(text.validation, o.model.context, o.val_examples, rank, world);
  std::FILE* log = nullptr;
  if (rank == 0) {
    std::printf(
        "qsdp_fsdp_train: %zu parameters in 3 layers, %d rank(s), weights %s, grads %s, stored "
        "%s, %ld steps of %zu examples; %zu train / %zu validation characters from %zu file(s) of "
        "%s\n",
        model.parameter_count(), world, o.weights.c_str(), o.grads.c_str(), o.store.c_str(),
        o.steps, o.batch, text.train.size(), text.validation.size(), text.files, o.data.c_str());
    if (!o.log.empty()) {
      log = std::fopen(o.log.c_str(), "w");
      if (!log)
        throw std::runtime_error("--log " + o.log + ": cannot write: " + std::strerror(errno));
      std::fprintf(log, "step,train,val\n");
    }
  }
  const auto start = std::chrono::steady_clock::now();
  fsdp_train::adam_config adam;
  adam.lr = o.lr;
  double window = 0, last_train = 0;
  long in_window = 0;
  double val = 0;
  // --profile: each step's seconds, and its share inside the collectives (qsdp::call_timings).
  std::vector<double> step_s, calls_s, encode_s, decode_s;
  const qsdp::call_timings& timings = comm.workspace().timings;
  for (long step = 0; step < o.steps; ++step) {
    const fsdp_train::batch local =
        fsdp_train::training_batch(text.train, o.model.context, o.batch, o.seed,
                                   static_cast<std::uint64_t>(step), rank, world);
    const qsdp::call_timings before = timings;
    const auto step_start = std::chrono::steady_clock::now();
    window += model.train_step(local, o.batch, adam, static_cast<std::uint64_t>(step),
                               static_cast<std::uint64_t>(o.steps));
    if (o.profile) {
      step_s.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
      calls_s.push_back(timings.calls_seconds - before.calls_seconds);
      encode_s.push_back(timings.encode_seconds - before.encode_seconds);
      decode_s.push_back(timings.decode_seconds - before.decode_seconds);
    }
    ++in_window;
    if ((step + 1) % o.eval_every == 0 || step + 1 == o.steps) {
      last_train = window / static_cast<double>(in_window);
      window = 0;
      in_window = 0;
      val = model.evaluate(validation, true);
      if (!std::isfinite(val) || !std::isfinite(last_train))
        throw std::runtime_error("training diverged at step " + std::to_string(step + 1) +
                                 " (loss " + std::to_string(last_train) + ", validation " +
                                 std::to_string(val) + ")");
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (rank == 0) {
        std::printf("step %6ld/%ld  train %.4f  val %.4f  (%.1f s)\n", step + 1, o.steps,
                    last_train, val, seconds);
        std::fflush(stdout);
        if (log) std::fprintf(log, "%ld,%.6f,%.6f\n", step + 1, last_train, val);
      }
    }
  }
  const double val_quantized = model.evaluate(validation, false);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rank == 0) {
    std::printf("final: steps %ld train %.4f val %.4f val_quantized %.4f seconds %.1f\n", o.steps,
                last_train, val, val_quantized, seconds);
    if (o.profile) {
      std::vector<double> compute_s, exchange_s;
      for (std::size_t i = 0; i < step_s.size(); ++i) {
        compute_s.push_back(step_s[i] - calls_s[i]);
        exchange_s.push_back(calls_s[i] - encode_s[i] - decode_s[i]);
      }
      std::printf(
          "breakdown: step %.5f compute %.5f collectives %.5f encode %.5f decode %.5f exchange "
          "%.5f\n",
          median(step_s), median(compute_s), median(calls_s), median(encode_s), median(decode_s),
          median(exchange_s));
    }
    if (log) std::fclose(log);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool mpi = false;
  int status = 0;
  try {
    const options o = parse(argc, argv);
    // Bad names fail before any work.
    const auto check = [](const auto&) {};
    fsdp_train::with_plain_policy(fsdp_train::weight_quantizer(o.weights), o.bucket, check);
    fsdp_train::with_gradient_policy(o.grads, o.bucket, check);
    fsdp_train::with_plain_policy(o.store, o.bucket, check);
    const fsdp_train::corpus text = fsdp_train::load_corpus(o.data, 0.1, 10000);
    if (o.mpi) {
#if QSDP_EXAMPLE_MPI
      MPI_Init(&argc, &argv);
      mpi = true;
      qsdp::mpi_communicator comm(MPI_COMM_WORLD);
      train(comm, o, text);
#else
      bad("--mpi: this build has no MPI (install libopenmpi-dev and reconfigure)");
#endif
    } else {
      qsdp::run_local(
          o.ranks, [&](qsdp::local_communicator& comm) { train(comm, o, text); },
          qsdp::fault_options{.timeout = std::chrono::minutes(5)});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    status = 1;
  }
#if QSDP_EXAMPLE_MPI
  if (mpi) {
    if (status != 0) MPI_Abort(MPI_COMM_WORLD, status);
    MPI_Finalize();
  }
#endif
  (void)mpi;
  return status;
}
