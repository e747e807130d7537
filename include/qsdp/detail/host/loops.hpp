// SPDX-License-Identifier: Apache-2.0
//
// The host codec's loops. Each bucket is read twice while it sits in L1 (statistics, then codes),
// the per-element policy call is inlined and vectorized, and codes are packed in groups of eight.
// On x86-64 the loops are compiled twice, for the baseline ISA and for AVX2+FMA, and picked at run
// time: users get the fast path without compiling their code with -mavx2, and both paths compute
// bit-identical results (every multiply-add in a policy is an explicit fma, so nothing depends on
// contraction).
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "../../quantizers.hpp"
#include "../codec/bit_packing.hpp"
#include "../codec/float_types.hpp"
#include "../codec/format.hpp"
#include "../codec/group.hpp"
#include "../codec/hadamard.hpp"
#include "../codec/philox.hpp"
#include "../codec/statistics.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(QSDP_NO_DISPATCH)
#define QSDP_HOST_X86_DISPATCH 1
#else
#define QSDP_HOST_X86_DISPATCH 0
#endif

#if QSDP_HOST_X86_DISPATCH
#include "avx2.hpp"
#include "avx2_minifloat.hpp"
#include "avx512.hpp"
#endif

namespace qsdp::detail {

inline constexpr std::size_t host_segment = 2048;  // values handled per inner loop (stays in L1)

template <class T>
QSDP_FORCE_INLINE T load_element(const T* p, std::size_t i) {
  T v;  // memcpy: element pointers may sit at any byte offset
  std::memcpy(&v, reinterpret_cast<const unsigned char*>(p) + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
QSDP_FORCE_INLINE void store_element(T* p, std::size_t i, T v) {
  std::memcpy(reinterpret_cast<unsigned char*>(p) + i * sizeof(T), &v, sizeof(T));
}

/// A bucket's statistics in one vectorizable pass (the same partial_stats the kernels reduce).
template <class T>
QSDP_FORCE_INLINE partial_stats scan_bucket(const T* src, std::size_t n) {
  partial_stats p;
  for (std::size_t j = 0; j < n; ++j) p.add(element_traits<T>::to_float(load_element(src, j)));
  return p;
}

/// Fills words[0, 4 * blocks) with Philox blocks first_block ... first_block + blocks - 1.
QSDP_FORCE_INLINE void philox_fill(const rng_key& key, draw_domain domain,
                                   std::uint64_t first_block, std::size_t blocks,
                                   std::uint32_t* words) {
  for (std::size_t j = 0; j < blocks; ++j) {
    const philox_block b = key.block(domain, first_block + j);
    words[4 * j + 0] = b.v[0];
    words[4 * j + 1] = b.v[1];
    words[4 * j + 2] = b.v[2];
    words[4 * j + 3] = b.v[3];
  }
}

/// Which hand-vectorized loops an encode runs: none, AVX2+FMA, or AVX-512 for the per-value draws
/// and codes of a stochastic encode (AVX2 for the rest).
enum class host_isa { baseline, avx2, avx512 };

// ---- what the CPU runs --------------------------------------------------------------------------

#if QSDP_HOST_X86_DISPATCH
inline bool host_cpu_has_avx2_fma() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
}
/// (libgcc's and compiler-rt's checks include the operating system's support for the registers.)
inline bool host_cpu_has_avx512() {
  static const bool supported = host_cpu_has_avx2_fma() && __builtin_cpu_supports("avx512f") &&
                                __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512dq") &&
                                __builtin_cpu_supports("avx512vl");
  return supported;
}
#endif

/// Tests set this to run the baseline loops on a machine that has AVX2, to compare the paths.
inline std::atomic<bool> host_force_baseline{false};
/// Tests clear this to run the AVX2 loops on a machine that has AVX-512, to compare the paths.
inline std::atomic<bool> host_allow_avx512{true};

#if QSDP_HOST_X86_DISPATCH
inline bool host_has_avx2_fma() {
  return !host_force_baseline.load(std::memory_order_relaxed) && host_cpu_has_avx2_fma();
}
inline bool host_has_avx512() {
  return host_has_avx2_fma() && host_allow_avx512.load(std::memory_order_relaxed) &&
         host_cpu_has_avx512();
}

/// out[j] = the value of codes[j] (Accumulate: out[j] += it) for n codes of one bucket, on grid g
/// (a value_grid: with the AVX-512 loops where the CPU has them and AVX2's otherwise, the same
/// bits either way) or of a block-scaled float block (avx2::minifloat_block). Stream: stored with
/// non-temporal stores from out's first 64-byte boundary on (the values before it, and all of them
/// where out is not float-aligned, with plain stores); the caller fences.
template <bool Accumulate, bool Stream = false, class Block>
inline __attribute__((always_inline, target("avx2,fma"))) void decode_block_values(
    const std::uint8_t* codes, std::size_t n, const Block& g, float* out) {
  if constexpr (Stream) {
    const auto address = reinterpret_cast<std::uintptr_t>(out);
    if (address % sizeof(float) != 0)
      return decode_block_values<Accumulate, false>(codes, n, g, out);
    const std::size_t head = std::min(n, (64 - address % 64) % 64 / sizeof(float));
    decode_block_values<Accumulate, false>(codes, head, g, out);
    codes += head;
    out += head;
    n -= head;
  }
  if constexpr (std::is_same_v<Block, value_grid>) {
    if (host_has_avx512()) return avx512::decode_values<Accumulate, Stream>(codes, n, g, out);
    avx2::decode_values<Accumulate, Stream>(codes, n, g, out);
  } else {
    avx2::decode_minifloats<Accumulate, Stream>(codes, n, g, out);
  }
}
#endif

/// The largest finite magnitude among n values, 0 if there is none: what a tensor-scaled policy's
/// fit_tensor is given (NaN and infinities are flagged per bucket instead).
template <class T>
float finite_abs_max(const T* src, std::size_t n) {
#if QSDP_HOST_X86_DISPATCH
  if constexpr (std::is_same_v<T, float>) {
    if (host_has_avx2_fma()) return avx2::finite_abs_max<false>(src, n);
  } else if constexpr (element_traits<T>::tag == element_type::bf16) {
    if (host_has_avx2_fma()) return avx2::finite_abs_max<true>(src, n);
  }
#endif
  std::uint32_t top = 0;  // magnitudes of finite floats order as their bit patterns
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t magnitude =
        bit_cast<std::uint32_t>(element_traits<T>::to_float(load_element(src, i))) & 0x7FFFFFFFu;
    top = magnitude < 0x7F800000u && magnitude > top ? magnitude : top;
  }
  return bit_cast<float>(top);
}

/// fp32 outputs of qsdp::decode of at least this many bytes are written with non-temporal stores,
/// past the caches: the stores save the read of every line they overwrite, which the 8-bit decode
/// otherwise waits for. On Intel CPUs from 16 MiB, where they made the 64 MiB decode about 1.5x
/// faster; on others never (on an AMD EPYC VM they gained nothing for uniform<8> and cost
/// random_shift<8> 13 %). Tests and qsdp_codec_bench set it to compare both kinds of store.
inline std::atomic<std::size_t> host_streaming_bytes{[] {
#if QSDP_HOST_X86_DISPATCH
  __builtin_cpu_init();  // this initializer may run before the constructors that would call it
  if (__builtin_cpu_is("intel")) return std::size_t{16} << 20;
#endif
  return std::numeric_limits<std::size_t>::max();
}()};

/// Whether a decode writes `bytes` of fp32 output with non-temporal stores.
inline bool streaming_output(std::size_t bytes) {
#if QSDP_HOST_X86_DISPATCH
  return bytes >= host_streaming_bytes.load(std::memory_order_relaxed) && host_has_avx2_fma();
#else
  (void)bytes;
  return false;
#endif
}

/// Orders the non-temporal stores before whatever the caller does next (hands the buffer to
/// another thread, for one).
inline void streaming_fence() {
#if QSDP_HOST_X86_DISPATCH
  __builtin_ia32_sfence();
#endif
}

/// Whether the hand-vectorized AVX2 loops serve policy Q (only compiled on x86-64).
template <class Q>
consteval bool avx2_kernels_for() {
#if QSDP_HOST_X86_DISPATCH
  return avx2::has_grids<Q>;
#else
  return false;
#endif
}

/// The element format of a block-scaled float policy (qsdp::mx, qsdp::nvfp4, alone or inside
/// hadamard<>) as the vector loops take it (detail/host/avx2_minifloat.hpp); void for any other
/// policy. A block's codes are minifloat_encode<element> of |x| * q.encode_factor(m) with x's sign,
/// and its values element * q.block_factor(m): the policies' encode and decode with the scale
/// arithmetic done once per block. mx's minifloat_encode(x, e) multiplies |x| by 2^-e itself;
/// nvfp4's is given x * factor and e = 0, and |x * factor| * 1 = |x| * factor exactly, the factor
/// being positive.
template <class Q>
struct minifloat_element : block_element<Q> {};

template <class Inner>
struct minifloat_element<hadamard<Inner>> : minifloat_element<Inner> {};

/// Whether the AVX2 block-scaled float loops serve policy Q (only compiled on x86-64).
template <class Q>
consteval bool minifloat_kernels_for() {
#if QSDP_HOST_X86_DISPATCH
  return !std::is_void_v<typename minifloat_element<Q>::type>;
#else
  return false;
#endif
}

/// Whether the AVX-512 loops serve policy Q: the built-ins that draw a number per value.
template <class Q>
consteval bool avx512_kernels_for() {
  return avx2_kernels_for<Q>() && randomized_elements<Q>();
}

/// Writes the header and every section of a quantized packet, with the loops of `Isa` for the
/// built-in policies (the caller has checked the CPU and compiled this with Isa's target).
template <host_isa Isa, class Q, class T>
QSDP_FORCE_INLINE void encode_quantized(const Q& q, const T* src, std::size_t count,
                                        std::byte* packet, const packet_layout& l,
                                        const rng_key& key) {
  using meta_type = typename Q::meta_type;
  constexpr int B = Q::bits;
  const std::size_t bucket_size = q.bucket_size;

  std::byte* const meta_out = packet + l.meta_offset;
  std::byte* const flags = packet + l.flags_offset;
  const std::size_t meta_end = l.meta_offset + l.buckets * sizeof(meta_type);
  std::memset(packet + meta_end, 0, l.codes_offset - meta_end);  // padding and non-finite flags

  code_writer<B> codes(packet + l.codes_offset);
  constexpr bool Avx2 = Isa != host_isa::baseline;
  constexpr bool Avx512 = Isa == host_isa::avx512 && avx512_kernels_for<Q>();
  constexpr bool grid_fast = Avx2 && avx2_kernels_for<Q>();
  constexpr bool minifloat_fast = Avx2 && minifloat_kernels_for<Q>();
  constexpr bool fast = grid_fast || minifloat_fast;
  alignas(64) float draws[host_segment];
  alignas(64) std::uint32_t words[host_segment + 128];  // room for whole Philox groups
  alignas(64) float converted[fast && !std::is_same_v<T, float> ? host_segment : 1];
#if QSDP_HOST_X86_DISPATCH
  // The per-value draws of the whole call, generated ahead of the values (avx2::draw_stream).
  using draw_stream = std::conditional_t<Avx512, avx512::draw_stream, avx2::draw_stream>;
  [[maybe_unused]] std::conditional_t<grid_fast && randomized_elements<Q>(), draw_stream, char>
      draws_ahead;
  if constexpr (Avx512) {
    avx512::start_draw_stream(key, draws_ahead);
  } else if constexpr (grid_fast && randomized_elements<Q>()) {
    avx2::start_draw_stream(key, draws_ahead);
  }
#endif

  // The block-scaled float loops' draws: values halves_first .. + host_segment - 1, generated for
  // the short blocks of several calls at once.
  [[maybe_unused]] const std::uint16_t* halves = nullptr;
  [[maybe_unused]] std::size_t halves_first = 0;

  // Bucket b: n values from `bucket` (of type V: T, or float for a rotated bucket), which are the
  // packet's values begin .. begin + n - 1.
  const auto encode_bucket = [&]<class V>(const V* bucket, std::size_t b, std::size_t begin,
                                          std::size_t n) {
    partial_stats stats;
#if QSDP_HOST_X86_DISPATCH
    if constexpr (Avx512 && std::is_same_v<V, float>) {
      stats = avx512::scan_values<false>(bucket, n);
    } else if constexpr (Avx512 && element_traits<V>::tag == element_type::bf16) {
      stats = avx512::scan_values<true>(bucket, n);
    } else if constexpr (Avx2 && std::is_same_v<V, float>) {
      stats = avx2::scan_values<false>(bucket, n);
    } else if constexpr (Avx2 && element_traits<V>::tag == element_type::bf16) {
      stats = avx2::scan_values<true>(bucket, n);
    } else
#endif
    {
      stats = scan_bucket(bucket, n);
    }
    meta_type m = non_finite_meta<Q>();
    if (!stats.finite()) {
      // NaN or inf in the bucket: flag it (decoders produce NaN for all of it) and send zero codes.
      flags[b / 8] |= std::byte{static_cast<unsigned char>(1u << (b % 8))};
      std::memcpy(meta_out + b * sizeof(meta_type), &m, sizeof m);
      for (std::size_t done = 0; done < n;) {
        const std::size_t k = std::min(n - done, codes.space());
        std::memset(codes.slots(), 0, k);
        codes.commit(k);
        done += k;
      }
      return;
    }
    m = fit_bucket(q, stats, n, key, b);
    std::memcpy(meta_out + b * sizeof(meta_type), &m, sizeof m);

    for (std::size_t done = 0; done < n;) {
      const std::size_t k = std::min({n - done, codes.space(), host_segment});
      [[maybe_unused]] const std::size_t first = begin + done;
      std::uint8_t* out = codes.slots();
      const V* in = bucket + done;
#if QSDP_HOST_X86_DISPATCH
      if constexpr (fast) {
        const float* values;
        if constexpr (std::is_same_v<V, float>) {
          values = in;
        } else if constexpr (element_traits<V>::tag == element_type::bf16) {
          avx2::bf16_to_f32(in, k, converted);
          values = converted;
        } else {
          for (std::size_t j = 0; j < k; ++j)
            converted[j] = element_traits<V>::to_float(load_element(in, j));
          values = converted;
        }
        if constexpr (minifloat_fast) {
          using F = typename minifloat_element<Q>::type;
          const float scale = q.encode_factor(m);
          if constexpr (randomized_elements<Q>()) {
            if (halves == nullptr || first < halves_first ||
                first + k > halves_first + host_segment) {
              halves = avx2::value_halves(key, first, host_segment, words);
              halves_first = first;
            }
            avx2::encode_minifloats<F, true>(values, k, scale, halves + (first - halves_first),
                                             out);
          } else {
            avx2::encode_minifloats<F, false>(values, k, scale, nullptr, out);
          }
        } else {
          const code_grid grid = q.code_grid_for(m);
          if constexpr (randomized_elements<Q>()) {
            if (first % 8 != 0) {  // a segment that starts inside a Philox block (bucket size not
                                   // a multiple of 8)
              avx2::encode_codes<true>(values, k, grid, avx2::value_halves(key, first, k, words),
                                       out);
            } else {
              const bool clamp_idle = grid_clamp_is_idle(
                  grid, stats.min(), stats.max(), uniform_from_half(0), uniform_from_half(0xFFFF));
              if constexpr (Avx512) {
                avx512::encode_drawn_codes(values, k, grid, clamp_idle, first / 8, draws_ahead,
                                           out);
              } else {
                avx2::encode_drawn_codes(values, k, grid, clamp_idle, first / 8, draws_ahead, out);
              }
            }
          } else {
            if (grid_clamp_is_idle(grid, stats.min(), stats.max(), grid.offset, grid.offset)) {
              avx2::encode_codes<false, false>(values, k, grid, nullptr, out);
            } else {
              avx2::encode_codes<false, true>(values, k, grid, nullptr, out);
            }
          }
        }
        codes.commit(k);
        done += k;
        continue;
      }
#endif
      if constexpr (randomized_elements<Q>()) {
        // The blocks' words read as 16-bit halves, in order, are the per-value draws.
        const std::size_t first_block = first / 8, skip = first % 8;
        philox_fill(key, draw_domain::element, first_block, (skip + k + 7) / 8, words);
        for (std::size_t j = 0; j < k; ++j) {
          const std::size_t h = skip + j;
          draws[j] = uniform_from_half(h & 1 ? words[h / 2] >> 16 : words[h / 2]);
        }
        for (std::size_t j = 0; j < k; ++j)
          out[j] = static_cast<std::uint8_t>(
              q.encode(element_traits<V>::to_float(load_element(in, j)), m, draws[j]));
      } else {
        for (std::size_t j = 0; j < k; ++j)
          out[j] = static_cast<std::uint8_t>(
              q.encode(element_traits<V>::to_float(load_element(in, j)), m, 0.0f));
      }
      codes.commit(k);
      done += k;
    }
  };

  [[maybe_unused]] const rotation_record rotation{key.seed, key.call};
  alignas(64) float rotated_values[rotated<Q>() ? hadamard_max_bucket : 1];
  for (std::size_t b = 0; b < l.buckets; ++b) {
    const std::size_t begin = b * bucket_size;
    const std::size_t n = std::min(bucket_size, count - begin);
    if constexpr (rotated<Q>()) {
#if QSDP_HOST_X86_DISPATCH
      if constexpr (Avx2) {
        const float* from = rotated_values;
        if constexpr (std::is_same_v<T, float>)
          from = src + begin;  // read by the rotation's first pass directly
        else if constexpr (element_traits<T>::tag == element_type::bf16)
          avx2::bf16_to_f32(src + begin, n, rotated_values);
        else
          for (std::size_t j = 0; j < n; ++j)
            rotated_values[j] = element_traits<T>::to_float(load_element(src + begin, j));
        if constexpr (Isa == host_isa::avx512)
          avx512::hadamard_forward(from, rotated_values, n, begin, rotation);
        else
          avx2::hadamard_forward(from, rotated_values, n, begin, rotation);
        encode_bucket(static_cast<const float*>(rotated_values), b, begin, n);
        continue;
      }
#endif
      for (std::size_t j = 0; j < n; ++j)
        rotated_values[j] = element_traits<T>::to_float(load_element(src + begin, j));
      hadamard_forward(rotated_values, n, begin, rotation);
      encode_bucket(static_cast<const float*>(rotated_values), b, begin, n);
    } else {
      encode_bucket(src + begin, b, begin, n);
    }
  }
  const std::size_t written = codes.finish();
  std::memset(packet + l.codes_offset + written, 0, l.total - l.codes_offset - written);
}

/// Where decoded values go: stored as T (saturating finite values) ...
template <class T>
struct store_sink {
  T* dst;
  // fp32 codes decoded with non-temporal stores (streaming_output; the caller fences).
  bool streaming = false;
  QSDP_FORCE_INLINE void put(std::size_t i, float v) const {
    store_element(dst, i, saturating_from_float<T>(v));
  }
  void fill_nan(std::size_t begin, std::size_t end) const {
    const T nan = element_traits<T>::from_float(std::numeric_limits<float>::quiet_NaN());
    for (std::size_t i = begin; i < end; ++i) store_element(dst, i, nan);
  }
  /// Values i .. i + n - 1, decoded already (a rotated bucket transformed back), with the AVX2
  /// narrowing where Avx2 (the CPU has been checked).
  template <bool Avx2>
  QSDP_FORCE_INLINE void put_values(std::size_t i, std::size_t n, const float* values) const {
    if constexpr (std::is_same_v<T, float>) {
      std::memcpy(reinterpret_cast<unsigned char*>(dst) + i * sizeof(T), values, n * sizeof(T));
      return;
    }
#if QSDP_HOST_X86_DISPATCH
    if constexpr (Avx2 && element_traits<T>::tag == element_type::bf16) {
      avx2::f32_to_bf16<true>(values, n, dst + i);
      return;
    }
#endif
    for (std::size_t j = 0; j < n; ++j) put(i + j, values[j]);
  }
#if QSDP_HOST_X86_DISPATCH
  template <class Block>
  __attribute__((target("avx2,fma"))) void put_avx2(std::size_t i, std::size_t n,
                                                    const std::uint8_t* codes,
                                                    const Block& block) const {
    if constexpr (std::is_same_v<T, float>) {
      if (streaming)
        decode_block_values<false, true>(codes, n, block, dst + i);
      else
        decode_block_values<false>(codes, n, block, dst + i);
    } else if constexpr (element_traits<T>::tag == element_type::bf16) {
      alignas(64) float values[host_segment];
      decode_block_values<false>(codes, n, block, values);
      avx2::f32_to_bf16<true>(values, n, dst + i);
    } else {
      alignas(64) float values[host_segment];
      decode_block_values<false>(codes, n, block, values);
      for (std::size_t j = 0; j < n; ++j) put(i + j, values[j]);
    }
  }
#endif
};

/// ... or added to an fp32 accumulator.
struct accumulate_sink {
  float* acc;
  QSDP_FORCE_INLINE void put(std::size_t i, float v) const {
    store_element(acc, i, load_element(acc, i) + v);
  }
  void fill_nan(std::size_t begin, std::size_t end) const {
    for (std::size_t i = begin; i < end; ++i)
      store_element(acc, i, std::numeric_limits<float>::quiet_NaN());
  }
  template <bool Avx2>
  QSDP_FORCE_INLINE void put_values(std::size_t i, std::size_t n, const float* values) const {
    for (std::size_t j = 0; j < n; ++j) put(i + j, values[j]);
  }
#if QSDP_HOST_X86_DISPATCH
  template <class Block>
  __attribute__((target("avx2,fma"))) void put_avx2(std::size_t i, std::size_t n,
                                                    const std::uint8_t* codes,
                                                    const Block& block) const {
    decode_block_values<true>(codes, n, block, acc + i);
  }
#endif
};

/// ... or, for rotated buckets, one bucket's decoded rotated values: value i of the packet to
/// values[i - first], stored or (Add) added.
template <bool Add>
struct bucket_sink {
  float* values;
  std::size_t first;
  QSDP_FORCE_INLINE void put(std::size_t i, float v) const {
    values[i - first] = Add ? values[i - first] + v : v;
  }
  void fill_nan(std::size_t begin, std::size_t end) const {
    for (std::size_t i = begin; i < end; ++i)
      values[i - first] = std::numeric_limits<float>::quiet_NaN();
  }
#if QSDP_HOST_X86_DISPATCH
  template <class Block>
  __attribute__((target("avx2,fma"))) void put_avx2(std::size_t i, std::size_t n,
                                                    const std::uint8_t* codes,
                                                    const Block& block) const {
    decode_block_values<Add>(codes, n, block, values + (i - first));
  }
#endif
};

/// Decodes the codes of values [begin, end) of a validated quantized packet into `sink` with the
/// packet's policy (the inner one, for a rotated packet: the values stay rotated).
template <bool Avx2, class Q, class Sink>
QSDP_FORCE_INLINE void decode_codes(const Q& packet_q, const std::byte* packet,
                                    const packet_layout& l, std::size_t count, std::size_t begin,
                                    std::size_t end, const Sink& sink) {
  const auto& q = packet_policy(packet_q, packet);
  using meta_type = typename Q::meta_type;
  constexpr int B = Q::bits;
  const std::size_t bucket_size = q.bucket_size;
  const std::byte* const meta_in = packet + l.meta_offset;
  const auto* flags = reinterpret_cast<const std::uint8_t*>(packet + l.flags_offset);
  const std::byte* const stream = packet + l.codes_offset;
  alignas(64) std::uint8_t staging[B == 8 ? 1 : host_segment];

  for (std::size_t i = begin; i < end;) {
    const std::size_t b = i / bucket_size;
    const std::size_t bucket_end = std::min((b + 1) * bucket_size, count);
    const std::size_t stop = std::min({bucket_end, end, i + host_segment});
    const std::size_t n = stop - i;
    if (flags[b / 8] & (1u << (b % 8))) {
      sink.fill_nan(i, stop);
      i = stop;
      continue;
    }
    meta_type m;
    std::memcpy(&m, meta_in + b * sizeof(meta_type), sizeof m);
    const std::uint8_t* codes;
    if constexpr (B == 8) {
      codes = reinterpret_cast<const std::uint8_t*>(stream) + i;
    } else {
#if QSDP_HOST_X86_DISPATCH
      if constexpr (Avx2 && B == 6)
        avx2::unpack_codes6(stream, i, n, staging);
      else
#endif
        unpack_codes<B>(stream, i, n, staging);
      codes = staging;
    }
#if QSDP_HOST_X86_DISPATCH
    if constexpr (Avx2 && avx2_kernels_for<Q>()) {
      sink.put_avx2(i, n, codes, q.value_grid_for(m));
      i = stop;
      continue;
    } else if constexpr (Avx2 && minifloat_kernels_for<Q>()) {
      sink.put_avx2(i, n, codes,
                    avx2::minifloat_block<typename minifloat_element<Q>::type>{q.block_factor(m)});
      i = stop;
      continue;
    }
#endif
    for (std::size_t j = 0; j < n; ++j) sink.put(i + j, q.decode(codes[j], m));
    i = stop;
  }
}

/// hadamard_inverse, with the AVX2 loops where Avx2.
template <bool Avx2, bool Saturate>
QSDP_FORCE_INLINE void rotate_back(float* values, std::size_t n, std::uint64_t first,
                                   const rotation_record& r) {
#if QSDP_HOST_X86_DISPATCH
  if constexpr (Avx2) return avx2::hadamard_inverse<Saturate>(values, n, first, r);
#endif
  hadamard_inverse<Saturate>(values, n, first, r);
}

inline rotation_record read_rotation(const std::byte* packet) {
  rotation_record r;
  std::memcpy(&r, packet + sizeof(packet_header), sizeof r);
  return r;
}

inline bool bucket_flagged(const std::byte* packet, const packet_layout& l, std::size_t b) {
  const auto flags = static_cast<std::uint8_t>(packet[l.flags_offset + b / 8]);
  return (flags >> (b % 8)) & 1u;
}

/// Decodes values [begin, end) of a validated packet of a rotated policy into `sink`: each bucket
/// they touch is decoded whole, transformed back (hadamard_inverse) and the part asked for handed
/// on.
template <bool Avx2, class Q, class Sink>
QSDP_FORCE_INLINE void decode_rotated(const Q& q, const std::byte* packet, const packet_layout& l,
                                      std::size_t count, std::size_t begin, std::size_t end,
                                      const Sink& sink) {
  const std::size_t bucket_size = q.bucket_size;
  const rotation_record rotation = read_rotation(packet);
  alignas(64) float values[hadamard_max_bucket];
  for (std::size_t b = begin / bucket_size; b * bucket_size < end; ++b) {
    const std::size_t first = b * bucket_size, n = std::min(bucket_size, count - first);
    const std::size_t lo = std::max(begin, first), hi = std::min(end, first + n);
    if (bucket_flagged(packet, l, b)) {
      sink.fill_nan(lo, hi);
      continue;
    }
    decode_codes<Avx2>(q, packet, l, count, first, first + n, bucket_sink<false>{values, first});
    rotate_back<Avx2, true>(values, n, first, rotation);
    sink.template put_values<Avx2>(lo, hi - lo, values + (lo - first));
  }
}

/// Decodes values [begin, end) of a validated quantized packet into `sink`.
template <bool Avx2, class Q, class Sink>
QSDP_FORCE_INLINE void decode_quantized(const Q& q, const std::byte* packet, const packet_layout& l,
                                        std::size_t count, std::size_t begin, std::size_t end,
                                        const Sink& sink) {
  if constexpr (rotated<Q>())
    decode_rotated<Avx2>(q, packet, l, count, begin, end, sink);
  else
    decode_codes<Avx2>(q, packet, l, count, begin, end, sink);
}

/// acc[i] += the sum over `packet_count` validated packets of a rotated policy (back to back,
/// `packet_bytes` apart) of value i, where every packet carries the same rotation: the rotated
/// values are summed (in fp32, packet order) and each bucket is transformed back once, instead of
/// once per packet. Not saturated: a sum that overflows is inf, as the unrotated sum's would be. A
/// bucket flagged in any packet is NaN.
template <bool Avx2, class Q>
QSDP_FORCE_INLINE void accumulate_rotated(const Q& q, const std::byte* packets,
                                          std::size_t packet_count, std::size_t packet_bytes,
                                          const packet_layout& l, std::size_t count, float* acc) {
  const std::size_t bucket_size = q.bucket_size;
  const rotation_record rotation = read_rotation(packets);
  alignas(64) float sum[hadamard_max_bucket];
  const accumulate_sink out{acc};
  for (std::size_t b = 0; b < l.buckets; ++b) {
    const std::size_t first = b * bucket_size, n = std::min(bucket_size, count - first);
    bool flagged = false;
    for (std::size_t p = 0; p < packet_count; ++p)
      flagged = flagged || bucket_flagged(packets + p * packet_bytes, l, b);
    if (flagged) {
      out.fill_nan(first, first + n);
      continue;
    }
    for (std::size_t p = 0; p < packet_count; ++p) {
      const std::byte* packet = packets + p * packet_bytes;
      if (p == 0)
        decode_codes<Avx2>(q, packet, l, count, first, first + n, bucket_sink<false>{sum, first});
      else
        decode_codes<Avx2>(q, packet, l, count, first, first + n, bucket_sink<true>{sum, first});
    }
    rotate_back<Avx2, false>(sum, n, first, rotation);
    out.put_values<Avx2>(first, n, sum);
  }
}

// ---- ISA dispatch -------------------------------------------------------------------------------

#if QSDP_HOST_X86_DISPATCH
#define QSDP_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"), flatten))
#define QSDP_TARGET_AVX2 __attribute__((target("avx2,fma"), flatten))
#define QSDP_TARGET_BASE __attribute__((flatten))

template <class Q, class T>
QSDP_TARGET_AVX512 void encode_quantized_avx512(const Q& q, const T* src, std::size_t count,
                                                std::byte* packet, const packet_layout& l,
                                                const rng_key& key) {
  encode_quantized<host_isa::avx512>(q, src, count, packet, l, key);
}
template <class Q, class T>
QSDP_TARGET_AVX2 void encode_quantized_avx2(const Q& q, const T* src, std::size_t count,
                                            std::byte* packet, const packet_layout& l,
                                            const rng_key& key) {
  encode_quantized<host_isa::avx2>(q, src, count, packet, l, key);
}
template <class Q, class T>
QSDP_TARGET_BASE void encode_quantized_base(const Q& q, const T* src, std::size_t count,
                                            std::byte* packet, const packet_layout& l,
                                            const rng_key& key) {
  encode_quantized<host_isa::baseline>(q, src, count, packet, l, key);
}
template <class Q, class Sink>
QSDP_TARGET_AVX2 void decode_quantized_avx2(const Q& q, const std::byte* packet,
                                            const packet_layout& l, std::size_t count,
                                            std::size_t begin, std::size_t end, const Sink& sink) {
  decode_quantized<true>(q, packet, l, count, begin, end, sink);
}
template <class Q, class Sink>
QSDP_TARGET_BASE void decode_quantized_base(const Q& q, const std::byte* packet,
                                            const packet_layout& l, std::size_t count,
                                            std::size_t begin, std::size_t end, const Sink& sink) {
  decode_quantized<false>(q, packet, l, count, begin, end, sink);
}
template <class Q>
QSDP_TARGET_AVX2 void accumulate_rotated_avx2(const Q& q, const std::byte* packets,
                                              std::size_t packet_count, std::size_t packet_bytes,
                                              const packet_layout& l, std::size_t count,
                                              float* acc) {
  accumulate_rotated<true>(q, packets, packet_count, packet_bytes, l, count, acc);
}
template <class Q>
QSDP_TARGET_BASE void accumulate_rotated_base(const Q& q, const std::byte* packets,
                                              std::size_t packet_count, std::size_t packet_bytes,
                                              const packet_layout& l, std::size_t count,
                                              float* acc) {
  accumulate_rotated<false>(q, packets, packet_count, packet_bytes, l, count, acc);
}
#undef QSDP_TARGET_AVX512
#undef QSDP_TARGET_AVX2
#undef QSDP_TARGET_BASE
#endif

/// dst[i] = T(src[i]) for n values with plain rounding (a sum that overflows T becomes inf): the
/// last step of a reduction. Vectorized for bf16 where the CPU has AVX2; the same bits either way.
template <class T>
inline void narrow_store(const float* src, std::size_t n, T* dst) {
  if constexpr (std::is_same_v<T, float>) {
    if (n) std::memcpy(dst, src, n * sizeof(float));
  } else {
#if QSDP_HOST_X86_DISPATCH
    if constexpr (element_traits<T>::tag == element_type::bf16) {
      if (host_has_avx2_fma()) {
        avx2::f32_to_bf16<false>(src, n, dst);
        return;
      }
    }
#endif
    for (std::size_t i = 0; i < n; ++i)
      store_element(dst, i, element_traits<T>::from_float(src[i]));
  }
}

/// Which host code path runs (reported by the benchmarks): "avx512+avx2+fma" (AVX-512 for the
/// stochastic encode's draws and codes and for the decode of codes to values), "avx2+fma" or
/// "baseline".
inline const char* host_codec_isa() {
#if QSDP_HOST_X86_DISPATCH
  if (host_has_avx512()) return "avx512+avx2+fma";
  return host_has_avx2_fma() ? "avx2+fma" : "baseline";
#else
  return "baseline";
#endif
}

template <class Q, class T>
void run_encode(const Q& q, const T* src, std::size_t count, std::byte* packet,
                const packet_layout& l, const rng_key& key) {
#if QSDP_HOST_X86_DISPATCH
  // AVX-512's stream of draws runs 64 values at a time; buckets of other sizes would restart it
  // at every bucket and keep the AVX2 loops.
  if constexpr (avx512_kernels_for<Q>()) {
    if (q.bucket_size % 64 == 0 && host_has_avx512())
      return encode_quantized_avx512(q, src, count, packet, l, key);
  }
  if (host_has_avx2_fma()) return encode_quantized_avx2(q, src, count, packet, l, key);
  return encode_quantized_base(q, src, count, packet, l, key);
#else
  encode_quantized<host_isa::baseline>(q, src, count, packet, l, key);
#endif
}

template <class Q>
void run_accumulate_rotated(const Q& q, const std::byte* packets, std::size_t packet_count,
                            std::size_t packet_bytes, const packet_layout& l, std::size_t count,
                            float* acc) {
#if QSDP_HOST_X86_DISPATCH
  if (host_has_avx2_fma())
    return accumulate_rotated_avx2(q, packets, packet_count, packet_bytes, l, count, acc);
  return accumulate_rotated_base(q, packets, packet_count, packet_bytes, l, count, acc);
#else
  accumulate_rotated<false>(q, packets, packet_count, packet_bytes, l, count, acc);
#endif
}

template <class Q, class Sink>
void run_decode(const Q& q, const std::byte* packet, const packet_layout& l, std::size_t count,
                std::size_t begin, std::size_t end, const Sink& sink) {
#if QSDP_HOST_X86_DISPATCH
  if (host_has_avx2_fma()) return decode_quantized_avx2(q, packet, l, count, begin, end, sink);
  return decode_quantized_base(q, packet, l, count, begin, end, sink);
#else
  decode_quantized<false>(q, packet, l, count, begin, end, sink);
#endif
}

}  // namespace qsdp::detail
