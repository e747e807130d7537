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

#include <cmath>
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

/// 2^-e (e in -127..127) as a float, exact: what an MX block's values are multiplied by before
/// rounding to elements.
QSDP_HOST_DEVICE inline float mx_element_scale(int e) { return e8m0_value(e8m0_byte(-e)); }

/// The code of x / 2^e in element format F: sign bit, then exponent and mantissa fields. Rounds to
/// the nearest element (ties to an even mantissa) or, with Stochastic, up with probability equal
/// to the distance from the lower neighbour in units of their gap (u, a draw of the codec's, is
/// (k + 1/2) * 2^-16); magnitudes past the largest finite element saturate to it (the OCP spec
/// leaves the choice to the implementation; torchao saturates). NaN and infinity give F's NaN and
/// infinity codes where it has them, else the largest magnitude: the codec never passes them (it
/// flags a block holding them, and its decoders give NaN for all of that block).
///
/// In float arithmetic that is exact where it decides anything, without branches: y = |x| / 2^e is
/// exact unless it is below 2^-126, where it is far below half the element grid's smallest gap
/// (2^-17 at most) and every rounding gives 0; y / gap is exact (a power of two), and so are its
/// rounding to an integer and its fractional part.
template <class F, bool Stochastic>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t minifloat_encode(float x, int e, float u) {
  constexpr int mbits = F::mantissa_bits;
  constexpr int bits = 1 + F::exponent_bits + F::mantissa_bits;
  constexpr int lowest_binade = 1 - F::bias;  // the smallest normal's; subnormals share its gap
  constexpr int highest_binade = element_emax<F>() + 1;  // past the largest finite value
  constexpr auto max_code = static_cast<std::uint32_t>(F::max_code);
  // Bounds y / gap for the conversion; a value this large (or NaN, or infinity) gives more steps
  // than any binade holds, so its code clamps to the largest finite element below.
  constexpr float steps_limit = static_cast<float>(1u << (mbits + 2));
  const float y = fabsf(x) * mx_element_scale(e);
  // floor(log2 y) from its exponent field (-127 for 0 and subnormals), kept within the element's
  // binades; the grid's gap there is 2^(binade - mbits).
  const int y_log2 = static_cast<int>(bit_cast<std::uint32_t>(y) >> 23) - 127;
  const int binade = y_log2 < lowest_binade    ? lowest_binade
                     : y_log2 > highest_binade ? highest_binade
                                               : y_log2;
  const float inverse_gap = bit_cast<float>(static_cast<std::uint32_t>(127 + mbits - binade) << 23);
  const float gaps = fminf(y * inverse_gap, steps_limit);  // NaN becomes the limit too
  std::uint32_t steps;
  if constexpr (Stochastic) {
    // floor(gaps) + (u < fraction) is ceil(gaps - u) (0 where that is negative): gaps - u is
    // exact wherever its ceiling is not 0 (gaps carries 24 bits below 2^5, u 17 bits below 1).
    steps = static_cast<std::uint32_t>(fmaxf(ceilf(gaps - u), 0.0f));
  } else {
    (void)u;
    // Round to nearest even in the addition (gaps < 2^23): no conversion instruction.
    steps = bit_cast<std::uint32_t>(gaps + 0x1p23f) - bit_cast<std::uint32_t>(0x1p23f);
  }
  // Exponent field binade + bias (0 for the subnormals, whose steps count from zero); a carry of
  // steps into 2^(mbits + 1) moves to the next binade's first code by itself.
  const std::uint32_t code = (static_cast<std::uint32_t>(binade + F::bias - 1) << mbits) + steps;
  std::uint32_t out = code < max_code ? code : max_code;
  const std::uint32_t raw = bit_cast<std::uint32_t>(x);
  if constexpr (F::nan_code >= 0)
    if ((raw & 0x7FFFFFFFu) > 0x7F800000u) out = static_cast<std::uint32_t>(F::nan_code);
  if constexpr (F::inf_code >= 0)
    if ((raw & 0x7FFFFFFFu) == 0x7F800000u) out = static_cast<std::uint32_t>(F::inf_code);
  return ((raw >> 31) << (bits - 1)) | out;
}

/// `value`, the finite reading of a code with magnitude bits `magnitude` and sign bit `sign` (at
/// bit 31), replaced by infinity or NaN where F's code says so: E5M2's largest exponent field
/// holds infinity and NaN, E4M3 has one NaN per sign and no infinity.
template <class F>
QSDP_HOST_DEVICE constexpr float with_special_codes(float value, std::uint32_t magnitude,
                                                    std::uint32_t sign) {
  if constexpr (F::inf_code >= 0) {
    if (magnitude == static_cast<std::uint32_t>(F::inf_code))
      value = bit_cast<float>(sign | 0x7F800000u);
    if (magnitude > static_cast<std::uint32_t>(F::inf_code)) value = quiet_nan();
  } else if constexpr (F::nan_code >= 0) {
    if (magnitude == static_cast<std::uint32_t>(F::nan_code)) value = quiet_nan();
  }
  return value;
}

/// The value of element code `code` of format F (NaN and infinity codes where F has them), from
/// its fields. Without branches: normal elements are the code's fields moved into a float's with
/// the exponent rebiased, subnormal ones mantissa * 2^(1 - bias - mbits) (a normal float, so no
/// subnormal arithmetic that fast math would flush); one select picks.
template <class F>
QSDP_HOST_DEVICE constexpr float minifloat_value(std::uint32_t code) {
  constexpr int mbits = F::mantissa_bits;
  constexpr int bits = 1 + F::exponent_bits + F::mantissa_bits;
  static_assert(F::bias + mbits - 1 > 0 && F::bias + mbits - 1 < 32);
  constexpr float subnormal_unit = 1.0f / static_cast<float>(1u << (F::bias + mbits - 1));
  const std::uint32_t magnitude = code & ((1u << (bits - 1)) - 1u);
  const std::uint32_t sign = ((code >> (bits - 1)) & 1u) << 31;
  const std::uint32_t mantissa = magnitude & ((1u << mbits) - 1u);
  const std::uint32_t normal =
      (magnitude << (23 - mbits)) + (static_cast<std::uint32_t>(127 - F::bias) << 23);
  const std::uint32_t subnormal =
      bit_cast<std::uint32_t>(static_cast<float>(mantissa) * subnormal_unit);
  const float value = bit_cast<float>(sign | ((magnitude >> mbits) != 0 ? normal : subnormal));
  return with_special_codes<F>(value, magnitude, sign);
}

/// Every value of element format F, indexed by code (minifloat_value's): the host decodes by one
/// load. (On the device a per-thread table would live in local memory; there the fields are
/// decoded in registers.)
template <class F>
inline constexpr auto element_values = [] {
  struct table {
    float v[1u << (1 + F::exponent_bits + F::mantissa_bits)];
  } t{};
  for (std::uint32_t c = 0; c < sizeof t.v / sizeof t.v[0]; ++c) t.v[c] = minifloat_value<F>(c);
  return t;
}();

/// The element code at bit `shift` of `word` (F's width of bits there) as a float: its magnitude
/// bits at a float's exponent and mantissa fields, with its sign, which is the element times
/// 2^(bias - 127) exactly (a subnormal element a subnormal float, whose scaling is the same); F's
/// NaN and infinity codes read as large finite values. Three integer steps: the code moved to the
/// top of the word, an arithmetic shift that puts its magnitude in place and copies its sign, and
/// a mask.
template <class F>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t packed_scaled_bits(std::uint32_t word,
                                                                    unsigned shift) {
  constexpr int bits = 1 + F::exponent_bits + F::mantissa_bits;
  constexpr std::uint32_t fields = ((1u << (bits - 1)) - 1u) << (23 - F::mantissa_bits);
  const auto top = static_cast<std::int32_t>(word << (32 - bits - shift));
  return static_cast<std::uint32_t>(top >> (8 - F::exponent_bits)) & (0x80000000u | fields);
}

/// 2^(127 - bias) of F: packed_scaled_bits times it is the element.
template <class F>
inline constexpr float scaled_bits_unit = bit_cast<float>(static_cast<std::uint32_t>(254 - F::bias)
                                                          << 23);

/// Whether any of the 8-bit codes of format F in `words` is a NaN or infinity code (E4M3's NaN
/// magnitude 0x7F, E5M2's magnitudes from 0x7C up): packed_scaled_bits reads those as finite
/// values. A code is one exactly when its magnitude holds every bit of the first such magnitude,
/// which is a zero byte of ~word & that magnitude in each byte; adding 0x7F to a byte below 0x80
/// sets its top bit exactly when it is not zero. Formats without such codes: false.
template <class F, unsigned N>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE bool packed_special_codes(const std::uint32_t (&words)[N]) {
  constexpr int special = F::inf_code >= 0 ? F::inf_code : F::nan_code;
  if constexpr (special < 0) {
    return false;
  } else {
    static_assert(1 + F::exponent_bits + F::mantissa_bits == 8, "bytes of codes");
    constexpr std::uint32_t magnitude = 0x01010101u * static_cast<std::uint32_t>(special);
    std::uint32_t nonzero = 0x80808080u;
    QSDP_UNROLL
    for (unsigned i = 0; i < N; ++i) nonzero &= (~words[i] & magnitude) + 0x7F7F7F7Fu;
    return (nonzero & 0x80808080u) != 0x80808080u;
  }
}

/// minifloat_value<F>(code) by one multiplication: packed_scaled_bits rescaled by
/// scaled_bits_unit, exactly. Then F's NaN and infinity codes. (Subnormal operands: the device
/// spelling; fast math, which flushes them, breaks the codec's bit identity anyway.)
template <class F>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float minifloat_value_rescaled(std::uint32_t code) {
  constexpr int bits = 1 + F::exponent_bits + F::mantissa_bits;
  const std::uint32_t magnitude = code & ((1u << (bits - 1)) - 1u);
  const std::uint32_t scaled = packed_scaled_bits<F>(code, 0);
  const float value = bit_cast<float>(scaled) * scaled_bits_unit<F>;
  return with_special_codes<F>(value, magnitude, scaled & 0x80000000u);
}

/// The value of element code `code` of format F: minifloat_value, by table on the host and by
/// minifloat_value_rescaled on the device.
template <class F>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float minifloat_decode(std::uint32_t code) {
#if QSDP_DEVICE_SPELLING
  return minifloat_value_rescaled<F>(code);
#else
  constexpr std::uint32_t codes = 1u << (1 + F::exponent_bits + F::mantissa_bits);
  return element_values<F>.v[code & (codes - 1)];
#endif
}

/// The code minifloat_encode<F, true> gives a finite x whose scaled magnitude is y = |x| * scale
/// (MX: scale = mx_element_scale(e); NVFP4: its encode factor), with the draw u = (half + 1/2) *
/// 2^-16 (uniform_from_half of the codec's 16-bit half), in integer steps: the kernels' spelling
/// of stochastic rounding, with no conversion instruction and no per-binade arithmetic.
///
/// Saturate clamps y to F's largest finite value first (a value past it encodes as it either way,
/// and then no rounding goes past it); without it y must be at most that value, as it is in a
/// block whose shared exponent is the stochastic MX fit's (mx_ceil_exponent). An element
/// subnormal (y below 2^lowest, the smallest normal) is moved to y / 2 + 2^(lowest - 1): one binade
/// below, whose codes count from 0 in steps of half the subnormal gap, so that that float's bits
/// count like a normal element's. The sum is rounded up: the ceiling below then sees the bits it
/// drops. From there the bits W of the float are the element code (rebiased) above bit 23 - mbits
/// and the position between the two neighbours, frac in [0, 1), below it. u < frac, the rule of
/// minifloat_encode (ceil(gaps - u) > floor(gaps)), holds exactly when ceil(frac * 2^17) >= 2 *
/// half + 2, so adding 2 * (2^16 - 1 - half) at the draw's 17th bit, and 2^spare - 1 below it (the
/// ceiling of the spare bits), carries into the code exactly then. Without Signed the code is that
/// of |x| (the caller places the signs).
template <class F, bool Saturate, bool Signed = true>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t minifloat_encode_drawn(float x, float scale,
                                                                        std::uint32_t half) {
  constexpr int mbits = F::mantissa_bits;
  constexpr int bits = 1 + F::exponent_bits + F::mantissa_bits;
  constexpr int lowest_binade = 1 - F::bias;
  constexpr int fraction_bits = 23 - mbits;       // below an element's mantissa in a float's
  constexpr int spare_bits = fraction_bits - 17;  // below the draw's 17 bits
  static_assert(spare_bits >= 0 && lowest_binade > -126);
  constexpr float largest = minifloat_value<F>(static_cast<std::uint32_t>(F::max_code));
  constexpr float half_lowest =
      bit_cast<float>(static_cast<std::uint32_t>(126 + lowest_binade) << 23);
  float y = fabsf(x) * scale;
  if constexpr (Saturate) y = fminf(y, largest);
#if QSDP_DEVICE_SPELLING
  // One fused, rounded-up operation, and a maximum: y / 2 + 2^(lowest - 1) <= y exactly when y >=
  // 2^lowest, and then the rounded sum is still at most y.
  const std::uint32_t w = bit_cast<std::uint32_t>(fmaxf(y, __fmaf_ru(y, 0.5f, half_lowest)));
#else
  // The same float from its bits: 2^(lowest - 1) plus y / 2 in units of that binade's last place,
  // 2^(lowest - 24), rounded up (y * 2^(23 - lowest) is exact, and at most 2^23).
  constexpr float to_units =
      bit_cast<float>(static_cast<std::uint32_t>(127 + 23 - lowest_binade) << 23);
  constexpr float lowest = bit_cast<float>(static_cast<std::uint32_t>(127 + lowest_binade) << 23);
  const std::uint32_t moved = bit_cast<std::uint32_t>(half_lowest) +
                              static_cast<std::uint32_t>(ceilf(fminf(y, lowest) * to_units));
  const std::uint32_t own = bit_cast<std::uint32_t>(y);
  const std::uint32_t w = own > moved ? own : moved;
#endif
  const std::uint32_t draw =
      ((0xFFFFu - (half & 0xFFFFu)) << (spare_bits + 1)) + ((1u << spare_bits) - 1u);
  const std::uint32_t magnitude =
      ((w + draw) >> fraction_bits) - (static_cast<std::uint32_t>(127 - F::bias) << mbits);
  if constexpr (!Signed) return magnitude;
  return ((bit_cast<std::uint32_t>(x) >> 31) << (bits - 1)) | magnitude;
}

/// The code minifloat_encode<F, false> gives a finite x whose scaled magnitude is y = |x| * scale
/// (MX: scale = mx_element_scale(e); NVFP4: its encode factor), in integer steps: the kernels'
/// spelling of round-to-nearest-even, saturating at F's largest finite value, with no
/// per-binade arithmetic. Two candidates, each right where it applies:
/// - a normal element's code is y's exponent and mantissa fields rounded to mbits bits, ties to
///   even, by one addition before a shift (a carry moves to the next binade by itself), then
///   rebiased; below the element's normal range it is at most the subnormal code (negative further
///   down);
/// - a subnormal element's code is y rounded to the subnormal gap, which the float addition of
///   2^(23 + lowest - mbits) does once (its last place is that gap), read off the sum's bits; at
///   and above the smallest normal it is at least that normal's code, 2^mbits.
/// So the code is max(normal, min(subnormal, 2^mbits)), then at most the largest finite code.
/// Without Signed the code is that of |x| (the caller places the signs).
template <class F, bool Signed = true>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t minifloat_encode_nearest(float x, float scale) {
  constexpr int mbits = F::mantissa_bits;
  constexpr int bits = 1 + F::exponent_bits + F::mantissa_bits;
  constexpr int lowest_binade = 1 - F::bias;
  constexpr int fraction_bits = 23 - mbits;  // below an element's mantissa in a float's
  static_assert(lowest_binade - mbits > -126);
  // Rounding bias (half a code, less the tie) with the exponent rebiased from float's to F's.
  constexpr std::int32_t rebiased_half =
      (std::int32_t{1} << (fraction_bits - 1)) - 1 - ((std::int32_t{127} - F::bias) << 23);
  constexpr float subnormal_magic =
      bit_cast<float>(static_cast<std::uint32_t>(127 + 23 + lowest_binade - mbits) << 23);
  // Unfused: y is rounded as minifloat_encode rounds it before the sum below reads it.
  const float y = unfused_product(fabsf(x), scale);
  const auto w = static_cast<std::int32_t>(bit_cast<std::uint32_t>(y));
  const std::int32_t normal = (w + rebiased_half + ((w >> fraction_bits) & 1)) >> fraction_bits;
  const std::int32_t subnormal =
      static_cast<std::int32_t>(bit_cast<std::uint32_t>(y + subnormal_magic)) -
      static_cast<std::int32_t>(bit_cast<std::uint32_t>(subnormal_magic));
  const std::int32_t capped = subnormal < (1 << mbits) ? subnormal : (1 << mbits);
  const std::int32_t code = normal > capped ? normal : capped;
  const auto magnitude = static_cast<std::uint32_t>(code < F::max_code ? code : F::max_code);
  if constexpr (!Signed) return magnitude;
  return ((bit_cast<std::uint32_t>(x) >> 31) << (bits - 1)) | magnitude;
}

// NVFP4 (NVIDIA's 4-bit format, as torchao's NVFP4Tensor computes it): E2M1 elements, an E4M3 scale
// per block of 16 and an fp32 scale per tensor. A value is element * (tensor scale * block scale).

/// 448 * 6, the largest E4M3 scale times the largest E2M1 element.
inline constexpr float nvfp4_range = 2688.0f;

/// The smallest tensor scale: 2^-120 keeps 1 / scale / (smallest block scale) finite and every
/// tensor scale * block scale a normal float.
inline constexpr float nvfp4_min_tensor_scale = 0x1p-120f;

/// The tensor scale of a packet whose largest finite magnitude is abs_max: abs_max / 2688
/// (torchao's per_tensor_amax_to_scale), so the block holding abs_max gets block scale 448, and no
/// less than nvfp4_min_tensor_scale. At abs_max = FLT_MAX, 6 * (448 * scale) is still finite.
QSDP_HOST_DEVICE inline float nvfp4_tensor_scale(float abs_max) {
  return fmaxf(abs_max / nvfp4_range, nvfp4_min_tensor_scale);
}

/// The E4M3 block scale (its byte) of a block whose largest magnitude is abs_max: (abs_max / 6) /
/// tensor_scale in float, clamped to E4M3's normal range 2^-6..448 (torchao clamps to E4M3's
/// smallest normal), rounded to nearest even or, with Up, up, so that no value of the block lands
/// past 6 and stochastic rounding stays unbiased.
template <class E4m3, bool Up>
QSDP_HOST_DEVICE inline std::uint8_t nvfp4_block_scale(float abs_max, float tensor_scale) {
  const float wanted = fminf(fmaxf(abs_max / 6.0f / tensor_scale, 0x1p-6f), 448.0f);
  // Rounding up is stochastic rounding with a draw of 0: ceil(wanted / gap).
  return static_cast<std::uint8_t>(minifloat_encode<E4m3, Up>(wanted, 0, 0.0f));
}

/// What the elements of a block are multiplied by before rounding: (1 / tensor_scale) /
/// block_scale, the order torchao multiplies in.
template <class E4m3>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float nvfp4_encode_factor(float tensor_scale,
                                                             std::uint8_t block_scale) {
  return 1.0f / tensor_scale / minifloat_decode<E4m3>(block_scale);
}

/// What the elements of a block decode with: tensor_scale * block_scale, as torchao's dequantize
/// (which multiplies each element by it once, unfused: unfused_product).
template <class E4m3>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float nvfp4_decode_factor(float tensor_scale,
                                                             std::uint8_t block_scale) {
  return tensor_scale * minifloat_decode<E4m3>(block_scale);
}

}  // namespace qsdp::detail
