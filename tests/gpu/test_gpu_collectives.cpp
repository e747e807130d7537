// SPDX-License-Identifier: Apache-2.0
// The device collectives (run_local_cuda, one GPU, several ranks; and one NCCL rank) against the
// host collectives on the same data: same random streams, same packets, same fp32 sums in the same
// order, so the outputs are bit-identical. Every comparison runs twice: with the size gate off
// (every call compressed, the default) and with the recommended gate (small calls uncompressed on
// both sides).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <qsdp/collectives.hpp>

#include "gpu_support.hpp"
#include "support.hpp"

namespace {

using gpu_test::collective;

template <class T>
std::size_t count_differences(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return ~std::size_t{0};
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const float fa = qsdp_test::to_f(a[i]), fb = qsdp_test::to_f(b[i]);
    if (std::isnan(fa) || std::isnan(fb))
      n += !(std::isnan(fa) && std::isnan(fb));
    else
      n += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  }
  return n;
}

template <class Q, class T>
std::vector<std::vector<T>> host_collective(collective kind, const Q& q, int world,
                                            std::size_t count,
                                            const std::vector<std::vector<T>>& inputs,
                                            qsdp::reduce_op op, int calls,
                                            qsdp::call_options options) {
  const auto w = static_cast<std::size_t>(world);
  std::vector<std::vector<T>> outputs(w);
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    std::vector<T> out(kind == collective::all_gather ? count * w : count);
    for (int c = 0; c < calls; ++c) {
      switch (kind) {
        case collective::all_gather:
          qsdp::all_gather(comm, q, inputs[r].data(), out.data(), count, options);
          break;
        case collective::reduce_scatter:
          qsdp::reduce_scatter(comm, q, inputs[r].data(), out.data(), count, op, options);
          break;
        case collective::all_reduce:
          out = inputs[r];
          qsdp::all_reduce(comm, q, out.data(), count, op, options);
          break;
      }
    }
    outputs[r] = out;
  });
  return outputs;
}

template <class Q, class T>
void compare(collective kind, const Q& q, int world, std::size_t count, qsdp::reduce_op op,
             int calls = 1) {
  const auto w = static_cast<std::size_t>(world);
  const std::size_t in_count = kind == collective::reduce_scatter ? count * w : count;
  std::vector<std::vector<T>> inputs(w);
  for (std::size_t r = 0; r < w; ++r)
    inputs[r] =
        qsdp_test::convert<T>(qsdp_test::make_data(qsdp_test::distribution::gradient_with_outliers,
                                                   in_count, 40 + static_cast<std::uint32_t>(r)));
  for (const qsdp::call_options options :
       {qsdp::call_options{},
        qsdp::call_options{.min_compressed_bytes = qsdp::recommended_min_compressed_bytes}}) {
    const auto expected = host_collective(kind, q, world, count, inputs, op, calls, options);
    const auto got =
        gpu_test::device_collective(kind, q, world, count, inputs, op, calls, nullptr, options);
    for (std::size_t r = 0; r < w; ++r) {
      INFO("collective " << static_cast<int>(kind) << " " << qsdp::policy_name<Q>() << " world "
                         << world << " count " << count << " rank " << r << " gate "
                         << options.min_compressed_bytes);
      CHECK(count_differences(expected[r], got[r]) == 0);
    }
  }
}

}  // namespace

TEST_CASE("device all_gather equals the host's, bit for bit") {
  for (const int world : {1, 2, 3, 4}) {
    compare<qsdp::random_shift<8>, __nv_bfloat16>(collective::all_gather, {}, world, 100000,
                                                  qsdp::reduce_op::sum);
    compare<qsdp::uniform<2>, __half>(collective::all_gather, {.bucket_size = 100}, world, 1001,
                                      qsdp::reduce_op::sum);
    compare<qsdp::identity, float>(collective::all_gather, {}, world, 513, qsdp::reduce_op::sum);
  }
  compare<qsdp::stochastic<4>, float>(collective::all_gather, {}, 4, 0, qsdp::reduce_op::sum);
}

// The encoded all-gather on the device against the host's: the same call indices and streams, so
// the same packets, so the same layout, byte for byte (pieces included at 2^19 values).
template <class Q, class T>
void compare_encoded(const Q& q, int world, std::size_t count) {
  const auto w = static_cast<std::size_t>(world);
  std::vector<std::vector<T>> inputs(w);
  for (std::size_t r = 0; r < w; ++r)
    inputs[r] =
        qsdp_test::convert<T>(qsdp_test::make_data(qsdp_test::distribution::gradient_with_outliers,
                                                   count, 70 + static_cast<std::uint32_t>(r)));
  std::vector<std::vector<std::byte>> elements(w);
  std::vector<std::vector<std::uint8_t>> scales(w);
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    elements[r].resize(qsdp::block_scaled_element_bytes(q, count * w));
    scales[r].resize(count * w / q.bucket_size);
    qsdp::all_gather_encoded(comm, q, inputs[r].data(), {elements[r].data(), scales[r].data()},
                             count);
  });
  const auto got = gpu_test::device_gather_encoded(q, world, count, inputs);
  for (std::size_t r = 0; r < w; ++r) {
    INFO(qsdp::policy_name<Q>() << " world " << world << " count " << count << " rank " << r);
    CHECK(got[r].first == elements[r]);
    CHECK(got[r].second == scales[r]);
  }
}

TEST_CASE("device all_gather_encoded writes the host's block-scaled layout, bit for bit") {
  using mxfp4_stochastic = qsdp::mxfp4<qsdp::rounding::stochastic>;
  compare_encoded<qsdp::mxfp8<>, float>({}, 3, 32 * 1000);
  compare_encoded<qsdp::mxfp6<qsdp::e3m2>, __nv_bfloat16>({}, 2, 32 * 77);
  compare_encoded<mxfp4_stochastic, float>({.seed = 9}, 4, std::size_t{1} << 19);
}

TEST_CASE("device reduce_scatter equals the host's, bit for bit") {
  for (const int world : {1, 2, 3, 5}) {
    compare<qsdp::stochastic<8>, __nv_bfloat16>(collective::reduce_scatter, {.seed = 3}, world,
                                                65536, qsdp::reduce_op::avg);
    compare<qsdp::stochastic<4>, float>(collective::reduce_scatter, {.bucket_size = 333}, world,
                                        4099, qsdp::reduce_op::sum);
    compare<qsdp::symmetric<8>, float>(collective::reduce_scatter, {}, world, 1,
                                       qsdp::reduce_op::avg);
  }
}

TEST_CASE("device collectives in pipeline pieces equal the host's, bit for bit") {
  // Above two qsdp::min_piece_bytes per peer a phase runs in pieces (call_options::max_pieces),
  // each its own packets at its own call index: the device must cut and draw alike.
  // The policy and type pairs of the cases above (tests/gpu/gpu_collectives.cu instantiates each
  // pair once: every new one compiles a whole device pipeline).
  constexpr std::size_t per_piece = qsdp::min_piece_bytes / sizeof(float);
  // Three calls each: the device counter must move past every piece's call index.
  compare<qsdp::stochastic<4>, float>(collective::all_gather, {.bucket_size = 333}, 3,
                                      3 * per_piece + 1000, qsdp::reduce_op::sum, 3);
  compare<qsdp::stochastic<8>, __nv_bfloat16>(collective::reduce_scatter, {.seed = 2}, 2,
                                              4 * 2 * per_piece + 77, qsdp::reduce_op::avg, 3);
  compare<qsdp::hadamard<qsdp::stochastic<4>>, float>(
      collective::all_reduce, {{.bucket_size = 128, .seed = 2}}, 3, 3 * 2 * per_piece + 5,
      qsdp::reduce_op::sum, 3);
}

TEST_CASE("device collectives of hadamard<Inner> equal the host's, bit for bit") {
  using rotated4 = qsdp::hadamard<qsdp::stochastic<4>>;
  for (const int world : {1, 2, 3, 4}) {
    // Reduce-scatter sums each chunk's rotated values and transforms back once, as the host does.
    compare<rotated4, float>(collective::reduce_scatter, {{.bucket_size = 2048}}, world, 65536,
                             qsdp::reduce_op::avg);
    compare<rotated4, float>(collective::reduce_scatter, {{.bucket_size = 64}}, world, 4099,
                             qsdp::reduce_op::sum);
    compare<rotated4, float>(collective::all_gather, {{.bucket_size = 2048}}, world, 100001,
                             qsdp::reduce_op::sum);
  }
  compare<rotated4, float>(collective::all_reduce, {{.bucket_size = 512}}, 3, 100001,
                           qsdp::reduce_op::avg, 2);
}

/// Shards of slowly drifting weights: calls x world x count.
template <class T>
std::vector<std::vector<std::vector<T>>> drifting_shards(int calls, int world, std::size_t count) {
  std::vector<std::vector<std::vector<T>>> shards(static_cast<std::size_t>(calls));
  for (int c = 0; c < calls; ++c)
    for (int r = 0; r < world; ++r) {
      const auto base = qsdp_test::make_data(qsdp_test::distribution::normal, count,
                                             60 + static_cast<std::uint32_t>(r));
      const auto step = qsdp_test::make_data(qsdp_test::distribution::normal, count,
                                             90 + static_cast<std::uint32_t>(r * 100 + c));
      std::vector<float> w(count);
      for (std::size_t i = 0; i < count; ++i)
        w[i] = base[i] + 1e-3f * static_cast<float>(c) * step[i];
      shards[static_cast<std::size_t>(c)].push_back(qsdp_test::convert<T>(w));
    }
  return shards;
}

template <class Q, class T>
void compare_delta(const Q& q, int world, std::size_t count, int calls) {
  const auto shards = drifting_shards<T>(calls, world, count);
  const auto w = static_cast<std::size_t>(world);
  std::vector<std::vector<std::vector<T>>> expected(shards.size(), std::vector<std::vector<T>>(w));
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    qsdp::delta_gather<T> gather(count, world);
    for (std::size_t c = 0; c < shards.size(); ++c) {
      expected[c][r].resize(count * w);
      gather.all_gather(comm, q, shards[c][r].data(), expected[c][r].data());
    }
  });
  const auto got = gpu_test::device_delta_gather(q, world, count, shards);
  for (std::size_t c = 0; c < shards.size(); ++c)
    for (std::size_t r = 0; r < w; ++r) {
      INFO(qsdp::policy_name<Q>() << " world " << world << " count " << count << " call " << c
                                  << " rank " << r);
      CHECK(count_differences(expected[c][r], got[c][r]) == 0);
    }
}

TEST_CASE("device delta_gather equals the host's, call after call, and catches a lone reset") {
  compare_delta<qsdp::stochastic<4>, float>({.bucket_size = 2048}, 3, 10001, 5);
  compare_delta<qsdp::stochastic<8>, __nv_bfloat16>({}, 2, 65536, 4);
  compare_delta<qsdp::hadamard<qsdp::stochastic<4>>, float>({{.bucket_size = 256}}, 4, 4099, 3);
  // Rank 1 resets alone before the third call: the device finds the counts differ, and every
  // rank's next call throws, naming them.
  std::vector<std::string> errors;
  gpu_test::device_delta_gather(qsdp::stochastic<4>{}, 3, 1000, drifting_shards<float>(3, 3, 1000),
                                1, &errors);
  REQUIRE(errors.size() == 3);
  for (const std::string& e : errors)
    CHECK(e.find("rank 1's reconstruction has seen 0 calls, rank 0's 2") != std::string::npos);
}

TEST_CASE(
    "device all_reduce equals the host's, and later calls draw fresh numbers as the host's do") {
  compare<qsdp::stochastic<8>, __nv_bfloat16>(collective::all_reduce, {}, 3, 100001,
                                              qsdp::reduce_op::avg, 3);
  compare<qsdp::identity, float>(collective::all_reduce, {}, 4, 10, qsdp::reduce_op::sum, 2);
}

TEST_CASE("device collectives reuse their scratch: no allocation after the first call") {
  std::vector<std::vector<float>> inputs(2, std::vector<float>(8192, 1.0f));
  std::size_t after_one = 0, after_many = 0;
  gpu_test::device_collective<qsdp::stochastic<4>, float>(
      collective::reduce_scatter, {}, 2, 4096, inputs, qsdp::reduce_op::sum, 1, &after_one);
  gpu_test::device_collective<qsdp::stochastic<4>, float>(
      collective::reduce_scatter, {}, 2, 4096, inputs, qsdp::reduce_op::sum, 20, &after_many);
  CHECK(after_one == 1);
  CHECK(after_many == after_one);
}

TEST_CASE(
    "one NCCL rank runs all three collectives like the host, also replayed from a CUDA graph") {
  if (!gpu_test::nccl_built()) {
    MESSAGE("NCCL was not found when the tests were built: this case checks nothing here");
    return;
  }
  const std::vector<__nv_bfloat16> x = qsdp_test::convert<__nv_bfloat16>(
      qsdp_test::make_data(qsdp_test::distribution::normal, 300000, 5));
  const qsdp::random_shift<8> q{};
  const auto plain = gpu_test::nccl_one_rank(q, x, false);
  const auto replayed = gpu_test::nccl_one_rank(q, x, true);
  REQUIRE(plain.size() == 3);
  REQUIRE(replayed.size() == 3);
  // World 1, one communicator, the same call sequence: all_gather (call 0), reduce_scatter (call
  // 1), all_reduce (calls 2 and 3). The host gives the reference, bit for bit.
  std::vector<std::vector<__nv_bfloat16>> host(3, std::vector<__nv_bfloat16>(x.size()));
  qsdp::run_local(1, [&](qsdp::local_communicator& comm) {
    qsdp::all_gather(comm, q, x.data(), host[0].data(), x.size());
    qsdp::reduce_scatter(comm, q, x.data(), host[1].data(), x.size(), qsdp::reduce_op::sum);
    host[2] = x;
    qsdp::all_reduce(comm, q, host[2].data(), x.size(), qsdp::reduce_op::sum);
  });
  for (std::size_t k = 0; k < 3; ++k) {
    INFO("collective " << k);
    CHECK(count_differences(host[k], plain[k]) == 0);
    // The replays ran later calls (other call indices, other draws): within the policy's bound
    // instead.
    std::size_t far = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      far += std::abs(qsdp_test::to_f(replayed[k][i]) - qsdp_test::to_f(x[i])) > 0.05f;
    CHECK(far == 0);
  }
}

/// The host's outputs of `calls` calls of `kind` (sum) on one rank, in order.
template <class Q, class T>
std::vector<std::vector<T>> host_sequence(collective kind, const Q& q, const std::vector<T>& x,
                                          int calls) {
  std::vector<std::vector<T>> out;
  qsdp::run_local(1, [&](qsdp::local_communicator& comm) {
    for (int c = 0; c < calls; ++c) {
      std::vector<T> y = x;
      if (kind == collective::all_gather)
        qsdp::all_gather(comm, q, x.data(), y.data(), x.size());
      else if (kind == collective::reduce_scatter)
        qsdp::reduce_scatter(comm, q, x.data(), y.data(), x.size(), qsdp::reduce_op::sum);
      else
        qsdp::all_reduce(comm, q, y.data(), x.size(), qsdp::reduce_op::sum);
      out.push_back(std::move(y));
    }
  });
  return out;
}

TEST_CASE("a collective replayed from a CUDA graph draws fresh numbers, as the host's next calls") {
  if (!gpu_test::nccl_built()) {
    MESSAGE("NCCL was not found when the tests were built: this case checks nothing here");
    return;
  }
  // One plain call, three replays, one plain call: the device call counter numbers them 0..4
  // (all_reduce: two indices each), exactly as five host calls would be numbered.
  const std::vector<float> x = qsdp_test::make_data(qsdp_test::distribution::normal, 70000, 8);
  for (collective kind : {collective::all_gather, collective::all_reduce}) {
    const auto device = gpu_test::nccl_graph_replays(kind, qsdp::stochastic<4>{}, x, 3);
    const auto host = host_sequence(kind, qsdp::stochastic<4>{}, x, 5);
    REQUIRE(device.size() == 5);
    for (std::size_t k = 0; k < 5; ++k) {
      INFO("collective " << static_cast<int>(kind) << ", call " << k);
      CHECK(count_differences(host[k], device[k]) == 0);
    }
    CHECK(count_differences(device[1], device[2]) != 0);  // the replays rounded differently
  }
}
