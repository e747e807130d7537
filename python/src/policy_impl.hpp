// SPDX-License-Identifier: Apache-2.0
//
// qsdp::python::policy for one concrete qsdp policy type (python/src/policies_<family>.cpp
// instantiate it through families.hpp's make_family, one family per file).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "ext.hpp"
#include "families.hpp"

namespace qsdp::python {

template <class Q>
class policy_impl final : public policy {
 public:
  using interface = policy;

  explicit policy_impl(Q q) : q_(std::move(q)) {
    // The bucket-size rules (hadamard's powers of two included) are checked now, not at first use.
    (void)qsdp::compressed_size<float>(q_, 0);
  }

  std::string name() const override { return policy_name<Q>(); }
  std::size_t bucket_size() const override {
    if constexpr (requires { q_.bucket_size; })
      return q_.bucket_size;
    else
      return 0;
  }
  std::uint64_t next_call() const override {
    if constexpr (requires { q_.calls.next(); })
      return q_.calls.next();
    else
      return 0;
  }
  std::uint64_t take_call() override { return detail::next_key(q_).call; }
  std::size_t compressed_size(element e, std::size_t count) const override {
    return with_element(e, [&]<class T>() { return qsdp::compressed_size<T>(q_, count); });
  }
  void encode(element e, const void* src, std::size_t count, std::byte* packet) override {
    with_element(e,
                 [&]<class T>() { qsdp::encode(q_, static_cast<const T*>(src), count, packet); });
  }
  void decode(element e, const std::byte* packet, std::size_t count, void* dst) override {
    with_element(e, [&]<class T>() { qsdp::decode(q_, packet, count, static_cast<T*>(dst)); });
  }
  void all_gather(group_communicator& comm, element e, const void* send, void* recv,
                  std::size_t count, call_options options) override {
    with_element(e, [&]<class T>() {
      qsdp::all_gather(comm, q_, static_cast<const T*>(send), static_cast<T*>(recv), count,
                       options);
    });
  }
  void reduce_scatter(group_communicator& comm, element e, const void* send, void* recv,
                      std::size_t count, reduce_op op, call_options options) override {
    with_element(e, [&]<class T>() {
      qsdp::reduce_scatter(comm, q_, static_cast<const T*>(send), static_cast<T*>(recv), count, op,
                           options);
    });
  }
  void all_reduce(group_communicator& comm, element e, void* data, std::size_t count, reduce_op op,
                  call_options options) override {
    with_element(e, [&]<class T>() {
      qsdp::all_reduce(comm, q_, static_cast<T*>(data), count, op, options);
    });
  }
  std::size_t block_scaled_element_bytes(std::size_t count) const override {
    if constexpr (detail::block_scaled_layout_policy<Q>)
      return qsdp::block_scaled_element_bytes(q_, count);
    else
      return 0;
  }
  void all_gather_encoded(group_communicator& comm, element e, const void* send,
                          std::byte* elements, std::uint8_t* scales, std::size_t count) override {
    if constexpr (detail::block_scaled_layout_policy<Q>) {
      with_element(e, [&]<class T>() {
        qsdp::all_gather_encoded(comm, q_, static_cast<const T*>(send), {elements, scales}, count);
      });
    } else {
      (void)comm, (void)e, (void)send, (void)elements, (void)scales, (void)count;
      throw not_block_scaled("qsdp.torch.all_gather_encoded");
    }
  }
  void unpack_block_scaled(const std::byte* packet, std::size_t count, std::byte* elements,
                           std::uint8_t* scales) override {
    if constexpr (detail::block_scaled_layout_policy<Q>) {
      qsdp::unpack_block_scaled(q_, packet, count, {elements, scales});
    } else {
      (void)packet, (void)count, (void)elements, (void)scales;
      throw not_block_scaled("qsdp.torch.unpack_block_scaled");
    }
  }
  void delta_all_gather(delta_holder& gather, group_communicator& comm, const void* send,
                        void* recv) override {
    with_element(gather.type(), [&]<class T>() {
      gather.get<T>().all_gather(comm, q_, static_cast<const T*>(send), static_cast<T*>(recv));
    });
  }

 private:
  qsdp::error not_block_scaled(const std::string& where) const {
    return python::not_block_scaled(where, name());
  }

  Q q_;
};

}  // namespace qsdp::python
