// SPDX-License-Identifier: Apache-2.0
//
// A ZeRO-1 training step in the style of llm.c's multi-GPU code, on in-process host ranks, with
// qsdp's groups where llm.c calls NCCL (examples/ports/zero1.hpp; docs/guides/porting.md):
//
//   * the parameters are ONE bf16 buffer holding every tensor, and so are the gradients;
//   * after each layer's backward, its gradients are reduce-scattered (avg) IN PLACE, the layer's
//     tensors in one group: rank r then holds the average of slice r of each tensor;
//   * each rank keeps fp32 master weights and AdamW moments for its slices only, updates them and
//     writes its slices of the bf16 parameters;
//   * the updated slices are all-gathered IN PLACE, every tensor in one group.
//
// The model is examples/ports/mlp_lm.hpp's (a character-level language model of --blocks residual
// MLP blocks). The uncompressed run of the same seed (qsdp::identity, the values as they are) runs
// first, then the run with --bits 8 (random_shift<8> weights, stochastic<8> gradients) or 4
// (random_shift<4>, hadamard<stochastic<4>>); the program prints both runs' validation losses, the
// largest per-step difference of the training loss, and the bytes each rank sent.
#include <cstdio>
#include <exception>
#include <vector>

#include <qsdp/collectives.hpp>
#include <qsdp/communicator.hpp>

#include "run.hpp"
#include "zero1.hpp"

namespace {

constexpr const char* program = "qsdp_zero1_llmc";
constexpr const char* help =
    "qsdp_zero1_llmc: a ZeRO-1 step as llm.c makes it (bf16 parameters in one buffer, in-place\n"
    "per-layer reduce-scatter of gradients, fp32 master weights and AdamW on each rank's slices,\n"
    "in-place all-gather of the updated slices), with qsdp's groups, on in-process ranks; the\n"
    "uncompressed run of the same seed first, then the compressed one.\n"
    "  --ranks N        ranks (threads)                                 default 4\n"
    "  --bits 8|4       8: random_shift<8> weights, stochastic<8> gradients;\n"
    "                   4: random_shift<4>, hadamard<stochastic<4>>     default 8\n"
    "  --steps N        training steps                                  default 300\n"
    "  --batch N        examples per step, all ranks                    default 64\n"
    "  --lr X           peak learning rate (warmup, cosine decay)        default 0.002\n"
    "  --weight-decay X AdamW's, on matrices and embeddings             default 0.1\n"
    "  --width N, --blocks N, --context N   the model                  default 128, 2, 16\n"
    "  --seed N         weights and data order                          default 1\n"
    "  --data PATH      text file or folder                  default /usr/share/games/fortunes\n"
    "  --eval-every N   steps between validation losses                 default 50\n"
    "  --val-examples N validation windows                              default 2048\n";

using bf16 = __nv_bfloat16;

/// One run of the ZeRO-1 loop with policies P (uncompressed: qsdp::identity for both).
template <class P>
ports::run_log train(const ports::options& o, const fsdp_train::corpus& text) {
  const ports::model_layout layout(o.model, o.ranks);
  std::vector<ports::shard_span> spans;
  for (const auto& t : layout.tensors()) spans.push_back({t.offset, t.padded, t.layer});
  const std::vector<float> initial = ports::initial_parameters(layout, o.seed);
  const fsdp_train::batch validation =
      fsdp_train::validation_batch(text.validation, o.model.context, o.val_examples, 0, 1);
  ports::run_recorder record(o);
  qsdp::run_local(o.ranks, [&](qsdp::local_communicator& comm) {
    const P policies;
    const int rank = comm.rank(), world = comm.size();
    const auto r = static_cast<std::size_t>(rank), w = static_cast<std::size_t>(world);
    // The full bf16 parameters on every rank (ZeRO-1), the bf16 gradients, and this rank's fp32
    // master weights and moments, slice r of every tensor in tensor order.
    std::vector<bf16> params(layout.total()), grads(layout.total());
    for (std::size_t i = 0; i < params.size(); ++i) params[i] = __float2bfloat16(initial[i]);
    std::vector<float> master, m(ports::shard_values(spans, world), 0.0f), v(m.size(), 0.0f);
    for (const auto& t : spans) {
      const std::size_t shard = t.padded / w;
      for (std::size_t i = 0; i < shard; ++i)
        master.push_back(__bfloat162float(params[t.offset + r * shard + i]));
    }
    std::vector<float> compute(layout.total()), grad(layout.total());
    ports::mlp_lm model(layout);
    for (long step = 0; step < o.steps; ++step) {
      for (std::size_t i = 0; i < params.size(); ++i) compute[i] = __bfloat162float(params[i]);
      const fsdp_train::batch data =
          fsdp_train::training_batch(text.train, o.model.context, o.batch, o.seed,
                                     static_cast<std::uint64_t>(step), rank, world);
      const double loss = model.forward(compute.data(), data);
      std::fill(grad.begin(), grad.end(), 0.0f);
      model.backward(compute.data(), data, grad.data(), [&](int layer) {
        // llm.c: the layer's gradients in bf16, then its reduce-scatter, in place, in one group.
        for (const auto* t : layout.tensors_of(layer))
          for (std::size_t i = 0; i < t->padded; ++i)
            grads[t->offset + i] = __float2bfloat16(grad[t->offset + i]);
        ports::reduce_scatter_layer(comm, policies.grads, spans, layer, grads.data());
        for (const auto* t : layout.tensors_of(layer)) {
          const std::size_t shard = t->padded / w;
          record.bytes(rank, world, qsdp::compressed_size<bf16>(policies.grads, shard),
                       shard * sizeof(bf16));
        }
      });
      // AdamW on this rank's slices, then the bf16 parameters of the slices.
      ports::adamw opt{.lr = ports::learning_rate(step, o),
                       .weight_decay = o.weight_decay,
                       .step = static_cast<int>(step + 1)};
      std::size_t k = 0;
      for (const auto& t : layout.tensors()) {
        const std::size_t shard = t.padded / w;
        const bool decay = t.cols > 1;  // matrices and the embedding; no decay for biases
        for (std::size_t i = 0; i < shard; ++i, ++k) {
          const std::size_t at = t.offset + r * shard + i;
          opt.update(master[k], m[k], v[k], __bfloat162float(grads[at]), decay);
          params[at] = __float2bfloat16(master[k]);
        }
      }
      ports::all_gather_shards(comm, policies.weights, spans, params.data());
      for (const auto& t : spans) {
        const std::size_t shard = t.padded / w;
        record.bytes(rank, world, qsdp::compressed_size<bf16>(policies.weights, shard),
                     shard * sizeof(bf16));
      }
      record.train(step, world, loss);
      if (rank == 0 && record.evaluates(step)) {  // the ranks hold the same parameters now
        for (std::size_t i = 0; i < params.size(); ++i) compute[i] = __bfloat162float(params[i]);
        record.validation(step, model.forward(compute.data(), validation));
      }
    }
  });
  return record.finish();
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
    std::printf(
        "%s: %zu parameters in %zu tensors of %d layers, %d ranks, %ld steps of %zu examples, "
        "%d-bit run after the uncompressed run of the same seed\n",
        program, layout.parameters(), layout.tensors().size(), layout.layers(), o.ranks, o.steps,
        o.batch, o.bits);
    std::printf("uncompressed:\n");
    const ports::run_log ref = train<ports::uncompressed>(o, text);
    std::printf("%d bits:\n", o.bits);
    const ports::run_log run =
        o.bits == 8 ? train<ports::policies8>(o, text) : train<ports::policies4>(o, text);
    ports::print_comparison(program, ref, run, o.bits == 8 ? "w8g8" : "w4g4");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
