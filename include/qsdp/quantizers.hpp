// SPDX-License-Identifier: Apache-2.0
/// @file
/// Quantizer policies: small value types that say how one bucket of values becomes codes and back.
/// A policy never loops, allocates or communicates; the codec (codec.hpp) computes bucket
/// statistics, draws random numbers, packs codes and handles tails and non-finite values, and runs
/// the very same policy functions on the host and (with nvcc) on the GPU.
///
/// Each built-in policy states its arithmetic once, as two affine grids per bucket
/// (detail/codec/grid.hpp): code_grid_for(meta) says where the codes sit and how values round onto
/// them, value_grid_for(meta) what each code stands for. encode and decode evaluate those grids;
/// the CUDA kernels run encode and decode, and the host's AVX2 loops evaluate the same grids lane
/// by lane, so no path can drift from another.
///
/// Every built-in policy has the members of a qsdp::quantizer: `bits` (B), `randomized` (true for
/// stochastic), `bucket_size`, `meta_type`, `fit`, and `encode(x, meta, u)` and
/// `decode(code, meta)`, which evaluate its grids; and `wire_id` and `name` ("uniform", ...), which
/// identify it in packet headers and messages.
///
/// Error bounds per value (plus float rounding), with L = 2^B - 1 and C = 2^(B-1) - 1:
/// ```
/// uniform<B>       |x - q(x)| <= (max - min) / L / 2                   round to nearest
/// stochastic<B>    |x - q(x)| <  (max - min) / L,         E[q(x)] = x  stochastic rounding
/// symmetric<B>     |x - q(x)| <= abs_max / C / 2   (B = 1: +-abs_max, |x - q(x)| <= abs_max)
/// random_shift<B>  |x - q(x)| <= (max - min) / (L - 1) / 2, E[q(x)] = x  grid shifted per bucket
/// identity         exact (values sent as they are)
/// ```
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "config.hpp"
#include "detail/codec/grid.hpp"
#include "detail/codec/hadamard.hpp"
#include "detail/codec/policy_traits.hpp"
#include "policy.hpp"

namespace qsdp {

// ---------------------------------------------------------------------------------------------------
// Built-in policies (their error bounds: the top of this file).
// ---------------------------------------------------------------------------------------------------

// What every built-in policy B-bit template says of itself: the widths it takes (a compile error
// names the rule), its bits, whether it draws per value, its wire id and its name.
#define QSDP_DETAIL_BUILTIN_POLICY(policy_name, id, lowest_bits, draws_per_value)            \
  static_assert(B >= lowest_bits && B <= 8,                                                  \
                "qsdp::" policy_name "<B>: B (bits per value) must be " #lowest_bits "..8"); \
  static constexpr int bits = B;                                                             \
  static constexpr bool randomized = draws_per_value;                                        \
  static constexpr std::uint8_t wire_id = id;                                                \
  static constexpr const char* name = policy_name;

// A built-in policy's encode and decode evaluate its grids (code_grid_for, value_grid_for), and
// nothing else: the one definition of the four built-ins' members, which are aggregates (a base
// class would make their designated initializers warn under -Wextra).
#define QSDP_DETAIL_ENCODE_DECODE_ON_GRIDS                                            \
  QSDP_HOST_DEVICE std::uint32_t encode(float x, const meta_type& m, float u) const { \
    return detail::grid_code<randomized>(code_grid_for(m), x, u);                     \
  }                                                                                   \
  QSDP_HOST_DEVICE float decode(std::uint32_t code, const meta_type& m) const {       \
    return detail::grid_decode(value_grid_for(m), code);                              \
  }

/// Asymmetric min/max quantization, round to nearest. Metadata: min and max (2 floats per bucket).
/// @tparam B bits per value, 1..8
template <int B>
struct uniform {
  QSDP_DETAIL_BUILTIN_POLICY("uniform", 1, 1, false)
  static constexpr double levels = double((1u << B) - 1u);  ///< grid steps over [min, max]: 2^B - 1

  std::size_t bucket_size = 1024;  ///< values per bucket, >= 1

  using meta_type = detail::range_meta;  ///< the bucket's min and max
  /// The bucket's metadata.
  /// @param s the bucket's statistics
  /// @return {min, max}
  QSDP_HOST_DEVICE meta_type fit(const bucket_stats& s) const { return {s.min, s.max}; }
  /// 2^B - 1 steps over [min, max], round to nearest.
  /// @param m the bucket's metadata
  /// @return the code grid
  QSDP_HOST_DEVICE detail::code_grid code_grid_for(const meta_type& m) const {
    return detail::range_code_grid(m.min, m.max, levels, 0.5, levels);
  }
  // In double, min + code * step lies within a few double ulps of [min, max], so rounding to float
  // lands inside [min, max]: no clamp needed, and finite data stay finite.
  /// What each code stands for (detail/codec/grid.hpp).
  /// @param m the bucket's metadata
  /// @return the value grid
  QSDP_HOST_DEVICE detail::value_grid value_grid_for(const meta_type& m) const {
    return detail::range_value_grid(m.min, m.max, levels, 0.0, false, 0.0, false);
  }
  QSDP_DETAIL_ENCODE_DECODE_ON_GRIDS
};

/// Asymmetric min/max quantization with unbiased stochastic rounding: uniform's grid, each value's
/// U[0,1) draw as the rounding offset instead of 1/2, so it rounds up with probability equal to its
/// distance from the lower grid point. Metadata: min and max, as uniform's.
/// @tparam B bits per value, 1..8
template <int B>
struct stochastic {
  QSDP_DETAIL_BUILTIN_POLICY("stochastic", 2, 1, true)

  std::size_t bucket_size = 1024;  ///< values per bucket, >= 1
  std::uint64_t seed = 0;          ///< the seed of its random numbers (Philox)
  call_counter calls{};            ///< the index of its next encode call

  using meta_type = typename uniform<B>::meta_type;  ///< the bucket's min and max
  /// The bucket's metadata.
  /// @param s the bucket's statistics
  /// @return {min, max}
  QSDP_HOST_DEVICE meta_type fit(const bucket_stats& s) const { return uniform<B>{}.fit(s); }
  // uniform's grids; grid_code<randomized> reads the draw in place of the grid's offset.
  /// The grid codes sit on and how values round onto it (detail/codec/grid.hpp).
  /// @param m the bucket's metadata
  /// @return the code grid
  QSDP_HOST_DEVICE detail::code_grid code_grid_for(const meta_type& m) const {
    return uniform<B>{}.code_grid_for(m);
  }
  /// What each code stands for (detail/codec/grid.hpp).
  /// @param m the bucket's metadata
  /// @return the value grid
  QSDP_HOST_DEVICE detail::value_grid value_grid_for(const meta_type& m) const {
    return uniform<B>{}.value_grid_for(m);
  }
  QSDP_DETAIL_ENCODE_DECODE_ON_GRIDS
};

/// Symmetric abs-max quantization, round to nearest (ZeRO++-like): levels k * abs_max / C for
/// k = -C..C, C = 2^(B-1) - 1, so zero is exact. One bit is sign quantization: +-abs_max.
/// Metadata: abs_max (1 float per bucket).
/// @tparam B bits per value, 1..8
template <int B>
struct symmetric {
  QSDP_DETAIL_BUILTIN_POLICY("symmetric", 3, 1, false)
  /// Code of zero (B >= 2); for B = 1 the two codes sit half a step either side of zero.
  static constexpr double center = B == 1 ? 0.5 : double((1u << (B - 1)) - 1u);

  std::size_t bucket_size = 1024;  ///< values per bucket, >= 1

  using meta_type = float;  ///< the bucket's abs_max
  /// The bucket's metadata.
  /// @param s the bucket's statistics
  /// @return abs_max
  QSDP_HOST_DEVICE meta_type fit(const bucket_stats& s) const { return s.abs_max; }
  /// Codes 0 .. 2 * center around zero (code center), step abs_max / center, round to nearest.
  /// x - 0.0 is x for every x, -0.0 included.
  /// @param abs_max the bucket's metadata
  /// @return the code grid
  QSDP_HOST_DEVICE detail::code_grid code_grid_for(const meta_type& abs_max) const {
    return {0.0, abs_max > 0.0f ? center / static_cast<double>(abs_max) : 0.0, center + 0.5,
            2.0 * center};
  }
  // (code - center) * step is within a double ulp of [-abs_max, abs_max]: rounds to float inside
  // it. A product, not an fma with base 0, so that a result that rounds to -0 stays -0.
  /// What each code stands for (detail/codec/grid.hpp).
  /// @param abs_max the bucket's metadata
  /// @return the value grid
  QSDP_HOST_DEVICE detail::value_grid value_grid_for(const meta_type& abs_max) const {
    return {true, -center, 0.0, detail::quotient(abs_max, center), 0.0, false, 0.0, 0.0, false};
  }
  QSDP_DETAIL_ENCODE_DECODE_ON_GRIDS
};

/// QSDP's weight quantizer: a uniform grid of step (max - min) / (2^B - 2) shifted by a random
/// offset per bucket, round to nearest (subtractive dithering). Unbiased over the offset, error at
/// most half a step. The grid reaches one step below min, so B >= 2. Metadata: min, max, offset (3
/// floats per bucket).
/// @tparam B bits per value, 2..8
template <int B>
struct random_shift {
  QSDP_DETAIL_BUILTIN_POLICY("random_shift", 4, 2, false)  // no per-element draw ...
  static constexpr bool randomized_buckets = true;  ///< ... but one per bucket, in bucket_stats::u
  static constexpr double intervals = double((1u << B) - 2u);  ///< grid steps over [min, max]

  std::size_t bucket_size = 1024;  ///< values per bucket, >= 1
  std::uint64_t seed = 0;          ///< the seed of its random offsets (Philox)
  call_counter calls{};            ///< the index of its next encode call

  using meta_type = detail::shifted_range_meta;  ///< the bucket's min, max and offset
  /// The bucket's metadata.
  /// @param s the bucket's statistics
  /// @return {min, max, the bucket's draw as offset}
  QSDP_HOST_DEVICE meta_type fit(const bucket_stats& s) const { return {s.min, s.max, s.u}; }
  // Grid point k sits at min + (k - 1 + shift) * step, k = 0 .. 2^B - 1: the first is below min and
  // the last above max for every shift in [0, 1), so rounding to the nearest point never has to
  // clamp.
  /// The grid codes sit on and how values round onto it (detail/codec/grid.hpp).
  /// @param m the bucket's metadata
  /// @return the code grid
  QSDP_HOST_DEVICE detail::code_grid code_grid_for(const meta_type& m) const {
    return detail::range_code_grid(m.min, m.max, intervals, 1.5 - static_cast<double>(m.shift),
                                   intervals + 1.0);
  }
  // (code - 1) + shift in two additions: adding (shift - 1) at once is the same for the shifts an
  // encoder draws (multiples of 2^-24), but not for any float a damaged or hostile packet may hold
  // (a shift of 1e-38 vanishes in shift - 1). The grid may reach past +-FLT_MAX when the data sit
  // there: saturated, so finite stays finite.
  /// What each code stands for (detail/codec/grid.hpp).
  /// @param m the bucket's metadata
  /// @return the value grid
  QSDP_HOST_DEVICE detail::value_grid value_grid_for(const meta_type& m) const {
    return detail::range_value_grid(m.min, m.max, intervals, -1.0, true,
                                    static_cast<double>(m.shift), true);
  }
  QSDP_DETAIL_ENCODE_DECODE_ON_GRIDS
};

// ---------------------------------------------------------------------------------------------------
// Rotated buckets.
// ---------------------------------------------------------------------------------------------------

namespace detail {

template <class Q>
concept seeded_policy = requires(const Q& q) {
  q.seed;
  q.calls.advance();
};

/// "hadamard<" + the inner policy's name + ">", as a constant.
template <class Inner>
inline constexpr auto hadamard_name = [] {
  struct text {
    char chars[64]{};
  } t;
  const char* parts[] = {"hadamard<", policy_name<Inner>(), ">"};
  std::size_t n = 0;
  for (const char* part : parts)
    for (const char* c = part; *c != '\0' && n + 1 < sizeof t.chars; ++c) t.chars[n++] = *c;
  return t;
}();

}  // namespace detail

// What every hadamard<Inner> states: Inner is a quantizer, not rotated already; its own wire id.
#define QSDP_DETAIL_HADAMARD_MEMBERS(Inner)                                                      \
  static_assert(quantizer<Inner>,                                                                \
                "qsdp::hadamard<Inner>: Inner must be a quantizer policy (not qsdp::identity)"); \
  static_assert(!detail::rotated<Inner>(), "qsdp::hadamard<Inner>: Inner is rotated already");   \
  static constexpr bool hadamard_rotated = true;                                                 \
  static constexpr std::uint8_t wire_id = detail::hadamard_id_bit | detail::wire_id<Inner>();    \
  static constexpr const char* name = detail::hadamard_name<Inner>.chars;                        \
  using inner_policy = Inner;

/// Randomized Hadamard rotation of every bucket before the inner policy quantizes it (SDP4Bit's
/// gradient rotation): the bucket's values are multiplied by random signs (Philox, fresh per call,
/// reproducible from seed and call index) and transformed by a fast Walsh-Hadamard transform, so an
/// outlier spreads over the bucket instead of stretching its grid; decoding transforms back
/// (detail/codec/hadamard.hpp states the transform). An aggregate whose base is the inner policy:
///
///     qsdp::hadamard<qsdp::stochastic<4>> g{{.bucket_size = 256, .seed = 7}};
///
/// bucket_size must be a power of two from 16 to 4096 (the codec throws qsdp::error otherwise); a
/// short last bucket is rotated in power-of-two pieces (64 + 32 + 4 for 100 values), so any count
/// works and the packet holds as many codes as Inner's, plus 16 bytes for the rotation's seed and
/// call index. Unbiased whenever Inner is (the rotation is linear and exactly inverted, up to float
/// rounding); Inner's error bound holds for the rotated values, and the decoded error has the same
/// L2 norm. A bucket holding NaN or inf still decodes to NaN. A policy without a seed of its own
/// (uniform, symmetric, user policies) gets `seed` and `calls` members here. Host codec and device
/// kernels (detail/cuda/hadamard_kernels.cuh) write the same packets, byte for byte.
///
/// Members besides Inner's: `inner_policy` (Inner), `wire_id` and `name` ("hadamard<" + Inner's
/// name + ">").
/// @tparam Inner a quantizer policy, not rotated already (qsdp::identity is not one)
template <class Inner>
struct hadamard : Inner {
  QSDP_DETAIL_HADAMARD_MEMBERS(Inner)
};

/// hadamard of a policy without a seed of its own (uniform, symmetric, user policies): adds the
/// seed and call counter of the rotation's random signs.
/// @tparam Inner a quantizer policy without `seed` and `calls` members
template <class Inner>
requires(!detail::seeded_policy<Inner>) struct hadamard<Inner> : Inner {
  QSDP_DETAIL_HADAMARD_MEMBERS(Inner)
  std::uint64_t seed = 0;  ///< the seed of the rotation's random signs (Philox)
  call_counter calls{};    ///< the index of its next encode call
};

#undef QSDP_DETAIL_HADAMARD_MEMBERS

}  // namespace qsdp
