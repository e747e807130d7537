// SPDX-License-Identifier: Apache-2.0
//
// Element types of the codec and their conversions to and from float. The half-precision
// conversions are written out bit by bit (round to nearest even, denormals kept) instead of calling
// the CUDA headers' helpers: the same code then runs on the host and the GPU, so decoded values
// agree to the bit, and the host side stays fast without F16C.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../config.hpp"

#if QSDP_HAS_CUDA_HALF
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace qsdp::detail {

/// Element type tag written into packet headers.
enum class element_type : std::uint8_t { f32 = 1, f64 = 2, f16 = 3, bf16 = 4 };

QSDP_HOST_DEVICE constexpr const char* element_type_name(element_type t) {
  switch (t) {
    case element_type::f32: return "float";
    case element_type::f64: return "double";
    case element_type::f16: return "__half";
    case element_type::bf16: return "__nv_bfloat16";
  }
  return "unknown";
}

QSDP_HOST_DEVICE inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  const std::uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return detail::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or denormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return detail::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

QSDP_HOST_DEVICE inline std::uint16_t float_to_half_bits(float f) {
  const std::uint32_t bits = detail::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u)  // NaN: keep it a (quiet) NaN
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  if (magnitude >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds to inf
  if (magnitude >= 0x38800000u) {  // normal half: rebias exponent by 112, round to nearest even
    const std::uint32_t rounded = magnitude - 0x38000000u + 0xFFFu + ((magnitude >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (rounded >> 13));
  }
  // Denormal half (or zero): |f| * 2^24 is exact, and rounding it to an integer with ties to even
  // gives the denormal's mantissa (a carry into 0x400 is the smallest normal, which is right).
  const float scaled = detail::bit_cast<float>(magnitude) * 0x1p24f;
#if QSDP_DEVICE_SPELLING
  const auto mantissa = static_cast<std::uint16_t>(rintf(scaled));
#else
  const auto mantissa = static_cast<std::uint16_t>(std::nearbyint(scaled));
#endif
  return static_cast<std::uint16_t>(sign | mantissa);
}

QSDP_HOST_DEVICE constexpr float bf16_bits_to_float(std::uint16_t b) {
  return detail::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

QSDP_HOST_DEVICE constexpr std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t bits = detail::bit_cast<std::uint32_t>(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  return static_cast<std::uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

/// Two floats as a pair of bf16 patterns (lo in the low half): float_to_bf16_bits of each, except
/// that a NaN becomes some NaN. On the device one cvt.rn.bf16x2.f32, round to nearest even like
/// the integer steps for every finite value and infinity, instead of seven integer instructions
/// per value; its NaN is the canonical one, so callers that must keep a NaN's sign and payload
/// convert again where the result holds a NaN.
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t bf16_pair_bits_rn(float lo, float hi) {
#if defined(__CUDA_ARCH__) && QSDP_HAS_CUDA_HALF
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  std::uint32_t bits;
  memcpy(&bits, &pair, sizeof bits);
  return bits;
#elif QSDP_DEVICE_SPELLING
  // The SIMT emulation: cvt.rn.bf16x2.f32 as PTX defines it, a NaN becoming the canonical 0x7FFF.
  const auto one = [](float v) -> std::uint32_t {
    return v != v ? 0x7FFFu : float_to_bf16_bits(v);
  };
  return one(lo) | one(hi) << 16;
#else
  return float_to_bf16_bits(lo) | static_cast<std::uint32_t>(float_to_bf16_bits(hi)) << 16;
#endif
}

/// Per-type facts: the wire tag, conversions, and the largest finite value (for saturation).
template <class T>
struct element_traits;

template <>
struct element_traits<float> {
  static constexpr element_type tag = element_type::f32;
  static constexpr float max_finite = 3.40282347e38f;
  QSDP_HOST_DEVICE static constexpr float to_float(float v) { return v; }
  QSDP_HOST_DEVICE static constexpr float from_float(float v) { return v; }
};

template <>
struct element_traits<double> {
  static constexpr element_type tag = element_type::f64;
  static constexpr float max_finite = 3.40282347e38f;
  // Quantizers work in float: doubles beyond float's range become inf here and so mark their bucket
  // non-finite (decoded as NaN) rather than being clamped silently.
  QSDP_HOST_DEVICE static constexpr float to_float(double v) { return static_cast<float>(v); }
  QSDP_HOST_DEVICE static constexpr double from_float(float v) { return v; }
};

#if QSDP_HAS_CUDA_HALF
/// __half and __nv_bfloat16: a 16-bit pattern behind a CUDA type (Raw its plain-struct form),
/// converted by the integer routines above, which host and device share.
template <class T, class Raw, element_type Tag>
struct sixteen_bit_traits {
  static constexpr bool bf16 = Tag == element_type::bf16;
  static constexpr element_type tag = Tag;
  static constexpr float max_finite = bf16 ? 3.38953139e38f : 65504.0f;  // 0x7F7F, 0x7BFF
  QSDP_HOST_DEVICE static float to_float(T v) {
    const std::uint16_t bits = static_cast<Raw>(v).x;
    return bf16 ? bf16_bits_to_float(bits) : half_bits_to_float(bits);
  }
  QSDP_HOST_DEVICE static T from_float(float v) {
    Raw raw;
    raw.x = bf16 ? float_to_bf16_bits(v) : float_to_half_bits(v);
    return T(raw);
  }
};

template <>
struct element_traits<__half> : sixteen_bit_traits<__half, __half_raw, element_type::f16> {};
template <>
struct element_traits<__nv_bfloat16>
    : sixteen_bit_traits<__nv_bfloat16, __nv_bfloat16_raw, element_type::bf16> {};
#endif

template <class T>
concept element = requires {
  element_traits<std::remove_cv_t<T>>::tag;
};

/// The clamp of saturating_from_float: a finite v beyond T's largest finite value becomes that
/// value; infinities and NaN pass through unchanged.
template <class T>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float saturate_to(float v) {
  constexpr float limit = element_traits<T>::max_finite;
  constexpr float float_max = 3.40282347e38f;
#if QSDP_DEVICE_SPELLING
  // The same function in four instructions: clamp, unless v is inf or NaN (|NaN| <= max is
  // false, and fmaxf would have turned NaN into -limit).
  const float clamped = fminf(fmaxf(v, -limit), limit);
  return fabsf(v) <= float_max ? clamped : v;
#else
  v = (v > limit && v <= float_max) ? limit : v;
  return (v < -limit && v >= -float_max) ? -limit : v;
#endif
}

/// Narrow a decoded float to T without letting a finite value become inf (a quantization grid may
/// reach a little past the input's largest value). Infinities and NaN pass through unchanged.
template <class T>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE T saturating_from_float(float v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return v;  // nothing to narrow
  } else {
    return element_traits<T>::from_float(saturate_to<T>(v));
  }
}

}  // namespace qsdp::detail
