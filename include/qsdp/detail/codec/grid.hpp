// SPDX-License-Identifier: Apache-2.0
//
// The affine grids of the built-in policies: the one statement of their arithmetic. A built-in
// policy describes, for one bucket's metadata, where its codes sit (code_grid) and what each code
// stands for (value_grid); its scalar encode and decode evaluate these grids with grid_code and
// grid_value, the CUDA kernels run those scalar functions, and the host's AVX2 loops
// (detail/host/avx2.hpp) evaluate the very same grids with the same IEEE operations in the same
// order, lane by lane. A change of a policy's math is a change of its grids, and reaches every path
// at once.
//
// The arithmetic is in double with explicit fma: exact at the edges of float's range (max - min of
// two floats near FLT_MAX, ranges of denormals), and bit-identical wherever it runs, since every
// operation is IEEE-rounded the same way on the host and on the GPU (nvcc and g++ would contract a
// * b + c differently; an explicit fma leaves them nothing to choose).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "../../config.hpp"

namespace qsdp::detail {

QSDP_HOST_DEVICE QSDP_FORCE_INLINE double fma_d(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return ::fma(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// floor() of a value already clamped to [0, top]: truncation is the same there, and unlike floor
/// it vectorizes on the host without -fno-trapping-math.
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t floor_nonnegative(double clamped) {
  return static_cast<std::uint32_t>(static_cast<std::int32_t>(clamped));
}

/// Clamps to [lo, hi]; a NaN becomes lo (only reachable when a policy is called on non-finite input
/// by hand: the codec never does, it marks such buckets instead). The AVX2 loops spell this
/// max(v, lo) then min(v, hi), which treat NaN the same way.
QSDP_HOST_DEVICE QSDP_FORCE_INLINE double clamp_d(double v, double lo, double hi) {
  v = v > lo ? v : lo;
  return v < hi ? v : hi;
}

/// x / d rounded once, for a divisor the compiler knows (a policy's count of steps) and an x that
/// is a float or the difference of two (0, inf, NaN, or |x| in [2^-149, 2^129]): the one statement
/// of the division behind every value grid's step. The device spelling avoids the division (a
/// reciprocal seed and Newton steps, about 17 instructions, paid per packet and span by the
/// decoders): with r = 1/d folded at compile time (correctly rounded), q = x * r lies within an ulp
/// of x / d, the remainder x - q * d is exact in an fma, and q + remainder * r rounded is the
/// correctly rounded quotient (Markstein's theorem) wherever nothing underflows or overflows, which
/// holds for |x| in [2^-960, 2^960]. For 0, inf and NaN, and for d a power of two, x * r is x / d
/// itself.
QSDP_HOST_DEVICE QSDP_FORCE_INLINE double quotient(double x, double d) {
#if QSDP_DEVICE_SPELLING
  const double r = 1.0 / d;
  const double q = x * r;
  if (detail::bit_cast<std::uint64_t>(d) << 12 == 0) return q;  // a power of two: q is exact
  const double refined = fma_d(fma_d(-q, d, x), r, q);
  const double magnitude = x < 0.0 ? -x : x;
  return magnitude >= 0x1p-960 && magnitude <= 0x1p960 ? refined : q;
#else
  return x / d;
#endif
}

inline constexpr double float_max = 3.40282346638528859811704183484516925440e+38;

/// Where a bucket's codes sit:
///   code = trunc(clamp(fma(x - origin, inverse_step, offset), 0, top))
/// `offset` is the rounding: 1/2 rounds to nearest; a stochastic policy (DrawnOffset) takes the
/// value's U[0,1) draw instead, which rounds up with probability equal to the distance from the
/// lower grid point.
struct code_grid {
  double origin;
  double inverse_step;
  double offset;
  double top;
};

/// What a code stands for:
///   c = (code + shift) + fraction        (two additions: shift is an integer, so the first is
///   exact) v = product ? c * step : fma(c, step, base) v = clamp(v, lo, hi) when clamp
/// then rounded to float. `product` is not fma(c, step, 0): for c * step rounding to -0 that would
/// give +0.
struct value_grid {
  bool product;
  double shift;
  double fraction;
  double step;
  double base;
  bool clamp;
  double lo;
  double hi;
  /// Whether `fraction` is added. code + shift is never -0 (an integer plus an integer-valued
  /// shift rounds a zero sum to +0), so adding a zero fraction changes nothing; a grid whose
  /// fraction is always zero says so, and its decoders skip a double addition per value.
  bool fractional = true;
};

/// A code on the grid with the rounding offset given (g.offset, or the value's draw in double).
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t grid_code_at(const code_grid& g, float x,
                                                              double offset) {
  const double t = fma_d(static_cast<double>(x) - g.origin, g.inverse_step, offset);
#if QSDP_DEVICE_SPELLING
  // The device clamps after truncating, in integers: the same code for every t. The unsigned
  // conversion truncates toward zero and saturates, so t in [0, top] gives trunc(t) as before, t <
  // 0 gives 0, and t > top (or +inf) at least trunc(top), which the clamp to trunc(top) maps where
  // the double clamp does. (t is never NaN: the kernels encode finite buckets only, and a fitted
  // grid's inverse step is finite.) One integer minimum instead of two double compares and four
  // selects per value, or the two integer clamps of a signed conversion.
  const unsigned truncated = __double2uint_rz(t);
  const unsigned top = __double2uint_rz(g.top);
  return truncated < top ? truncated : top;
#else
  return floor_nonnegative(clamp_d(t, 0.0, g.top));
#endif
}

/// Whether grid_code's clamp to [0, top] changes no code of any value in [lo, hi] rounded with any
/// offset in [offset_lo, offset_hi]: then a loop may leave the clamp out and truncate t itself, the
/// same code (host loops only; detail/host/avx512.hpp). The bound is exact, not an estimate: with
/// inverse_step >= 0 and finite, t = fma(x - origin, inverse_step, offset) is a non-decreasing
/// function of x and of the offset (the float-to-double conversion is exact, and each IEEE
/// operation, rounding included, is monotone in its operands), so every t lies in
/// [t(lo, offset_lo), t(hi, offset_hi)]. If
/// that interval lies in [0, floor(top) + 1), max(t, 0) is t, and min(t, top) truncates to floor(t)
/// whether it is t (t <= top) or top (top < t < floor(top) + 1). Finite values and a grid fitted
/// to their bucket meet it; anything else (NaN, inf, a grid that clips) keeps the clamp.
inline bool grid_clamp_is_idle(const code_grid& g, float lo, float hi, double offset_lo,
                               double offset_hi) {
  if (!(g.inverse_step >= 0.0 && g.inverse_step <= std::numeric_limits<double>::max()))
    return false;
  const double t_lo = fma_d(static_cast<double>(lo) - g.origin, g.inverse_step, offset_lo);
  const double t_hi = fma_d(static_cast<double>(hi) - g.origin, g.inverse_step, offset_hi);
  return t_lo >= 0.0 && t_hi < std::floor(g.top) + 1.0;
}

/// A code on the grid; `u` is the value's draw, read only when DrawnOffset.
template <bool DrawnOffset>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t grid_code(const code_grid& g, float x, float u) {
  return grid_code_at(g, x, DrawnOffset ? static_cast<double>(u) : g.offset);
}

/// The value of a code, in double (the AVX2 loops round the same double to float).
QSDP_HOST_DEVICE QSDP_FORCE_INLINE double grid_value(const value_grid& g, std::uint32_t code) {
  const double whole = static_cast<double>(code) + g.shift;
  const double c = g.fractional ? whole + g.fraction : whole;
  const double v = g.product ? c * g.step : fma_d(c, g.step, g.base);
  return g.clamp ? clamp_d(v, g.lo, g.hi) : v;
}

/// The decoded float: grid_value rounded to float. On the device a clamp to float's finite range
/// (random_shift's saturation) is done after the rounding, as two float min/max instead of a NaN-
/// aware clamp in double: the same float for every double v (|v| <= FLT_MAX rounds inside the
/// range; beyond it, or inf, rounds to at most inf and is clamped to +-FLT_MAX; NaN becomes
/// -FLT_MAX either way, since fmaxf returns its other operand).
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float grid_decode(const value_grid& g, std::uint32_t code) {
#if QSDP_DEVICE_SPELLING
  if (g.clamp && g.lo == -float_max && g.hi == float_max) {
    value_grid unclamped = g;
    unclamped.clamp = false;
    const auto f = static_cast<float>(grid_value(unclamped, code));
    return fminf(fmaxf(f, -3.40282347e38f), 3.40282347e38f);
  }
#endif
  return static_cast<float>(grid_value(g, code));
}

/// The device decoders' shortcut for fractional grids of codes of at most 8 bits (random_shift's):
/// grid_decode's value in one conversion and two fmas instead of a conversion, two additions, an
/// fma and a saturation. It applies when the fraction is k * 2^-24 with 0 <= k < 2^24 (every
/// fraction an encoder draws: uniform_from_bits), the shift is an integer of at most 2^8, and no
/// value of the grid can reach float's finite limit. Then, with the packed code u = code * 2^24 + k
/// (32 bits), c = fma(u, 2^-24, shift) is (code + shift) + fraction exactly: both are the exact sum
/// (it needs at most 9 + 24 bits), and an exact zero is +0 either way. And |v| <= |base| + (|shift|
/// + 2^8) |step| <= 2^127 < FLT_MAX, so the saturation to +-FLT_MAX is idle. Anything else (a
/// damaged or hostile packet's fraction, data near FLT_MAX) keeps grid_decode. Returns whether it
/// applies and, if so, k in `units`.
QSDP_HOST_DEVICE QSDP_FORCE_INLINE bool packed_fraction_applies(const value_grid& g,
                                                                std::uint32_t& units) {
  if (!(g.fraction >= 0.0 && g.fraction < 1.0)) return false;
  units = static_cast<std::uint32_t>(g.fraction * 0x1p24);
  const double magnitude_shift = g.shift < 0.0 ? -g.shift : g.shift;
  const double magnitude_step = g.step < 0.0 ? -g.step : g.step;
  const double magnitude_base = g.product ? 0.0 : (g.base < 0.0 ? -g.base : g.base);
  const bool saturation_idle = !g.clamp || (g.lo == -float_max && g.hi == float_max);
  return static_cast<double>(units) * 0x1p-24 == g.fraction && magnitude_shift <= 0x1p8 &&
         static_cast<double>(static_cast<std::int32_t>(g.shift)) == g.shift && saturation_idle &&
         magnitude_base + (magnitude_shift + 0x1p8) * magnitude_step <= 0x1p127;
}

/// grid_decode's float of a packed code (packed_fraction_applies: code * 2^24 + units).
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float packed_fraction_decode(const value_grid& g,
                                                                std::uint32_t packed_code) {
  const double c = fma_d(static_cast<double>(packed_code), 0x1p-24, g.shift);
  return static_cast<float>(g.product ? c * g.step : fma_d(c, g.step, g.base));
}

/// The grid of `intervals` steps over [min, max], shifted by `offset` (asymmetric policies).
/// A bucket of equal values has no range: inverse_step 0 puts every value on code trunc(offset).
QSDP_HOST_DEVICE QSDP_FORCE_INLINE code_grid range_code_grid(float min, float max, double intervals,
                                                             double offset, double top) {
  const double range = static_cast<double>(max) - static_cast<double>(min);
  return {static_cast<double>(min), range > 0.0 ? intervals / range : 0.0, offset, top};
}

/// min + (code + shift + fraction) * step, step = (max - min) / intervals, optionally saturated to
/// float's finite range. In double, max - min stays finite even beyond FLT_MAX. `fractional`: false
/// where the fraction is always 0 (value_grid::fractional).
QSDP_HOST_DEVICE QSDP_FORCE_INLINE value_grid range_value_grid(float min, float max,
                                                               double intervals, double shift,
                                                               bool fractional, double fraction,
                                                               bool saturate) {
  const double step = quotient(static_cast<double>(max) - static_cast<double>(min), intervals);
  return {false,    shift,      fraction,  step,      static_cast<double>(min),
          saturate, -float_max, float_max, fractional};
}

}  // namespace qsdp::detail
