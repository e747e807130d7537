// SPDX-License-Identifier: Apache-2.0
//
// A bucketed gradient reducer in the style of Megatron-LM's distributed optimizer and DeepSpeed's
// ZeRO-2, on in-process host ranks, with qsdp's collectives (docs/guides/porting.md):
//
//   * the gradients are ONE fp32 buffer, cut into buckets of at least --bucket-kib KiB of whole
//     tensors, taken from the last layer backwards (the order in which backward produces them);
//   * as backward finishes a layer, its tensors are marked ready, and a bucket whose tensors are
//   all
//     ready is reduce-scattered (avg) at once, in place, by a communication thread, while backward
//     goes on with the layers below (the overlap those frameworks get from a second CUDA stream);
//   * rank r owns slice r of every bucket: fp32 master weights and AdamW moments for that slice
//   only
//     (ZeRO-2: each rank keeps only its slice of the reduced gradients and of the optimizer state),
//     from which it writes its slice of the model's parameters;
//   * the updated slices of every bucket are all-gathered in place, all buckets in one qsdp group.
//
// The model is examples/ports/mlp_lm.hpp's. The uncompressed run of the same seed (qsdp::identity)
// runs first, then --bits 8 (random_shift<8> weights, stochastic<8> gradients) or 4; the program
// prints both runs' validation losses, the bytes sent, and how much of the reduce-scatters' time
// backward hid (--no-overlap: the reduce-scatters run after backward, on the training thread).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <qsdp/collectives.hpp>
#include <qsdp/communicator.hpp>

#include "run.hpp"

namespace {

constexpr const char* program = "qsdp_bucketed_reducer";
constexpr const char* help =
    "qsdp_bucketed_reducer: gradients packed into buckets as backward produces them, each bucket\n"
    "reduce-scattered as soon as it is full by a communication thread while backward goes on\n"
    "(Megatron's distributed optimizer, DeepSpeed's ZeRO-2), AdamW on each rank's bucket slices,\n"
    "an all-gather of the updated slices in one group; on in-process ranks, the uncompressed run\n"
    "of the same seed first, then the compressed one.\n"
    "  --ranks N        ranks (threads)                                 default 4\n"
    "  --bits 8|4       8: random_shift<8> weights, stochastic<8> gradients;\n"
    "                   4: random_shift<4>, hadamard<stochastic<4>>     default 8\n"
    "  --bucket-kib N   least bucket size, KiB of fp32 gradients         default 256\n"
    "  --no-overlap     reduce-scatter the buckets after backward\n"
    "  --steps N        training steps                                  default 300\n"
    "  --batch N        examples per step, all ranks                    default 64\n"
    "  --lr X           peak learning rate (warmup, cosine decay)        default 0.002\n"
    "  --weight-decay X AdamW's, on matrices and embeddings             default 0.1\n"
    "  --width N, --blocks N, --context N   the model                  default 128, 2, 16\n"
    "  --seed N         weights and data order                          default 1\n"
    "  --data PATH      text file or folder                  default /usr/share/games/fortunes\n"
    "  --eval-every N   steps between validation losses                 default 50\n"
    "  --val-examples N validation windows                              default 2048\n";

/// A bucket: whole tensors [first_tensor, end_tensor) covering [begin, end) of the flat buffers.
struct bucket {
  std::size_t first_tensor = 0, end_tensor = 0;
  std::size_t begin = 0, end = 0;
};

/// Buckets of at least `bytes` bytes of fp32 values, from the last tensor backwards.
std::vector<bucket> make_buckets(const ports::model_layout& l, std::size_t bytes) {
  std::vector<bucket> out;
  const auto& t = l.tensors();
  std::size_t end_tensor = t.size();
  while (end_tensor > 0) {
    bucket b;
    b.end_tensor = end_tensor;
    b.first_tensor = end_tensor;
    std::size_t values = 0;
    while (b.first_tensor > 0 && values * sizeof(float) < bytes)
      values += t[--b.first_tensor].padded;
    b.begin = t[b.first_tensor].offset;
    b.end = t[end_tensor - 1].offset + t[end_tensor - 1].padded;
    out.push_back(b);
    end_tensor = b.first_tensor;
  }
  return out;
}

/// Runs tasks in order on a thread of its own; wait() returns when every task has run and
/// rethrows the first task's exception.
class communication_thread {
 public:
  communication_thread() : worker_([this] { loop(); }) {}
  communication_thread(const communication_thread&) = delete;
  communication_thread& operator=(const communication_thread&) = delete;
  ~communication_thread() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    worker_.join();
  }

  void post(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    ready_.notify_all();
  }

  void wait() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return tasks_.empty() && !running_; });
    if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      running_ = true;
      lock.unlock();
      try {
        if (!failed()) task();  // after a failure the rest is skipped: the step is lost anyway
      } catch (...) {
        std::lock_guard relock(mutex_);
        if (!failure_) failure_ = std::current_exception();
      }
      lock.lock();
      running_ = false;
      if (tasks_.empty()) idle_.notify_all();
    }
  }
  bool failed() {
    std::lock_guard lock(mutex_);
    return failure_ != nullptr;
  }

  std::mutex mutex_;
  std::condition_variable ready_, idle_;
  std::deque<std::function<void()>> tasks_;
  bool running_ = false, stopping_ = false;
  std::exception_ptr failure_;
  std::thread worker_;
};

struct timing {
  std::vector<double> backward_ms, exposed_ms;
};

template <class P>
ports::run_log train(const ports::options& o, const fsdp_train::corpus& text, timing& times) {
  const ports::model_layout layout(o.model, o.ranks);
  const std::vector<bucket> buckets = make_buckets(layout, o.bucket_kib * 1024);
  const std::vector<float> initial = ports::initial_parameters(layout, o.seed);
  std::vector<unsigned char> decays(layout.total(), 0);  // weight decay on matrices, embeddings
  for (const auto& t : layout.tensors())
    if (t.cols > 1) std::fill_n(decays.begin() + static_cast<std::ptrdiff_t>(t.offset), t.size, 1);
  const fsdp_train::batch validation =
      fsdp_train::validation_batch(text.validation, o.model.context, o.val_examples, 0, 1);
  ports::run_recorder record(o);
  std::mutex guard;  // times
  qsdp::run_local(o.ranks, [&](qsdp::local_communicator& comm) {
    const P policies;
    const int rank = comm.rank(), world = comm.size();
    const auto r = static_cast<std::size_t>(rank), w = static_cast<std::size_t>(world);
    std::vector<float> params(initial), grads(layout.total());
    std::size_t slice_values = 0;
    for (const auto& b : buckets) slice_values += (b.end - b.begin) / w;
    // The fp32 master weights of slice r of every bucket: the model's parameters are what the
    // all-gather delivers (quantized), the master keeps every update exactly.
    std::vector<float> master, m(slice_values, 0.0f), v(slice_values, 0.0f);
    for (const bucket& b : buckets) {
      const std::size_t n = (b.end - b.begin) / w;
      master.insert(master.end(), params.begin() + static_cast<std::ptrdiff_t>(b.begin + r * n),
                    params.begin() + static_cast<std::ptrdiff_t>(b.begin + (r + 1) * n));
    }
    ports::mlp_lm model(layout);
    communication_thread comm_thread;
    std::vector<int> waiting(buckets.size());  // tensors of each bucket still to come
    auto reduce_bucket = [&](const bucket& b) {
      const std::size_t n = (b.end - b.begin) / w;
      float* const g = grads.data() + b.begin;
      qsdp::reduce_scatter(comm, policies.grads, g, g + r * n, n, qsdp::reduce_op::avg);
    };
    for (long step = 0; step < o.steps; ++step) {
      const fsdp_train::batch data =
          fsdp_train::training_batch(text.train, o.model.context, o.batch, o.seed,
                                     static_cast<std::uint64_t>(step), rank, world);
      const double loss = model.forward(params.data(), data);
      std::fill(grads.begin(), grads.end(), 0.0f);
      for (std::size_t i = 0; i < buckets.size(); ++i)
        waiting[i] = static_cast<int>(buckets[i].end_tensor - buckets[i].first_tensor);
      const auto backward_start = std::chrono::steady_clock::now();
      model.backward(params.data(), data, grads.data(), [&](int layer) {
        for (std::size_t i = 0; i < buckets.size(); ++i) {
          const bucket& b = buckets[i];
          for (std::size_t t = b.first_tensor; t < b.end_tensor; ++t)
            if (layout.tensors()[t].layer == layer) --waiting[i];
          if (waiting[i] == 0 && o.overlap) {
            waiting[i] = -1;  // posted
            comm_thread.post([&reduce_bucket, &b] { reduce_bucket(b); });
          }
        }
      });
      const auto backward_end = std::chrono::steady_clock::now();
      if (o.overlap)
        comm_thread.wait();
      else
        for (const bucket& b : buckets) reduce_bucket(b);
      const auto reduced = std::chrono::steady_clock::now();
      // AdamW on the master weights of slice r of every bucket, then the updated slices of every
      // bucket in one group.
      const ports::adamw opt{.lr = ports::learning_rate(step, o),
                             .weight_decay = o.weight_decay,
                             .step = static_cast<int>(step + 1)};
      std::size_t k = 0;
      for (const bucket& b : buckets) {
        const std::size_t n = (b.end - b.begin) / w;
        for (std::size_t i = 0; i < n; ++i, ++k) {
          const std::size_t at = b.begin + r * n + i;
          opt.update(master[k], m[k], v[k], grads[at], decays[at] != 0);
          params[at] = master[k];
        }
      }
      qsdp::group_start(comm);
      for (const bucket& b : buckets) {
        const std::size_t n = (b.end - b.begin) / w;
        float* const p = params.data() + b.begin;
        qsdp::all_gather(comm, policies.weights, p + r * n, p, n);
      }
      qsdp::group_end(comm);
      for (const bucket& b : buckets) {
        const std::size_t n = (b.end - b.begin) / w;
        record.bytes(rank, world, qsdp::compressed_size<float>(policies.grads, n),
                     n * sizeof(float));
        record.bytes(rank, world, qsdp::compressed_size<float>(policies.weights, n),
                     n * sizeof(float));
      }
      record.train(step, world, loss);
      if (rank == 0) {
        std::lock_guard lock(guard);
        times.backward_ms.push_back(
            std::chrono::duration<double, std::milli>(backward_end - backward_start).count());
        times.exposed_ms.push_back(
            std::chrono::duration<double, std::milli>(reduced - backward_end).count());
      }
      if (rank == 0 && record.evaluates(step))
        record.validation(step, model.forward(params.data(), validation));
    }
  });
  return record.finish();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    ports::options o;
    if (!ports::parse(argc, argv, program, help, o,
                      [](const std::string&, const std::string&) { return false; }))
      return 0;
    const fsdp_train::corpus text = fsdp_train::load_corpus(o.data, 0.1, 20000);
    const ports::model_layout layout(o.model, o.ranks);
    const std::vector<bucket> buckets = make_buckets(layout, o.bucket_kib * 1024);
    std::printf(
        "%s: %zu parameters in %zu tensors, %zu buckets of >= %zu KiB, %d ranks, %ld steps of %zu "
        "examples, reduce-scatters %s backward; %d-bit run after the uncompressed run of the same "
        "seed\n",
        program, layout.parameters(), layout.tensors().size(), buckets.size(), o.bucket_kib,
        o.ranks, o.steps, o.batch, o.overlap ? "overlapped with" : "after", o.bits);
    timing ref_times, times;
    std::printf("uncompressed:\n");
    const ports::run_log ref = train<ports::uncompressed>(o, text, ref_times);
    std::printf("%d bits:\n", o.bits);
    const ports::run_log run = o.bits == 8 ? train<ports::policies8>(o, text, times)
                                           : train<ports::policies4>(o, text, times);
    std::printf(
        "rank 0, median per step: backward %.2f ms; reduce-scatter time left after backward %.2f "
        "ms (uncompressed: %.2f ms and %.2f ms)\n",
        median(times.backward_ms), median(times.exposed_ms), median(ref_times.backward_ms),
        median(ref_times.exposed_ms));
    ports::print_comparison(program, ref, run, o.bits == 8 ? "w8g8" : "w4g4");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
