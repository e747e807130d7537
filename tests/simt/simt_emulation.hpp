// SPDX-License-Identifier: Apache-2.0
//
// Runs qsdp's CUDA kernels on the host, so that their indexing, shuffles, shared memory, barriers
// and grid-stride loops are executed and checked on machines without a GPU (CI has none). Include
// it before any qsdp header, in a translation unit compiled by the host compiler with
// QSDP_SIMT_EMULATION defined.
//
// Model: blocks run one after another; the threads of a block are std::threads. __syncthreads is a
// barrier of the block, warp shuffles and __syncwarp a barrier of the warp's 32 threads; a thread
// that returns drops out of both, as an exited thread does on the GPU. __shared__ variables become
// function statics: one copy, which is right because only one block runs at a time. Atomics are
// std::atomic_ref. What it cannot show: timing, memory-model subtleties between blocks, and bank
// conflicts.
#pragma once

#if !defined(QSDP_SIMT_EMULATION)
#error "define QSDP_SIMT_EMULATION before including simt_emulation.hpp"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

namespace qsdp_simt {

struct block_state {
  explicit block_state(unsigned threads) : block(static_cast<std::ptrdiff_t>(threads)) {
    for (unsigned w = 0; w * 32 < threads; ++w)  // a last, partial warp has fewer threads
      warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, threads - 32 * w)));
    slots.resize(threads);
    flags.resize(threads);
  }
  std::barrier<> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<std::uint64_t> slots;  // shuffle exchange, one per thread
  std::vector<int> flags;            // __syncthreads_and
};

inline block_state* current = nullptr;  // the block running now (blocks run one at a time)
inline thread_local uint3 thread_index{};
inline thread_local uint3 block_index{};
inline thread_local dim3 block_dim{};
inline thread_local dim3 grid_dim{};

inline std::barrier<>& warp_barrier() { return *current->warps[thread_index.x / 32]; }

inline void syncthreads() { current->block.arrive_and_wait(); }

inline int syncthreads_and(int predicate) {
  current->flags[thread_index.x] = predicate != 0;
  current->block.arrive_and_wait();
  int all = 1;
  for (unsigned t = 0; t < block_dim.x; ++t) all &= current->flags[t];
  current->block.arrive_and_wait();
  return all;
}

inline void syncwarp(unsigned = 0xFFFFFFFFu) { warp_barrier().arrive_and_wait(); }

template <class T>
T shfl_xor(unsigned, T value, unsigned offset) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);
  current->slots[thread_index.x] = bits;
  warp_barrier().arrive_and_wait();
  const std::uint64_t theirs = current->slots[thread_index.x ^ offset];
  warp_barrier().arrive_and_wait();
  T out;
  std::memcpy(&out, &theirs, sizeof out);
  return out;
}

/// __shfl_sync: the value of lane (this lane's group of `width`) + (src mod width); the hardware
/// reads only src's low log2(width) bits, whatever the rest.
template <class T>
T shfl(unsigned, T value, int src, int width = 32) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);
  current->slots[thread_index.x] = bits;
  warp_barrier().arrive_and_wait();
  const unsigned w = static_cast<unsigned>(width);
  const unsigned from = (thread_index.x & ~(w - 1)) | (static_cast<unsigned>(src) & (w - 1));
  const std::uint64_t theirs = current->slots[from];
  warp_barrier().arrive_and_wait();
  T out;
  std::memcpy(&out, &theirs, sizeof out);
  return out;
}

template <class T>
T ldg(const T* p) {
  return *p;
}

inline unsigned atomic_or(unsigned* p, unsigned v) {
  return std::atomic_ref<unsigned>(*p).fetch_or(v);
}
inline unsigned atomic_cas(unsigned* p, unsigned expected, unsigned desired) {
  std::atomic_ref<unsigned>(*p).compare_exchange_strong(expected, desired);
  return expected;
}
inline unsigned atomic_exch(unsigned* p, unsigned v) {
  return std::atomic_ref<unsigned>(*p).exchange(v);
}
inline unsigned atomic_max(unsigned* p, unsigned v) {
  std::atomic_ref<unsigned> word(*p);
  unsigned seen = word.load();
  while (seen < v && !word.compare_exchange_weak(seen, v)) {
  }
  return seen;
}
inline void threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }

/// __shfl_up_sync / __shfl_down_sync over the whole warp: the value of lane -/+ delta, or the
/// lane's own where that lane does not exist.
template <class T>
T shfl_up(unsigned, T value, unsigned delta) {
  const unsigned lane = thread_index.x % 32;
  return shfl(0xFFFFFFFFu, value, static_cast<int>(lane >= delta ? lane - delta : lane));
}
template <class T>
T shfl_down(unsigned, T value, unsigned delta) {
  const unsigned lane = thread_index.x % 32;
  return shfl(0xFFFFFFFFu, value, static_cast<int>(lane + delta < 32 ? lane + delta : lane));
}

/// Runs kernel(args...) on `grid` blocks of `threads` threads, block after block.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), unsigned grid, unsigned threads, Args&&... args) {
  for (unsigned b = 0; b < grid; ++b) {
    block_state state(threads);
    current = &state;
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        thread_index = {t, 0, 0};
        block_index = {b, 0, 0};
        block_dim = dim3(threads);
        grid_dim = dim3(grid);
        kernel(args...);
        // An exited thread no longer holds up its block's or its warp's barriers.
        warp_barrier().arrive_and_drop();
        state.block.arrive_and_drop();
      });
    for (auto& t : pool) t.join();
    current = nullptr;
  }
}

}  // namespace qsdp_simt

// The CUDA intrinsics of the shared math's device spellings (QSDP_DEVICE_SPELLING), as CUDA and
// PTX define them, so that the emulated kernels run the device's arithmetic, not the host's.

/// cvt.rzi.s32.f64: toward zero, saturated; NaN gives INT_MIN (PTX ISA: a NaN converted from f64
/// to a 32-bit integer is 1 << 31).
inline int __double2int_rz(double x) {
  if (std::isnan(x)) return INT32_MIN;
  if (x >= 2147483647.0) return INT32_MAX;
  if (x <= -2147483648.0) return INT32_MIN;
  return static_cast<int>(x);
}
/// cvt.rzi.u32.f64: toward zero, saturated to [0, UINT_MAX]; NaN gives 0.
inline unsigned __double2uint_rz(double x) {
  if (std::isnan(x) || x <= 0.0) return 0;
  if (x >= 4294967295.0) return UINT32_MAX;
  return static_cast<unsigned>(x);
}
/// Per 16-bit half as int16: the least and the greatest of three (VIMNMX3.S16x2).
inline unsigned qsdp_simt_s16x2(unsigned a, unsigned b, unsigned c, bool greatest) {
  unsigned r = 0;
  for (unsigned shift = 0; shift < 32; shift += 16) {
    const auto x = static_cast<std::int16_t>(a >> shift), y = static_cast<std::int16_t>(b >> shift),
               z = static_cast<std::int16_t>(c >> shift);
    std::int16_t m = x;
    if (greatest ? y > m : y < m) m = y;
    if (greatest ? z > m : z < m) m = z;
    r |= static_cast<unsigned>(static_cast<std::uint16_t>(m)) << shift;
  }
  return r;
}
inline unsigned __vimin3_s16x2(unsigned a, unsigned b, unsigned c) {
  return qsdp_simt_s16x2(a, b, c, false);
}
inline unsigned __vimax3_s16x2(unsigned a, unsigned b, unsigned c) {
  return qsdp_simt_s16x2(a, b, c, true);
}
/// Per 16-bit half, unsigned: the greatest of three (VIMNMX3.U16x2).
inline unsigned __vimax3_u16x2(unsigned a, unsigned b, unsigned c) {
  unsigned r = 0;
  for (unsigned shift = 0; shift < 32; shift += 16) {
    unsigned m = (a >> shift) & 0xFFFFu;
    for (const unsigned w : {b, c}) m = std::max(m, (w >> shift) & 0xFFFFu);
    r |= m << shift;
  }
  return r;
}
inline double __hiloint2double(int hi, int lo) {
  const std::uint64_t bits = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(hi)) << 32) |
                             static_cast<std::uint32_t>(lo);
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
/// fma.rp.f32: a * b + c rounded once, toward +infinity. The product is exact in double; the sum's
/// rounding error comes from Knuth's two-sum, so the float above the exact result is known.
inline float __fmaf_ru(float a, float b, float c) {
  const double product = static_cast<double>(a) * static_cast<double>(b);
  const double sum = product + static_cast<double>(c);
  const double back = sum - product;
  const double error = (product - (sum - back)) + (static_cast<double>(c) - back);
  const float nearest = static_cast<float>(sum);
  const double f = static_cast<double>(nearest);
  if (std::isnan(sum) || std::isinf(sum)) return nearest;
  return f < sum || (f == sum && error > 0.0) ? std::nextafter(nearest, INFINITY) : nearest;
}
/// (hi:lo) >> min(shift, 32), low word.
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned shift) {
  const std::uint64_t v = (static_cast<std::uint64_t>(hi) << 32) | lo;
  return static_cast<unsigned>(v >> (shift < 32 ? shift : 32));
}
/// PRMT, default mode: byte i of the result is byte (s >> 4i) & 7 of y:x, or that byte's sign
/// replicated when bit 3 of the selector nibble is set.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const std::uint64_t v = (static_cast<std::uint64_t>(y) << 32) | x;
  unsigned r = 0;
  for (unsigned i = 0; i < 4; ++i) {
    const unsigned nibble = (s >> (4 * i)) & 0xFu;
    unsigned byte = static_cast<unsigned>(v >> (8 * (nibble & 7u))) & 0xFFu;
    if (nibble & 8u) byte = byte & 0x80u ? 0xFFu : 0u;
    r |= byte << (8 * i);
  }
  return r;
}

#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)
#define threadIdx (::qsdp_simt::thread_index)
#define blockIdx (::qsdp_simt::block_index)
#define blockDim (::qsdp_simt::block_dim)
#define gridDim (::qsdp_simt::grid_dim)
#define __syncthreads ::qsdp_simt::syncthreads
#define __syncthreads_and ::qsdp_simt::syncthreads_and
#define __syncwarp ::qsdp_simt::syncwarp
#define __shfl_xor_sync ::qsdp_simt::shfl_xor
#define __shfl_sync ::qsdp_simt::shfl
#define __shfl_up_sync ::qsdp_simt::shfl_up
#define __shfl_down_sync ::qsdp_simt::shfl_down
#define __ldg ::qsdp_simt::ldg
#define atomicOr ::qsdp_simt::atomic_or
#define atomicCAS ::qsdp_simt::atomic_cas
#define atomicExch ::qsdp_simt::atomic_exch
#define atomicMax ::qsdp_simt::atomic_max
#define __threadfence_system ::qsdp_simt::threadfence_system

// cub::WarpReduce as the kernels use it: Reduce(value, op), result valid in lane 0.
namespace cub {
template <class T>
class WarpReduce {
 public:
  struct TempStorage {};
  explicit WarpReduce(TempStorage&) {}
  template <class Op>
  T Reduce(T value, Op op) {
    static std::vector<T> lanes(1024);  // indexed by thread; one block at a time
    lanes[threadIdx.x] = value;
    __syncwarp();
    T result = value;
    if (threadIdx.x % 32 == 0) {
      for (unsigned lane = 1; lane < 32; ++lane) result = op(result, lanes[threadIdx.x + lane]);
    }
    __syncwarp();
    return result;
  }
};
}  // namespace cub
