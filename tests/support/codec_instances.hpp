// SPDX-License-Identifier: Apache-2.0
//
// The host codec's loops for every built-in policy and element type, compiled once per test build
// instead of once per test file. run_encode and run_decode hold the heavy part of the library (each
// instantiated for two ISAs, flattened, for 31 policies and 4 element types); the test files
// include this header, whose explicit instantiation declarations stop them from compiling those
// bodies, and tests/support/codec_instances_*.cpp compile them once. Only qsdp's own tests do this,
// to keep the build short: the library stays header-only for its users, and a target that does not
// define QSDP_TEST_CODEC_INSTANCES (the libFuzzer target, which needs coverage instrumentation of
// the code it fuzzes) compiles everything itself.
#pragma once

#include <qsdp/codec.hpp>

// X(P<B>) for the widths a policy family P takes, and X(Q) for every built-in policy at every
// width.
// (clang-format 14 lays this macro list out differently on every run, hence off.)
// clang-format off
#define QSDP_TEST_WIDTHS_2_TO_8(X, P) X(P<2>) X(P<3>) X(P<4>) X(P<5>) X(P<6>) X(P<7>) X(P<8>)
#define QSDP_TEST_WIDTHS_1_TO_8(X, P) X(P<1>) QSDP_TEST_WIDTHS_2_TO_8(X, P)
#define QSDP_TEST_FOR_EACH_POLICY(X)                                                   \
  QSDP_TEST_WIDTHS_1_TO_8(X, qsdp::uniform) QSDP_TEST_WIDTHS_1_TO_8(X, qsdp::stochastic) \
  QSDP_TEST_WIDTHS_1_TO_8(X, qsdp::symmetric) QSDP_TEST_WIDTHS_2_TO_8(X, qsdp::random_shift)
// clang-format on

// The loops of one policy Q for element type T; EXTERN is `extern` (declaration) or empty
// (definition).
#define QSDP_TEST_CODEC_LOOPS_FOR_TYPE(EXTERN, Q, T)                                               \
  EXTERN template void qsdp::detail::run_encode<Q, T>(const Q&, const T*, std::size_t, std::byte*, \
                                                      const qsdp::detail::packet_layout&,          \
                                                      const qsdp::detail::rng_key&);               \
  EXTERN template void qsdp::detail::run_decode<Q, qsdp::detail::store_sink<T>>(                   \
      const Q&, const std::byte*, const qsdp::detail::packet_layout&, std::size_t, std::size_t,    \
      std::size_t, const qsdp::detail::store_sink<T>&);

#if QSDP_HAS_CUDA_HALF
#define QSDP_TEST_CODEC_HALF_LOOPS(EXTERN, Q)       \
  QSDP_TEST_CODEC_LOOPS_FOR_TYPE(EXTERN, Q, __half) \
  QSDP_TEST_CODEC_LOOPS_FOR_TYPE(EXTERN, Q, __nv_bfloat16)
#else
#define QSDP_TEST_CODEC_HALF_LOOPS(EXTERN, Q)
#endif

// Every loop of policy Q: encode and decode for each element type, and decode-accumulate.
#define QSDP_TEST_CODEC_LOOPS(EXTERN, Q)                                                        \
  QSDP_TEST_CODEC_LOOPS_FOR_TYPE(EXTERN, Q, float)                                              \
  QSDP_TEST_CODEC_LOOPS_FOR_TYPE(EXTERN, Q, double)                                             \
  QSDP_TEST_CODEC_HALF_LOOPS(EXTERN, Q)                                                         \
  EXTERN template void qsdp::detail::run_decode<Q, qsdp::detail::accumulate_sink>(              \
      const Q&, const std::byte*, const qsdp::detail::packet_layout&, std::size_t, std::size_t, \
      std::size_t, const qsdp::detail::accumulate_sink&);

#define QSDP_TEST_DECLARE_LOOPS(Q) QSDP_TEST_CODEC_LOOPS(extern, Q)
#define QSDP_TEST_DEFINE_LOOPS(Q) QSDP_TEST_CODEC_LOOPS(, Q)

#if QSDP_TEST_CODEC_INSTANCES
QSDP_TEST_FOR_EACH_POLICY(QSDP_TEST_DECLARE_LOOPS)
#endif
