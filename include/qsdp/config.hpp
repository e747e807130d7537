// qsdp: compressed collectives for sharded data-parallel training.
// SPDX-License-Identifier: Apache-2.0
//
// Configuration macros and the library's single error type. Every other header includes this one.
#pragma once

#include <bit>
#include <stdexcept>
#include <string>

#define QSDP_VERSION_MAJOR 0
#define QSDP_VERSION_MINOR 1
#define QSDP_VERSION_PATCH 0

// Functions shared by the host codec and the CUDA kernels carry QSDP_HOST_DEVICE, so that both
// sides run the very same per-element arithmetic and produce bit-identical packets.
#if defined(__CUDACC__)
#define QSDP_HOST_DEVICE __host__ __device__
#else
#define QSDP_HOST_DEVICE
#endif

// Where shared math has a faster device spelling (the same results, other instructions), it is
// compiled in device code, and in tests/simt's emulation of the kernels on the host, which supplies
// the intrinsics it uses: so CI executes the device spellings too, without a GPU.
#if defined(__CUDA_ARCH__) || defined(QSDP_SIMT_EMULATION)
#define QSDP_DEVICE_SPELLING 1
#else
#define QSDP_DEVICE_SPELLING 0
#endif

// Unrolling hints for nvcc's device pass; nothing elsewhere: a host compiler, including the one
// nvcc hands a __host__ __device__ function's host side to, would warn about the pragma.
#if defined(__CUDA_ARCH__)
#define QSDP_UNROLL _Pragma("unroll")
#else
#define QSDP_UNROLL
#endif

#if defined(__CUDACC__) || defined(__GNUC__) || defined(__clang__)
#define QSDP_FORCE_INLINE inline __attribute__((always_inline))
#else
#define QSDP_FORCE_INLINE inline
#endif

// __half and __nv_bfloat16 come from the CUDA toolkit's headers, which work on the host without
// nvcc. When they are not on the include path, qsdp still builds; only those two element types are
// missing.
#if !defined(QSDP_HAS_CUDA_HALF)
#if __has_include(<cuda_fp16.h>) && __has_include(<cuda_bf16.h>)
#define QSDP_HAS_CUDA_HALF 1
#else
#define QSDP_HAS_CUDA_HALF 0
#endif
#endif

namespace qsdp {

static_assert(std::endian::native == std::endian::little,
              "qsdp's wire format is little-endian; big-endian hosts are not supported");

namespace detail {

/// std::bit_cast for code shared with the GPU: std::bit_cast is a host function to nvcc, the
/// builtin behind it works on both sides (g++, clang and nvcc all provide it).
template <class To, class From>
QSDP_HOST_DEVICE constexpr To bit_cast(const From& value) noexcept {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs types of the same size");
  return __builtin_bit_cast(To, value);
}

/// The NaN decoders write for flagged buckets and rotated results (the host's
/// std::numeric_limits<float>::quiet_NaN()): one NaN, whichever path made it.
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float quiet_nan() { return bit_cast<float>(0x7FC00000u); }

/// Base of the owners of a resource (pinned or device memory, events, MPI datatypes), which are
/// neither copied nor moved: a copy would free the resource twice.
struct no_copies {
  no_copies() = default;
  no_copies(const no_copies&) = delete;
  no_copies& operator=(const no_copies&) = delete;
};

}  // namespace detail

/// The one exception type qsdp throws. Messages name the argument, its value and what was expected.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A qsdp::error thrown when a communicator gave up waiting for its peers (fault_options::timeout):
/// code that catches qsdp::error sees it too.
class timeout_error : public error {
 public:
  using error::error;
};

}  // namespace qsdp
