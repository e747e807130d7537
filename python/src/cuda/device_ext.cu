// SPDX-License-Identifier: Apache-2.0
//
// The device communicator over a ProcessGroup, the identity policy and the family dispatch of
// qsdp._ext_cuda (the parts that need nvcc but no policy family).
#include <string>

#include "device_ext.hpp"
#include "device_policy_impl.cuh"

namespace qsdp::python {

device_group_communicator::device_group_communicator(int rank, int size, int device,
                                                     device_exchange all_gather,
                                                     device_exchange all_to_all)
    : rank_(rank),
      size_(size),
      device_(device),
      all_gather_(std::move(all_gather)),
      all_to_all_(std::move(all_to_all)) {
  check_group_shape(rank, size);
  if (device < 0)
    throw qsdp::error("qsdp.torch: process group device is " + std::to_string(device) +
                      "; expected a CUDA device index >= 0");
}

void device_group_communicator::exchange(const device_exchange& exchange, const std::byte* send,
                                         std::size_t send_bytes, std::byte* recv,
                                         std::size_t recv_bytes, cudaStream_t stream,
                                         const char* where) {
  // torch orders its collectives on its current stream only: an exchange on any other stream
  // would race with the kernels around it.
  if (stream != stream_)
    throw qsdp::error(std::string(where) + ": an exchange on stream " +
                      detail::cuda::address(stream) +
                      ", but torch orders this communicator's "
                      "collectives on its current stream " +
                      detail::cuda::address(stream_));
  // The collectives gather in place; torch's collectives take no overlapping buffers, so a `send`
  // inside `recv` goes out from a stream-ordered copy.
  if (send_bytes > 0 && send + send_bytes > recv && send < recv + recv_bytes) {
    std::byte* copy = in_place_.get(send_bytes, stream, where);
    detail::cuda::check(cudaMemcpyAsync(copy, send, send_bytes, cudaMemcpyDeviceToDevice, stream),
                        "cudaMemcpyAsync", where);
    send = copy;
  }
  exchange(send, send_bytes, recv, recv_bytes);
}

void device_group_communicator::all_gather_bytes(const std::byte* send, std::byte* recv,
                                                 std::size_t n, cudaStream_t stream) {
  exchange(all_gather_, send, n, recv, n * static_cast<std::size_t>(size_), stream,
           "qsdp.torch all_gather_bytes (device)");
}

void device_group_communicator::all_to_all_bytes(const std::byte* send, std::byte* recv,
                                                 std::size_t n, cudaStream_t stream) {
  const std::size_t total = n * static_cast<std::size_t>(size_);
  exchange(all_to_all_, send, total, recv, total, stream, "qsdp.torch all_to_all_bytes (device)");
}

void device_group_communicator::group_start() { qsdp::group_start(*this); }

void device_group_communicator::group_end() { qsdp::group_end(*this); }

std::unique_ptr<device_policy> make_device_identity() {
  return std::make_unique<device_policy_impl<qsdp::identity>>(qsdp::identity{});
}

std::unique_ptr<device_policy> make_device_policy(const std::string& family, int bits,
                                                  std::size_t bucket_size, std::uint64_t seed,
                                                  bool rotated) {
  static constexpr family_factories<device_policy> factories{
      make_device_stochastic, make_device_uniform, make_device_symmetric, make_device_random_shift,
      make_device_identity,   make_device_mx,      make_device_fp4};
  return make_named(factories, family, bits, bucket_size, seed, rotated);
}

void device_synchronize_and_check(cudaStream_t stream) { qsdp::synchronize_and_check(stream); }

}  // namespace qsdp::python
