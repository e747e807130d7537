// SPDX-License-Identifier: Apache-2.0
//
// The model the ported training loops share (examples/ports): a character-level language model of
// several layers whose parameters live in ONE flat buffer, as llm.c keeps GPT-2's, so that the
// loops can shard, reduce-scatter and all-gather tensor by tensor and layer by layer. The previous
// `context` characters are embedded and concatenated, projected to `width` with tanh, passed
// through residual MLP blocks and a softmax over the vocabulary:
//
//   layer 0            wte     [vocab x embed]
//   layer 1            w_in    [context*embed x width], b_in [width]      h = tanh(x w_in + b_in)
//   layer 2 .. 1+B     w_up    [width x 4 width], b_up [4 width],          h += tanh(h w_up + b_up)
//                      w_down  [4 width x width], b_down [width]                  w_down + b_down
//   layer 2+B          w_out   [width x vocab], b_out [vocab]              p = softmax(h w_out +
//   b_out)
//
// Every tensor is padded to a multiple of the world size, so that each rank owns the same slice of
// every tensor (ZeRO's shard). The math is examples/fsdp_train's dense kernels; the text and the
// batches are examples/fsdp_train/data.hpp's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../fsdp_train/data.hpp"
#include "../fsdp_train/model.hpp"

namespace ports {

using fsdp_train::batch;

struct model_config {
  int context = 16;  // characters seen
  int embed = 16;    // embedding width
  int width = 128;   // hidden width
  int blocks = 2;    // residual MLP blocks
};

/// One tensor in the flat buffer: `size` values at `offset` (then padding to `padded`).
struct tensor_info {
  std::string name;
  int layer = 0;
  std::size_t rows = 0, cols = 0;  // cols = 1 for a bias
  std::size_t offset = 0, size = 0, padded = 0;
};

/// Where every tensor lives in the flat buffer, each padded to a multiple of `world` values.
class model_layout {
 public:
  model_layout(const model_config& c, int world) : config_(c) {
    const auto v = static_cast<std::size_t>(fsdp_train::vocabulary_size);
    const auto k = static_cast<std::size_t>(c.context), e = static_cast<std::size_t>(c.embed),
               w = static_cast<std::size_t>(c.width);
    const auto padded = [world](std::size_t n) {
      const auto r = static_cast<std::size_t>(world);
      return (n + r - 1) / r * r;
    };
    auto add = [&](std::string name, int layer, std::size_t rows, std::size_t cols) {
      tensor_info t{std::move(name), layer, rows, cols, total_, rows * cols, padded(rows * cols)};
      total_ += t.padded;
      tensors_.push_back(std::move(t));
    };
    add("wte", 0, v, e);
    add("w_in", 1, k * e, w);
    add("b_in", 1, w, 1);
    for (int b = 0; b < c.blocks; ++b) {
      const std::string p = "block" + std::to_string(b) + ".";
      add(p + "w_up", 2 + b, w, 4 * w);
      add(p + "b_up", 2 + b, 4 * w, 1);
      add(p + "w_down", 2 + b, 4 * w, w);
      add(p + "b_down", 2 + b, w, 1);
    }
    add("w_out", 2 + c.blocks, w, v);
    add("b_out", 2 + c.blocks, v, 1);
  }

  const model_config& config() const { return config_; }
  const std::vector<tensor_info>& tensors() const { return tensors_; }
  /// Values of the whole buffer, padding included.
  std::size_t total() const { return total_; }
  int layers() const { return config_.blocks + 3; }
  /// The tensors of `layer`, in buffer order.
  std::vector<const tensor_info*> tensors_of(int layer) const {
    std::vector<const tensor_info*> out;
    for (const auto& t : tensors_)
      if (t.layer == layer) out.push_back(&t);
    return out;
  }
  /// Values of the model, padding not included.
  std::size_t parameters() const {
    std::size_t n = 0;
    for (const auto& t : tensors_) n += t.size;
    return n;
  }

 private:
  model_config config_;
  std::vector<tensor_info> tensors_;
  std::size_t total_ = 0;
};

/// The initial parameters (fp32, padding zero), the same on every rank for a seed: N(0, 1)
/// embeddings, U(+-1/sqrt(fan_in)) matrices, the blocks' w_down scaled by 1/sqrt(blocks), zero
/// biases.
inline std::vector<float> initial_parameters(const model_layout& l, std::uint64_t seed) {
  std::vector<float> p(l.total(), 0.0f);
  std::mt19937_64 rng(seed);
  for (const auto& t : l.tensors()) {
    if (t.cols == 1) continue;
    float* at = p.data() + t.offset;
    if (t.layer == 0) {
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (std::size_t i = 0; i < t.size; ++i) at[i] = normal(rng);
      continue;
    }
    float bound = 1.0f / std::sqrt(static_cast<float>(t.rows));
    if (t.name.find("w_down") != std::string::npos)
      bound /= std::sqrt(static_cast<float>(l.config().blocks));
    std::uniform_real_distribution<float> uniform(-bound, bound);
    for (std::size_t i = 0; i < t.size; ++i) at[i] = uniform(rng);
  }
  return p;
}

/// Forward and backward of one batch on fp32 parameters `p` (the flat buffer), the gradient of
/// the mean cross-entropy added to `grad` (same layout). `layer_done(l)` is called as soon as
/// layer l's gradient is complete, from the last layer down to layer 0: where llm.c starts the
/// layer's reduce-scatter, and where a bucketing reducer packs it. Returns the mean loss (nats).
class mlp_lm {
 public:
  explicit mlp_lm(const model_layout& layout) : l_(layout) {}

  double forward(const float* p, const batch& data) {
    const model_config& c = l_.config();
    const auto k = static_cast<std::size_t>(c.context), e = static_cast<std::size_t>(c.embed),
               w = static_cast<std::size_t>(c.width);
    const auto v = static_cast<std::size_t>(fsdp_train::vocabulary_size);
    const std::size_t n = data.size;
    const auto& t = l_.tensors();
    x_.assign(n * k * e, 0.0f);
    for (std::size_t b = 0; b < n; ++b)
      for (std::size_t j = 0; j < k; ++j) {
        const float* row = p + t[0].offset + data.tokens[b * (k + 1) + j] * e;
        std::copy(row, row + e, x_.begin() + static_cast<std::ptrdiff_t>((b * k + j) * e));
      }
    hs_.assign(static_cast<std::size_t>(c.blocks) + 1, std::vector<float>(n * w));
    dense(x_.data(), p, t[1], t[2], n, hs_[0].data());
    for (float& x : hs_[0]) x = std::tanh(x);
    us_.assign(static_cast<std::size_t>(c.blocks), std::vector<float>(n * 4 * w));
    for (int b = 0; b < c.blocks; ++b) {
      const std::size_t first = 3 + 4 * static_cast<std::size_t>(b);
      std::vector<float>& u = us_[static_cast<std::size_t>(b)];
      dense(hs_[static_cast<std::size_t>(b)].data(), p, t[first], t[first + 1], n, u.data());
      for (float& x : u) x = std::tanh(x);
      std::vector<float>& h = hs_[static_cast<std::size_t>(b) + 1];
      dense(u.data(), p, t[first + 2], t[first + 3], n, h.data());
      const std::vector<float>& before = hs_[static_cast<std::size_t>(b)];
      for (std::size_t i = 0; i < h.size(); ++i) h[i] += before[i];
    }
    probs_.assign(n * v, 0.0f);
    const std::size_t out = t.size() - 2;
    dense(hs_.back().data(), p, t[out], t[out + 1], n, probs_.data());
    double loss = 0;
    for (std::size_t b = 0; b < n; ++b) {
      float* q = probs_.data() + b * v;
      const float top = *std::max_element(q, q + v);
      double total = 0;
      for (std::size_t i = 0; i < v; ++i) total += (q[i] = std::exp(q[i] - top));
      const auto inv = static_cast<float>(1.0 / total);
      for (std::size_t i = 0; i < v; ++i) q[i] *= inv;
      loss -= std::log(std::max(static_cast<double>(q[data.tokens[b * (k + 1) + k]]), 1e-30));
    }
    return loss / static_cast<double>(n);
  }

  /// After forward() on the same batch and parameters.
  void backward(const float* p, const batch& data, float* grad,
                const std::function<void(int)>& layer_done) {
    const model_config& c = l_.config();
    const auto k = static_cast<std::size_t>(c.context), e = static_cast<std::size_t>(c.embed),
               w = static_cast<std::size_t>(c.width);
    const auto v = static_cast<std::size_t>(fsdp_train::vocabulary_size);
    const std::size_t n = data.size;
    const auto& t = l_.tensors();
    std::vector<float> dlogits(probs_);
    const float scale = 1.0f / static_cast<float>(n);
    for (std::size_t b = 0; b < n; ++b) {
      dlogits[b * v + data.tokens[b * (k + 1) + k]] -= 1.0f;
      for (std::size_t i = 0; i < v; ++i) dlogits[b * v + i] *= scale;
    }
    const std::size_t out = t.size() - 2;
    std::vector<float> dh(n * w);
    dense_backward(hs_.back().data(), p, t[out], t[out + 1], n, dlogits.data(), grad, dh.data());
    layer_done(l_.layers() - 1);
    for (int b = c.blocks - 1; b >= 0; --b) {
      const std::size_t first = 3 + 4 * static_cast<std::size_t>(b);
      const std::vector<float>& u = us_[static_cast<std::size_t>(b)];
      std::vector<float> du(n * 4 * w);
      dense_backward(u.data(), p, t[first + 2], t[first + 3], n, dh.data(), grad, du.data());
      for (std::size_t i = 0; i < du.size(); ++i) du[i] *= 1.0f - u[i] * u[i];
      std::vector<float> dbefore(n * w);
      dense_backward(hs_[static_cast<std::size_t>(b)].data(), p, t[first], t[first + 1], n,
                     du.data(), grad, dbefore.data());
      for (std::size_t i = 0; i < dh.size(); ++i) dh[i] += dbefore[i];  // the residual path
      layer_done(2 + b);
    }
    for (std::size_t i = 0; i < dh.size(); ++i) dh[i] *= 1.0f - hs_[0][i] * hs_[0][i];
    std::vector<float> dx(n * k * e);
    dense_backward(x_.data(), p, t[1], t[2], n, dh.data(), grad, dx.data());
    layer_done(1);
    for (std::size_t b = 0; b < n; ++b)
      for (std::size_t j = 0; j < k; ++j) {
        float* row = grad + t[0].offset + data.tokens[b * (k + 1) + j] * e;
        const float* d = dx.data() + (b * k + j) * e;
        for (std::size_t i = 0; i < e; ++i) row[i] += d[i];
      }
    layer_done(0);
  }

 private:
  static void dense(const float* in, const float* p, const tensor_info& weight,
                    const tensor_info& bias, std::size_t n, float* out) {
    fsdp_train::kernels::dense_forward(in, p + weight.offset, p + bias.offset, n, weight.rows,
                                       weight.cols, out);
  }
  static void dense_backward(const float* in, const float* p, const tensor_info& weight,
                             const tensor_info& bias, std::size_t n, const float* dout, float* grad,
                             float* din) {
    fsdp_train::kernels::dense_backward(in, p + weight.offset, dout, n, weight.rows, weight.cols,
                                        grad + weight.offset, grad + bias.offset, din);
  }

  const model_layout& l_;
  std::vector<float> x_, probs_;
  std::vector<std::vector<float>> hs_, us_;
};

}  // namespace ports
