// SPDX-License-Identifier: Apache-2.0
//
// What qsdp.torch's host extension (qsdp._ext) and CUDA extension (qsdp._ext_cuda) share: the
// codes python/qsdp/torch.py passes for element types and reduce ops, the dispatch to the C++
// element type, the checks of a process group's shape, and the integer-to-pointer conversions of
// data_ptr().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <qsdp/collectives.hpp>
#include <qsdp/config.hpp>
#include <qsdp/detail/codec/float_types.hpp>

namespace qsdp::python {

/// The element types qsdp.torch takes (torch.float32, torch.bfloat16, torch.float16).
enum class element : int { f32 = 0, bf16 = 1, f16 = 2 };

/// Calls fn.template operator()<T>() with T the C++ type of `e`; bf16 and fp16 need the CUDA
/// toolkit's headers at build time (QSDP_HAS_CUDA_HALF), otherwise they are refused by name.
template <class Fn>
decltype(auto) with_element(element e, Fn&& fn) {
  switch (e) {
    case element::f32: return fn.template operator()<float>();
#if QSDP_HAS_CUDA_HALF
    case element::bf16: return fn.template operator()<__nv_bfloat16>();
    case element::f16: return fn.template operator()<__half>();
#else
    case element::bf16:
    case element::f16:
      throw qsdp::error(std::string("qsdp.torch: this build of qsdp has no ") +
                        (e == element::bf16 ? "bfloat16" : "float16") +
                        " support (built without the CUDA toolkit's cuda_bf16.h / cuda_fp16.h); "
                        "reinstall where /usr/local/cuda/include or CUDAToolkit_ROOT has them");
#endif
  }
  throw qsdp::error("qsdp.torch: element type code " + std::to_string(static_cast<int>(e)) +
                    "; expected 0 (float32), 1 (bfloat16) or 2 (float16)");
}

/// The reduce op of python/qsdp/torch.py's code (1 sum, 2 avg).
inline reduce_op reduce_op_from(int op) {
  if (op == static_cast<int>(reduce_op::sum)) return reduce_op::sum;
  if (op == static_cast<int>(reduce_op::avg)) return reduce_op::avg;
  throw qsdp::error("qsdp.torch: reduce op code " + std::to_string(op) +
                    "; expected 1 (sum) or 2 (avg)");
}

/// The call options of qsdp.torch's min_compressed_bytes argument (the size gate).
inline call_options gate(std::size_t min_compressed_bytes) {
  return call_options{.min_compressed_bytes = min_compressed_bytes};
}

/// A process group's rank and size as a communicator takes them.
inline void check_group_shape(int rank, int size) {
  constexpr const char* where = "qsdp.torch: process group";
  if (size < 1)
    throw qsdp::error(std::string(where) + " size is " + std::to_string(size) + "; expected >= 1");
  if (rank < 0 || rank >= size)
    throw qsdp::error(std::string(where) + " rank is " + std::to_string(rank) + "; expected 0.." +
                      std::to_string(size - 1));
}

/// Tensor.data_ptr() as the pointers the C++ calls take.
inline void* address(std::uintptr_t p) { return reinterpret_cast<void*>(p); }
inline std::byte* bytes(std::uintptr_t p) { return reinterpret_cast<std::byte*>(p); }

}  // namespace qsdp::python
