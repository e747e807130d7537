// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the tests: data generators, the error bounds every policy promises (computed
// here independently of the library, in double, from each bucket's true min / max), and error_of.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <qsdp/codec.hpp>

#include "codec_instances.hpp"

namespace qsdp_test {

/// Values on a 1/4 grid below 2^10 (rank r's own sequence): every sum of up to 8 of them is exact
/// in fp32, in any order, so sums through any schedule can be compared bit for bit.
inline std::vector<float> exact_sum_values(int rank, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] =
        static_cast<float>(
            static_cast<int>((i * 7919 + static_cast<std::size_t>(rank) * 104729) % 4096) - 2048) /
        4.0f;
  return v;
}

/// The message of the qsdp::error that body() throws, or "" when it throws none.
inline std::string error_of(auto&& body) {
  try {
    body();
  } catch (const qsdp::error& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

enum class distribution { normal, uniform, lognormal, gradient_with_outliers, mixed_scale };

inline const char* name(distribution d) {
  switch (d) {
    case distribution::normal: return "normal";
    case distribution::uniform: return "uniform";
    case distribution::lognormal: return "lognormal";
    case distribution::gradient_with_outliers: return "gradient_with_outliers";
    case distribution::mixed_scale: return "mixed_scale";
  }
  return "?";
}

inline constexpr distribution all_distributions[] = {
    distribution::normal, distribution::uniform, distribution::lognormal,
    distribution::gradient_with_outliers, distribution::mixed_scale};

inline std::vector<float> make_data(distribution d, std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-3.0f, 5.0f);
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (d) {
      case distribution::normal: x[i] = normal(rng); break;
      case distribution::uniform: x[i] = uni(rng); break;
      case distribution::lognormal: x[i] = std::exp(2.0f * normal(rng)); break;
      case distribution::gradient_with_outliers:
        x[i] = (rng() % 97 == 0) ? 100.0f * normal(rng) : 1e-4f * normal(rng);
        break;
      case distribution::mixed_scale:
        x[i] = normal(rng) * std::pow(10.0f, static_cast<float>(static_cast<int>(i / 64 % 9) - 4));
        break;
    }
  }
  return x;
}

template <class T>
float to_f(T v) {
  return qsdp::detail::element_traits<T>::to_float(v);
}
template <class T>
T from_f(float v) {
  return qsdp::detail::element_traits<T>::from_float(v);
}

template <class T>
std::vector<T> convert(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = from_f<T>(x[i]);
  return out;
}

/// Relative precision of T's output rounding (half an ulp at 1).
template <class T>
constexpr double output_epsilon() {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) return 0x1p-24;
#if QSDP_HAS_CUDA_HALF
  else if constexpr (std::is_same_v<T, __half>)
    return 0x1p-11;
  else
    return 0x1p-8;  // bf16
#else
  else
    return 0x1p-24;
#endif
}

/// Largest error policy Q may make on a bucket with these true (double) statistics, rounding
/// included.
template <class Q, class T>
double error_bound(double lo, double hi) {
  const double abs_max = std::max(std::abs(lo), std::abs(hi));
  double quantization = 0.0;
  constexpr int B = Q::bits;
  if constexpr (Q::wire_id == 1)
    quantization = (hi - lo) / ((1 << B) - 1) / 2;
  else if constexpr (Q::wire_id == 2)
    quantization = (hi - lo) / ((1 << B) - 1);
  else if constexpr (Q::wire_id == 3)
    quantization = abs_max / (B == 1 ? 0.5 : (1 << (B - 1)) - 1) / 2;
  else if constexpr (Q::wire_id == 4)
    quantization = (hi - lo) / ((1 << B) - 2) / 2;
  // Float rounding: the grid computation (a few float ulps), the output type's rounding of the
  // result (which may sit up to one quantization step beyond the data), and the denormal floor.
  const double reach = abs_max + 2 * quantization;
  return quantization * (1 + 1e-6) + 4 * 0x1p-24 * reach + output_epsilon<T>() * reach + 1e-40 +
         (output_epsilon<T>() > 0x1p-24 ? 0x1p-24 : 0.0);
}

/// Checks decoded values bucket by bucket against their bound; returns the first violation or "".
template <class Q, class T>
std::string check_bounds(const Q& q, const std::vector<T>& x, const std::vector<T>& y) {
  const std::size_t n = x.size();
  for (std::size_t begin = 0; begin < n; begin += q.bucket_size) {
    const std::size_t end = std::min(n, begin + q.bucket_size);
    double lo = INFINITY, hi = -INFINITY;
    for (std::size_t i = begin; i < end; ++i) {
      lo = std::min(lo, static_cast<double>(to_f(x[i])));
      hi = std::max(hi, static_cast<double>(to_f(x[i])));
    }
    const double bound = error_bound<Q, T>(lo, hi);
    for (std::size_t i = begin; i < end; ++i) {
      const double xi = to_f(x[i]), yi = to_f(y[i]);
      if (!std::isfinite(yi) || std::abs(xi - yi) > bound)
        return "value " + std::to_string(i) + ": x=" + std::to_string(xi) +
               " decoded=" + std::to_string(yi) + " error=" + std::to_string(std::abs(xi - yi)) +
               " bound=" + std::to_string(bound);
    }
  }
  return "";
}

/// encode + decode through fresh buffers.
template <class Q, class T>
std::vector<T> round_trip(const Q& q, const std::vector<T>& x) {
  std::vector<std::byte> packet(qsdp::compressed_size<T>(q, x.size()));
  qsdp::encode(q, x.data(), x.size(), packet.data());
  std::vector<T> y(x.size());
  qsdp::decode(q, packet.data(), x.size(), y.data());
  return y;
}

/// Calls fn(policy) for every built-in quantizer at every legal width.
template <class Fn>
void for_each_policy(std::size_t bucket_size, std::uint64_t seed, Fn&& fn) {
  [&]<int... B>(std::integer_sequence<int, B...>) {
    (fn(qsdp::uniform<B + 1>{.bucket_size = bucket_size}), ...);
    (fn(qsdp::stochastic<B + 1>{.bucket_size = bucket_size, .seed = seed}), ...);
    (fn(qsdp::symmetric<B + 1>{.bucket_size = bucket_size}), ...);
  }
  (std::make_integer_sequence<int, 8>{});
  [&]<int... B>(std::integer_sequence<int, B...>) {
    (fn(qsdp::random_shift<B + 2>{.bucket_size = bucket_size, .seed = seed}), ...);
  }
  (std::make_integer_sequence<int, 7>{});
}

template <class Q>
std::string describe(const Q&) {
  return std::string(qsdp::policy_name<Q>()) + "<" + std::to_string(Q::bits) + ">";
}

}  // namespace qsdp_test
