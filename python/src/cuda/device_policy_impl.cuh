// SPDX-License-Identifier: Apache-2.0
//
// qsdp::python::device_policy for one concrete qsdp policy type: the device codec and collectives
// of qsdp/device_codec.hpp and qsdp/collectives.hpp (nvcc).
// python/src/cuda/device_policies_<family>.cu instantiate it through families.hpp's make_family,
// one family per file.
#pragma once

#include <qsdp/collectives.hpp>
#include <qsdp/device_codec.hpp>

#include <string>
#include <utility>

#include "../families.hpp"
#include "device_ext.hpp"

namespace qsdp::python {

template <class Q>
class device_policy_impl final : public device_policy {
 public:
  using interface = device_policy;

  explicit device_policy_impl(Q q) : q_(std::move(q)) {
    (void)qsdp::compressed_size<float>(q_, 0);  // the bucket-size rules, checked now
  }

  std::string name() const override { return policy_name<Q>(); }
  void encode(element e, const void* src, std::size_t count, std::byte* packet, std::uint64_t call,
              cudaStream_t stream) override {
    with_element(e, [&]<class T>() {
      qsdp::encode(q_, static_cast<const T*>(src), count, packet,
                   rng_position{.call = call, .stream = 0}, stream);
    });
  }
  void decode(element e, const std::byte* packet, std::size_t count, void* dst,
              cudaStream_t stream) override {
    with_element(e,
                 [&]<class T>() { qsdp::decode(q_, packet, count, static_cast<T*>(dst), stream); });
  }
  void all_gather(device_group_communicator& comm, element e, const void* send, void* recv,
                  std::size_t count, cudaStream_t stream, call_options options) override {
    with_element(e, [&]<class T>() {
      qsdp::all_gather(comm, q_, static_cast<const T*>(send), static_cast<T*>(recv), count, stream,
                       options);
    });
  }
  void reduce_scatter(device_group_communicator& comm, element e, const void* send, void* recv,
                      std::size_t count, reduce_op op, cudaStream_t stream,
                      call_options options) override {
    with_element(e, [&]<class T>() {
      qsdp::reduce_scatter(comm, q_, static_cast<const T*>(send), static_cast<T*>(recv), count, op,
                           stream, options);
    });
  }
  void all_reduce(device_group_communicator& comm, element e, void* data, std::size_t count,
                  reduce_op op, cudaStream_t stream, call_options options) override {
    with_element(e, [&]<class T>() {
      qsdp::all_reduce(comm, q_, static_cast<T*>(data), count, op, stream, options);
    });
  }

  void all_gather_encoded(device_group_communicator& comm, element e, const void* send,
                          std::byte* elements, std::uint8_t* scales, std::size_t count,
                          cudaStream_t stream) override {
    if constexpr (detail::block_scaled_layout_policy<Q>) {
      with_element(e, [&]<class T>() {
        qsdp::all_gather_encoded(comm, q_, static_cast<const T*>(send), {elements, scales}, count,
                                 stream);
      });
    } else {
      (void)comm, (void)e, (void)send, (void)elements, (void)scales, (void)count, (void)stream;
      throw not_block_scaled("qsdp.torch.all_gather_encoded");
    }
  }
  void unpack_block_scaled(const std::byte* packet, std::size_t count, std::byte* elements,
                           std::uint8_t* scales, cudaStream_t stream) override {
    if constexpr (detail::block_scaled_layout_policy<Q>) {
      qsdp::unpack_block_scaled(q_, packet, count, {elements, scales}, stream);
    } else {
      (void)packet, (void)count, (void)elements, (void)scales, (void)stream;
      throw not_block_scaled("qsdp.torch.fsdp.keep_encoded");
    }
  }

 private:
  qsdp::error not_block_scaled(const std::string& where) const {
    return python::not_block_scaled(where, name());
  }

  Q q_;
};

}  // namespace qsdp::python
