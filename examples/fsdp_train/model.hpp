// SPDX-License-Identifier: Apache-2.0
//
// A character-level language model small enough to train on two CPU cores, with its own forward and
// backward passes (no framework): Bengio et al.'s neural probabilistic language model. The previous
// `context` characters are looked up in an embedding table, concatenated, passed through one tanh
// hidden layer and a softmax over the vocabulary.
//
//   layer 0  embedding  C   [vocab x embed]
//   layer 1  hidden     W1  [context*embed x hidden], b1 [hidden]      h = tanh(x W1 + b1)
//   layer 2  output     W2  [hidden x vocab],         b2 [vocab]       p = softmax(h W2 + b2)
//
// Each layer's parameters are one flat fp32 vector (weights row-major, then bias): the unit that
// FSDP shards, all-gathers and reduce-scatters (fsdp.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace fsdp_train {

struct model_config {
  int vocab = 96;    // printable ASCII and newline (data.hpp)
  int context = 16;  // characters seen
  int embed = 16;    // embedding width
  int hidden = 384;  // hidden units
};

struct layer_shape {
  std::size_t rows = 0, cols = 0;
  bool bias = false;
  std::size_t size() const { return rows * cols + (bias ? cols : 0); }
};

inline std::vector<layer_shape> layer_shapes(const model_config& c) {
  const auto v = static_cast<std::size_t>(c.vocab), k = static_cast<std::size_t>(c.context),
             e = static_cast<std::size_t>(c.embed), h = static_cast<std::size_t>(c.hidden);
  return {{v, e, false}, {k * e, h, true}, {h, v, true}};
}

/// The full (unsharded) initial parameters of every layer, the same for a given seed on every rank.
inline std::vector<std::vector<float>> initial_parameters(const model_config& c,
                                                          std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<float>> layers;
  for (const layer_shape& s : layer_shapes(c)) {
    std::vector<float> p(s.size(), 0.0f);
    // Embeddings ~ N(0, 1); dense weights ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)); biases zero.
    if (!s.bias) {
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (std::size_t i = 0; i < s.rows * s.cols; ++i) p[i] = normal(rng);
    } else {
      const float bound = 1.0f / std::sqrt(static_cast<float>(s.rows));
      std::uniform_real_distribution<float> uniform(-bound, bound);
      for (std::size_t i = 0; i < s.rows * s.cols; ++i) p[i] = uniform(rng);
    }
    layers.push_back(std::move(p));
  }
  return layers;
}

/// One batch: for each example, `context` input characters then the target character.
struct batch {
  std::size_t size = 0;
  std::vector<std::uint8_t> tokens;  // size * (context + 1)
};

/// Activations kept from forward for backward.
struct activations {
  std::vector<float> x;      // [B x context*embed] concatenated embeddings
  std::vector<float> h;      // [B x hidden] tanh outputs
  std::vector<float> probs;  // [B x vocab] softmax
};

namespace kernels {

/// out[B x N] = in[B x K] W[K x N] (+ bias[N]); the inner loop runs along N, which vectorizes.
inline void dense_forward(const float* in, const float* w, const float* bias,
                          std::size_t batch_size, std::size_t k_dim, std::size_t n_dim,
                          float* out) {
  for (std::size_t b = 0; b < batch_size; ++b) {
    float* o = out + b * n_dim;
    for (std::size_t n = 0; n < n_dim; ++n) o[n] = bias ? bias[n] : 0.0f;
    for (std::size_t k = 0; k < k_dim; ++k) {
      const float a = in[b * k_dim + k];
      const float* row = w + k * n_dim;
      for (std::size_t n = 0; n < n_dim; ++n) o[n] += a * row[n];
    }
  }
}

/// dW[K x N] += in^T dout, dbias[N] += column sums of dout, din[B x K] = dout W^T (if din).
inline void dense_backward(const float* in, const float* w, const float* dout,
                           std::size_t batch_size, std::size_t k_dim, std::size_t n_dim, float* dw,
                           float* dbias, float* din) {
  for (std::size_t b = 0; b < batch_size; ++b) {
    const float* d = dout + b * n_dim;
    if (dbias)
      for (std::size_t n = 0; n < n_dim; ++n) dbias[n] += d[n];
    for (std::size_t k = 0; k < k_dim; ++k) {
      const float a = in[b * k_dim + k];
      float* row = dw + k * n_dim;
      for (std::size_t n = 0; n < n_dim; ++n) row[n] += a * d[n];
    }
    if (!din) continue;
    for (std::size_t k = 0; k < k_dim; ++k) {
      // Eight explicit partial sums: the compiler vectorizes them without reassociating a
      // reduction.
      const float* row = w + k * n_dim;
      float lanes[8] = {};
      const std::size_t vector_end = n_dim - n_dim % 8;
      for (std::size_t n = 0; n < vector_end; n += 8)
        for (std::size_t j = 0; j < 8; ++j) lanes[j] += d[n + j] * row[n + j];
      float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                  ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      for (std::size_t n = vector_end; n < n_dim; ++n) sum += d[n] * row[n];
      din[b * k_dim + k] = sum;
    }
  }
}

}  // namespace kernels

/// Layer 0: looks up and concatenates the context's embeddings into acts.x.
inline void embed_forward(const model_config& c, const float* table, const batch& data,
                          activations& acts) {
  const auto k = static_cast<std::size_t>(c.context), e = static_cast<std::size_t>(c.embed);
  acts.x.assign(data.size * k * e, 0.0f);
  for (std::size_t b = 0; b < data.size; ++b)
    for (std::size_t j = 0; j < k; ++j) {
      const float* row = table + static_cast<std::size_t>(data.tokens[b * (k + 1) + j]) * e;
      std::copy(row, row + e, acts.x.begin() + static_cast<std::ptrdiff_t>((b * k + j) * e));
    }
}

/// Layer 1: acts.h = tanh(acts.x W1 + b1).
inline void hidden_forward(const model_config& c, const float* layer, std::size_t batch_size,
                           activations& acts) {
  const auto in = static_cast<std::size_t>(c.context * c.embed),
             h = static_cast<std::size_t>(c.hidden);
  acts.h.assign(batch_size * h, 0.0f);
  kernels::dense_forward(acts.x.data(), layer, layer + in * h, batch_size, in, h, acts.h.data());
  for (float& v : acts.h) v = std::tanh(v);
}

/// Layer 2: acts.probs = softmax(acts.h W2 + b2); returns the summed cross-entropy (nats) of the
/// batch.
inline double output_forward(const model_config& c, const float* layer, const batch& data,
                             activations& acts) {
  const auto h = static_cast<std::size_t>(c.hidden), v = static_cast<std::size_t>(c.vocab),
             k = static_cast<std::size_t>(c.context);
  acts.probs.assign(data.size * v, 0.0f);
  kernels::dense_forward(acts.h.data(), layer, layer + h * v, data.size, h, v, acts.probs.data());
  double loss = 0;
  for (std::size_t b = 0; b < data.size; ++b) {
    float* p = acts.probs.data() + b * v;
    const float top = *std::max_element(p, p + v);
    double total = 0;
    for (std::size_t i = 0; i < v; ++i) {
      p[i] = std::exp(p[i] - top);
      total += p[i];
    }
    const auto inv = static_cast<float>(1.0 / total);
    for (std::size_t i = 0; i < v; ++i) p[i] *= inv;
    const std::size_t target = data.tokens[b * (k + 1) + k];
    loss -= std::log(std::max(static_cast<double>(p[target]), 1e-30));
  }
  return loss;
}

/// Backward of layer 2 for the loss `scale * sum of cross-entropies`: adds to grad (W2, b2) and
/// writes dh, the gradient at the hidden layer's output.
inline void output_backward(const model_config& c, const float* layer, const batch& data,
                            const activations& acts, float scale, float* grad,
                            std::vector<float>& dh) {
  const auto h = static_cast<std::size_t>(c.hidden), v = static_cast<std::size_t>(c.vocab),
             k = static_cast<std::size_t>(c.context);
  std::vector<float> dlogits(acts.probs);
  for (std::size_t b = 0; b < data.size; ++b) {
    dlogits[b * v + data.tokens[b * (k + 1) + k]] -= 1.0f;
    for (std::size_t i = 0; i < v; ++i) dlogits[b * v + i] *= scale;
  }
  dh.assign(data.size * h, 0.0f);
  kernels::dense_backward(acts.h.data(), layer, dlogits.data(), data.size, h, v, grad, grad + h * v,
                          dh.data());
}

/// Backward of layer 1: adds to grad (W1, b1) and writes dx, the gradient at the concatenated
/// embeddings.
inline void hidden_backward(const model_config& c, const float* layer, std::size_t batch_size,
                            const activations& acts, const std::vector<float>& dh, float* grad,
                            std::vector<float>& dx) {
  const auto in = static_cast<std::size_t>(c.context * c.embed),
             h = static_cast<std::size_t>(c.hidden);
  std::vector<float> da(dh);
  for (std::size_t i = 0; i < da.size(); ++i) da[i] *= 1.0f - acts.h[i] * acts.h[i];
  dx.assign(batch_size * in, 0.0f);
  kernels::dense_backward(acts.x.data(), layer, da.data(), batch_size, in, h, grad, grad + in * h,
                          dx.data());
}

/// Backward of layer 0: scatters dx into the embedding rows that were looked up.
inline void embed_backward(const model_config& c, const batch& data, const std::vector<float>& dx,
                           float* grad) {
  const auto k = static_cast<std::size_t>(c.context), e = static_cast<std::size_t>(c.embed);
  for (std::size_t b = 0; b < data.size; ++b)
    for (std::size_t j = 0; j < k; ++j) {
      float* row = grad + static_cast<std::size_t>(data.tokens[b * (k + 1) + j]) * e;
      const float* d = dx.data() + (b * k + j) * e;
      for (std::size_t i = 0; i < e; ++i) row[i] += d[i];
    }
}

}  // namespace fsdp_train
