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
#include "detail/codec/minifloat.hpp"
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
// Block-scaled floating point: the OCP Microscaling (MX) formats.
// ---------------------------------------------------------------------------------------------------

/// How an MX policy rounds a scaled value onto its element grid.
enum class rounding {
  nearest,    ///< to the nearest element, ties to an even mantissa (the OCP spec's conversion)
  stochastic  ///< up with probability equal to the distance from the lower neighbour: unbiased
};

// An element format of the OCP MX spec: its fields (sign, exponent_bits, mantissa_bits, bias), the
// magnitude code of its largest finite value and of NaN and infinity (-1: the format has none),
// and its name and those of its MX policies. detail/codec/minifloat.hpp reads these.
#define QSDP_DETAIL_ELEMENT_FORMAT(e, m, b, max, nan, inf, index, element, nearest_name, \
                                   stochastic_name)                                      \
  static constexpr int exponent_bits = e;                                                \
  static constexpr int mantissa_bits = m;                                                \
  static constexpr int bias = b;                                                         \
  static constexpr int max_code = max;                                                   \
  static constexpr int nan_code = nan;                                                   \
  static constexpr int inf_code = inf;                                                   \
  static constexpr std::uint8_t mx_index = index;                                        \
  static constexpr const char* name = element;                                           \
  static constexpr const char* mx_name = nearest_name;                                   \
  static constexpr const char* mx_stochastic_name = stochastic_name;

/// FP8 E4M3 (OCP "E4M3", torch.float8_e4m3fn): largest finite 448, smallest normal 2^-6, smallest
/// subnormal 2^-9; NaN S.1111.111, no infinity.
struct e4m3 {
  QSDP_DETAIL_ELEMENT_FORMAT(4, 3, 7, 0x7E, 0x7F, -1, 0, "e4m3", "mxfp8<e4m3>",
                             "mxfp8<e4m3, stochastic>")
};
/// FP8 E5M2 (torch.float8_e5m2): largest finite 57344, smallest normal 2^-14, smallest subnormal
/// 2^-16; infinity S.11111.00, NaN S.11111.{01, 10, 11}.
struct e5m2 {
  QSDP_DETAIL_ELEMENT_FORMAT(5, 2, 15, 0x7B, 0x7E, 0x7C, 1, "e5m2", "mxfp8<e5m2>",
                             "mxfp8<e5m2, stochastic>")
};
/// FP6 E3M2: largest finite 28, smallest normal 2^-2, smallest subnormal 2^-4; no NaN, no infinity.
struct e3m2 {
  QSDP_DETAIL_ELEMENT_FORMAT(3, 2, 3, 0x1F, -1, -1, 2, "e3m2", "mxfp6<e3m2>",
                             "mxfp6<e3m2, stochastic>")
};
/// FP6 E2M3: largest finite 7.5, smallest normal 1, smallest subnormal 0.125; no NaN, no infinity.
struct e2m3 {
  QSDP_DETAIL_ELEMENT_FORMAT(2, 3, 1, 0x1F, -1, -1, 3, "e2m3", "mxfp6<e2m3>",
                             "mxfp6<e2m3, stochastic>")
};
/// FP4 E2M1: the values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives; no NaN, no infinity.
struct e2m1 {
  QSDP_DETAIL_ELEMENT_FORMAT(2, 1, 1, 0x7, -1, -1, 4, "e2m1", "mxfp4", "mxfp4<stochastic>")
};

#undef QSDP_DETAIL_ELEMENT_FORMAT

namespace detail {
/// The wire id of mx<e4m3>; the other element formats follow in mx_index order.
inline constexpr std::uint8_t mx_first_wire_id = 6;
}  // namespace detail

// What every mx<Element, R> states (the nearest and the stochastic form differ only in their seed).
#define QSDP_DETAIL_MX_MEMBERS(Element, R)                                                         \
  static constexpr int bits = 1 + Element::exponent_bits + Element::mantissa_bits;                 \
  static constexpr bool randomized = R == rounding::stochastic;                                    \
  static constexpr std::uint8_t wire_id = detail::mx_first_wire_id + Element::mx_index;            \
  static constexpr const char* name = randomized ? Element::mx_stochastic_name : Element::mx_name; \
  using element_format = Element;                                                                  \
  static constexpr bool fit_reads_abs_max = true; /**< fit reads bucket_stats::abs_max alone */    \
                                                                                                   \
  std::size_t bucket_size = 32; /**< values per block, >= 1 (the OCP spec's block is 32) */        \
                                                                                                   \
  using meta_type = std::uint8_t; /**< the block's E8M0 scale: 2^(byte - 127) */                   \
  /** A block holding NaN or inf: E8M0's NaN byte (its codes are 0, its values decode to NaN). */  \
  static constexpr meta_type non_finite_meta = detail::e8m0_nan;                                   \
  /** Every finite decoded value is an element times a power of two: these significant bits. */    \
  static constexpr int decoded_significant_bits = 1 + Element::mantissa_bits;                      \
  /** The block's shared scale (detail/codec/minifloat.hpp states both rules). */                  \
  QSDP_HOST_DEVICE meta_type fit(const bucket_stats& s) const {                                    \
    return detail::e8m0_byte(randomized ? detail::mx_ceil_exponent<Element>(s.abs_max)             \
                                        : detail::mx_floor_exponent<Element>(s.abs_max));          \
  }                                                                                                \
  /** The element code of x / scale. */                                                            \
  QSDP_HOST_DEVICE std::uint32_t encode(float x, const meta_type& m, float u) const {              \
    return detail::minifloat_encode<Element, randomized>(x, int{m} - detail::e8m0_bias, u);        \
  }                                                                                                \
  /** What x is multiplied by before rounding to an element: 1 / scale, 2^(127 - m). */            \
  QSDP_HOST_DEVICE float encode_factor(const meta_type& m) const {                                 \
    return detail::mx_element_scale(int{m} - detail::e8m0_bias);                                   \
  }                                                                                                \
  /** What the block's elements are multiplied by: its scale, 2^(m - 127) (NaN for 0xFF). */       \
  QSDP_HOST_DEVICE float block_factor(const meta_type& m) const { return detail::e8m0_value(m); }  \
  /** element * block_factor in float: exact (float holds every such product) unless it */         \
  /** overflows, and never fused into a later sum (which would hide that overflow). */             \
  QSDP_HOST_DEVICE float decode(std::uint32_t code, const meta_type& m) const {                    \
    return detail::unfused_product(detail::minifloat_decode<Element>(code), block_factor(m));      \
  }

/// An OCP Microscaling format: blocks of `bucket_size` values (32 in the spec) share a power-of-two
/// scale, stored as one E8M0 byte, and each value is an element of format Element (e4m3, e5m2,
/// e3m2, e2m3, e2m1) times that scale. The aliases mxfp8, mxfp6 and mxfp4 name the spec's formats:
///
///     qsdp::mxfp8<qsdp::e4m3> w{};  // 8.28 bits per value on the wire, the flag bit included
///     qsdp::mxfp4<qsdp::rounding::stochastic> g{.bucket_size = 32, .seed = 7};
///
/// Round to nearest (R = rounding::nearest) is the spec's conversion with the scale rule of
/// torchao's `to_mx` (FLOOR mode): the scale is 2^(floor(log2 abs_max) - emax), emax the exponent
/// of the element format's largest finite value, and values that land past that value saturate to
/// it. Stochastic rounding (R = rounding::stochastic) takes the smallest power of two that keeps
/// every value of the block within the element range (torchao's RCEIL rule), so nothing saturates
/// and E[decode(encode(x))] = x; each value lands on one of its two neighbours on the element grid.
/// The scale's exponent is clamped to E8M0's -127..127. A block holding NaN or infinity decodes to
/// NaN (the codec's rule for every policy). Metadata: one byte per block.
/// @tparam Element the element format
/// @tparam R the rounding of the elements
template <class Element, rounding R = rounding::nearest>
struct mx {
  QSDP_DETAIL_MX_MEMBERS(Element, R)
  /// encode(x, m, u) of a finite x, in integer steps (the kernels' path).
  /// @tparam Signed false: the code of |x|
  /// @param x the value
  /// @param m its block's scale
  /// @return the element code
  template <bool Signed = true>
  QSDP_HOST_DEVICE std::uint32_t encode_nearest(float x, const meta_type& m) const {
    return detail::minifloat_encode_nearest<Element, Signed>(x, encode_factor(m));
  }
};

/// mx with stochastic rounding: adds the seed and call counter of its per-value draws.
/// @tparam Element the element format
template <class Element>
struct mx<Element, rounding::stochastic> {
  QSDP_DETAIL_MX_MEMBERS(Element, rounding::stochastic)
  std::uint64_t seed = 0;  ///< the seed of its random numbers (Philox)
  call_counter calls{};    ///< the index of its next encode call
  /// encode(x, m, u) of a finite x in a block whose scale m is fit's, taking the 16-bit half
  /// whose draw u is (the kernels' path; such an x never saturates).
  /// @tparam Signed false: the code of |x|
  /// @param x the value
  /// @param m its block's scale, as fit gives it
  /// @param half its 16-bit draw, 0..65535 (u = (half + 1/2) * 2^-16)
  /// @return the element code
  template <bool Signed = true>
  QSDP_HOST_DEVICE std::uint32_t encode_drawn(float x, const meta_type& m,
                                              std::uint32_t half) const {
    return detail::minifloat_encode_drawn<Element, false, Signed>(x, encode_factor(m), half);
  }
};

#undef QSDP_DETAIL_MX_MEMBERS

/// MXFP8: 8-bit elements (e4m3, the default, or e5m2) with an E8M0 scale per block.
template <class Element = e4m3, rounding R = rounding::nearest>
requires(Element::exponent_bits + Element::mantissa_bits == 7) using mxfp8 = mx<Element, R>;

/// MXFP6: 6-bit elements (e2m3, the default, or e3m2) with an E8M0 scale per block.
template <class Element = e2m3, rounding R = rounding::nearest>
requires(Element::exponent_bits + Element::mantissa_bits == 5) using mxfp6 = mx<Element, R>;

/// MXFP4: E2M1 elements with an E8M0 scale per block.
template <rounding R = rounding::nearest>
using mxfp4 = mx<e2m1, R>;

namespace detail {
/// The wire id of nvfp4 (both roundings).
inline constexpr std::uint8_t nvfp4_wire_id = 11;
}  // namespace detail

// What every nvfp4<R> states (the nearest and the stochastic form differ only in their seed).
#define QSDP_DETAIL_NVFP4_MEMBERS(R)                                                              \
  static constexpr int bits = 4;                                                                  \
  static constexpr bool randomized = R == rounding::stochastic;                                   \
  static constexpr std::uint8_t wire_id = detail::nvfp4_wire_id;                                  \
  static constexpr const char* name = randomized ? "nvfp4<stochastic>" : "nvfp4";                 \
  static constexpr bool fit_reads_abs_max = true; /**< fit reads bucket_stats::abs_max alone */   \
                                                                                                  \
  std::size_t bucket_size = 16; /**< values per block, >= 1 (NVFP4's block is 16) */              \
                                                                                                  \
  using meta_type = std::uint8_t; /**< the block's E4M3 scale */                                  \
  /** A block holding NaN or inf: E4M3's NaN byte (its codes are 0, its values decode to NaN). */ \
  static constexpr meta_type non_finite_meta = 0x7F;                                              \
  using tensor_meta_type = float; /**< the packet's fp32 tensor scale */                          \
  /** The tensor scale the codec fitted to the packet this policy object encodes or decodes; */   \
  /** the codec sets it on its own copy, so leave it at 1 (single-level scaling). */              \
  float tensor_meta = 1.0f;                                                                       \
  /** abs_max / 2688, at least 2^-120 (detail/codec/minifloat.hpp). */                            \
  QSDP_HOST_DEVICE float fit_tensor(float abs_max) const {                                        \
    return detail::nvfp4_tensor_scale(abs_max);                                                   \
  }                                                                                               \
  /** The block's E4M3 scale: (abs_max / 6) / tensor scale, rounded to nearest or (stochastic) */ \
  /** up. */                                                                                      \
  QSDP_HOST_DEVICE meta_type fit(const bucket_stats& s) const {                                   \
    return detail::nvfp4_block_scale<e4m3, randomized>(s.abs_max, tensor_meta);                   \
  }                                                                                               \
  /** What x is multiplied by before rounding to an element: (1 / tensor scale) / block scale. */ \
  QSDP_HOST_DEVICE float encode_factor(const meta_type& m) const {                                \
    return detail::nvfp4_encode_factor<e4m3>(tensor_meta, m);                                     \
  }                                                                                               \
  /** The E2M1 code of x * encode_factor. */                                                      \
  QSDP_HOST_DEVICE std::uint32_t encode(float x, const meta_type& m, float u) const {             \
    return detail::minifloat_encode<e2m1, randomized>(x * encode_factor(m), 0, u);                \
  }                                                                                               \
  /** What the block's elements are multiplied by: tensor scale * block scale, in float. */       \
  QSDP_HOST_DEVICE float block_factor(const meta_type& m) const {                                 \
    return detail::nvfp4_decode_factor<e4m3>(tensor_meta, m);                                     \
  }                                                                                               \
  /** element * block_factor, rounded once (never fused into a later sum). */                     \
  QSDP_HOST_DEVICE float decode(std::uint32_t code, const meta_type& m) const {                   \
    return detail::unfused_product(detail::minifloat_decode<e2m1>(code), block_factor(m));        \
  }

/// NVIDIA's NVFP4: blocks of `bucket_size` values (16 in the format) share an E4M3 scale, the whole
/// packet an fp32 tensor scale, and each value is an E2M1 element (0, 0.5, 1, 1.5, 2, 3, 4, 6 and
/// their negatives) times both:
///
///     qsdp::nvfp4<> w{};  // 4.5 bits per value on the wire, plus 16 bytes per packet
///     qsdp::nvfp4<qsdp::rounding::stochastic> g{.seed = 7};
///
/// The arithmetic is torchao's NVFP4Tensor.to_nvfp4 with a per-tensor scale, operation for
/// operation: the tensor scale is the packet's largest finite magnitude / (448 * 6) (at least
/// 2^-120, where torchao's arithmetic would overflow); a block's scale is (its abs_max / 6) /
/// tensor scale, clamped to 2^-6..448 and rounded to E4M3; the elements are x * ((1 / tensor
/// scale) / block scale) rounded to E2M1, saturating at 6; a value decodes as element * (tensor
/// scale * block scale). Round to nearest (R = rounding::nearest) rounds both to nearest even.
/// Stochastic rounding rounds the block scale up, so no value saturates (up to the float rounding
/// of the scale arithmetic, a relative 2^-22), and each value lands on one of its two neighbours
/// with E[decode(encode(x))] = x. A block holding NaN or infinity decodes to NaN and carries E4M3's
/// NaN byte; infinities do not enter the tensor scale. Metadata: one byte per block; the tensor
/// scale sits in a 16-byte record after the header (docs/reference/wire-format.md). On the device
/// a reduction kernel finds the packet's largest magnitude before the block kernels run.
/// @tparam R the rounding of the block scales and the elements
template <rounding R = rounding::nearest>
struct nvfp4 {
  QSDP_DETAIL_NVFP4_MEMBERS(R)
  /// encode(x, m, u) of a finite x, in integer steps (the kernels' path).
  /// @tparam Signed false: the code of |x|
  /// @param x the value
  /// @param m its block's E4M3 scale
  /// @return the E2M1 code
  template <bool Signed = true>
  QSDP_HOST_DEVICE std::uint32_t encode_nearest(float x, const meta_type& m) const {
    return detail::minifloat_encode_nearest<e2m1, Signed>(x, encode_factor(m));
  }
};

/// nvfp4 with stochastic rounding: adds the seed and call counter of its per-value draws.
template <>
struct nvfp4<rounding::stochastic> {
  QSDP_DETAIL_NVFP4_MEMBERS(rounding::stochastic)
  std::uint64_t seed = 0;  ///< the seed of its random numbers (Philox)
  call_counter calls{};    ///< the index of its next encode call
  /// encode(x, m, u) of a finite x, taking the 16-bit half whose draw u is (the kernels' path).
  /// @tparam Signed false: the code of |x|
  /// @param x the value
  /// @param m its block's E4M3 scale
  /// @param half its 16-bit draw, 0..65535 (u = (half + 1/2) * 2^-16)
  /// @return the E2M1 code
  template <bool Signed = true>
  QSDP_HOST_DEVICE std::uint32_t encode_drawn(float x, const meta_type& m,
                                              std::uint32_t half) const {
    return detail::minifloat_encode_drawn<e2m1, true, Signed>(x, encode_factor(m), half);
  }
};

#undef QSDP_DETAIL_NVFP4_MEMBERS

namespace detail {

/// The element format of a built-in block-scaled policy (mx, nvfp4), whose decode(code, m) is
/// minifloat_decode of the code times q.block_factor(m); void for every other policy.
template <class Q>
struct block_element {
  using type = void;
};
template <class Element, rounding R>
struct block_element<mx<Element, R>> {
  using type = Element;
};
template <rounding R>
struct block_element<nvfp4<R>> {
  using type = e2m1;
};

/// Whether a block-scaled policy's element * block_factor is exact in float (MX: a power-of-two
/// factor), so that it may fuse into a sum; NVFP4's is rounded first.
template <class Q>
inline constexpr bool exact_block_products = false;
template <class Element, rounding R>
inline constexpr bool exact_block_products<mx<Element, R>> = true;

}  // namespace detail

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
