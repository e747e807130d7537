// SPDX-License-Identifier: Apache-2.0
//
// The short version of examples/fsdp_train (issue 7): the sharded fp32 run equals an unsharded run
// to float rounding, and W8G8 with unbiased quantizers stays close to the fp32 baseline. The text
// is this repository's own documentation (real English, always present).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <qsdp/communicator.hpp>

#include "fsdp_train/data.hpp"
#include "fsdp_train/fsdp.hpp"

TEST_SUITE_BEGIN("fsdp_train");

namespace {

fsdp_train::model_config small_model() {
  fsdp_train::model_config c;
  c.context = 8;
  c.embed = 8;
  c.hidden = 48;
  return c;
}

const fsdp_train::corpus& repository_text() {
  static const fsdp_train::corpus text =
      fsdp_train::load_corpus(QSDP_SOURCE_DIR "/docs", 0.1, 10000);
  return text;
}

struct run_result {
  std::vector<std::vector<float>> parameters;
  double first_loss = 0, validation = 0;
};

/// Trains `steps` steps on `world` in-process ranks; rank 0's view of the result.
run_result train(int world, const std::string& weights, const std::string& grads, long steps) {
  const auto config = small_model();
  const auto& text = repository_text();
  run_result out;
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    fsdp_train::fsdp_model<qsdp::local_communicator> model(comm, config, 7, weights, grads, 256);
    fsdp_train::adam_config adam;
    const std::size_t global_batch = 32;
    double first = 0;
    for (long step = 0; step < steps; ++step) {
      const auto local =
          fsdp_train::training_batch(text.train, config.context, global_batch, 7,
                                     static_cast<std::uint64_t>(step), comm.rank(), comm.size());
      const double loss =
          model.train_step(local, global_batch, adam, static_cast<std::uint64_t>(step),
                           static_cast<std::uint64_t>(steps));
      if (step == 0) first = loss;
    }
    const auto val = fsdp_train::validation_batch(text.validation, config.context, 2048,
                                                  comm.rank(), comm.size());
    const double v = model.evaluate(val, true);
    auto params = model.full_parameters();
    if (comm.rank() == 0) {
      out.parameters = std::move(params);
      out.first_loss = first;
      out.validation = v;
    }
  });
  return out;
}

}  // namespace

TEST_CASE("fsdp_train: the model's backward pass matches finite differences") {
  const auto config = small_model();
  auto params = fsdp_train::initial_parameters(config, 3);
  const auto& text = repository_text();
  const auto data = fsdp_train::training_batch(text.train, config.context, 8, 3, 0, 0, 1);
  auto loss_of = [&](const std::vector<std::vector<float>>& p) {
    fsdp_train::activations acts;
    fsdp_train::embed_forward(config, p[0].data(), data, acts);
    fsdp_train::hidden_forward(config, p[1].data(), data.size, acts);
    return fsdp_train::output_forward(config, p[2].data(), data, acts);
  };
  // Analytic gradient of the summed loss (scale 1).
  std::vector<std::vector<float>> grads;
  for (const auto& layer : params) grads.emplace_back(layer.size(), 0.0f);
  fsdp_train::activations acts;
  fsdp_train::embed_forward(config, params[0].data(), data, acts);
  fsdp_train::hidden_forward(config, params[1].data(), data.size, acts);
  (void)fsdp_train::output_forward(config, params[2].data(), data, acts);
  std::vector<float> dh, dx;
  fsdp_train::output_backward(config, params[2].data(), data, acts, 1.0f, grads[2].data(), dh);
  fsdp_train::hidden_backward(config, params[1].data(), data.size, acts, dh, grads[1].data(), dx);
  fsdp_train::embed_backward(config, data, dx, grads[0].data());
  // Central differences on the entries with the largest gradients of each layer (small ones drown
  // in float rounding), weights and biases alike.
  for (std::size_t l = 0; l < 3; ++l) {
    std::vector<std::size_t> order(params[l].size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 12, order.end(),
                      [&](std::size_t a, std::size_t b) {
                        return std::abs(grads[l][a]) > std::abs(grads[l][b]);
                      });
    for (std::size_t k = 0; k < 12; ++k) {
      const std::size_t i = order[k];
      const float saved = params[l][i];
      const float h = 1e-2f;
      params[l][i] = saved + h;
      const double up = loss_of(params);
      params[l][i] = saved - h;
      const double down = loss_of(params);
      params[l][i] = saved;
      const double numeric = (up - down) / (2.0 * static_cast<double>(h));
      CAPTURE(l);
      CAPTURE(i);
      CHECK(numeric == doctest::Approx(grads[l][i]).epsilon(0.02));
    }
  }
}

TEST_CASE("fsdp_train: sharded fp32 training equals unsharded training to float rounding") {
  const run_result sharded = train(4, "fp32", "fp32", 20);
  const run_result single = train(1, "fp32", "fp32", 20);
  REQUIRE(sharded.parameters.size() == 3);
  REQUIRE(single.parameters.size() == 3);
  for (std::size_t l = 0; l < 3; ++l) {
    REQUIRE(sharded.parameters[l].size() == single.parameters[l].size());
    double diff = 0, norm = 0, moved = 0;
    const auto initial = fsdp_train::initial_parameters(small_model(), 7)[l];
    for (std::size_t i = 0; i < single.parameters[l].size(); ++i) {
      const double a = sharded.parameters[l][i], b = single.parameters[l][i];
      diff += (a - b) * (a - b);
      norm += b * b;
      moved += (b - initial[i]) * (b - initial[i]);
    }
    CAPTURE(l);
    CHECK(std::sqrt(moved / norm) > 1e-3);  // training changed the layer
    CHECK(std::sqrt(diff / norm) < 1e-5);   // ... and both runs changed it alike
  }
  CHECK(std::abs(sharded.first_loss - single.first_loss) < 1e-5);
}

TEST_CASE(
    "fsdp_train: W8G8 with unbiased rounding stays within 2% of the fp32 baseline, delta and "
    "rotated too") {
  const long steps = 400;
  const run_result fp32 = train(4, "fp32", "fp32", steps);
  const run_result w8g8 = train(4, "random_shift8", "stochastic8", steps);
  CAPTURE(fp32.validation);
  CAPTURE(w8g8.validation);
  CHECK(fp32.validation < fp32.first_loss - 1.0);  // it learned: from ln(96) = 4.56 nats down
  CHECK(std::abs(w8g8.validation - fp32.validation) < 0.02 * fp32.validation);
  // The same through qsdp::delta_gather and hadamard<> (the examples' "delta_" and "hadamard_").
  const run_result rotated = train(4, "delta_random_shift8", "hadamard_stochastic8", steps);
  CAPTURE(rotated.validation);
  CHECK(std::abs(rotated.validation - fp32.validation) < 0.02 * fp32.validation);
}

TEST_CASE("fsdp_train: bad quantizer names and batch sizes are refused with the value") {
  CHECK_THROWS_WITH(fsdp_train::with_plain_policy("stochastic3", 64, [](const auto&) {}),
                    doctest::Contains("stochastic3"));
  CHECK_THROWS_WITH(fsdp_train::with_plain_policy("fp16", 64, [](const auto&) {}),
                    doctest::Contains("fp16"));
  CHECK_THROWS_WITH(fsdp_train::with_plain_policy("mxfp6", 64, [](const auto&) {}),
                    doctest::Contains("mxfp6"));
  CHECK_THROWS_WITH(
      fsdp_train::with_gradient_policy("hadamard_nearest4", 64, [](const auto&) {}),
      doctest::Contains("hadamard_ takes stochastic4, stochastic8, mxfp4_stochastic or "
                        "nvfp4_stochastic"));
  CHECK_THROWS_WITH(fsdp_train::with_plain_policy(fsdp_train::weight_quantizer("delta_stochastic5"),
                                                  64, [](const auto&) {}),
                    doctest::Contains("stochastic5"));
  CHECK_THROWS_WITH(fsdp_train::load_corpus(QSDP_SOURCE_DIR "/no-such-dir", 0.1, 10),
                    doctest::Contains("no-such-dir"));
}

TEST_SUITE_END();
