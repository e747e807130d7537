// SPDX-License-Identifier: Apache-2.0
//
// Fully sharded data parallelism for the model of model.hpp, over any qsdp communicator:
//
//   - every layer's flat parameters are padded to a multiple of the world size and split: rank r
//   keeps
//     shard r (fp32 master weights and Adam's moments) and nothing else between steps;
//   - forward: before each layer runs, its weights are all-gathered (qsdp::all_gather with the
//   weight
//     quantizer); backward: gathered again before the layer's backward, then its gradient is
//     reduce-scattered (qsdp::reduce_scatter with the gradient quantizer, average over ranks);
//   - Adam updates only the local shard.
//
// The quantizers are chosen at run time by name ("fp32", "stochastic8", "random_shift4",
// "nearest8", "symmetric8"; widths 2, 4 and 8; "hadamard_stochastic4" for rotated buckets,
// "delta_random_shift4" for weight differences): each name maps to one qsdp policy, type-erased
// behind a function so that the training loop is compiled once.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <qsdp/collectives.hpp>

#include "model.hpp"

namespace fsdp_train {

/// Parses "fp32", "stochastic8", "random_shift4", "nearest8" (qsdp::uniform: round to nearest),
/// "symmetric8", an OCP Microscaling format, "mxfp8" or "mxfp4" (round to nearest) and
/// "mxfp8_stochastic" or "mxfp4_stochastic" (blocks of 32, whatever the bucket), or NVFP4, "nvfp4"
/// and "nvfp4_stochastic" (blocks of 16), and calls f(policy).
template <class F>
void with_plain_policy(const std::string& spec, std::size_t bucket, F&& f) {
  using qsdp::rounding;
  if (spec == "fp32") return f(qsdp::identity{});
  if (spec == "mxfp8") return f(qsdp::mxfp8<qsdp::e4m3>{});
  if (spec == "mxfp8_stochastic") return f(qsdp::mxfp8<qsdp::e4m3, rounding::stochastic>{});
  if (spec == "mxfp4") return f(qsdp::mxfp4<>{});
  if (spec == "mxfp4_stochastic") return f(qsdp::mxfp4<rounding::stochastic>{});
  if (spec == "nvfp4") return f(qsdp::nvfp4<>{});
  if (spec == "nvfp4_stochastic") return f(qsdp::nvfp4<rounding::stochastic>{});
  std::size_t digits = spec.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(spec[digits - 1]))) --digits;
  const std::string name = spec.substr(0, digits);
  const int bits = digits < spec.size() ? std::stoi(spec.substr(digits)) : 0;
  auto widths = [&]<template <int> class P>() {
    switch (bits) {
      case 2: return f(P<2>{.bucket_size = bucket});
      case 4: return f(P<4>{.bucket_size = bucket});
      case 8: return f(P<8>{.bucket_size = bucket});
      default:
        throw std::invalid_argument("quantizer " + spec +
                                    ": expected a width of 2, 4 or 8 after the name");
    }
  };
  if (name == "stochastic") return widths.template operator()<qsdp::stochastic>();
  if (name == "random_shift") return widths.template operator()<qsdp::random_shift>();
  if (name == "nearest") return widths.template operator()<qsdp::uniform>();
  if (name == "symmetric") return widths.template operator()<qsdp::symmetric>();
  throw std::invalid_argument(
      "quantizer " + spec +
      ": expected fp32, stochastic<B>, random_shift<B>, nearest<B> or symmetric<B> "
      "with B in 2, 4, 8 (e.g. stochastic8), mxfp8, mxfp4, mxfp8_stochastic, mxfp4_stochastic, "
      "nvfp4 or nvfp4_stochastic; gradients also hadamard_stochastic4, hadamard_stochastic8, "
      "hadamard_mxfp4_stochastic or hadamard_nvfp4_stochastic");
}

/// with_plain_policy, and for gradients "hadamard_stochastic4" or "hadamard_stochastic8"
/// (qsdp::hadamard<> over stochastic<B>: rotated buckets; the bucket size must be a power of two
/// from 16 to 4096), "hadamard_mxfp4_stochastic" (MXFP4 with stochastic rounding on rotated
/// blocks of 32, the MXFP4 training recipes' gradients) or "hadamard_nvfp4_stochastic" (NVFP4
/// likewise, blocks of 16). Only these are offered rotated: every
/// other combination would compile the collectives once more for a run nobody makes.
template <class F>
void with_gradient_policy(const std::string& spec, std::size_t bucket, F&& f) {
  if (spec.rfind("hadamard_", 0) != 0) return with_plain_policy(spec, bucket, f);
  const std::string inner = spec.substr(9);
  auto rotated = [&]<int B>() {
    return f(qsdp::hadamard<qsdp::stochastic<B>>{{.bucket_size = bucket}});
  };
  if (inner == "stochastic4") return rotated.template operator()<4>();
  if (inner == "stochastic8") return rotated.template operator()<8>();
  if (inner == "mxfp4_stochastic")
    return f(qsdp::hadamard<qsdp::mxfp4<qsdp::rounding::stochastic>>{});
  if (inner == "nvfp4_stochastic")
    return f(qsdp::hadamard<qsdp::nvfp4<qsdp::rounding::stochastic>>{});
  throw std::invalid_argument(
      "quantizer " + spec +
      ": hadamard_ takes stochastic4, stochastic8, mxfp4_stochastic or nvfp4_stochastic");
}

/// A weight spec's quantizer: "delta_random_shift4" gathers with random_shift4 through
/// qsdp::delta_gather.
inline bool is_delta(const std::string& weights) { return weights.rfind("delta_", 0) == 0; }
inline std::string weight_quantizer(const std::string& weights) {
  return is_delta(weights) ? weights.substr(6) : weights;
}

struct adam_config {
  float lr = 3e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float final_lr_fraction = 0.1f;  // linear decay from lr to lr * this over the run
};

/// The size gate off (as by default), said explicitly: this example measures what quantizing every
/// layer does to training, and the embedding's shard (384 values at 4 ranks) is below the
/// recommended gate, which would send it exactly.
inline constexpr qsdp::call_options quantize_every_layer{.min_compressed_bytes = 0};

template <class Comm>
class fsdp_model {
 public:
  /// How a layer's shard travels: (layer, in, out, shard values).
  using exchange =
      std::function<void(std::size_t layer, const float* in, float* out, std::size_t shard)>;

  /// Every rank passes the same config, seed and quantizer names. `weights` may be prefixed
  /// "delta_" (qsdp::delta_gather: each layer's gathers send the change against the last
  /// reconstruction); `store`, if not "fp32", is a quantizer the master weights are stored through
  /// after every update (a round trip on the owner's shard: updates below the grid's resolution
  /// vanish unless the rounding is unbiased).
  fsdp_model(Comm& comm, const model_config& config, std::uint64_t seed, const std::string& weights,
             const std::string& grads, std::size_t bucket, const std::string& store = "fp32")
      : comm_(comm), config_(config) {
    const auto world = static_cast<std::size_t>(comm.size());
    const auto rank = static_cast<std::size_t>(comm.rank());
    const auto full = initial_parameters(config, seed);
    for (std::size_t l = 0; l < full.size(); ++l) {
      layer_state s;
      s.size = full[l].size();
      s.shard = (s.size + world - 1) / world;
      s.master.assign(s.shard, 0.0f);
      for (std::size_t i = 0; i < s.shard; ++i) {
        const std::size_t g = rank * s.shard + i;
        if (g < s.size) s.master[i] = full[l][g];
      }
      s.m.assign(s.shard, 0.0f);
      s.v.assign(s.shard, 0.0f);
      s.grad.assign(s.shard, 0.0f);
      s.gathered.assign(s.shard * world, 0.0f);
      s.full_grad.assign(s.shard * world, 0.0f);
      layers_.push_back(std::move(s));
    }
    if (is_delta(weights)) {
      for (const layer_state& s : layers_) deltas_.emplace_back(s.shard, comm.size());
      with_plain_policy(weight_quantizer(weights), bucket, [&](const auto& q) {
        gather_ = [this, q](std::size_t l, const float* in, float* out, std::size_t) {
          deltas_[l].all_gather(comm_, q, in, out);
        };
      });
    } else {
      with_plain_policy(weights, bucket, [&](const auto& q) {
        gather_ = [this, q](std::size_t, const float* in, float* out, std::size_t n) {
          qsdp::all_gather(comm_, q, in, out, n, quantize_every_layer);
        };
      });
    }
    with_gradient_policy(grads, bucket, [&](const auto& q) {
      scatter_ = [this, q](std::size_t, const float* in, float* out, std::size_t n) {
        qsdp::reduce_scatter(comm_, q, in, out, n, qsdp::reduce_op::avg, quantize_every_layer);
      };
    });
    exact_gather_ = [this](std::size_t, const float* in, float* out, std::size_t n) {
      qsdp::all_gather(comm_, qsdp::identity{}, in, out, n);
    };
    if (store != "fp32") {
      with_plain_policy(store, bucket, [&](const auto& q) {
        store_ = [this, q](std::size_t, const float* in, float* out, std::size_t n) {
          std::vector<std::byte>& packet = store_packet_;
          packet.resize(qsdp::compressed_size<float>(q, n));
          qsdp::encode(q, in, n, packet.data(),
                       qsdp::rng_position{.call = stored_calls_++,
                                          .stream = static_cast<std::uint32_t>(comm_.rank())});
          qsdp::decode(q, packet.data(), n, out);
        };
      });
      for (std::size_t l = 0; l < layers_.size(); ++l)  // the initial weights are stored too
        store_(l, layers_[l].master.data(), layers_[l].master.data(), layers_[l].shard);
    }
  }

  /// One step on this rank's slice of the global batch; returns the global batch's mean loss (nats
  /// per character, before the update), the same on every rank.
  double train_step(const batch& local, std::size_t global_batch, const adam_config& adam,
                    std::uint64_t step, std::uint64_t total_steps) {
    // Forward, gathering each layer just before it runs.
    embed_forward(config_, gather(0, gather_), local, acts_);
    hidden_forward(config_, gather(1, gather_), local.size, acts_);
    const double loss = output_forward(config_, gather(2, gather_), local, acts_);
    // Backward, layer by layer: gather again, compute the layer's gradient of the local mean loss,
    // reduce-scatter it (average over ranks = the global batch's mean).
    const float scale = 1.0f / static_cast<float>(local.size);
    output_backward(config_, gather(2, gather_), local, acts_, scale, zeroed_gradient(2), dh_);
    scatter(2);
    hidden_backward(config_, gather(1, gather_), local.size, acts_, dh_, zeroed_gradient(1), dx_);
    scatter(1);
    (void)gather(0,
                 gather_);  // the embedding's backward reads no weights, but FSDP gathers each unit
    embed_backward(config_, local, dx_, zeroed_gradient(0));
    scatter(0);
    update(adam, step, total_steps);
    return sum_over_ranks(loss) / static_cast<double>(global_batch);
  }

  /// Mean loss over every rank's validation examples, with the weights gathered exactly (the master
  /// weights) or through the training's weight quantizer.
  double evaluate(const batch& local, bool exact) {
    const exchange& g = exact ? exact_gather_ : gather_;
    embed_forward(config_, gather(0, g), local, acts_);
    hidden_forward(config_, gather(1, g), local.size, acts_);
    const double loss = output_forward(config_, gather(2, g), local, acts_);
    return sum_over_ranks(loss) / sum_over_ranks(static_cast<double>(local.size));
  }

  /// The full master parameters of every layer (exact gather), for checks.
  std::vector<std::vector<float>> full_parameters() {
    std::vector<std::vector<float>> out;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const float* p = gather(l, exact_gather_);
      out.emplace_back(p, p + layers_[l].size);
    }
    return out;
  }

  std::size_t parameter_count() const {
    std::size_t n = 0;
    for (const auto& s : layers_) n += s.size;
    return n;
  }

 private:
  struct layer_state {
    std::size_t size = 0, shard = 0;
    std::vector<float> master, m, v, grad;   // this rank's shard
    std::vector<float> gathered, full_grad;  // the whole padded layer, live only around its use
  };

  const float* gather(std::size_t l, const exchange& how) {
    layer_state& s = layers_[l];
    how(l, s.master.data(), s.gathered.data(), s.shard);
    return s.gathered.data();
  }

  float* zeroed_gradient(std::size_t l) {
    std::fill(layers_[l].full_grad.begin(), layers_[l].full_grad.end(), 0.0f);
    return layers_[l].full_grad.data();
  }

  void scatter(std::size_t l) {
    layer_state& s = layers_[l];
    scatter_(l, s.full_grad.data(), s.grad.data(), s.shard);
  }

  void update(const adam_config& a, std::uint64_t step, std::uint64_t total_steps) {
    const double progress =
        total_steps > 1 ? static_cast<double>(step) / static_cast<double>(total_steps - 1) : 0.0;
    const auto lr = static_cast<float>(a.lr * (1.0 - (1.0 - a.final_lr_fraction) * progress));
    const double t = static_cast<double>(step + 1);
    const auto correction1 = static_cast<float>(1.0 - std::pow(a.beta1, t));
    const auto correction2 = static_cast<float>(1.0 - std::pow(a.beta2, t));
    const auto rank = static_cast<std::size_t>(comm_.rank());
    for (layer_state& s : layers_)
      for (std::size_t i = 0; i < s.shard; ++i) {
        if (rank * s.shard + i >= s.size) break;  // padding stays zero
        const float g = s.grad[i];
        s.m[i] = a.beta1 * s.m[i] + (1.0f - a.beta1) * g;
        s.v[i] = a.beta2 * s.v[i] + (1.0f - a.beta2) * g * g;
        const float m_hat = s.m[i] / correction1, v_hat = s.v[i] / correction2;
        s.master[i] -= lr * m_hat / (std::sqrt(v_hat) + a.eps);
      }
    if (store_)
      for (std::size_t l = 0; l < layers_.size(); ++l)
        store_(l, layers_[l].master.data(), layers_[l].master.data(), layers_[l].shard);
  }

  double sum_over_ranks(double mine) {
    std::vector<double> all(static_cast<std::size_t>(comm_.size()));
    comm_.all_gather_bytes(reinterpret_cast<const std::byte*>(&mine),
                           reinterpret_cast<std::byte*>(all.data()), sizeof(double));
    double total = 0;
    for (double v : all) total += v;  // rank order: the same sum on every rank
    return total;
  }

  Comm& comm_;
  model_config config_;
  std::vector<layer_state> layers_;
  exchange gather_, scatter_, exact_gather_, store_;
  std::vector<qsdp::delta_gather<float>> deltas_;  // one per layer, for "delta_" weights
  std::vector<std::byte> store_packet_;
  std::uint64_t stored_calls_ = 0;
  activations acts_;
  std::vector<float> dh_, dx_;
};

}  // namespace fsdp_train
