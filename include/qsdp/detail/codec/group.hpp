// SPDX-License-Identifier: Apache-2.0
//
// The codec's steps at the granularity the CUDA kernels work in: a bucket's statistics as a
// mergeable value (so threads reduce them in any order and get the same result), a bucket's
// metadata, and one *group* of eight consecutive values, which is exactly one Philox block of
// per-value draws and exactly `bits` bytes of packed codes. Everything here is QSDP_HOST_DEVICE and
// compiles with the host compiler alone, so tests/test_group_codec.cpp rebuilds packets from these
// steps on the host and checks them byte for byte against the host codec: the device kernels only
// decide which thread runs which step.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../config.hpp"
#include "../../policy.hpp"
#include "float_types.hpp"
#include "format.hpp"
#include "grid.hpp"
#include "philox.hpp"
#include "statistics.hpp"

namespace qsdp::detail {

/// Values per group: one Philox block of 16-bit draws, `bits` bytes of packed codes.
inline constexpr unsigned group_values = 8;

/// The 16-bit half of value k (0..7) of a group whose Philox block is `block`.
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t group_half(const philox_block& block, unsigned k) {
  const std::uint32_t word = block.v[k >> 1];
  return (k & 1 ? word >> 16 : word) & 0xFFFFu;
}

/// The 16-bit draw of value k (0..7) of a group whose Philox block is `block`.
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float group_draw(const philox_block& block, unsigned k) {
  const std::uint32_t half = group_half(block, k);
#if QSDP_DEVICE_SPELLING
  // uniform_from_half's (half + 1/2) * 2^-16, from bits: 1 + (half + 1/2) * 2^-16 has exactly
  // those 17 fraction bits, and subtracting 1 is exact. Two integer operations and an addition
  // instead of an int-to-float conversion, an addition and a multiplication.
  return __uint_as_float(0x3F800040u | (half << 7)) - 1.0f;
#else
  return uniform_from_half(half);
#endif
}

/// Places code k of a group in its packed word (LSB-first; codes above 2^B are cut to 8 bits like
/// the host's staging bytes, so even a policy that breaks its contract packs identically on both
/// sides).
template <int B>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint64_t place_code(std::uint32_t code, unsigned k) {
  return static_cast<std::uint64_t>(static_cast<std::uint8_t>(code)) << (k * B);
}

template <int B>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t code_at(std::uint64_t word, unsigned k) {
  return static_cast<std::uint32_t>((word >> (k * B)) & ((1u << B) - 1u));
}

/// group_draw in double, the offset grid_code adds: the same value.
QSDP_HOST_DEVICE QSDP_FORCE_INLINE double group_draw_offset(const philox_block& block, unsigned k) {
#if QSDP_DEVICE_SPELLING
  // The half converted to double (one conversion that reads either 16-bit half of the word in
  // place), then half * 2^-16 + 2^-17, exact: a conversion and a double fma instead of a float
  // computation and a conversion.
  const std::uint32_t word = block.v[k >> 1];
  const double whole = static_cast<double>(static_cast<std::uint16_t>(k & 1 ? word >> 16 : word));
  return fma_d(whole, 0x1p-16, 0x1p-17);
#else
  return static_cast<double>(group_draw(block, k));
#endif
}

/// Whether Q is a built-in policy, whose decode is grid_decode on its value_grid_for: the kernels
/// may then evaluate the grid another way that gives the same floats (packed_fraction_decode).
template <class Q>
inline constexpr bool decodes_on_grid = builtin_grid_id<Q>() &&
                                        requires(const Q& q, const typename Q::meta_type& m) {
  { q.value_grid_for(m) } -> std::same_as<value_grid>;
};

/// Whether Q is a built-in policy, whose encode is grid_code on its code_grid_for (quantizers.hpp):
/// the kernels then evaluate the grid directly, with the draw built in double.
template <class Q>
inline constexpr bool encodes_on_grid = builtin_grid_id<Q>() &&
                                        requires(const Q& q, const typename Q::meta_type& m) {
  { q.code_grid_for(m) } -> std::same_as<code_grid>;
};

/// Whether Q is a built-in policy whose encode_drawn takes a value's 16-bit half itself (the
/// stochastic mx and nvfp4: the same codes as encode with the half's draw, in integer steps).
template <class Q>
inline constexpr bool encodes_drawn = randomized_elements<Q>() && wire_id<Q>() != 0 &&
                                      requires(const Q& q, const typename Q::meta_type& m) {
  { q.encode_drawn(0.0f, m, 0u) } -> std::same_as<std::uint32_t>;
};

/// Whether Q is a built-in policy whose encode_nearest gives its round-to-nearest codes in integer
/// steps (mx and nvfp4).
template <class Q>
inline constexpr bool encodes_nearest = !randomized_elements<Q>() && wire_id<Q>() != 0 &&
                                        requires(const Q& q, const typename Q::meta_type& m) {
  { q.encode_nearest(0.0f, m) } -> std::same_as<std::uint32_t>;
};

/// Whether Q's element codes come from encode_drawn or encode_nearest (in integer steps).
template <class Q>
inline constexpr bool encodes_in_steps = encodes_drawn<Q> || encodes_nearest<Q>;

/// q.encode of x, value k of a group whose Philox block is `block` (read by randomized policies
/// only); x is finite, in a bucket whose metadata m is fit's. Without Signed, encodes_in_steps
/// policies give the code of |x|.
template <class Q, bool Signed = true>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint32_t encode_value(const Q& q, float x,
                                                              const typename Q::meta_type& m,
                                                              const philox_block& block,
                                                              unsigned k) {
  if constexpr (encodes_drawn<Q>)
    return q.template encode_drawn<Signed>(x, m, group_half(block, k));
  else if constexpr (encodes_nearest<Q>)
    return q.template encode_nearest<Signed>(x, m);
  else
    return q.encode(x, m, randomized_elements<Q>() ? group_draw(block, k) : 0.0f);
}

/// The sign bits of a group's eight values where packed codes of B bits (4 or 8) hold them, bit B -
/// 1 of each code: what encode_group_drawn adds to the codes of the values' magnitudes. On the
/// device, byte permutes gather the floats' top bytes (a PRMT selector nibble of 8 and up
/// replicates the selected byte's sign bit): one instruction per value, against a shift and a
/// merge.
template <int B, class W>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE W group_signs(const float* x) {
  static_assert(B == 4 || B == 8);
#if QSDP_DEVICE_SPELLING
  const auto top = [&](unsigned i, unsigned j, unsigned selector) {
    return __byte_perm(bit_cast<std::uint32_t>(x[i]), bit_cast<std::uint32_t>(x[j]), selector);
  };
  if constexpr (B == 4) {  // values 2k and 2k + 1 in byte k: signs at its bits 3 and 7
    const std::uint32_t even = __byte_perm(top(0, 2, 0xFB), top(4, 6, 0xFB), 0x5410);
    const std::uint32_t odd = __byte_perm(top(1, 3, 0xFB), top(5, 7, 0xFB), 0x5410);
    return (even & 0x08080808u) | (odd & 0x80808080u);
  } else {  // value k in byte k: its sign at bit 7
    const std::uint32_t low = __byte_perm(top(0, 1, 0x73), top(2, 3, 0x73), 0x5410);
    const std::uint32_t high = __byte_perm(top(4, 5, 0x73), top(6, 7, 0x73), 0x5410);
    return (static_cast<W>(high) << 32 | low) & 0x8080808080808080u;
  }
#else
  W signs = 0;
  for (unsigned k = 0; k < group_values; ++k)
    signs |= static_cast<W>(bit_cast<std::uint32_t>(x[k]) >> 31) << (k * B + B - 1);
  return signs;
#endif
}

/// encode_group's codes with the group's Philox block already drawn (read only by randomized
/// policies). Codes
/// of widths up to 4 are placed in 32 bits (a group's 8B bits fit, and what a contract-breaking
/// code would push beyond them is not stored either way).
template <class Q>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint64_t encode_group_drawn(const Q& q, const float* x,
                                                                    unsigned n,
                                                                    const typename Q::meta_type& m,
                                                                    const philox_block& block) {
  using word_type = std::conditional_t<(Q::bits <= 4), std::uint32_t, std::uint64_t>;
  word_type word = 0;
  if constexpr (encodes_in_steps<Q> && (Q::bits == 4 || Q::bits == 8)) {
    // The codes of the magnitudes (at most bits - 1 bits each: added), then the signs at once.
    for (unsigned k = 0; k < group_values; ++k)
      if (k < n)
        word += static_cast<word_type>(encode_value<Q, false>(q, x[k], m, block, k))
                << (k * Q::bits);
    const word_type signs = group_signs<Q::bits, word_type>(x);
    word |= n < group_values ? signs & ((word_type{1} << (n * Q::bits)) - 1u) : signs;
  } else {
    for (unsigned k = 0; k < group_values; ++k) {
      if (k >= n) continue;
      std::uint32_t code;
      if constexpr (encodes_on_grid<Q>) {
        const code_grid g = q.code_grid_for(m);
        code = grid_code_at(g, x[k],
                            randomized_elements<Q>() ? group_draw_offset(block, k) : g.offset);
        // At most trunc(g.top) <= 2^bits - 1: the code fills its own field only, so adding it is
        // or-ing it, and a shift and an add fuse into one integer instruction on the device.
        word += static_cast<word_type>(code) << (k * Q::bits);
      } else if constexpr (encodes_in_steps<Q>) {
        // A code of at most `bits` bits (sign included): added, like the grid codes above.
        word += static_cast<word_type>(encode_value(q, x[k], m, block, k)) << (k * Q::bits);
      } else {
        code = encode_value(q, x[k], m, block, k);
        word |= static_cast<word_type>(static_cast<std::uint8_t>(code)) << (k * Q::bits);
      }
    }
  }
  return word;
}

/// Codes of the first n (<= 8) values of group `group`, all in one finite bucket with metadata m.
/// Values n..7 get code 0, as the host pads its last group.
template <class Q>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint64_t encode_group(const Q& q, const float* x,
                                                              unsigned n,
                                                              const typename Q::meta_type& m,
                                                              const rng_key& key,
                                                              std::uint64_t group) {
  philox_block block{};
  if constexpr (randomized_elements<Q>()) block = key.block(draw_domain::element, group);
  return encode_group_drawn(q, x, n, m, block);
}

/// Bytes of group g's packed codes that belong to the stream (the last group may be cut).
QSDP_HOST_DEVICE QSDP_FORCE_INLINE unsigned group_bytes(int bits, std::uint64_t group,
                                                        std::size_t code_bytes) {
  const std::uint64_t begin = group * static_cast<std::uint64_t>(bits);
  const std::uint64_t left = code_bytes > begin ? code_bytes - begin : 0;
  return static_cast<unsigned>(left < static_cast<std::uint64_t>(bits) ? left : bits);
}

/// Whether bucket b is flagged as holding NaN or inf.
QSDP_HOST_DEVICE QSDP_FORCE_INLINE bool bucket_flagged(const std::uint8_t* flags, std::uint64_t b) {
  return (flags[b >> 3] >> (b & 7)) & 1u;
}

// ---- Per-thread work items of the CUDA kernels' general paths
// ---------------------------------------------------------------------------------------
// Each is one thread's whole job (no cooperation), so the host tests run them for every index and
// compare the result with the host codec. A tensor-scaled policy comes bound to its packet
// (bind_to_packet).

/// Loads value i of src at any byte alignment (the general paths accept pointers at any offset).
template <class T>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float load_value(const T* src, std::uint64_t i) {
  T v;
  memcpy(static_cast<void*>(&v), reinterpret_cast<const unsigned char*>(src) + i * sizeof(T),
         sizeof(T));
  return element_traits<T>::to_float(v);
}

template <class M>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE M load_meta(const std::byte* packet, const packet_layout& l,
                                               std::uint64_t bucket) {
  M m;
  memcpy(static_cast<void*>(&m), packet + l.meta_offset + bucket * sizeof(M), sizeof(M));
  return m;
}

/// Writes bucket b's metadata (non_finite_meta for a bucket with NaN or inf) and says whether to
/// flag it; setting the flag bit is the caller's (an atomic or on the device).
template <class Q>
QSDP_HOST_DEVICE QSDP_FORCE_INLINE bool store_bucket_meta(const Q& q, std::byte* packet,
                                                          const packet_layout& l,
                                                          std::uint64_t bucket,
                                                          const partial_stats& p, std::size_t n,
                                                          const rng_key& key) {
  using meta_type = typename Q::meta_type;
  meta_type m = non_finite_meta<Q>();
  if (p.finite()) m = fit_bucket(q, p, n, key, bucket);
  memcpy(packet + l.meta_offset + bucket * sizeof(meta_type), static_cast<const void*>(&m),
         sizeof m);
  return !p.finite();
}

/// Stores the n (<= 8) bytes of a packed group at any alignment. (Eight tests rather than a loop of
/// n steps: the kernels unroll it, so a cut group adds no loop to theirs.)
QSDP_HOST_DEVICE QSDP_FORCE_INLINE void store_group_bytes(std::byte* at, std::uint64_t word,
                                                          unsigned n) {
  for (unsigned k = 0; k < 8; ++k)
    if (k < n) at[k] = static_cast<std::byte>(word >> (8 * k));
}

QSDP_HOST_DEVICE QSDP_FORCE_INLINE std::uint64_t load_group_bytes(const std::byte* at, unsigned n) {
  std::uint64_t word = 0;
  for (unsigned k = 0; k < 8; ++k)
    if (k < n) word |= static_cast<std::uint64_t>(at[k]) << (8 * k);
  return word;
}

/// Group g's codes for any bucket size: each value takes its own bucket's metadata from the packet,
/// which store_bucket_meta has already filled; values of flagged buckets get code 0.
template <class Q, class T>
QSDP_HOST_DEVICE void encode_group_general(const Q& q, const T* src, std::size_t count,
                                           std::byte* packet, const packet_layout& l,
                                           const rng_key& key, std::uint64_t g) {
  using meta_type = typename Q::meta_type;
  const auto* flags = reinterpret_cast<const std::uint8_t*>(packet + l.flags_offset);
  const std::uint64_t first = g * group_values;
  std::uint64_t word = 0;
  std::uint64_t cached = ~std::uint64_t{0};
  meta_type m{};
  bool flagged = false;
  philox_block block{};  // the group's draws: value first + k takes half k (rng_key)
  if constexpr (randomized_elements<Q>()) block = key.block(draw_domain::element, g);
  for (unsigned k = 0; k < group_values; ++k) {  // fixed bounds: unrolled, no loop in the kernel
    const std::uint64_t i = first + k;
    if (i >= count) break;
    const std::uint64_t b = i / q.bucket_size;
    if (b != cached) {
      cached = b;
      flagged = bucket_flagged(flags, b);
      m = load_meta<meta_type>(packet, l, b);
    }
    if (!flagged) {
      word |= place_code<Q::bits>(encode_value(q, load_value(src, i), m, block, k), k);
    }
  }
  store_group_bytes(packet + l.codes_offset + g * Q::bits, word,
                    group_bytes(Q::bits, g, l.code_bytes));
}

/// Decodes group g of a validated packet into out[0, n) (n = values of the group inside count,
/// which it returns); values of flagged buckets are NaN.
template <class Q>
QSDP_HOST_DEVICE unsigned decode_group(const Q& q, const std::byte* packet, const packet_layout& l,
                                       std::size_t count, std::uint64_t g, float* out) {
  using meta_type = typename Q::meta_type;
  const auto* flags = reinterpret_cast<const std::uint8_t*>(packet + l.flags_offset);
  const std::uint64_t first = g * group_values;
  const unsigned n =
      count - first < group_values ? static_cast<unsigned>(count - first) : group_values;
  const std::uint64_t word = load_group_bytes(packet + l.codes_offset + g * Q::bits,
                                              group_bytes(Q::bits, g, l.code_bytes));
  std::uint64_t cached = ~std::uint64_t{0};
  meta_type m{};
  bool flagged = false;
  for (unsigned k = 0; k < group_values; ++k) {  // fixed bounds: `out` stays in registers
    if (k >= n) break;
    const std::uint64_t b = (first + k) / q.bucket_size;
    if (b != cached) {
      cached = b;
      flagged = bucket_flagged(flags, b);
      m = load_meta<meta_type>(packet, l, b);
    }
    out[k] = flagged ? quiet_nan() : q.decode(code_at<Q::bits>(word, k), m);
  }
  return n;
}

}  // namespace qsdp::detail
