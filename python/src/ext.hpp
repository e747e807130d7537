// SPDX-License-Identifier: Apache-2.0
//
// qsdp._ext, the C++ side of qsdp.torch (python/qsdp/torch.py): a policy object that keeps its
// concrete qsdp policy (and so its call counter) behind a small virtual interface, and a host
// communicator whose byte exchanges call back into Python (torch.distributed on a ProcessGroup), so
// the library's collectives, descriptor agreement and packet checks run unchanged. Tensors arrive
// as data pointers, checked by the Python layer (dtype, device, contiguity, sizes) before they get
// here.
#pragma once

#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <variant>

#include <qsdp/collectives.hpp>
#include <qsdp/communicator.hpp>

#include "shared.hpp"

namespace qsdp::python {

namespace nb = nanobind;

/// A qsdp::communicator over a torch ProcessGroup: all_gather_bytes and all_to_all_bytes call the
/// Python functions given (torch.distributed.all_gather_into_tensor / all_to_all_single on uint8
/// tensors that view the C++ buffers). Host memory.
class group_communicator {
 public:
  static constexpr memory_space memory = memory_space::host;

  group_communicator(int rank, int size, nb::callable all_gather, nb::callable all_to_all);

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  host_workspace& workspace() noexcept { return workspace_; }
  std::uint64_t next_call() noexcept { return calls_++; }
  std::uint64_t calls() const noexcept { return calls_; }

  void all_gather_bytes(const std::byte* send, std::byte* recv, std::size_t n);
  void all_to_all_bytes(const std::byte* send, std::byte* recv, std::size_t n);

 private:
  int rank_, size_;
  nb::callable all_gather_, all_to_all_;
  host_workspace workspace_;
  host_workspace in_place_;  // a copy of `send` when it lies inside `recv`
  std::uint64_t calls_ = 0;
};

static_assert(communicator<group_communicator>);

/// A qsdp::delta_gather<T> for the element type chosen at run time (qsdp.torch.DeltaGather).
class delta_holder {
 public:
  delta_holder(element e, std::size_t count, int world);

  element type() const noexcept { return type_; }
  std::size_t count() const;
  std::uint64_t calls() const;
  std::size_t memory_bytes() const;
  void reset();

  /// The delta_gather<T>; T must be type()'s (the Python layer checks the tensors' dtype).
  template <class T>
  qsdp::delta_gather<T>& get() {
    if (auto* d = std::get_if<qsdp::delta_gather<T>>(&gather_)) return *d;
    throw qsdp::error(
        "qsdp.torch.DeltaGather: called with another element type than it was "
        "made for");
  }

 private:
#if QSDP_HAS_CUDA_HALF
  using any_gather = std::variant<qsdp::delta_gather<float>, qsdp::delta_gather<__nv_bfloat16>,
                                  qsdp::delta_gather<__half>>;
#else
  using any_gather = std::variant<qsdp::delta_gather<float>>;
#endif
  static any_gather make(element e, std::size_t count, int world);

  element type_;
  any_gather gather_;
};

/// One qsdp policy with its state, behind the calls qsdp.torch makes. Pointers are host memory,
/// `count` values of the element type given (checked by the Python layer).
class policy {
 public:
  virtual ~policy() = default;
  virtual std::string name() const = 0;
  virtual std::size_t bucket_size() const = 0;
  /// The index the policy's next call draws its random numbers with (0 for deterministic ones).
  virtual std::uint64_t next_call() const = 0;
  /// The call index of an encode made elsewhere (the CUDA extension's) with this policy's counter:
  /// next_call(), which then moves on (0, unmoved, for the policies that draw nothing).
  virtual std::uint64_t take_call() = 0;
  virtual std::size_t compressed_size(element e, std::size_t count) const = 0;
  virtual void encode(element e, const void* src, std::size_t count, std::byte* packet) = 0;
  virtual void decode(element e, const std::byte* packet, std::size_t count, void* dst) = 0;
  virtual void all_gather(group_communicator& comm, element e, const void* send, void* recv,
                          std::size_t count, call_options options) = 0;
  virtual void reduce_scatter(group_communicator& comm, element e, const void* send, void* recv,
                              std::size_t count, reduce_op op, call_options options) = 0;
  virtual void all_reduce(group_communicator& comm, element e, void* data, std::size_t count,
                          reduce_op op, call_options options) = 0;
  /// Bytes of the block-scaled layout's elements for `count` values:
  /// qsdp::block_scaled_element_bytes for an MX policy, 0 for the others (which have no such
  /// layout).
  virtual std::size_t block_scaled_element_bytes(std::size_t count) const = 0;
  /// qsdp::all_gather_encoded into `elements` and `scales`; the policies without the block-scaled
  /// layout throw qsdp::error.
  virtual void all_gather_encoded(group_communicator& comm, element e, const void* send,
                                  std::byte* elements, std::uint8_t* scales, std::size_t count) = 0;
  /// qsdp::unpack_block_scaled of a packet of this policy into `elements` and `scales`; the
  /// policies without the block-scaled layout throw qsdp::error.
  virtual void unpack_block_scaled(const std::byte* packet, std::size_t count, std::byte* elements,
                                   std::uint8_t* scales) = 0;
  /// gather.all_gather(comm, this policy, send, recv): the weight-difference all-gather.
  virtual void delta_all_gather(delta_holder& gather, group_communicator& comm, const void* send,
                                void* recv) = 0;
};

/// families.hpp's make_named over this extension's factories.
std::unique_ptr<policy> make_policy(const std::string& family, int bits, std::size_t bucket_size,
                                    std::uint64_t seed, bool rotated);

// One per family, each in its own translation unit (policies_<family>.cpp).
std::unique_ptr<policy> make_stochastic(int bits, std::size_t bucket_size, std::uint64_t seed,
                                        bool rotated);
std::unique_ptr<policy> make_uniform(int bits, std::size_t bucket_size, std::uint64_t seed,
                                     bool rotated);
std::unique_ptr<policy> make_symmetric(int bits, std::size_t bucket_size, std::uint64_t seed,
                                       bool rotated);
std::unique_ptr<policy> make_random_shift(int bits, std::size_t bucket_size, std::uint64_t seed,
                                          bool rotated);
std::unique_ptr<policy> make_identity();
// The block-scaled float policies by C++ name (policies_mx.cpp, policies_fp4.cpp); null for
// another name.
std::unique_ptr<policy> make_mx(const std::string& name, std::size_t bucket_size,
                                std::uint64_t seed, bool rotated);
std::unique_ptr<policy> make_fp4(const std::string& name, std::size_t bucket_size,
                                 std::uint64_t seed, bool rotated);

}  // namespace qsdp::python
