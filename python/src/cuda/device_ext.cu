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

void device_group_communicator::require_stream(cudaStream_t stream, const char* where) const {
  // torch orders its collectives on its current stream only: an exchange on any other stream
  // would race with the kernels around it.
  if (stream != stream_)
    throw qsdp::error(std::string(where) + ": an exchange on stream " +
                      detail::cuda::address(stream) +
                      ", but torch orders this communicator's "
                      "collectives on its current stream " +
                      detail::cuda::address(stream_));
}

namespace {

/// `send` itself, or a stream-ordered copy of it when it lies inside `recv` (the collectives gather
/// in place; torch's collectives take no overlapping buffers).
const std::byte* outside(const std::byte* send, std::size_t n, const std::byte* recv,
                         std::size_t recv_bytes, detail::cuda::device_workspace& copy,
                         cudaStream_t stream, const char* where) {
  if (n == 0 || send + n <= recv || send >= recv + recv_bytes) return send;
  std::byte* c = copy.get(n, stream, where);
  detail::cuda::check(cudaMemcpyAsync(c, send, n, cudaMemcpyDeviceToDevice, stream),
                      "cudaMemcpyAsync", where);
  return c;
}

}  // namespace

void device_group_communicator::all_gather_bytes(const std::byte* send, std::byte* recv,
                                                 std::size_t n, cudaStream_t stream) {
  constexpr const char* where = "qsdp.torch all_gather_bytes (device)";
  require_stream(stream, where);
  const std::size_t total = n * static_cast<std::size_t>(size_);
  send = outside(send, n, recv, total, in_place_, stream, where);
  all_gather_(send, n, recv, total);
}

void device_group_communicator::all_to_all_bytes(const std::byte* send, std::byte* recv,
                                                 std::size_t n, cudaStream_t stream) {
  constexpr const char* where = "qsdp.torch all_to_all_bytes (device)";
  require_stream(stream, where);
  const std::size_t total = n * static_cast<std::size_t>(size_);
  send = outside(send, total, recv, total, in_place_, stream, where);
  all_to_all_(send, total, recv, total);
}

std::unique_ptr<device_policy> make_device_identity() {
  return std::make_unique<device_policy_impl<qsdp::identity>>(qsdp::identity{});
}

std::unique_ptr<device_policy> make_device_policy(const std::string& family, int bits,
                                                  std::size_t bucket_size, std::uint64_t seed,
                                                  bool rotated) {
  static constexpr family_factories<device_policy> factories{
      make_device_stochastic, make_device_uniform, make_device_symmetric, make_device_random_shift,
      make_device_identity};
  return make_named(factories, family, bits, bucket_size, seed, rotated);
}

void device_synchronize_and_check(cudaStream_t stream) { qsdp::synchronize_and_check(stream); }

}  // namespace qsdp::python
