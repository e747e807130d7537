// SPDX-License-Identifier: Apache-2.0
//
// The device kernels of qsdp::hadamard<Inner>: the rotation of detail/codec/hadamard.hpp fused into
// the inner policy's encode and decode, writing the host codec's packets byte for byte and decoding
// to the host's values bit for bit.
//
// Both work in tiles of 4096 values (the largest bucket, so a tile holds whole buckets) in shared
// memory, one tile per block of 256 threads at a time:
// * encode: the tile's values are loaded (coalesced), multiplied by their signs and 1/piece size,
//   and run through the butterfly stages of their buckets (one stage per barrier, every thread a
//   pair of each stage, in the host's stage order, so every value sees the same float operations);
//   then each thread takes 16 consecutive rotated values (two groups, one bucket), the bucket's
//   threads reduce their statistics (warp shuffles, shared memory across warps for buckets of 1024
//   and more), and each encodes its groups with the inner policy's arithmetic (group.hpp).
// * decode: each thread decodes its two groups of every packet, summing in packet order where all
//   packets carry the same rotation (a reduce-scatter's: the inverse then runs once per tile, as on
//   the host); the inverse stages run in shared memory, and the sink takes the results. Packets
//   rotated differently (decode_accumulate of unrelated packets) are transformed back one by one.
// Input and packets may sit at any alignment; the source is read and the codes are written once.
// The sign bits of a tile are 32 Philox blocks, drawn by its first warp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../codec/hadamard.hpp"
#include "codec_kernels.cuh"

namespace qsdp::detail::cuda {

inline constexpr unsigned rotation_tile = static_cast<unsigned>(hadamard_max_bucket);
inline constexpr unsigned rotation_block = 256;
/// Values a thread encodes or decodes per tile: two groups, always in one bucket (>= 16 values).
inline constexpr unsigned rotation_share = rotation_tile / rotation_block;
static_assert(rotation_share == 2 * group_values);

/// Shared-memory slot of tile value j: one float of padding per 32, so that the 16 consecutive
/// values each thread reads for its groups fall in distinct banks across a warp.
__device__ QSDP_FORCE_INLINE unsigned tile_slot(unsigned j) { return j + (j >> 5); }
inline constexpr unsigned tile_slots = rotation_tile + rotation_tile / 32;

/// A value's place in its bucket: its offset and the bucket's length (short for the last).
struct bucket_place {
  std::uint32_t offset, length;
  /// log2 of the size of the rotation piece of the value k places on (in the same bucket).
  __device__ unsigned piece_log2(unsigned k = 0) const {
    return hadamard_piece_log2(offset + k, length);
  }
};

/// Values of the packet a thread's share starting at `first` holds (0 .. 16).
__device__ QSDP_FORCE_INLINE unsigned share_values(std::uint64_t first, std::size_t count) {
  return first >= count                   ? 0u
         : count - first < rotation_share ? static_cast<unsigned>(count - first)
                                          : rotation_share;
}

/// Values of group g (0 or 1) of a share of n values (0 .. 8).
__device__ QSDP_FORCE_INLINE unsigned group_share(unsigned n, unsigned g) {
  const unsigned left = n > g * group_values ? n - g * group_values : 0u;
  return left < group_values ? left : group_values;
}

/// Where a tile lies in the packet, and the piece of each of its values.
struct tile_view {
  std::uint64_t begin;  // packet index of tile value 0 (a multiple of 4096)
  std::size_t count;    // values in the packet
  unsigned log2_bucket;

  __device__ bool holds(unsigned j) const { return begin + j < count; }
  /// The place of tile value j (which holds(j)).
  __device__ bucket_place place(unsigned j) const {
    const std::uint64_t i = begin + j;
    const std::uint64_t bucket_begin = i >> log2_bucket << log2_bucket;
    const std::uint64_t left = count - bucket_begin;
    return {static_cast<std::uint32_t>(i - bucket_begin), left < (std::uint64_t{1} << log2_bucket)
                                                              ? static_cast<std::uint32_t>(left)
                                                              : (std::uint32_t{1} << log2_bucket)};
  }
  __device__ unsigned piece_log2(unsigned j) const { return place(j).piece_log2(); }
};

/// The tile's 4096 sign bits (value j: bit j % 32 of words[j / 32]; hadamard.hpp's sign_bits),
/// drawn by the block's first 32 threads. The caller synchronises before they are read.
__device__ QSDP_FORCE_INLINE void draw_tile_signs(const rotation_record& r, std::uint64_t begin,
                                                  std::uint32_t* words) {
  if (threadIdx.x < rotation_tile / 128) {
    const philox_block b = sign_block(r, begin / 128 + threadIdx.x);
    QSDP_UNROLL
    for (unsigned k = 0; k < 4; ++k) words[threadIdx.x * 4 + k] = b.v[k];
  }
}

__device__ QSDP_FORCE_INLINE bool tile_sign_negative(const std::uint32_t* words, unsigned j) {
  return (words[j / 32] >> (j % 32)) & 1u;
}

/// The butterfly stages of every bucket in the tile, stride 1 first, each followed by a barrier
/// (so the caller's writes must be complete: it synchronises before). A pair (j, j + h) is
/// transformed when its piece is larger than h; values past the count are never touched.
__device__ QSDP_FORCE_INLINE void tile_butterflies(float* tile, const tile_view& view) {
  for (unsigned s = 0; s < view.log2_bucket; ++s) {
    const unsigned h = 1u << s;
    for (unsigned pair = threadIdx.x; pair < rotation_tile / 2; pair += rotation_block) {
      const unsigned j = ((pair >> s) << (s + 1)) | (pair & (h - 1));
      if (!view.holds(j) || view.piece_log2(j) <= s) continue;
      const float a = tile[tile_slot(j)], b = tile[tile_slot(j + h)];
      tile[tile_slot(j)] = a + b;
      tile[tile_slot(j + h)] = a - b;
    }
    __syncthreads();
  }
}

/// One value's butterfly with its partner's value across lanes or warps: the pair's lower value
/// becomes mine + theirs and the upper theirs - mine (a + b and a - b, rounded alike), given
/// `sign` = +1 (lower) or -1 (upper): one fused multiply-add, exact in its product, so one rounding
/// of the same sum, instead of a selection between two additions.
__device__ QSDP_FORCE_INLINE float partner_butterfly(float mine, float theirs, float sign) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(mine, sign, theirs);
#else
  return sign < 0.0f ? theirs - mine : mine + theirs;
#endif
}

/// The same stages for a tile of whole buckets (every piece a bucket), where thread t holds tile
/// values 16t .. 16t + 15 in v: strides 1 to 8 within v, 16 to 256 across the warp's lanes
/// (__shfl_xor_sync and partner_butterfly), 512 and up through the tile in shared memory, between
/// barriers. About 1 instruction per value and stage in registers and 2 across lanes, against
/// some 17 for tile_butterflies' indexed pairs. Every thread of the block calls it.
__device__ QSDP_FORCE_INLINE void register_butterflies(float (&v)[rotation_share], float* tile,
                                                       unsigned log2_bucket) {
  QSDP_UNROLL
  for (unsigned h = 1; h < rotation_share; h *= 2) {
    QSDP_UNROLL
    for (unsigned j = 0; j < rotation_share; ++j) {
      if (j & h) continue;
      const float a = v[j], b = v[j + h];
      v[j] = a + b;
      v[j + h] = a - b;
    }
  }
  constexpr unsigned log2_share = 4;  // rotation_share == 16
  const unsigned lane = threadIdx.x % 32;
  QSDP_UNROLL
  for (unsigned s = log2_share; s < log2_share + 5; ++s) {  // strides 16 .. 256
    if (s >= log2_bucket) return;
    const unsigned lanes = 1u << (s - log2_share);
    const float sign = (lane & lanes) != 0 ? -1.0f : 1.0f;
    QSDP_UNROLL
    for (unsigned k = 0; k < rotation_share; ++k)
      v[k] = partner_butterfly(v[k], __shfl_xor_sync(0xFFFFFFFFu, v[k], lanes), sign);
  }
  for (unsigned s = log2_share + 5; s < log2_bucket; ++s) {  // strides 512 .. 2048: across warps
    const unsigned partner = threadIdx.x ^ (1u << (s - log2_share));
    const float sign = (threadIdx.x & (1u << (s - log2_share))) != 0 ? -1.0f : 1.0f;
    __syncthreads();  // every thread is done reading the tile
    QSDP_UNROLL
    for (unsigned k = 0; k < rotation_share; ++k)
      tile[tile_slot(threadIdx.x * rotation_share + k)] = v[k];
    __syncthreads();
    QSDP_UNROLL
    for (unsigned k = 0; k < rotation_share; ++k)
      v[k] = partner_butterfly(v[k], tile[tile_slot(partner * rotation_share + k)], sign);
  }
}

/// Whether every bucket of the tile is whole (so every piece is a bucket): all but a packet's last
/// tile, and that one too when the count is a multiple of the bucket size (values past the count
/// are zeros, transformed among themselves). Block-uniform.
__device__ QSDP_FORCE_INLINE bool whole_buckets(const tile_view& view) {
  return view.begin + rotation_tile <= view.count ||
         (view.count & ((std::uint64_t{1} << view.log2_bucket) - 1)) == 0;
}

/// Encodes a rotated policy's packet (header and zero padding written by write_frame_kernel
/// before): rotation record, metadata, flags and codes.
template <class Q, class T>
__global__ void __launch_bounds__(rotation_block)
    rotated_encode_kernel(Q q, const T* src, std::size_t count, std::byte* packet, packet_layout l,
                          rng_source source, unsigned log2_bucket, bool packet_aligned) {
  bind_to_packet(q, packet);  // the tensor record is written before
  using meta_type = typename Q::meta_type;
  constexpr int B = Q::bits;
  const rng_key key = source.resolve();
  const rotation_record rotation{key.seed, key.call};
  if (blockIdx.x == 0 && threadIdx.x == 0)
    memcpy(packet + sizeof(packet_header), &rotation, sizeof rotation);
  __shared__ float tile[tile_slots];
  __shared__ std::uint32_t signs[rotation_tile / 32];
  __shared__ partial_stats warp_partials[rotation_block / 32];
  const unsigned bucket_values = 1u << log2_bucket;
  const unsigned threads_per_bucket = bucket_values / rotation_share;  // 1 .. 256
  const std::uint64_t tiles = (count + rotation_tile - 1) / rotation_tile;
  for (std::uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const tile_view view{t * rotation_tile, count, log2_bucket};
    draw_tile_signs(rotation, view.begin, signs);
    __syncthreads();
    for (unsigned j = threadIdx.x; j < rotation_tile; j += rotation_block) {
      float x = 0.0f;
      if (view.holds(j)) {
        const float scale = hadamard_inverse_size(view.piece_log2(j));
        x = hadamard_product(load_value(src, view.begin + j),
                             tile_sign_negative(signs, j) ? -scale : scale);
      }
      tile[tile_slot(j)] = x;
    }
    __syncthreads();
    // This thread's two groups: values first .. first + 15 of one bucket.
    const unsigned j0 = threadIdx.x * rotation_share;
    const std::uint64_t first = view.begin + j0;
    const unsigned n = share_values(first, count);
    float v[rotation_share];
    if (whole_buckets(view)) {
      QSDP_UNROLL
      for (unsigned k = 0; k < rotation_share; ++k) v[k] = tile[tile_slot(j0 + k)];
      register_butterflies(v, tile, log2_bucket);
    } else {
      tile_butterflies(tile, view);
      QSDP_UNROLL
      for (unsigned k = 0; k < rotation_share; ++k) v[k] = tile[tile_slot(j0 + k)];
    }
    partial_stats p;
    QSDP_UNROLL
    for (unsigned k = 0; k < rotation_share; ++k)
      if (k < n) p.add(v[k]);
    // The bucket's threads merge their statistics (idempotent merges; never across buckets).
    QSDP_UNROLL
    for (unsigned offset = 1; offset < 32; offset *= 2) {
      const partial_stats o = shuffle_xor(p, offset);
      if (offset < threads_per_bucket) p.merge(o);
    }
    if (threads_per_bucket > 32) {  // buckets of 1024 .. 4096 values: 2 .. 8 warps
      if (threadIdx.x % 32 == 0) warp_partials[threadIdx.x / 32] = p;
      __syncthreads();
      const unsigned warps_per_bucket = threads_per_bucket / 32;
      const unsigned first_warp = threadIdx.x / threads_per_bucket * warps_per_bucket;
      p = warp_partials[first_warp];
      for (unsigned w = 1; w < warps_per_bucket; ++w) p.merge(warp_partials[first_warp + w]);
    }
    __syncthreads();  // the next tile overwrites tile, signs and warp_partials
    if (n == 0) continue;

    const std::uint64_t bucket = first >> log2_bucket;
    const std::uint64_t bucket_begin = bucket << log2_bucket;
    const std::uint64_t in_bucket =
        count - bucket_begin < bucket_values ? count - bucket_begin : bucket_values;
    meta_type m = non_finite_meta<Q>();
    if (p.finite()) m = fit_bucket(q, p, in_bucket, key, bucket);
    if (first == bucket_begin) {
      memcpy(packet + l.meta_offset + bucket * sizeof(meta_type), static_cast<const void*>(&m),
             sizeof m);
      if (!p.finite()) set_flag(packet + l.flags_offset, bucket);
    }
    QSDP_UNROLL
    for (unsigned g = 0; g < rotation_share / group_values; ++g) {
      const unsigned in_group = group_share(n, g);
      if (in_group == 0) break;
      const std::uint64_t group = first / group_values + g;
      std::uint64_t word = 0;  // a flagged bucket's codes are 0, as the host's
      if (p.finite()) {
        philox_block block{};
        if constexpr (randomized_elements<Q>()) block = key.block(draw_domain::element, group);
        word = encode_group_drawn(q, v + g * group_values, in_group, m, block);
      }
      std::byte* at = packet + l.codes_offset + group * B;
      const unsigned bytes = group_bytes(B, group, l.code_bytes);
      if (packet_aligned)
        store_codes<B>(at, word, bytes);
      else
        store_group_bytes(at, word, bytes);
    }
  }
}

/// Decodes `packet_count` packets of a rotated policy (packet p at packets + p * packet_bytes)
/// into the sink: the rotated values of packets that share packet 0's rotation record are summed
/// and transformed back once (not saturated where the sink adds: a sum may overflow, as the host's
/// decode_accumulate); otherwise each packet is transformed back (saturated, as the host's decode)
/// and handed to the sink in turn.
template <class Q, class Sink>
__global__ void __launch_bounds__(rotation_block)
    rotated_decode_kernel(Q q, const std::byte* packets, std::size_t packet_bytes,
                          unsigned packet_count, unsigned first_index, std::size_t count,
                          packet_layout l, header_expectation want, unsigned log2_bucket,
                          bool packets_aligned, device_report* failure, Sink sink) {
  const bool ok = headers_ok(packets, packet_bytes, packet_count, first_index, want, failure);
  rotation_record first_rotation;
  memcpy(&first_rotation, packets + sizeof(packet_header), sizeof first_rotation);
  int same_rotation = 1;
  for (unsigned p = 1 + threadIdx.x; p < packet_count; p += blockDim.x) {
    rotation_record r;
    memcpy(&r, packets + p * packet_bytes + sizeof(packet_header), sizeof r);
    same_rotation &= r.seed == first_rotation.seed && r.call == first_rotation.call;
  }
  const bool alike = __syncthreads_and(same_rotation) != 0;
  const unsigned passes = alike ? 1u : packet_count;
  const bool saturate = !(Sink::adds && alike);
  __shared__ float tile[tile_slots];
  __shared__ std::uint32_t signs[rotation_tile / 32];
  const std::uint64_t tiles = (count + rotation_tile - 1) / rotation_tile;
  for (std::uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const tile_view view{t * rotation_tile, count, log2_bucket};
    const unsigned j0 = threadIdx.x * rotation_share;
    const std::uint64_t first = view.begin + j0;
    const unsigned n = share_values(first, count);
    constexpr unsigned groups = rotation_share / group_values;
    alignas(16) float a[rotation_share] = {};
    QSDP_UNROLL
    for (unsigned g = 0; g < groups; ++g)
      if (const unsigned m = group_share(n, g))
        sink.begin(first + g * group_values, m, a + g * group_values);
    for (unsigned pass = 0; pass < passes; ++pass) {
      const std::byte* own = packets + pass * packet_bytes;
      rotation_record rotation;
      memcpy(&rotation, own + sizeof(packet_header), sizeof rotation);
      draw_tile_signs(rotation, view.begin, signs);
      // This thread's groups: decoded (summed over the packets that share a rotation) into its
      // own slots of the tile, which hold the running sum (no registers held across packets),
      // then scaled by 1/piece size.
      const unsigned from = alike ? 0u : pass, to = alike ? packet_count : pass + 1;
      for (unsigned p = from; p < to; ++p) {
        const std::byte* packet = packets + p * packet_bytes;
        QSDP_UNROLL
        for (unsigned g = 0; g < groups; ++g) {
          if (g * group_values >= n) break;
          float v[group_values];
#if !defined(__CUDA_ARCH__)  // the host compiler of tests/simt cannot see that the decoders fill it
          for (unsigned k = 0; k < group_values; ++k) v[k] = 0.0f;
#endif
          if (ok) {
            bind_to_packet(q, packet);
            decode_one(q, packet, l, count, first / group_values + g, static_cast<int>(log2_bucket),
                       packets_aligned, v);
          } else {
            QSDP_UNROLL
            for (unsigned k = 0; k < group_values; ++k) v[k] = quiet_nan();
          }
          QSDP_UNROLL
          for (unsigned k = 0; k < group_values; ++k) {
            float& sum = tile[tile_slot(j0 + g * group_values + k)];
            sum = p == from ? v[k] : sum + v[k];
          }
        }
      }
      const bucket_place place = n > 0 ? view.place(j0) : bucket_place{0, 1};
      float x[rotation_share];
      QSDP_UNROLL
      for (unsigned k = 0; k < rotation_share; ++k) {
        const float sum = tile[tile_slot(j0 + k)];
        x[k] = k < n ? hadamard_product(sum, hadamard_inverse_size(place.piece_log2(k))) : 0.0f;
      }
      if (whole_buckets(view)) {
        register_butterflies(x, tile, log2_bucket);
        __syncthreads();  // the signs are drawn
      } else {
        QSDP_UNROLL
        for (unsigned k = 0; k < rotation_share; ++k) tile[tile_slot(j0 + k)] = x[k];
        __syncthreads();
        tile_butterflies(tile, view);
        QSDP_UNROLL
        for (unsigned k = 0; k < rotation_share; ++k) x[k] = tile[tile_slot(j0 + k)];
      }
      QSDP_UNROLL
      for (unsigned k = 0; k < rotation_share; ++k) {
        const float size = hadamard_size(place.piece_log2(k));
        x[k] = k < n ? hadamard_output(
                           hadamard_product(x[k], tile_sign_negative(signs, j0 + k) ? -size : size),
                           saturate)
                     : 0.0f;
      }
      QSDP_UNROLL
      for (unsigned g = 0; g < groups; ++g)
        if (const unsigned m = group_share(n, g))
          sink.add(a + g * group_values, x + g * group_values, m);
      __syncthreads();  // the next pass or tile overwrites tile and signs
    }
    QSDP_UNROLL
    for (unsigned g = 0; g < groups; ++g)
      if (const unsigned m = group_share(n, g))
        sink.end(first + g * group_values, m, a + g * group_values);
  }
}

}  // namespace qsdp::detail::cuda
