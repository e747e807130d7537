// SPDX-License-Identifier: Apache-2.0
//
// AdamW on one value, for the ported training loops (examples/ports): host loops and the device
// example's kernel run the same arithmetic.
#pragma once

#include <cmath>

#include <qsdp/config.hpp>

namespace ports {

/// AdamW (decoupled weight decay) with llm.c's and nanoGPT's betas.
struct adamw {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  int step = 1;  // 1-based, for the bias corrections

  /// Updates the fp32 weight w and its moments m, v from the gradient g; `decay` false for the
  /// tensors without weight decay (biases).
  QSDP_HOST_DEVICE void update(float& w, float& m, float& v, float g, bool decay) const {
    m = beta1 * m + (1.0f - beta1) * g;
    v = beta2 * v + (1.0f - beta2) * g * g;
    const float m_hat = m / (1.0f - powf(beta1, static_cast<float>(step)));
    const float v_hat = v / (1.0f - powf(beta2, static_cast<float>(step)));
    w -= lr * (m_hat / (sqrtf(v_hat) + eps) + (decay ? weight_decay * w : 0.0f));
  }
};

}  // namespace ports
