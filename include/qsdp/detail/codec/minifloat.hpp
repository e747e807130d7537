// SPDX-License-Identifier: Apache-2.0
//
// The arithmetic of the OCP Microscaling (MX) formats, once for the host and the device: narrow
// floating-point elements (E4M3, E5M2, E3M2, E2M3, E2M1) rounded to nearest-even or
// stochastically, and the shared power-of-two E8M0 scale of a block. Element formats are tag types
// (qsdp::e4m3, ... in quantizers.hpp) with the members exponent_bits, mantissa_bits, bias,
// max_code (the magnitude code of the largest finite value) and nan_code / inf_code (-1 where the
// format has none).
//
// Encoding works on the integers of the input's bits: a finite float is M * 2^E with M < 2^24, so
// the scaled value, its binade and its position between two neighbours on the element grid are
// shifts and masks, exact without a wider float type, and the same on every path.
#pragma once

#include <cstdint>

#include "../../config.hpp"

namespace qsdp::detail {

/// The bias of E8M0 (scale 2^(byte - 127)) and its NaN byte; it has no zero and no infinity.
inline constexpr int e8m0_bias = 127;
inline constexpr std::uint8_t e8m0_nan = 0xFF;

/// The index of the highest set bit of x > 0.
QSDP_HOST_DEVICE inline int top_bit(std::uint32_t x) {
#if defined(__CUDA_ARCH__)
  return 31 - __clz(x);
#else
  return 31 - __builtin_clz(x);
#endif
}

/// floor(log2 |x|) of a finite nonzero float, read off its bits (subnormals included).
QSDP_HOST_DEVICE inline int floor_log2_magnitude(std::uint32_t magnitude_bits) {
  const int field = static_cast<int>(magnitude_bits >> 23);
  if (field != 0) return field - 127;
  return -149 + top_bit(magnitude_bits);  // subnormal: the top set bit of M
}

/// e clamped to E8M0's exponents, -127..127.
QSDP_HOST_DEVICE constexpr int e8m0_clamp(int e) {
  return e < -e8m0_bias ? -e8m0_bias : e > e8m0_bias ? e8m0_bias : e;
}

/// The largest finite value of element format F, 2^emax * (1 + m / 2^mbits) from its code.
template <class F>
QSDP_HOST_DEVICE constexpr int element_emax() {
  return (F::max_code >> F::mantissa_bits) - F::bias;
}

/// The shared exponent the OCP spec gives a block (section 6.3, round-to-nearest conversion):
/// floor(log2(abs_max)) - emax of the element format, read from abs_max's exponent field as
/// torchao's FLOOR mode does (a subnormal abs_max counts as 2^-127), clamped to E8M0's
/// -127..127. Values that end above the element's largest finite value saturate to it.
template <class F>
QSDP_HOST_DEVICE inline int mx_floor_exponent(float abs_max) {
  const int field = static_cast<int>(bit_cast<std::uint32_t>(abs_max) >> 23) & 0xFF;
  const int e = field - 127 - element_emax<F>();
  return e8m0_clamp(e);
}

/// The smallest shared exponent e (clamped to -127..127) with abs_max <= max finite * 2^e: no
/// value of the block saturates, so stochastic rounding stays unbiased (torchao's RCEIL rule,
/// computed exactly).
template <class F>
QSDP_HOST_DEVICE inline int mx_ceil_exponent(float abs_max) {
  const std::uint32_t bits = bit_cast<std::uint32_t>(abs_max) & 0x7FFFFFFFu;
  if (bits == 0) return -e8m0_bias;
  constexpr int mbits = F::mantissa_bits;
  // abs_max = M * 2^E and max finite = (2^mbits + m) * 2^(emax - mbits): compare the significands
  // once both sit at abs_max's binade.
  const int field = static_cast<int>(bits >> 23);
  const std::uint32_t m = field != 0 ? (bits & 0x7FFFFFu) | 0x800000u : bits;
  int e = floor_log2_magnitude(bits) - element_emax<F>();
  // abs_max / 2^e has the binade of max finite; it fits when its significand (24 bits at that
  // binade) is at most max finite's, (2^mbits + m) << (23 - mbits).
  const std::uint32_t significand = m << (23 - top_bit(m));
  const std::uint32_t max_significand = ((1u << mbits) | (F::max_code & ((1u << mbits) - 1)))
                                        << (23 - mbits);
  if (significand > max_significand) ++e;
  return e8m0_clamp(e);
}

/// The E8M0 byte of shared exponent e (-127..127).
QSDP_HOST_DEVICE constexpr std::uint8_t e8m0_byte(int e) {
  return static_cast<std::uint8_t>(e + e8m0_bias);
}

/// 2^(byte - 127) as a float (exact: byte 0 is the subnormal 2^-127), NaN for byte 0xFF.
QSDP_HOST_DEVICE inline float e8m0_value(std::uint8_t byte) {
  if (byte == e8m0_nan) return quiet_nan();
  return bit_cast<float>(byte == 0 ? 0x00400000u : std::uint32_t{byte} << 23);
}

/// The code of x / 2^e in element format F: sign bit, then exponent and mantissa fields. Rounds to
/// the nearest element (ties to an even mantissa) or, with Stochastic, up with probability equal
/// to the distance from the lower neighbour in units of their gap (u ~ U[0,1)); magnitudes past
/// the largest finite element saturate to it (the OCP spec leaves the choice to the
/// implementation; torchao saturates). NaN and infinity give F's NaN and infinity codes where it
/// has them, else the largest magnitude: the codec never passes them (it flags a block holding
/// them, and its decoders give NaN for all of that block).
template <class F, bool Stochastic>
QSDP_HOST_DEVICE inline std::uint32_t minifloat_encode(float x, int e, float u) {
  constexpr int mbits = F::mantissa_bits;
  constexpr int bits = 1 + F::exponent_bits + F::mantissa_bits;
  const std::uint32_t raw = bit_cast<std::uint32_t>(x);
  const std::uint32_t sign = (raw >> 31) << (bits - 1);
  const std::uint32_t magnitude = raw & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u)
    return sign | static_cast<std::uint32_t>(F::nan_code >= 0 ? F::nan_code : F::max_code);
  if (magnitude == 0x7F800000u)
    return sign | static_cast<std::uint32_t>(F::inf_code >= 0 ? F::inf_code : F::max_code);
  if (magnitude == 0) return sign;
  // |x| = M * 2^E.
  const int field = static_cast<int>(magnitude >> 23);
  const std::uint32_t m = field != 0 ? (magnitude & 0x7FFFFFu) | 0x800000u : magnitude;
  const int exponent = (field != 0 ? field : 1) - 150;
  // The scaled value's binade, and the element grid's gap there: 2^(binade - mbits), or the
  // subnormal gap below the smallest normal.
  int binade = floor_log2_magnitude(magnitude) - e;
  if (binade < 1 - F::bias) binade = 1 - F::bias;
  if (binade > element_emax<F>() + 1) return sign | F::max_code;  // past the largest finite
  // The scaled value in units of the gap: m * 2^(exponent - e - (binade - mbits)).
  const int shift = (binade - mbits) - (exponent - e);  // right shift of m
  std::uint32_t steps, rest = 0, half = 0;
  bool inexact = false;
  if (shift <= 0) {
    steps = m << -shift;  // < 2^(mbits + 1): a value on the grid
  } else if (shift >= 32) {
    steps = 0;
    rest = m;
    inexact = true;
  } else {
    steps = m >> shift;
    rest = m & ((std::uint32_t{1} << shift) - 1);
    half = std::uint32_t{1} << (shift - 1);
    inexact = rest != 0;
  }
  if (inexact) {
    bool up;
    if constexpr (Stochastic) {
      // rest * 2^-shift is exact in double (rest < 2^24, shift < 300), so is the comparison.
      const double two_to_minus_shift =
          bit_cast<double>(static_cast<std::uint64_t>(1023 - shift) << 52);
      up = static_cast<double>(u) < static_cast<double>(rest) * two_to_minus_shift;
    } else {
      (void)u;
      up = shift < 32 && (rest > half || (rest == half && (steps & 1u)));
    }
    steps += up ? 1u : 0u;
  }
  // Exponent field binade + bias (0 for the subnormals, whose steps count from zero); a carry of
  // steps into 2^(mbits + 1) moves to the next binade's first code by itself.
  const std::uint32_t code = (static_cast<std::uint32_t>(binade + F::bias - 1) << mbits) + steps;
  return sign | (code > std::uint32_t{F::max_code} ? std::uint32_t{F::max_code} : code);
}

/// The value of element code `code` of format F (NaN and infinity codes where F has them).
template <class F>
QSDP_HOST_DEVICE inline float minifloat_decode(std::uint32_t code) {
  constexpr int mbits = F::mantissa_bits;
  constexpr int bits = 1 + F::exponent_bits + F::mantissa_bits;
  const std::uint32_t magnitude = code & ((1u << (bits - 1)) - 1u);
  const std::uint32_t sign = ((code >> (bits - 1)) & 1u) << 31;
  if constexpr (F::inf_code >= 0) {  // E5M2: the largest exponent field holds infinity and NaN
    if (magnitude > static_cast<std::uint32_t>(F::inf_code)) return quiet_nan();
    if (magnitude == static_cast<std::uint32_t>(F::inf_code))
      return bit_cast<float>(sign | 0x7F800000u);
  } else if constexpr (F::nan_code >= 0) {  // E4M3: one NaN per sign, no infinity
    if (magnitude == static_cast<std::uint32_t>(F::nan_code)) return quiet_nan();
  }
  const std::uint32_t field = magnitude >> mbits, mantissa = magnitude & ((1u << mbits) - 1u);
  // A float holds every element exactly: normal elements as a float exponent and the mantissa at
  // the top of float's, subnormal ones as mantissa * 2^(1 - bias - mbits), a normal float.
  if (field != 0)
    return bit_cast<float>(sign | ((field - F::bias + 127) << 23) | (mantissa << (23 - mbits)));
  if (mantissa == 0) return bit_cast<float>(sign);
  const int top = top_bit(mantissa);  // the mantissa's leading one
  const std::uint32_t fraction = (mantissa ^ (1u << top)) << (23 - top);
  return bit_cast<float>(sign | ((top + 1 - F::bias - mbits + 127) << 23) | fraction);
}

}  // namespace qsdp::detail
