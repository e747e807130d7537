// SPDX-License-Identifier: Apache-2.0
//
// The device codec's kernels. Their unit is the group of eight values (one Philox block of draws,
// `bits` bytes of codes), and the arithmetic is detail/codec/group.hpp's, shared with the host
// codec, so packets are byte-identical to the host's.
//
// Encode, fast path (bucket size a power of two from 32 to 4096, 16-byte aligned input and packet):
// one pass. A thread takes a span of 32 values (four groups); a bucket's 1..128 threads load their
// spans with 16-byte loads into registers, reduce the bucket's min/max/finite with warp shuffles
// (and shared memory across warps for buckets of 2048 and 4096 values), fit the metadata and write
// codes in 16-byte words, without reading global memory again.
// Encode, general path (any bucket size, any alignment): a warp per bucket writes the metadata
// (cub::WarpReduce), then a thread per group writes codes, looking up each value's bucket.
// Decode, fast path (buckets of at least 32 values, a power of two; 16-byte aligned packets): a
// thread per span of 32 values (see "The fast decoder" below). Decode, general path: a thread per
// group. With `packets` > 1 both read every packet's values and sum in fp32 in packet order
// (reduce-scatter's fused decode-accumulate: each input byte read once, output written once).
// Headers are checked on the device, once per block; a bad one is reported through a
// failure_channel and its values come out as NaN.
#pragma once

#include <cuda_runtime.h>

// tests/simt runs these kernels on the host with its own stand-in for cub::WarpReduce.
#if !defined(QSDP_SIMT_EMULATION)
#include <cub/warp/warp_reduce.cuh>
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "../../quantizers.hpp"
#include "../codec/block_layout.hpp"
#include "../codec/float_types.hpp"
#include "../codec/format.hpp"
#include "../codec/group.hpp"
#include "../transport/cuda_runtime.hpp"

namespace qsdp::detail::cuda {

inline constexpr unsigned codec_block = 256;        // threads per block of the per-group kernels
inline constexpr unsigned fast_encode_block = 512;  // threads per block of the one-pass encoder
inline constexpr unsigned max_grid = 1u << 20;      // blocks; grid-stride loops cover the rest
/// Values per thread and step of the one-pass encoder and the span decoder: four groups, a lane's
/// share of a bucket of at least 64 (encode) or 32 (decode) values.
inline constexpr unsigned span_values = 32;

inline unsigned grid_for(std::uint64_t items, unsigned per_block) {
  const std::uint64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > max_grid ? max_grid : blocks));
}

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

/// Sets bucket b's non-finite flag with an atomic or on the aligned 32-bit word holding it (the
/// flags section was zeroed by the frame kernel earlier on the same stream).
__device__ inline void set_flag(std::byte* flags, std::uint64_t b) {
  const auto address = reinterpret_cast<std::uintptr_t>(flags + (b >> 3));
  auto* word = reinterpret_cast<unsigned int*>(address & ~std::uintptr_t{3});
  atomicOr(word, (1u << (b & 7)) << (8 * (address & 3)));
}

/// Header, and zeros in the padding and flag bytes around metadata and codes. (A template, so that
/// every translation unit including this header may define it: kernels cannot be `inline`.)
/// `record_bytes` zeros after the header: the tensor record of a tensor-scaled policy (else 0).
template <int = 0>
__global__ void write_frame_kernel(std::byte* packet, packet_header h, std::size_t record_begin,
                                   std::size_t record_bytes, std::size_t zero1_begin,
                                   std::size_t zero1_end, std::size_t zero2_begin,
                                   std::size_t zero2_end) {
  const std::size_t n0 = sizeof(packet_header) + record_bytes;
  const std::size_t n1 = zero1_end - zero1_begin, n2 = zero2_end - zero2_begin;
  const std::size_t total = n0 + n1 + n2;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < total;
       i += std::size_t{gridDim.x} * blockDim.x) {
    if (i < sizeof(packet_header)) {
      packet[i] = reinterpret_cast<const std::byte*>(&h)[i];
    } else if (i < n0) {
      packet[record_begin + (i - sizeof(packet_header))] = std::byte{0};
    } else if (i < n0 + n1) {
      packet[zero1_begin + (i - n0)] = std::byte{0};
    } else {
      packet[zero2_begin + (i - n0 - n1)] = std::byte{0};
    }
  }
}

// ---- The tensor record of a tensor-scaled policy (qsdp::nvfp4)
// ---------------------------------------------------------------------------------------
// write_frame_kernel zeroes the record; tensor_abs_max_kernel gathers the largest finite magnitude
// of the values into a 4-byte aligned word inside the record (atomicMax over magnitude bits, which
// order as the magnitudes: the packet may start at any byte, the word lies in bytes 4..11 whatever
// the record's alignment); tensor_record_kernel turns it into the policy's fit_tensor and writes
// the record. The encode kernels then read the record (bind_to_packet), as the decoders do.

/// The word of a packet's tensor record that gathers the largest magnitude.
template <class Q>
QSDP_HOST_DEVICE unsigned* tensor_max_slot(std::byte* packet) {
  const auto at = reinterpret_cast<std::uintptr_t>(packet + tensor_record_offset<Q>() + 4);
  return reinterpret_cast<unsigned*>((at + 3) & ~std::uintptr_t{3});
}

/// The largest finite magnitude of count values, into *slot (zeroed before).
template <class T>
__global__ void __launch_bounds__(codec_block)
    tensor_abs_max_kernel(const T* src, std::size_t count, unsigned* slot) {
  unsigned top = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const unsigned magnitude = bit_cast<std::uint32_t>(load_value(src, i)) & 0x7FFFFFFFu;
    top = magnitude < 0x7F800000u && magnitude > top ? magnitude : top;
  }
  QSDP_UNROLL
  for (unsigned offset = 16; offset > 0; offset /= 2) {
    const unsigned other = __shfl_xor_sync(0xFFFFFFFFu, top, offset);
    top = other > top ? other : top;
  }
  if (threadIdx.x % 32 == 0 && top != 0) atomicMax(slot, top);
}

/// One thread: the tensor record from the gathered magnitude.
template <class Q>
__global__ void tensor_record_kernel(Q q, std::byte* packet) {
  const float abs_max = bit_cast<float>(*tensor_max_slot<Q>(packet));
  write_tensor_record<Q>(packet, q.fit_tensor(abs_max));  // its zeros clear the word too
}

/// Where an encoding kernel's random stream comes from: `key` as given, or, with `call_base` set,
/// key.call counted on from the call index stored at call_base (device memory), read when the
/// kernel runs. A CUDA graph that captured the launch then draws at each replay from wherever the
/// counter stands, and advance_calls_kernel, captured with it, moves the counter on.
struct rng_source {
  rng_key key;
  const std::uint64_t* call_base = nullptr;

  rng_source(const rng_key& k, const std::uint64_t* base = nullptr) : key(k), call_base(base) {}

  __device__ rng_key resolve() const {
    rng_key k = key;
    if (call_base) k.call += *call_base;
    return k;
  }
};

/// Moves a device call counter on by `calls` (one thread): the last step of a call that drew from
/// it.
template <int = 0>
__global__ void advance_calls_kernel(std::uint64_t* counter, std::uint64_t calls) {
  *counter += calls;
}

struct merge_stats {
  __device__ partial_stats operator()(partial_stats a, const partial_stats& b) const {
    a.merge(b);
    return a;
  }
};

/// General path, step 1: a warp per bucket computes its statistics and writes metadata and flag.
template <class Q, class T>
__global__ void __launch_bounds__(codec_block)
    bucket_meta_kernel(Q q, const T* src, std::size_t count, std::byte* packet, packet_layout l,
                       rng_source source) {
  bind_to_packet(q, packet);  // the tensor record is written before
  const rng_key key = source.resolve();
  constexpr unsigned warps = codec_block / 32;
  using warp_reduce = cub::WarpReduce<partial_stats>;
  __shared__ typename warp_reduce::TempStorage storage[warps];
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (std::uint64_t b = std::uint64_t{blockIdx.x} * warps + warp; b < l.buckets;
       b += std::uint64_t{gridDim.x} * warps) {
    const std::uint64_t begin = b * q.bucket_size;
    const std::uint64_t n = count - begin < q.bucket_size ? count - begin : q.bucket_size;
    partial_stats p;
    for (std::uint64_t j = lane; j < n; j += 32) p.add(load_value(src, begin + j));
    p = warp_reduce(storage[warp]).Reduce(p, merge_stats{});
    if (lane == 0 && store_bucket_meta(q, packet, l, b, p, n, key))
      set_flag(packet + l.flags_offset, b);
    __syncwarp();
  }
}

/// General path, step 2: a thread per group writes codes.
template <class Q, class T>
__global__ void __launch_bounds__(codec_block)
    encode_groups_kernel(Q q, const T* src, std::size_t count, std::byte* packet, packet_layout l,
                         rng_source source) {
  bind_to_packet(q, packet);
  const rng_key key = source.resolve();
  const std::uint64_t groups = (count + group_values - 1) / group_values;
  for (std::uint64_t g = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; g < groups;
       g += std::uint64_t{gridDim.x} * blockDim.x)
    encode_group_general(q, src, count, packet, l, key, g);
}

/// Eight values of a 16-bit T from their bit patterns, two to a word.
template <class T>
__device__ QSDP_FORCE_INLINE void group_from_words(const uint4& w, float* v) {
  const unsigned int words[4] = {w.x, w.y, w.z, w.w};
  QSDP_UNROLL
  for (int k = 0; k < 4; ++k) {
    T lo, hi;
    const auto l16 = static_cast<std::uint16_t>(words[k]),
               h16 = static_cast<std::uint16_t>(words[k] >> 16);
    memcpy(static_cast<void*>(&lo), &l16, 2);
    memcpy(static_cast<void*>(&hi), &h16, 2);
    v[2 * k] = element_traits<T>::to_float(lo);
    v[2 * k + 1] = element_traits<T>::to_float(hi);
  }
}

/// Eight values from a 16-byte aligned address.
template <class T>
__device__ QSDP_FORCE_INLINE void load_group_aligned(const T* p, float* v) {
  if constexpr (sizeof(T) == 4) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    static_assert(sizeof(T) == 2, "16-bit elements");
    group_from_words<T>(__ldg(reinterpret_cast<const uint4*>(p)), v);
  }
}

/// Stores a group's codes: one store for widths 1, 2, 4 and 8 (aligned, since the codes section
/// is), bytes otherwise or when the group is the cut last one.
template <int B>
__device__ QSDP_FORCE_INLINE void store_codes(std::byte* at, std::uint64_t word, unsigned n) {
  if (n == static_cast<unsigned>(B)) {
    if constexpr (B == 8) {
      *reinterpret_cast<unsigned long long*>(at) = word;
      return;
    } else if constexpr (B == 4) {
      *reinterpret_cast<unsigned int*>(at) = static_cast<unsigned int>(word);
      return;
    } else if constexpr (B == 2) {
      *reinterpret_cast<unsigned short*>(at) = static_cast<unsigned short>(word);
      return;
    }
  }
  store_group_bytes(at, word, n);
}

template <int B>
__device__ QSDP_FORCE_INLINE std::uint64_t load_codes(const std::byte* at, unsigned n) {
  if (n == static_cast<unsigned>(B)) {
    if constexpr (B == 8)
      return __ldg(reinterpret_cast<const unsigned long long*>(at));
    else if constexpr (B == 4)
      return __ldg(reinterpret_cast<const unsigned int*>(at));
    else if constexpr (B == 2)
      return __ldg(reinterpret_cast<const unsigned short*>(at));
  }
  return load_group_bytes(at, n);
}

__device__ QSDP_FORCE_INLINE partial_stats shuffle_xor(const partial_stats& p, unsigned offset) {
  partial_stats o;
  o.lo = __shfl_xor_sync(0xFFFFFFFFu, p.lo, offset);
  o.hi = __shfl_xor_sync(0xFFFFFFFFu, p.hi, offset);
  o.non_finite = p.non_finite;  // 0 on the device: finite() reads the extremes (statistics.hpp)
  return o;
}

/// A span's 32 values from a 16-byte aligned address: 16-byte loads.
template <class T>
__device__ QSDP_FORCE_INLINE void load_span_aligned(const T* p, float (&v)[span_values]) {
  QSDP_UNROLL
  for (unsigned g = 0; g < span_values / group_values; ++g)
    load_group_aligned(p + g * group_values, v + g * group_values);
}

/// The same, with the values' statistics: a 16-bit T's from the bit patterns as loaded, two values
/// at a time (paired_stats16: about 1.5 instructions per value against 5 for partial_stats::add;
/// AbsMax, for a policy whose fit reads abs_max alone: paired_abs_max16, about 0.75).
template <class T, bool AbsMax>
__device__ QSDP_FORCE_INLINE partial_stats load_span_aligned_stats(const T* p,
                                                                   float (&v)[span_values]) {
  if constexpr (sizeof(T) == 2) {
    constexpr bool bf16 = element_traits<T>::tag == element_type::bf16;
    std::conditional_t<AbsMax, paired_abs_max16<bf16>, paired_stats16<bf16>> stats;
    QSDP_UNROLL
    for (unsigned g = 0; g < span_values / group_values; ++g) {
      const uint4 w = __ldg(reinterpret_cast<const uint4*>(p + g * group_values));
      group_from_words<T>(w, v + g * group_values);
      stats.add(w.x, w.y);
      stats.add(w.z, w.w);
    }
    return stats.stats();
  } else {
    load_span_aligned(p, v);
    partial_stats stats;
    QSDP_UNROLL
    for (unsigned k = 0; k < span_values; ++k) stats.add(v[k]);
    return stats;
  }
}

/// Metadata of bucket b into a 16-byte aligned packet: in 4-byte words where its size allows
/// (the section starts at byte 32), else byte by byte.
template <class M>
__device__ QSDP_FORCE_INLINE void store_meta_aligned(std::byte* packet, const packet_layout& l,
                                                     std::uint64_t b, const M& m) {
  std::byte* at = packet + l.meta_offset + b * sizeof(M);
  if constexpr (sizeof(M) % 4 == 0) {
    std::uint32_t w[sizeof(M) / 4];
    memcpy(w, static_cast<const void*>(&m), sizeof m);
    QSDP_UNROLL
    for (unsigned i = 0; i < sizeof(M) / 4; ++i) reinterpret_cast<std::uint32_t*>(at)[i] = w[i];
  } else {
    memcpy(at, static_cast<const void*>(&m), sizeof m);
  }
}

/// A whole span's codes (4B bytes at 4B * s, so 4B-byte aligned): in the widest words that allows.
template <int B>
__device__ QSDP_FORCE_INLINE void store_span_codes(std::byte* at, const std::uint64_t (&words)[4]) {
  if constexpr (B == 8) {
    auto* to = reinterpret_cast<uint4*>(at);
    to[0] = make_uint4(
        static_cast<std::uint32_t>(words[0]), static_cast<std::uint32_t>(words[0] >> 32),
        static_cast<std::uint32_t>(words[1]), static_cast<std::uint32_t>(words[1] >> 32));
    to[1] = make_uint4(
        static_cast<std::uint32_t>(words[2]), static_cast<std::uint32_t>(words[2] >> 32),
        static_cast<std::uint32_t>(words[3]), static_cast<std::uint32_t>(words[3] >> 32));
  } else if constexpr (B == 4) {
    *reinterpret_cast<uint4*>(at) =
        make_uint4(static_cast<std::uint32_t>(words[0]), static_cast<std::uint32_t>(words[1]),
                   static_cast<std::uint32_t>(words[2]), static_cast<std::uint32_t>(words[3]));
  } else if constexpr (B == 2) {  // a group's 16 bits each (bits beyond them are not its own)
    *reinterpret_cast<uint2*>(at) =
        make_uint2(static_cast<std::uint32_t>((words[0] & 0xFFFFu) | words[1] << 16),
                   static_cast<std::uint32_t>((words[2] & 0xFFFFu) | words[3] << 16));
  } else {
    // 4B bytes: B 32-bit words of the four groups' 8B-bit codes laid end to end.
    std::uint32_t out[B] = {};
    QSDP_UNROLL
    for (unsigned g = 0; g < 4; ++g) {
      const unsigned bit = g * 8 * B;
      const std::uint64_t own = words[g] & ((std::uint64_t{1} << (8 * B)) - 1);
      QSDP_UNROLL
      for (unsigned i = 0; i < B; ++i) {  // word i covers bits [32i, 32i + 32)
        const int at_bit = static_cast<int>(32 * i) - static_cast<int>(bit);
        if (at_bit >= 0 && at_bit < 8 * B)
          out[i] |= static_cast<std::uint32_t>(own >> at_bit);
        else if (at_bit < 0 && -at_bit < 32)
          out[i] |= static_cast<std::uint32_t>(own << -at_bit);
      }
    }
    QSDP_UNROLL
    for (unsigned i = 0; i < B; ++i) reinterpret_cast<std::uint32_t*>(at)[i] = out[i];
  }
}

/// Whether Q's one-pass encode runs for every bucket, non-finite ones (whose scale and codes it
/// then replaces) and the whole of a cut span included, so that its loop has one path rather than
/// branches around the encoding: a block-scaled policy's round-to-nearest encode, which has no
/// draw and no undefined step on NaN or infinity. At buckets of 32 its spans take the SpanBuckets
/// instantiation.
template <class Q>
inline constexpr bool encodes_any_bucket =
    !std::is_void_v<typename block_element<Q>::type> && !randomized_elements<Q>();

/// Fast path: one pass, bucket = 2^log2_bucket values (32..4096), packet 16-byte aligned, src
/// 16-byte aligned (SrcAligned: 16-byte loads) or at least aligned to its element (element loads,
/// as a reduce-scatter's chunk of a count that is no multiple of 16 bytes needs; a separate
/// instantiation, so that the aligned kernel carries none of them).
/// A thread takes a span of 32 values (four groups) of one bucket: its values stay in registers
/// from the 16-byte loads to the codes; the bucket's 1..128 threads reduce min/max/finite with warp
/// shuffles (and shared memory across warps for buckets of 2048 and 4096), and each fits the
/// metadata itself (no broadcast); the first writes it. SpanBuckets: buckets of 32 values (the MX
/// block), a thread's span its whole bucket, and no reduction at all (a separate instantiation, for
/// encodes_any_bucket policies only).
template <class Q, class T, bool SrcAligned, bool SpanBuckets = false>
__global__ void __launch_bounds__(fast_encode_block)
    encode_spans_kernel(Q q, const T* __restrict__ src, std::size_t count,
                        std::byte* __restrict__ packet, packet_layout l, rng_source source,
                        unsigned log2_bucket) {
  bind_to_packet(q, packet);  // the tensor record is written before
  using meta_type = typename Q::meta_type;
  constexpr int B = Q::bits;
  constexpr unsigned groups_per_span = span_values / group_values;
  const rng_key key = source.resolve();
  __shared__ partial_stats warp_partials[fast_encode_block / 32];
  const unsigned threads_per_bucket = 1u << (log2_bucket - 5);
  const unsigned width = threads_per_bucket < 32 ? threads_per_bucket : 32;
  const std::uint64_t spans = (count + span_values - 1) / span_values;
  const std::uint64_t tiles = (spans + fast_encode_block - 1) / fast_encode_block;
  for (std::uint64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::uint64_t s = tile * fast_encode_block + threadIdx.x;
    const std::uint64_t first = s * span_values;
    float v[span_values];
    unsigned n = 0;
    partial_stats p;
    if (first + span_values <= count) {
      if constexpr (SrcAligned) {
        p = load_span_aligned_stats<T, fit_reads_abs_max<Q>()>(src + first, v);
      } else {  // a chunk off a 16-byte boundary (whole elements): element by element
        QSDP_UNROLL
        for (unsigned k = 0; k < span_values; ++k) {
          v[k] = element_traits<T>::to_float(__ldg(src + first + k));
          p.add(v[k]);
        }
      }
      n = span_values;
    } else if (first < count) {  // the cut last span
      n = static_cast<unsigned>(count - first);
      QSDP_UNROLL
      for (unsigned k = 0; k < span_values; ++k) {
        v[k] = k < n ? load_value(src, first + k) : 0.0f;
        if (k < n) p.add(v[k]);
      }
    }
    // Every thread of the block takes part in the reduction (inactive ones with empty statistics).
    // Five levels, each kept only within the bucket's lanes (merging is idempotent, so a lane may
    // merge a value twice, never one of another bucket): no loop of run-time length.
    QSDP_UNROLL
    for (unsigned offset = 16; offset > 0 && !SpanBuckets; offset /= 2) {
      const partial_stats o = shuffle_xor(p, offset);
      if (offset < width) p.merge(o);
    }
    if (!SpanBuckets && threads_per_bucket > 32) {  // 2 or 4 warps per bucket
      if (threadIdx.x % 32 == 0) warp_partials[threadIdx.x / 32] = p;
      __syncthreads();
      const unsigned warps_per_bucket = threads_per_bucket / 32;
      const unsigned first_warp = threadIdx.x / threads_per_bucket * warps_per_bucket;
      p = warp_partials[first_warp];
      QSDP_UNROLL
      for (unsigned w = 1; w < 4; ++w)
        if (w < warps_per_bucket) p.merge(warp_partials[first_warp + w]);
      __syncthreads();  // the next tile overwrites warp_partials
    }
    if (n == 0) continue;
    const std::uint64_t bucket = first >> log2_bucket;
    const std::uint64_t bucket_begin = bucket << log2_bucket;
    const std::uint64_t in_bucket = count - bucket_begin < (std::uint64_t{1} << log2_bucket)
                                        ? count - bucket_begin
                                        : (std::uint64_t{1} << log2_bucket);
    std::uint64_t words[groups_per_span] = {};
    meta_type m = non_finite_meta<Q>();
    if (encodes_any_bucket<Q> || p.finite()) {
      m = fit_bucket(q, p, in_bucket, key, bucket);
      philox_block blocks[groups_per_span] = {};  // the four groups' draws, generated together
      if constexpr (randomized_elements<Q>())
        key.blocks(draw_domain::element, s * groups_per_span, blocks);
      if (randomized_elements<Q>() || encodes_any_bucket<Q> || n == span_values) {
        // Every value of the span is encoded, those past the count (zeros) too, and their codes
        // are cleared afterwards (the host pads with code 0). With per-value draws that is one
        // version of the per-value work: nvcc no longer splits the Philox rounds between a
        // whole-span and a cut-span copy, recomputing products in each (34 of 114 multiplies);
        // for encodes_any_bucket policies it keeps the one path.
        QSDP_UNROLL
        for (unsigned g = 0; g < groups_per_span; ++g)
          words[g] = encode_group_drawn(q, v + g * group_values, group_values, m, blocks[g]);
        if (n < span_values) {
          QSDP_UNROLL
          for (unsigned g = 0; g < groups_per_span; ++g) {
            const unsigned in_group = n > g * group_values ? n - g * group_values : 0;
            if (in_group < group_values)
              words[g] &= (std::uint64_t{1} << (in_group * static_cast<unsigned>(B))) - 1u;
          }
        }
      } else {  // the cut last span of a policy without draws: no value past the count encoded
        QSDP_UNROLL
        for (unsigned g = 0; g < groups_per_span; ++g) {
          const unsigned in_group = n > g * group_values ? n - g * group_values : 0;
          words[g] =
              encode_group_drawn(q, v + g * group_values,
                                 in_group < group_values ? in_group : group_values, m, blocks[g]);
        }
      }
      if (encodes_any_bucket<Q> && !p.finite()) {
        m = non_finite_meta<Q>();
        QSDP_UNROLL
        for (unsigned g = 0; g < groups_per_span; ++g) words[g] = 0;
      }
    }
    if (first == bucket_begin) {
      store_meta_aligned(packet, l, bucket, m);
      if (!p.finite()) set_flag(packet + l.flags_offset, bucket);
    }
    std::byte* const codes = packet + l.codes_offset + s * (4 * B);
    if (n == span_values) {
      store_span_codes<B>(codes, words);
    } else {
      QSDP_UNROLL
      for (unsigned g = 0; g < groups_per_span; ++g) {
        const std::uint64_t group = s * groups_per_span + g;
        store_codes<B>(codes + g * B, words[g], group_bytes(B, group, l.code_bytes));
      }
    }
  }
}

// ---- Decoding
// ---------------------------------------------------------------------------------------

/// What a decoding kernel reports about a bad header (device_report::detail).
struct bad_header {
  packet_header seen;
  header_expectation want;
};
static_assert(sizeof(bad_header) <= sizeof(device_report::detail),
              "device_report::detail too small");

/// The host's message for a bad_header report: the host decoder's own, for the same header, and
/// where the packet was: "(in <source_noun> <index>, ...)", e.g. "in packet 2" or "in the packet
/// from rank 2".
inline std::string describe_bad_header(const device_report& report, const char* where,
                                       const char* source_noun) {
  bad_header b;
  std::memcpy(&b, report.detail, sizeof b);
  std::string message;
  try {
    check_header(b.seen, b.want, where);
    message = std::string(where) + ": a kernel reported a bad packet header";
  } catch (const qsdp::error& e) {
    message = e.what();
  }
  return message + " (in " + source_noun + " " + std::to_string(report.index) +
         ", found by the device; values decoded from it were set to NaN)";
}

/// Records a bad header (first failure wins) so that failure_channel::poll reports it.
__device__ inline void report_bad_header(device_report* f, unsigned packet,
                                         const packet_header& seen,
                                         const header_expectation& want) {
  if (atomicCAS(&f->claimed, 0u, 1u) != 0u) return;
  f->index = packet;
  const bad_header b{seen, want};
  memcpy(f->detail, &b, sizeof b);
  __threadfence_system();
  atomicExch(&f->ready, 1u);
}

/// The block's threads check the packets' headers in parallel (thread t packet t, t + blockDim.x,
/// ...); returns to every thread whether all match. Block 0 reports a mismatch.
__device__ inline bool headers_ok(const std::byte* packets, std::size_t packet_bytes,
                                  unsigned count, unsigned first_index,
                                  const header_expectation& want, device_report* f) {
  int ok = 1;
  for (unsigned p = threadIdx.x; p < count; p += blockDim.x) {
    packet_header h;
    memcpy(&h, packets + p * packet_bytes, sizeof h);
    if (header_mismatch(h, want) != header_field::none) {
      ok = 0;
      if (blockIdx.x == 0) report_bad_header(f, first_index + p, h, want);
    }
  }
  return __syncthreads_and(ok) != 0;
}

/// Sinks: what happens to a group's decoded values. begin() gives the starting accumulator, add()
/// folds in one packet's values, end() writes the result.
template <class T>
struct store_sink {  // decode: dst = value (saturated into T's range)
  static constexpr bool adds = false;
  T* dst;
  bool aligned;
  __device__ void begin(std::uint64_t, unsigned, float*) const {}
  __device__ void add(float* a, const float* v, unsigned n) const {
    for (unsigned k = 0; k < group_values; ++k)
      if (k < n) a[k] = v[k];
  }
  __device__ void end(std::uint64_t first, unsigned n, const float* a) const {
    alignas(16) T out[group_values];  // stored as 16-byte words
    for (unsigned k = 0; k < group_values; ++k)
      out[k] = saturating_from_float<T>(k < n ? a[k] : 0.0f);
    store_values(dst, first, n, out, aligned);
  }
  template <class U>
  __device__ static void store_values(U* dst, std::uint64_t first, unsigned n, const U* out,
                                      bool aligned) {
    if (aligned && n == group_values) {
      const auto* words = reinterpret_cast<const uint4*>(out);
      auto* to = reinterpret_cast<uint4*>(dst + first);
      for (unsigned w = 0; w < sizeof(U) * group_values / 16; ++w) to[w] = words[w];
    } else {
      for (unsigned k = 0; k < group_values; ++k)
        if (k < n)
          memcpy(reinterpret_cast<unsigned char*>(dst) + (first + k) * sizeof(U),
                 static_cast<const void*>(&out[k]), sizeof(U));
    }
  }
};

struct accumulate_sink {  // decode_accumulate: acc += value, packet after packet
  static constexpr bool adds = true;
  float* acc;
  bool aligned;
  __device__ void begin(std::uint64_t first, unsigned n, float* a) const {
    if (aligned && n == group_values) {
      const float4 x = reinterpret_cast<const float4*>(acc + first)[0];
      const float4 y = reinterpret_cast<const float4*>(acc + first)[1];
      a[0] = x.x, a[1] = x.y, a[2] = x.z, a[3] = x.w, a[4] = y.x, a[5] = y.y, a[6] = y.z,
      a[7] = y.w;
    } else {
      for (unsigned k = 0; k < group_values; ++k)
        if (k < n) a[k] = load_value(acc, first + k);
    }
  }
  __device__ void add(float* a, const float* v, unsigned n) const {
    for (unsigned k = 0; k < group_values; ++k)
      if (k < n) a[k] = a[k] + v[k];
  }
  __device__ void end(std::uint64_t first, unsigned n, const float* a) const {
    store_sink<float>::store_values(acc, first, n, a, aligned);
  }
};

template <class T>
struct reduce_sink {  // reduce-scatter: out = (sum over packets) [/ world], rounded to T
  static constexpr bool adds = true;
  T* dst;
  bool aligned;
  bool average;
  float world;
  __device__ void begin(std::uint64_t, unsigned, float* a) const {
    for (unsigned k = 0; k < group_values; ++k) a[k] = 0.0f;
  }
  __device__ void add(float* a, const float* v, unsigned n) const {
    for (unsigned k = 0; k < group_values; ++k)
      if (k < n) a[k] = a[k] + v[k];
  }
  __device__ void end(std::uint64_t first, unsigned n, const float* a) const {
    alignas(16) T out[group_values];  // stored as 16-byte words
    // Plain rounding, as on the host: a sum that overflows T becomes inf, never a clipped value.
    for (unsigned k = 0; k < group_values; ++k)
      out[k] = element_traits<T>::from_float(k < n ? (average ? a[k] / world : a[k]) : 0.0f);
    store_sink<T>::store_values(dst, first, n, out, aligned);
  }
};

/// One group of a quantized packet, fast when the group lies in one bucket (log2_bucket >= 3) and
/// the packet is 16-byte aligned.
template <class Q>
__device__ QSDP_FORCE_INLINE unsigned decode_one(const Q& q, const std::byte* packet,
                                                 const packet_layout& l, std::size_t count,
                                                 std::uint64_t g, int log2_bucket, bool aligned,
                                                 float* v) {
  if (log2_bucket < 3 || !aligned) return decode_group(q, packet, l, count, g, v);
  using meta_type = typename Q::meta_type;
  constexpr int B = Q::bits;
  const std::uint64_t first = g * group_values;
  const unsigned n =
      count - first < group_values ? static_cast<unsigned>(count - first) : group_values;
  const std::uint64_t b = first >> log2_bucket;
  const auto* flags = reinterpret_cast<const std::uint8_t*>(packet + l.flags_offset);
  if (bucket_flagged(flags, b)) {
    for (unsigned k = 0; k < group_values; ++k) v[k] = quiet_nan();
    return n;
  }
  const meta_type m = load_meta<meta_type>(packet, l, b);
  const std::uint64_t word =
      load_codes<B>(packet + l.codes_offset + g * B, group_bytes(B, g, l.code_bytes));
  QSDP_UNROLL
  for (unsigned k = 0; k < group_values; ++k) v[k] = q.decode(code_at<B>(word, k), m);
  return n;
}

/// One value of an identity packet (raw values of the packet's own element type).
__device__ QSDP_FORCE_INLINE float identity_value(const std::byte* packet, const packet_layout& l,
                                                  std::uint8_t element, std::uint64_t i) {
  const std::byte* values = packet + l.codes_offset;
  switch (static_cast<element_type>(element)) {
    case element_type::f32: return load_value(reinterpret_cast<const float*>(values), i);
    case element_type::f64: return load_value(reinterpret_cast<const double*>(values), i);
    case element_type::f16: return load_value(reinterpret_cast<const __half*>(values), i);
    default: return load_value(reinterpret_cast<const __nv_bfloat16*>(values), i);
  }
}

/// Decodes groups first_group.. of `packets` packets of `count` values (packet p at packets + p *
/// packet_bytes) into the sink: everything decode_spans_kernel does not.
template <class Q, class Sink>
__global__ void __launch_bounds__(codec_block)
    decode_kernel(Q q, const std::byte* packets, std::size_t packet_bytes, unsigned packet_count,
                  unsigned first_index, std::size_t count, std::uint64_t first_group,
                  packet_layout l, header_expectation want, int log2_bucket, bool packets_aligned,
                  device_report* failure, Sink sink) {
  const bool ok = headers_ok(packets, packet_bytes, packet_count, first_index, want, failure);
  const std::uint64_t groups = (count + group_values - 1) / group_values;
  for (std::uint64_t g = first_group + blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
       g < groups; g += std::uint64_t{gridDim.x} * blockDim.x) {
    const std::uint64_t first = g * group_values;
    const unsigned n =
        count - first < group_values ? static_cast<unsigned>(count - first) : group_values;
    // Zeros although the sinks fill the first n: the host compiler of tests/simt cannot see that.
    alignas(16) float a[group_values] = {};
    float v[group_values];
#if !defined(__CUDA_ARCH__)  // nor that the decoders fill them (on the device it would cost spills)
    for (unsigned k = 0; k < group_values; ++k) v[k] = 0.0f;
#endif
    sink.begin(first, n, a);
    for (unsigned p = 0; p < packet_count; ++p) {
      const std::byte* packet = packets + p * packet_bytes;
      if (!ok) {
        for (unsigned k = 0; k < group_values; ++k) v[k] = quiet_nan();
      } else if constexpr (is_identity<Q>) {
        const auto element = static_cast<std::uint8_t>(packet[offsetof(packet_header, element)]);
        for (unsigned k = 0; k < group_values; ++k)
          if (k < n) v[k] = identity_value(packet, l, element, first + k);
      } else {
        bind_to_packet(q, packet);
        decode_one(q, packet, l, count, g, log2_bucket, packets_aligned, v);
      }
      sink.add(a, v, n);
    }
    sink.end(first, n, a);
  }
}

// ---- The fast decoder: spans of 32 values
// ---------------------------------------------------------------------------------------
// A thread decodes 32 consecutive values (four groups) of one bucket per step: the bucket's flag,
// metadata and grid (a double division) once per 32 values instead of once per 8, codes and values
// moved in 16-byte words, every array indexed by compile-time constants so that it stays in
// registers. It needs a bucket of at least 32 values (a power of two, so spans never straddle
// buckets), 16-byte aligned packets and output, and covers the whole spans of the count; the
// general decode_kernel does the rest (the last < 32 values, and everything else).

/// Loads n 32-bit words from a 4-byte aligned address, in the widest loads its alignment allows.
template <unsigned N>
__device__ QSDP_FORCE_INLINE void load_words(const std::byte* at, std::uint32_t (&w)[N]) {
  if constexpr (N % 4 == 0) {
    QSDP_UNROLL
    for (unsigned i = 0; i < N; i += 4) {
      const uint4 x = __ldg(reinterpret_cast<const uint4*>(at) + i / 4);
      w[i] = x.x, w[i + 1] = x.y, w[i + 2] = x.z, w[i + 3] = x.w;
    }
  } else if constexpr (N % 2 == 0) {
    QSDP_UNROLL
    for (unsigned i = 0; i < N; i += 2) {
      const uint2 x = __ldg(reinterpret_cast<const uint2*>(at) + i / 2);
      w[i] = x.x, w[i + 1] = x.y;
    }
  } else {
    QSDP_UNROLL
    for (unsigned i = 0; i < N; ++i) w[i] = __ldg(reinterpret_cast<const unsigned int*>(at) + i);
  }
}

/// Bucket b's metadata from a 16-byte aligned packet. The section starts at byte 32, so metadata of
/// a multiple of 4 bytes lies on a 4-byte boundary (8 and 16 when its size is a multiple of those):
/// loaded in words, the built-ins' floats in one or two loads; other types byte by byte.
template <class M>
__device__ QSDP_FORCE_INLINE M load_meta_aligned(const std::byte* packet, const packet_layout& l,
                                                 std::uint64_t b) {
  if constexpr (sizeof(M) % 4 == 0) {
    std::uint32_t w[sizeof(M) / 4];
    load_words(packet + l.meta_offset + b * sizeof(M), w);
    M m;
    memcpy(static_cast<void*>(&m), w, sizeof m);
    return m;
  } else {
    return load_meta<M>(packet, l, b);
  }
}

/// Codes of group j (0..3) of a span whose codes are the B 32-bit words w (LSB first).
template <int B>
__device__ QSDP_FORCE_INLINE std::uint64_t span_group_word(const std::uint32_t (&w)[B],
                                                           unsigned j) {
  const unsigned bit = j * 8 * B, i = bit / 32, shift = bit % 32;
  std::uint64_t word = w[i];
  if (i + 1 < B) word |= static_cast<std::uint64_t>(w[i + 1]) << 32;
  if (shift != 0) {
    word >>= shift;
    if (i + 2 < B) word |= static_cast<std::uint64_t>(w[i + 2]) << (64 - shift);
  }
  return B == 8 ? word : word & ((std::uint64_t{1} << (8 * B)) - 1);
}

/// The block-scaled decode of span s's codes, the B words w (32 codes of 4 or 8 bits), when it
/// gives decode's bits: the factor rescaled (block_factor times scaled_bits_unit) is finite and no
/// code is a NaN or infinity code. Each code's packed_scaled_bits times the rescaled factor is then
/// element * block_factor as a real number, so the multiplication rounds as decode's does: a
/// product for take_product(k, bits, factor) to fuse where it is exact, else rounded for take.
/// No decode per value and no rescaling multiplication: three integer steps and the fold. A
/// factor at or above 2^(1 + bias) (MX: a block abs_max of 2^(emax + bias + 1) or more; NVFP4: 4)
/// returns false, as does every other policy, and decode_span decodes value by value.
template <class Q, int B, class Take, class TakeProduct>
__device__ QSDP_FORCE_INLINE bool fold_scaled_span(const Q& q, const typename Q::meta_type& m,
                                                   const std::uint32_t (&w)[B], Take& take,
                                                   TakeProduct& take_product) {
  using F = typename block_element<Q>::type;
  if constexpr (std::is_void_v<F> || 32 % B != 0) {
    return false;
  } else {
    if (packed_special_codes<F>(w)) return false;
    const float rescaled = q.block_factor(m) * scaled_bits_unit<F>;
    if (!(fabsf(rescaled) <= 0x1.fffffep127f)) return false;
    QSDP_UNROLL
    for (unsigned k = 0; k < span_values; ++k) {
      const float bits = bit_cast<float>(packed_scaled_bits<F>(w[k * B / 32], k * B % 32));
      if constexpr (exact_block_products<Q>)
        take_product(k, bits, rescaled);
      else
        take(k, unfused_product(bits, rescaled));
    }
    return true;
  }
}

/// The 32 values of span s of one packet (flagged buckets and bad packets: NaN), value k handed to
/// take(k, value), or as an exact product x * y to take_product(k, x, y) (fold_scaled_span).
/// (Taken at once rather than returned in an array: a NaN-filled array was filled before the test,
/// 32 moves on every packet's path.)
template <class Q, class Take, class TakeProduct>
__device__ QSDP_FORCE_INLINE void decode_span(const Q& q, const std::byte* packet,
                                              const packet_layout& l, std::uint64_t s,
                                              int log2_bucket, bool ok, Take&& take,
                                              TakeProduct&& take_product) {
  using meta_type = typename Q::meta_type;
  constexpr int B = Q::bits;
  const std::uint64_t b = (s * span_values) >> log2_bucket;
  const auto* flags = reinterpret_cast<const std::uint8_t*>(packet + l.flags_offset);
  if (!ok || bucket_flagged(flags, b)) {
    QSDP_UNROLL
    for (unsigned k = 0; k < span_values; ++k) take(k, quiet_nan());
    return;
  }
  const meta_type m = load_meta_aligned<meta_type>(packet, l, b);
  std::uint32_t w[B];  // 32 codes of B bits: B words, at byte 4 * B * s (4-byte aligned)
  load_words(packet + l.codes_offset + s * (4 * B), w);
  if (fold_scaled_span(q, m, w, take, take_product)) return;
  if constexpr (32 % B == 0) {
    // Widths that divide 32: code k lies inside word k * B / 32; 32-bit shifts (a byte permute for
    // B = 8) instead of the 64-bit ones of a group's word.
    if constexpr (decodes_on_grid<Q>) {
      // A fractional grid (random_shift's) from packed codes where it may (grid.hpp,
      // packed_fraction_applies): for B = 8 one byte permute puts the code above the fraction.
      const value_grid g = q.value_grid_for(m);
      std::uint32_t units;
      if (g.fractional && packed_fraction_applies(g, units)) {
        QSDP_UNROLL
        for (unsigned k = 0; k < span_values; ++k) {
          const std::uint32_t word = w[k * B / 32];
          const unsigned shift = k * B % 32;
          std::uint32_t packed;
#if QSDP_DEVICE_SPELLING
          if constexpr (B == 8)
            packed = __byte_perm(word, units, 0x0654u | (shift / 8) << 12);
          else
#endif
            packed = ((word >> shift) & ((1u << B) - 1u)) << 24 | units;
          take(k, packed_fraction_decode(g, packed));
        }
        return;
      }
    }
    QSDP_UNROLL
    for (unsigned k = 0; k < span_values; ++k) {
      const std::uint32_t word = w[k * B / 32];
      const unsigned shift = k * B % 32;
      std::uint32_t code;
      if constexpr (B == 8) {
#if QSDP_DEVICE_SPELLING
        code = __byte_perm(word, 0u, 0x4440u + shift / 8);
#else
        code = (word >> shift) & 0xFFu;
#endif
      } else {
        code = (word >> shift) & ((1u << B) - 1u);
      }
      take(k, q.decode(code, m));
    }
  } else {
    QSDP_UNROLL
    for (unsigned j = 0; j < span_values / group_values; ++j) {
      const std::uint64_t word = span_group_word<B>(w, j);
      QSDP_UNROLL
      for (unsigned k = 0; k < group_values; ++k)
        take(j * group_values + k, q.decode(code_at<B>(word, k), m));
    }
  }
}

/// Widths whose spans decode through a shuffled table: lane l evaluates code l mod 2^B of its own
/// bucket once, and every value takes its decoded value from the lane of its code with one warp
/// shuffle, instead of a conversion, a double fma and a rounding per value. It needs 2^B <= 16
/// lanes per bucket's lane group (buckets of >= 512 values: 16 or 32 lanes, whole spans) and B
/// dividing 32. The shuffle's source lane is the code word shifted, unmasked: a shuffle of width w
/// reads only its low log2(w) bits, and lane j of the group holds code j mod 2^B.
template <int B>
inline constexpr bool shuffled_width = B <= 4 && 32 % B == 0;
inline constexpr int shuffled_min_log2_bucket = 9;

/// Lanes per bucket of the shuffled table (16 or 32), and this lane's table entry: the value of
/// code (lane mod 2^B) in span s's bucket (NaN for a flagged bucket or a bad packet).
__device__ QSDP_FORCE_INLINE int shuffled_lanes(int log2_bucket) {
  return log2_bucket >= 10 ? 32 : 1 << (log2_bucket - 5);
}
template <class Q>
__device__ QSDP_FORCE_INLINE float shuffled_entry(const Q& q, const std::byte* packet,
                                                  const packet_layout& l, std::uint64_t s,
                                                  int log2_bucket, bool ok) {
  const std::uint64_t b = (s * span_values) >> log2_bucket;
  const auto* flags = reinterpret_cast<const std::uint8_t*>(packet + l.flags_offset);
  if (!ok || bucket_flagged(flags, b)) return quiet_nan();
  return q.decode((threadIdx.x % 32) & ((1u << Q::bits) - 1u),
                  load_meta_aligned<typename Q::meta_type>(packet, l, b));
}

/// Span s's 32 code words' shuffles of `entry` (a float, or T's bit pattern), value k handed to
/// take(k, value) as it arrives: a sum takes it at once, so no array of 32 shuffled values is
/// live at the same time as the sums (which cost register moves in the 8-packet reduce).
template <int B, class E, class Take>
__device__ QSDP_FORCE_INLINE void shuffle_span(const std::byte* packet, const packet_layout& l,
                                               std::uint64_t s, int width, E entry, Take&& take) {
  static_assert(sizeof(E) == 4);
  std::uint32_t w[B];
  load_words(packet + l.codes_offset + s * (4 * B), w);
  const auto bits = detail::bit_cast<std::uint32_t>(entry);
  // The shuffle's segment operand for `width` (as __shfl_sync computes it), once: with a run-time
  // width nvcc compiled the 32 shuffles twice, for 16 and 32 lanes, and moved registers between
  // the two versions (18 moves per packet of the 8-packet reduce).
  const unsigned segment = ((32u - static_cast<unsigned>(width)) << 8) | 0x1Fu;
  QSDP_UNROLL
  for (unsigned k = 0; k < span_values; ++k) {
    const unsigned source = w[k * B / 32] >> (k * B % 32);
#if defined(__CUDA_ARCH__)
    std::uint32_t value;
    asm("shfl.sync.idx.b32 %0, %1, %2, %3, 0xffffffff;"
        : "=r"(value)
        : "r"(bits), "r"(source), "r"(segment));
#else
    (void)segment;
    const std::uint32_t value = __shfl_sync(0xFFFFFFFFu, bits, static_cast<int>(source), width);
#endif
    take(k, detail::bit_cast<E>(value));
  }
}

/// Folds one packet's value in: the store sink takes it as it is (0 + -0 would be +0), the others
/// add in packet order.
template <class Sink>
__device__ QSDP_FORCE_INLINE void fold_value(float& a, float v) {
  if constexpr (Sink::adds)
    a = a + v;
  else
    a = v;
}

/// Folds in the exact product x * y: fused into the sum (one rounding, as the product's own is
/// none), or stored.
template <class Sink>
__device__ QSDP_FORCE_INLINE void fold_product(float& a, float x, float y) {
  if constexpr (Sink::adds)
    a = fmaf(x, y, a);
  else
    a = x * y;
}

/// Span s of one packet through the shuffled table, folded into `a` (fold_value).
template <class Sink, class Q>
__device__ QSDP_FORCE_INLINE void add_span_shuffled(const Q& q, const std::byte* packet,
                                                    const packet_layout& l, std::uint64_t s,
                                                    int log2_bucket, bool ok,
                                                    float (&a)[span_values]) {
  shuffle_span<Q::bits>(packet, l, s, shuffled_lanes(log2_bucket),
                        shuffled_entry(q, packet, l, s, log2_bucket, ok),
                        [&](unsigned k, float value) { fold_value<Sink>(a[k], value); });
}

/// (hi:lo) >> shift, low 32 bits, for shift 16 or 32 (then hi).
__device__ QSDP_FORCE_INLINE std::uint32_t funnel_right(std::uint32_t lo, std::uint32_t hi,
                                                        unsigned shift) {
#if QSDP_DEVICE_SPELLING
  return __funnelshift_rc(lo, hi, shift);
#else
  return static_cast<std::uint32_t>(((static_cast<std::uint64_t>(hi) << 32) | lo) >> shift);
#endif
}

/// Stores a span's output, N 32-bit words (the bytes of 32 values), at `out`.
///
/// Not Skewed: `out` is 16-byte aligned; 16-byte stores.
/// Skewed: `out` lies `skew` bytes past a 16-byte boundary, a whole number of elements, so at
/// least 2-byte aligned; 4-byte stores. At 4-byte alignment (`skew` % 4 == 0) they are the span's
/// own words. Otherwise each 4-byte word straddles two of the span's: word i is (o[i-1] >> 16) |
/// (o[i] << 16), word 0 taking the previous lane's last half (one warp shuffle), and the span's own
/// last half is the next lane's to store. The first lane of the warp, whose previous span another
/// warp holds, stores only its own half of word 0, and the last lane of a run (lane 31, or the
/// last active one) its own last half: 2-byte stores, the peeled ends of a warp's run of 32 spans.
/// All lanes call it together; `active` false: a lane past the last span, which stores nothing.
/// (The kernels run one loop for aligned and one for skewed outputs, so that the aligned loop
/// carries none of this.)
template <bool Skewed, unsigned N>
__device__ QSDP_FORCE_INLINE void store_span_words(std::byte* out, const std::uint32_t (&o)[N],
                                                   unsigned skew, bool active) {
  if constexpr (!Skewed) {
    static_assert(N % 4 == 0);
    if (!active) return;
    auto* to = reinterpret_cast<uint4*>(out);
    QSDP_UNROLL
    for (unsigned i = 0; i < N; i += 4) to[i / 4] = make_uint4(o[i], o[i + 1], o[i + 2], o[i + 3]);
  } else {
    const std::uint32_t previous_last = __shfl_up_sync(0xFFFFFFFFu, o[N - 1], 1);
    const unsigned lane = threadIdx.x % 32;
    // Every lane shuffles (a full-mask shuffle that lane 31 skipped, as `lane == 31 || ...` would,
    // is undefined on the GPU and desynchronises the emulation's warp barriers).
    const unsigned next_active = __shfl_down_sync(0xFFFFFFFFu, active ? 1u : 0u, 1);
    const bool run_end = lane == 31 || next_active == 0;
    if (!active) return;
    const unsigned half = skew % 4;  // 0 or 2 bytes
    const unsigned shift = 32 - 8 * half;
    auto* to = reinterpret_cast<std::uint32_t*>(out - half);
    if (half != 0 && lane == 0)
      *reinterpret_cast<std::uint16_t*>(out) = static_cast<std::uint16_t>(o[0]);
    else
      to[0] = funnel_right(previous_last, o[0], shift);
    QSDP_UNROLL
    for (unsigned i = 1; i < N; ++i) to[i] = funnel_right(o[i - 1], o[i], shift);
    if (half != 0 && run_end)
      *reinterpret_cast<std::uint16_t*>(out + 4 * N - 2) =
          static_cast<std::uint16_t>(o[N - 1] >> 16);
  }
}

/// Decode into a 16-bit T through the shuffled table of T's bit patterns, saturated and rounded
/// once per lane: a value costs a shuffle and half a pack.
template <bool Skewed, class Q, class T>
__device__ QSDP_FORCE_INLINE void decode_span_shuffled_into(const Q& q, const std::byte* packet,
                                                            const packet_layout& l, std::uint64_t s,
                                                            int log2_bucket, bool ok, bool active,
                                                            T* dst, unsigned skew) {
  const T t = saturating_from_float<T>(shuffled_entry(q, packet, l, s, log2_bucket, ok));
  std::uint16_t pattern;
  memcpy(&pattern, static_cast<const void*>(&t), 2);
  std::uint32_t v[span_values];
  shuffle_span<Q::bits>(packet, l, s, shuffled_lanes(log2_bucket), std::uint32_t{pattern},
                        [&](unsigned k, std::uint32_t value) { v[k] = value; });
  std::uint32_t pairs[span_values / 2];
  QSDP_UNROLL
  for (unsigned i = 0; i < span_values; i += 2) pairs[i / 2] = v[i] | v[i + 1] << 16;
  store_span_words<Skewed>(reinterpret_cast<std::byte*>(dst + s * span_values), pairs, skew,
                           active);
}

/// Whether any half of N packed bf16 pairs is a NaN. On the device a NaN-propagating minimum over
/// the pairs, one instruction per pair, and one test at the end.
template <unsigned N>
__device__ QSDP_FORCE_INLINE bool bf16_pairs_have_nan(const std::uint32_t (&pairs)[N]) {
#if defined(__CUDA_ARCH__)
  const auto pair = [&](unsigned i) {  // (__nv_bfloat162 is not trivially copyable)
    __nv_bfloat162 p;
    memcpy(&p, &pairs[i], sizeof p);
    return p;
  };
  __nv_bfloat162 least = pair(0);
  QSDP_UNROLL
  for (unsigned i = 1; i < N; ++i) least = __hmin2_nan(least, pair(i));
  return __hisnan(least.x) || __hisnan(least.y);
#else
  bool nan = false;
  for (unsigned i = 0; i < N; ++i)
    nan = nan || (pairs[i] & 0x7FFFu) > 0x7F80u || (pairs[i] >> 16 & 0x7FFFu) > 0x7F80u;
  return nan;
#endif
}

/// 32 values of T from 32 floats (T's own rounding, `saturate` or plain), stored by
/// store_span_words.
template <class T, bool Saturate, bool Skewed>
__device__ QSDP_FORCE_INLINE void store_span(T* dst, std::uint64_t first,
                                             const float (&a)[span_values], unsigned skew,
                                             bool active) {
  auto* out = reinterpret_cast<std::byte*>(dst + first);
  if constexpr (sizeof(T) == 4) {
    std::uint32_t words[span_values];
    QSDP_UNROLL
    for (unsigned i = 0; i < span_values; ++i) words[i] = detail::bit_cast<std::uint32_t>(a[i]);
    store_span_words<Skewed>(out, words, skew, active);
  } else {
    std::uint32_t pairs[span_values / 2];
    if constexpr (element_traits<T>::tag == element_type::bf16) {
      // The paired conversion, exact for everything but NaN (bf16_pair_bits_rn); a span
      // holding a NaN is converted again, value by value, below.
      QSDP_UNROLL
      for (unsigned i = 0; i < span_values; i += 2) {
        const float lo = Saturate ? saturate_to<T>(a[i]) : a[i];
        const float hi = Saturate ? saturate_to<T>(a[i + 1]) : a[i + 1];
        pairs[i / 2] = bf16_pair_bits_rn(lo, hi);
      }
      if (!bf16_pairs_have_nan(pairs)) {
        store_span_words<Skewed>(out, pairs, skew, active);
        return;
      }
    }
    QSDP_UNROLL
    for (unsigned i = 0; i < span_values; i += 2) {
      const T lo = Saturate ? saturating_from_float<T>(a[i]) : element_traits<T>::from_float(a[i]);
      const T hi =
          Saturate ? saturating_from_float<T>(a[i + 1]) : element_traits<T>::from_float(a[i + 1]);
      std::uint16_t l16, h16;
      memcpy(&l16, static_cast<const void*>(&lo), 2);
      memcpy(&h16, static_cast<const void*>(&hi), 2);
      pairs[i / 2] = l16 | (static_cast<std::uint32_t>(h16) << 16);
    }
    store_span_words<Skewed>(out, pairs, skew, active);
  }
}

/// The spans' versions of the sinks (store_sink, accumulate_sink, reduce_sink above): the same
/// arithmetic on 32 values at once.
template <bool Skewed, class Sink>  // store and reduce: from zeros
__device__ QSDP_FORCE_INLINE void span_begin(const Sink&, std::uint64_t, float (&a)[span_values]) {
  QSDP_UNROLL
  for (unsigned k = 0; k < span_values; ++k) a[k] = 0.0f;
}
// SignificantBits: decoded_significant_bits of the policy. A finite float of at most 8 significant
// bits is at most 1.99 * 2^127, inside bf16's range: a store into bf16 then needs no saturation.
template <bool Skewed, int SignificantBits, class T>
__device__ QSDP_FORCE_INLINE void span_end(const store_sink<T>& sink, std::uint64_t first,
                                           float (&a)[span_values], unsigned skew, bool active) {
  constexpr bool in_range = element_traits<T>::tag == element_type::bf16 && SignificantBits <= 8;
  store_span<T, !in_range, Skewed>(sink.dst, first, a, skew, active);
}
template <bool Skewed>
__device__ QSDP_FORCE_INLINE void span_begin(const accumulate_sink& sink, std::uint64_t first,
                                             float (&a)[span_values]) {
  if constexpr (Skewed) {  // 4-byte aligned (span_skew)
    QSDP_UNROLL
    for (unsigned i = 0; i < span_values; ++i) a[i] = sink.acc[first + i];
  } else {
    const auto* from = reinterpret_cast<const float4*>(sink.acc + first);
    QSDP_UNROLL
    for (unsigned i = 0; i < span_values; i += 4) {
      const float4 x = from[i / 4];
      a[i] = x.x, a[i + 1] = x.y, a[i + 2] = x.z, a[i + 3] = x.w;
    }
  }
}
template <bool Skewed, int SignificantBits>
__device__ QSDP_FORCE_INLINE void span_end(const accumulate_sink& sink, std::uint64_t first,
                                           float (&a)[span_values], unsigned skew, bool active) {
  store_span<float, false, Skewed>(sink.acc, first, a, skew, active);
}
template <bool Skewed, int SignificantBits, class T>
__device__ QSDP_FORCE_INLINE void span_end(const reduce_sink<T>& sink, std::uint64_t first,
                                           float (&a)[span_values], unsigned skew, bool active) {
  if (sink.average) {
    // sum / world, rounded once: for a power-of-two world, sum * (1 / world) is the same exact
    // quotient rounded the same way (the reciprocal is exact), without a division per value.
    const float world = sink.world;
    const bool power_of_two = (detail::bit_cast<std::uint32_t>(world) & 0x007FFFFFu) == 0;
    if (power_of_two) {
      const float inverse = 1.0f / world;
      QSDP_UNROLL
      for (unsigned k = 0; k < span_values; ++k) a[k] = a[k] * inverse;
    } else {
      QSDP_UNROLL
      for (unsigned k = 0; k < span_values; ++k) a[k] = a[k] / world;
    }
  }
  store_span<T, false, Skewed>(sink.dst, first, a, skew, active);
}

/// Whether the sink is decode's into a 16-bit type (the shuffled table then holds its patterns).
template <class Sink>
inline constexpr bool stores_16_bit = false;
template <class T>
inline constexpr bool stores_16_bit<store_sink<T>> = sizeof(T) == 2;

/// Decodes the first `spans` spans of `packet_count` packets into the sink (see the section
/// comment); Shuffled: through the shuffled table (shuffled_width, buckets of >= 512 values). The
/// output starts `skew` bytes past a 16-byte boundary (store_span_words).
template <class Q, class Sink, bool Shuffled>
__global__ void __launch_bounds__(codec_block)
    decode_spans_kernel(Q q, const std::byte* packets, std::size_t packet_bytes,
                        unsigned packet_count, unsigned first_index, std::uint64_t spans,
                        packet_layout l, header_expectation want, int log2_bucket,
                        device_report* failure, Sink sink, unsigned skew) {
  const bool ok = headers_ok(packets, packet_bytes, packet_count, first_index, want, failure);
  const auto span = [&](auto skewed, std::uint64_t s, bool active) {
    constexpr bool Skewed = decltype(skewed)::value;
    if constexpr (Shuffled && stores_16_bit<Sink>) {
      bind_to_packet(q, packets);
      decode_span_shuffled_into<Skewed>(q, packets, l, s, log2_bucket, ok, active, sink.dst,
                                        skew);  // 1 packet
    } else {
      float a[span_values];
      span_begin<Skewed>(sink, s * span_values, a);
      const auto fold_packet = [&](unsigned p) {
        bind_to_packet(q, packets + p * packet_bytes);
        if constexpr (Shuffled) {
          add_span_shuffled<Sink>(q, packets + p * packet_bytes, l, s, log2_bucket, ok, a);
        } else {
          decode_span(
              q, packets + p * packet_bytes, l, s, log2_bucket, ok,
              [&](unsigned k, float value) { fold_value<Sink>(a[k], value); },
              [&](unsigned k, float x, float y) { fold_product<Sink>(a[k], x, y); });
        }
      };
      if constexpr (Sink::adds) {
        for (unsigned p = 0; p < packet_count; ++p) fold_packet(p);
      } else {  // a store keeps the last packet's values (decode has one): no loop for nvcc to peel
        fold_packet(packet_count - 1);
      }
      span_end<Skewed, decoded_significant_bits<Q>()>(sink, s * span_values, a, skew, active);
    }
  };
  // Warp tiles: a warp takes 32 consecutive spans per step and its lanes stay together (the
  // shuffled table and skewed stores need every lane): a lane past the last span decodes the last
  // span again and stores nothing. (The last span, not the warp's first: a lane's table entry must
  // be its own lane group's bucket's, and a group with lanes past the end holds the last span.)
  const auto warp_tiles = [&](auto skewed) {
    const unsigned lane = threadIdx.x % 32;
    const std::uint64_t warps = std::uint64_t{gridDim.x} * blockDim.x / 32;
    for (std::uint64_t base = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) / 32 * 32;
         base < spans; base += warps * 32) {
      const bool active = base + lane < spans;
      span(skewed, active ? base + lane : spans - 1, active);
    }
  };
  if (skew != 0) {
    warp_tiles(std::true_type{});
  } else if constexpr (Shuffled) {
    warp_tiles(std::false_type{});
  } else {  // no lane needs another: a thread per span
    for (std::uint64_t s = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; s < spans;
         s += std::uint64_t{gridDim.x} * blockDim.x)
      span(std::false_type{}, s, true);
  }
}

// ---- The block-scaled layout
// ---------------------------------------------------------------------------------------

/// The block-scaled layout (detail/codec/block_layout.hpp) of `packet_count` packets of `count`
/// values, packet p at packets + p * packet_bytes, written to elements + p * element_stride and
/// scales + p * scale_stride: the scale and 8- or 4-bit element bytes copied, 6-bit elements
/// unpacked to a byte each. Every block checks the headers first; where any is bad (reported as the
/// decoders report it, packet first_index + p), every packet's scales become E8M0's NaN and every
/// element 0, so that a consumer's values are NaN, as a decode's would be.
template <int Bits>
__global__ void __launch_bounds__(codec_block)
    unpack_block_scaled_kernel(const std::byte* packets, std::size_t packet_bytes,
                               unsigned packet_count, unsigned first_index, std::uint64_t count,
                               packet_layout l, header_expectation want, device_report* failure,
                               std::byte* elements, std::size_t element_stride,
                               std::uint8_t* scales, std::size_t scale_stride) {
  const bool ok = headers_ok(packets, packet_bytes, packet_count, first_index, want, failure);
  const std::uint64_t element_bytes = layout_element_bytes(Bits, count);
  const std::uint64_t step = std::uint64_t{gridDim.x} * blockDim.x;
  for (unsigned p = 0; p < packet_count; ++p) {
    const std::byte* packet = packets + p * packet_bytes;
    const std::byte* codes = packet + l.codes_offset;
    std::uint8_t* scale_out = scales + p * scale_stride;
    std::byte* element_out = elements + p * element_stride;
    for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < l.buckets;
         i += step)
      scale_out[i] = ok ? static_cast<std::uint8_t>(packet[l.meta_offset + i]) : e8m0_nan;
    for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < element_bytes;
         i += step) {
      if constexpr (Bits == 6)
        element_out[i] = ok ? six_bit_code(codes, i) : std::byte{0};
      else
        element_out[i] = ok ? codes[i] : std::byte{0};
    }
  }
}

}  // namespace qsdp::detail::cuda
