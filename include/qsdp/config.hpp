// qsdp: compressed collectives for sharded data-parallel training.
// SPDX-License-Identifier: Apache-2.0
/// @file
/// Configuration macros and the library's single error type. Every other header includes this one.
#pragma once

#include <bit>
#include <stdexcept>
#include <string>

/// The major version of qsdp (the CMake package is compatible within one major version).
#define QSDP_VERSION_MAJOR 0
/// The minor version of qsdp.
#define QSDP_VERSION_MINOR 1
/// The patch version of qsdp.
#define QSDP_VERSION_PATCH 0

/// `__host__ __device__` under nvcc, nothing otherwise. Functions shared by the host codec and the
/// CUDA kernels carry it, so that both sides run the very same per-element arithmetic and produce
/// bit-identical packets; a custom quantizer policy marks fit, encode and decode with it.
#if defined(__CUDACC__)
#define QSDP_HOST_DEVICE __host__ __device__
#else
#define QSDP_HOST_DEVICE
#endif

/// 1 where shared math takes its faster device spelling (the same results, other instructions):
/// in device code, and in tests/simt's emulation of the kernels on the host (QSDP_SIMT_EMULATION),
/// which supplies the intrinsics it uses, so that CI executes the device spellings without a GPU.
/// 0 elsewhere.
#if defined(__CUDA_ARCH__) || defined(QSDP_SIMT_EMULATION)
#define QSDP_DEVICE_SPELLING 1
#else
#define QSDP_DEVICE_SPELLING 0
#endif

/// `#pragma unroll` in nvcc's device pass; nothing elsewhere: a host compiler, including the one
/// nvcc hands a `__host__ __device__` function's host side to, would warn about the pragma.
#if defined(__CUDA_ARCH__)
#define QSDP_UNROLL _Pragma("unroll")
#else
#define QSDP_UNROLL
#endif

/// `inline` with the compiler's always-inline attribute (nvcc, g++, clang), plain `inline`
/// elsewhere: for the per-element functions of the codec's inner loops.
#if defined(__CUDACC__) || defined(__GNUC__) || defined(__clang__)
#define QSDP_FORCE_INLINE inline __attribute__((always_inline))
#else
#define QSDP_FORCE_INLINE inline
#endif

/// 1 when the element types `__half` and `__nv_bfloat16` are available, 0 when not. They come from
/// the CUDA toolkit's headers (cuda_fp16.h, cuda_bf16.h), which work on the host without nvcc; when
/// those are not on the include path qsdp still builds, without these two element types. Define it
/// to 0 before including qsdp to leave them out.
#if !defined(QSDP_HAS_CUDA_HALF)
#if __has_include(<cuda_fp16.h>) && __has_include(<cuda_bf16.h>)
#define QSDP_HAS_CUDA_HALF 1
#else
#define QSDP_HAS_CUDA_HALF 0
#endif
#endif

/// Everything qsdp declares: policies, codec, communicators and collectives. Internals live in
/// qsdp::detail, which is not part of the API.
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
QSDP_HOST_DEVICE constexpr float quiet_nan() { return bit_cast<float>(0x7FC00000u); }

/// a * b rounded once, never fused with a later addition into a multiply-add (nvcc fuses by
/// default, and so does g++ where FMA is enabled, across inlined calls): a decoded value that a
/// sum then takes must be the value that decode stores, on the host and the device alike. (Where
/// the product is exact, as MX's element times a power of two above float's subnormals, a plain
/// multiply does.)
QSDP_HOST_DEVICE QSDP_FORCE_INLINE float unfused_product(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  float product = a * b;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+x"(product));  // an opaque value: nothing after it can fuse with the multiply
#elif defined(__GNUC__) && defined(__aarch64__)
  asm("" : "+w"(product));
#endif
  return product;
#endif
}

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
