// SPDX-License-Identifier: Apache-2.0
//
// Quantizer policies: small value types that say how one bucket of values becomes codes and back.
// A policy never loops, allocates or communicates; the codec (codec.hpp) computes bucket statistics,
// draws random numbers, packs codes and handles tails and non-finite values, and runs the very same
// policy functions on the host and (with nvcc) on the GPU.
//
// The built-in policies do their per-element arithmetic in double with explicit fma. That keeps them
// exact at the edges of float's range (max - min of two floats near FLT_MAX, ranges of denormals) and
// makes host and device results bit-identical: every operation is IEEE-rounded the same way on both.
#pragma once

#include <atomic>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "config.hpp"

namespace qsdp {

/// What the codec tells a policy about one bucket (finite values only; see codec.hpp for the rest).
struct bucket_stats {
  float min = 0.0f;      ///< smallest value of the bucket
  float max = 0.0f;      ///< largest value
  float abs_max = 0.0f;  ///< max(|min|, |max|)
  std::size_t count = 0; ///< values in the bucket (the last bucket may be short)
  float u = 0.0f;        ///< U[0,1) draw for this bucket when the policy sets randomized_buckets
};

/// Call index of a randomized policy: every encode through the policy object takes the next index, so
/// each call draws fresh random numbers, and a run is reproducible from the seed and the call sequence.
/// Copies carry the current index; advancing is atomic, so sharing one policy between threads is safe
/// (though then the order of calls between threads decides who gets which index).
class call_counter {
 public:
  call_counter() noexcept = default;
  call_counter(const call_counter& other) noexcept : next_(other.next()) {}
  call_counter& operator=(const call_counter& other) noexcept {
    next_.store(other.next(), std::memory_order_relaxed);
    return *this;
  }
  /// Index the next call will use.
  std::uint64_t next() const noexcept { return next_.load(std::memory_order_relaxed); }
  /// Takes the next index (the codec calls this once per encode).
  std::uint64_t advance() const noexcept { return next_.fetch_add(1, std::memory_order_relaxed); }
  /// Rewinds (or forwards) the sequence, e.g. to replay a run.
  void reset(std::uint64_t next_index = 0) noexcept {
    next_.store(next_index, std::memory_order_relaxed);
  }

 private:
  mutable std::atomic<std::uint64_t> next_{0};
};

namespace detail {

/// Metadata of the asymmetric policies: the bucket's range. Decoding recomputes the step from it in
/// double, which stays finite even when max - min exceeds FLT_MAX.
struct range_meta {
  float min;
  float max;
};

/// random_shift's metadata: the range and the bucket's random grid offset.
struct shifted_range_meta {
  float min;
  float max;
  float shift;
};

QSDP_HOST_DEVICE QSDP_FORCE_INLINE double fma_d(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return ::fma(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// floor() of a value already clamped to [0, top]: truncation is the same there, and unlike floor it
/// vectorizes on the host without -fno-trapping-math.
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t floor_nonnegative(double clamped) {
  return static_cast<std::uint32_t>(static_cast<std::int32_t>(clamped));
}

/// Clamps to [lo, hi]; a NaN becomes lo (only reachable when a policy is called on non-finite input
/// by hand: the codec never does, it marks such buckets instead).
QSDP_HOST_DEVICE QSDP_FORCE_INLINE double clamp_d(double v, double lo, double hi) {
  v = v > lo ? v : lo;
  return v < hi ? v : hi;
}

/// (x - min) / step + offset, floored, as an index into a grid of `intervals` steps over [min, max].
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t grid_index(float x, float min, float max,
                                                            double intervals, double offset,
                                                            double top_code) {
  const double range = static_cast<double>(max) - static_cast<double>(min);
  const double inverse_step = range > 0.0 ? intervals / range : 0.0;
  const double t = fma_d(static_cast<double>(x) - static_cast<double>(min), inverse_step, offset);
  return floor_nonnegative(clamp_d(t, 0.0, top_code));
}

/// min + position * step, step = (max - min) / intervals.
QSDP_HOST_DEVICE QSDP_FORCE_INLINE double grid_value(double position, float min, float max,
                                                     double intervals) {
  const double step = (static_cast<double>(max) - static_cast<double>(min)) / intervals;
  return fma_d(position, step, static_cast<double>(min));
}

inline constexpr double float_max = 3.40282346638528859811704183484516925440e+38;

}  // namespace detail

// ---------------------------------------------------------------------------------------------------
// Built-in policies. Error bounds (plus float rounding), with L = 2^B - 1:
//   uniform<B>       |x - q(x)| <= (max - min) / L / 2               round to nearest
//   stochastic<B>    |x - q(x)| <  (max - min) / L,  E[q(x)] = x     unbiased stochastic rounding
//   symmetric<B>     |x - q(x)| <= abs_max / C / 2, C = 2^(B-1) - 1  (B = 1: sign * abs_max, <= abs_max)
//   random_shift<B>  |x - q(x)| <= (max - min) / (L - 1) / 2, E[q(x)] = x   grid shifted per bucket
//   identity         exact (values sent as they are)
// ---------------------------------------------------------------------------------------------------

/// Asymmetric min/max quantization, round to nearest. Metadata: min and max (2 floats per bucket).
template <int B>
struct uniform {
  static_assert(B >= 1 && B <= 8, "qsdp::uniform<B>: B (bits per value) must be 1..8");
  static constexpr int bits = B;
  static constexpr bool randomized = false;
  static constexpr std::uint8_t wire_id = 1;
  static constexpr const char* name = "uniform";
  static constexpr double levels = double((1u << B) - 1u);

  std::size_t bucket_size = 1024;

  using meta_type = detail::range_meta;
  QSDP_HOST_DEVICE meta_type fit(const bucket_stats& s) const { return {s.min, s.max}; }
  QSDP_HOST_DEVICE std::uint32_t encode(float x, const meta_type& m, float) const {
    return detail::grid_index(x, m.min, m.max, levels, 0.5, levels);
  }
  // In double, min + code * step lies within a few double ulps of [min, max], so rounding to float
  // lands inside [min, max]: no clamp needed, and finite data stay finite.
  QSDP_HOST_DEVICE float decode(std::uint32_t code, const meta_type& m) const {
    return static_cast<float>(detail::grid_value(static_cast<double>(code), m.min, m.max, levels));
  }
};

/// Asymmetric min/max quantization with unbiased stochastic rounding: rounds up with probability equal
/// to the distance from the lower grid point. Metadata: min and max.
template <int B>
struct stochastic {
  static_assert(B >= 1 && B <= 8, "qsdp::stochastic<B>: B (bits per value) must be 1..8");
  static constexpr int bits = B;
  static constexpr bool randomized = true;
  static constexpr std::uint8_t wire_id = 2;
  static constexpr const char* name = "stochastic";
  static constexpr double levels = double((1u << B) - 1u);

  std::size_t bucket_size = 1024;
  std::uint64_t seed = 0;
  call_counter calls{};

  using meta_type = detail::range_meta;
  QSDP_HOST_DEVICE meta_type fit(const bucket_stats& s) const { return {s.min, s.max}; }
  QSDP_HOST_DEVICE std::uint32_t encode(float x, const meta_type& m, float u) const {
    return detail::grid_index(x, m.min, m.max, levels, static_cast<double>(u), levels);
  }
  // In double, min + code * step lies within a few double ulps of [min, max], so rounding to float
  // lands inside [min, max]: no clamp needed, and finite data stay finite.
  QSDP_HOST_DEVICE float decode(std::uint32_t code, const meta_type& m) const {
    return static_cast<float>(detail::grid_value(static_cast<double>(code), m.min, m.max, levels));
  }
};

/// Symmetric abs-max quantization, round to nearest (ZeRO++-like): levels k * abs_max / C for
/// k = -C..C, C = 2^(B-1) - 1, so zero is exact. One bit is sign quantization: +-abs_max.
/// Metadata: abs_max (1 float per bucket).
template <int B>
struct symmetric {
  static_assert(B >= 1 && B <= 8, "qsdp::symmetric<B>: B (bits per value) must be 1..8");
  static constexpr int bits = B;
  static constexpr bool randomized = false;
  static constexpr std::uint8_t wire_id = 3;
  static constexpr const char* name = "symmetric";
  /// Code of zero (B >= 2); for B = 1 the two codes sit half a step either side of zero.
  static constexpr double center = B == 1 ? 0.5 : double((1u << (B - 1)) - 1u);

  std::size_t bucket_size = 1024;

  using meta_type = float;
  QSDP_HOST_DEVICE meta_type fit(const bucket_stats& s) const { return s.abs_max; }
  QSDP_HOST_DEVICE std::uint32_t encode(float x, const meta_type& abs_max, float) const {
    const double inverse_step = abs_max > 0.0f ? center / static_cast<double>(abs_max) : 0.0;
    const double t = detail::fma_d(static_cast<double>(x), inverse_step, center + 0.5);
    return detail::floor_nonnegative(detail::clamp_d(t, 0.0, 2.0 * center));
  }
  QSDP_HOST_DEVICE float decode(std::uint32_t code, const meta_type& abs_max) const {
    // (code - center) * step is within a double ulp of [-abs_max, abs_max]: rounds to float inside it.
    const double step = static_cast<double>(abs_max) / center;
    return static_cast<float>((static_cast<double>(code) - center) * step);
  }
};

/// QSDP's weight quantizer: a uniform grid of step (max - min) / (2^B - 2) shifted by a random offset per
/// bucket, round to nearest (subtractive dithering). Unbiased over the offset, error at most half a step.
/// The grid reaches one step below min, so B >= 2. Metadata: min, max, offset (3 floats per bucket).
template <int B>
struct random_shift {
  static_assert(B >= 2 && B <= 8, "qsdp::random_shift<B>: B (bits per value) must be 2..8");
  static constexpr int bits = B;
  static constexpr bool randomized = false;        // no per-element draw ...
  static constexpr bool randomized_buckets = true; // ... but one per bucket, in bucket_stats::u
  static constexpr std::uint8_t wire_id = 4;
  static constexpr const char* name = "random_shift";
  static constexpr double intervals = double((1u << B) - 2u);

  std::size_t bucket_size = 1024;
  std::uint64_t seed = 0;
  call_counter calls{};

  using meta_type = detail::shifted_range_meta;
  QSDP_HOST_DEVICE meta_type fit(const bucket_stats& s) const { return {s.min, s.max, s.u}; }
  // Grid point k sits at min + (k - 1 + shift) * step, k = 0 .. 2^B - 1: the first is below min and the
  // last above max for every shift in [0, 1), so rounding to the nearest point never has to clamp.
  QSDP_HOST_DEVICE std::uint32_t encode(float x, const meta_type& m, float) const {
    return detail::grid_index(x, m.min, m.max, intervals, 1.5 - static_cast<double>(m.shift),
                              intervals + 1.0);
  }
  QSDP_HOST_DEVICE float decode(std::uint32_t code, const meta_type& m) const {
    const double position = static_cast<double>(code) - 1.0 + static_cast<double>(m.shift);
    const double v = detail::grid_value(position, m.min, m.max, intervals);
    // The grid may reach past +-FLT_MAX when the data sit there; saturate so finite stays finite.
    return static_cast<float>(detail::clamp_d(v, -detail::float_max, detail::float_max));
  }
};

/// No quantization: the codec copies the values into the packet unchanged (bit-exact), through the same
/// code path as the quantizers, for baselines.
struct identity {
  static constexpr std::uint8_t wire_id = 5;
  static constexpr const char* name = "identity";
};

// ---------------------------------------------------------------------------------------------------
// The plug-in point: any type with these members is a quantizer (see docs and README).
// ---------------------------------------------------------------------------------------------------
namespace detail {

template <class Q>
concept has_bits = requires {
  { Q::bits } -> std::convertible_to<int>;
};
template <class Q>
concept has_randomized = requires {
  { Q::randomized } -> std::convertible_to<bool>;
};
template <class Q>
concept has_bucket_size = requires(const Q& q) {
  { q.bucket_size } -> std::convertible_to<std::size_t>;
};
template <class Q>
concept has_meta_type = requires { typename Q::meta_type; };
template <class Q>
concept has_fit = requires(const Q& q, const bucket_stats& s) {
  { q.fit(s) } -> std::same_as<typename Q::meta_type>;
};
template <class Q>
concept has_encode = requires(const Q& q, const typename Q::meta_type& m) {
  { q.encode(0.0f, m, 0.0f) } -> std::convertible_to<std::uint32_t>;
};
template <class Q>
concept has_decode = requires(const Q& q, const typename Q::meta_type& m) {
  { q.decode(std::uint32_t{}, m) } -> std::convertible_to<float>;
};
template <class Q>
concept valid_bits = Q::bits >= 1 && Q::bits <= 8;
template <class Q>
concept valid_meta = std::is_trivially_copyable_v<typename Q::meta_type> &&
                     sizeof(typename Q::meta_type) <= 16 && alignof(typename Q::meta_type) <= 16;

}  // namespace detail

/// A quantizer policy (see the contract in README.md / DESIGN.md).
template <class Q>
concept quantizer = detail::has_bits<Q> && detail::has_randomized<Q> && detail::has_bucket_size<Q> &&
                    detail::has_meta_type<Q> && detail::has_fit<Q> && detail::has_encode<Q> &&
                    detail::has_decode<Q> && detail::valid_bits<Q> && detail::valid_meta<Q>;

/// Any policy the codec accepts: a quantizer or qsdp::identity.
template <class Q>
concept codec_policy = quantizer<Q> || std::same_as<std::remove_cv_t<Q>, identity>;

namespace detail {

/// One readable diagnostic per missing member, instead of a wall of unsatisfied constraints.
template <class Q>
consteval void require_policy() {
  if constexpr (std::same_as<std::remove_cv_t<Q>, identity>) {
    return;
  } else if constexpr (!has_bits<Q>) {
    static_assert(has_bits<Q>, "type does not satisfy qsdp::quantizer: missing member "
                               "`static constexpr int bits` (code width, 1..8)");
  } else if constexpr (!valid_bits<Q>) {
    static_assert(valid_bits<Q>, "type does not satisfy qsdp::quantizer: `bits` must be 1..8");
  } else if constexpr (!has_randomized<Q>) {
    static_assert(has_randomized<Q>, "type does not satisfy qsdp::quantizer: missing member "
                                     "`static constexpr bool randomized`");
  } else if constexpr (!has_bucket_size<Q>) {
    static_assert(has_bucket_size<Q>, "type does not satisfy qsdp::quantizer: missing member "
                                      "`std::size_t bucket_size`");
  } else if constexpr (!has_meta_type<Q>) {
    static_assert(has_meta_type<Q>, "type does not satisfy qsdp::quantizer: missing member type "
                                    "`meta_type` (per-bucket metadata)");
  } else if constexpr (!valid_meta<Q>) {
    static_assert(valid_meta<Q>, "type does not satisfy qsdp::quantizer: `meta_type` must be "
                                 "trivially copyable and at most 16 bytes");
  } else if constexpr (!has_fit<Q>) {
    static_assert(has_fit<Q>, "type does not satisfy qsdp::quantizer: missing member "
                              "`meta_type fit(const qsdp::bucket_stats&) const`");
  } else if constexpr (!has_encode<Q>) {
    static_assert(has_encode<Q>, "type does not satisfy qsdp::quantizer: missing member "
                                 "`std::uint32_t encode(float x, const meta_type&, float u) const`");
  } else if constexpr (!has_decode<Q>) {
    static_assert(has_decode<Q>, "type does not satisfy qsdp::quantizer: missing member "
                                 "`float decode(std::uint32_t code, const meta_type&) const`");
  }
}

template <class Q>
inline constexpr bool is_identity = std::same_as<std::remove_cv_t<Q>, identity>;

template <class Q>
consteval bool randomized_elements() {
  if constexpr (is_identity<Q>) return false;
  else return Q::randomized;
}

template <class Q>
consteval bool randomized_buckets() {
  if constexpr (requires { Q::randomized_buckets; }) return Q::randomized_buckets;
  else return false;
}

template <class Q>
consteval std::uint8_t wire_id() {
  if constexpr (requires { Q::wire_id; }) return Q::wire_id;
  else return 0;  // user-defined
}

template <class Q>
consteval std::uint32_t wire_tag() {
  if constexpr (requires { Q::wire_tag; }) return static_cast<std::uint32_t>(Q::wire_tag);
  else return 0;
}

template <class Q>
std::uint64_t seed_of(const Q& q) {
  if constexpr (requires { q.seed; }) return static_cast<std::uint64_t>(q.seed);
  else return 0;
}

}  // namespace detail

/// Name of a policy for tables and messages ("uniform", "stochastic", ..., or "user-defined").
template <class Q>
constexpr const char* policy_name() {
  if constexpr (requires { Q::name; }) return Q::name;
  else return "user-defined";
}

}  // namespace qsdp
