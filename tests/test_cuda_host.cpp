// SPDX-License-Identifier: Apache-2.0
// The host side of the CUDA path, compiled by the host compiler and run everywhere: what happens
// without a GPU, the device communicators' bookkeeping, and (where a GPU is) a real exchange
// between the ranks of run_local_cuda. The kernels themselves are tested in tests/gpu.
#include <doctest/doctest.h>

TEST_SUITE_BEGIN("cuda_host");

#if QSDP_TEST_CUDA_RUNTIME
#include <cstring>
#include <string>
#include <vector>

#include <qsdp/cuda_local.hpp>
#if QSDP_TEST_NCCL
#include <qsdp/nccl.hpp>
#endif

#include "support.hpp"

using qsdp_test::error_of;

TEST_CASE("run_local_cuda fails with a qsdp::error naming the CUDA call where no GPU is usable") {
  if (qsdp::detail::cuda::device_available()) {
    // Two ranks swap 4 KiB through the device-to-device exchange, ordered by events, no host sync.
    std::vector<std::vector<unsigned char>> got(2);
    qsdp::run_local_cuda(2, [&](qsdp::cuda_local_communicator& comm) {
      const std::size_t n = 4096;
      std::vector<unsigned char> mine(n, static_cast<unsigned char>(0x10 + comm.rank()));
      void* d = nullptr;
      REQUIRE(cudaMalloc(&d, 3 * n) == cudaSuccess);
      auto* bytes = static_cast<std::byte*>(d);
      REQUIRE(cudaMemcpyAsync(bytes, mine.data(), n, cudaMemcpyHostToDevice, comm.stream()) ==
              cudaSuccess);
      comm.all_gather_bytes(bytes, bytes + n, n, comm.stream());
      got[static_cast<std::size_t>(comm.rank())].resize(2 * n);
      REQUIRE(cudaMemcpyAsync(got[static_cast<std::size_t>(comm.rank())].data(), bytes + n, 2 * n,
                              cudaMemcpyDeviceToHost, comm.stream()) == cudaSuccess);
      REQUIRE(cudaStreamSynchronize(comm.stream()) == cudaSuccess);
      REQUIRE(cudaFree(d) == cudaSuccess);
    });
    for (const auto& g : got) {
      CHECK(g[0] == 0x10);
      CHECK(g[4096] == 0x11);
    }
    return;
  }
  const std::string m =
      error_of([] { qsdp::run_local_cuda(2, [](qsdp::cuda_local_communicator&) {}); });
  CHECK(m.find("qsdp::run_local_cuda: cudaGetDevice failed: cuda") != std::string::npos);
  CHECK(error_of([] { qsdp::run_local_cuda(0, [](qsdp::cuda_local_communicator&) {}); }) ==
        "qsdp::run_local_cuda: world is 0; expected >= 1");
}

TEST_CASE(
    "agreed_signatures remembers agreed call signatures, forgetting the oldest past its capacity") {
  qsdp::detail::agreed_signatures state;
  unsigned char d[64] = {};
  CHECK_FALSE(state.contains(d));
  state.remember(d);
  CHECK(state.contains(d));
  for (std::size_t i = 1; i <= qsdp::detail::agreed_signatures::capacity; ++i) {
    unsigned char other[64] = {};
    std::memcpy(other, &i, sizeof i);
    state.remember(other);
  }
  CHECK_FALSE(state.contains(d));  // the first one was pushed out by 64 newer ones
  unsigned char last[64] = {};
  const std::size_t newest = qsdp::detail::agreed_signatures::capacity;
  std::memcpy(last, &newest, sizeof newest);
  CHECK(state.contains(last));
}

TEST_CASE("a failure channel with nothing reported polls quietly") {
  qsdp::detail::cuda::failure_channel channel;
  CHECK_NOTHROW(channel.poll("test"));
  CHECK_NOTHROW(channel.poll("test", "the packet from rank"));
}

#if QSDP_TEST_NCCL
TEST_CASE("nccl_communicator refuses a null communicator") {
  CHECK(error_of([] { qsdp::nccl_communicator comm(nullptr); }) ==
        "qsdp::nccl_communicator: comm is null; expected an initialised ncclComm_t");
}
#endif

#endif  // QSDP_TEST_CUDA_RUNTIME

#if QSDP_TEST_CUDA_RUNTIME && QSDP_TEST_NCCL
#include <chrono>

TEST_CASE("nccl_communicator: fault_options defaults, and out-of-range values refused first") {
  using namespace std::chrono_literals;
  const qsdp::fault_options defaults;
  CHECK_FALSE(defaults.timeout.has_value());  // the transport's default:
  CHECK(qsdp::nccl_default_timeout == 10min);
  CHECK(defaults.poll_interval == 100us);
  CHECK(defaults.abort_on_failure);
  // The options are checked first, so a null comm shows that nothing reached NCCL.
  CHECK(error_of([] { qsdp::nccl_communicator comm(nullptr, {.timeout = -1ms}); }) ==
        "qsdp::nccl_communicator: fault_options::timeout is -1 ms; expected 0 (no limit) or "
        "1..86400000 ms");
  CHECK(error_of([] { qsdp::nccl_communicator comm(nullptr, {.poll_interval = -3us}); }) ==
        "qsdp::nccl_communicator: fault_options::poll_interval is -3 us; expected 0..60000000 us "
        "(0 polls continuously)");
  CHECK(error_of([] {
          qsdp::nccl_communicator comm(nullptr, {.timeout = 0ms, .abort_on_failure = false});
        }) == "qsdp::nccl_communicator: comm is null; expected an initialised ncclComm_t");
}

TEST_CASE("nccl_result_name names every NCCL result, and unknown ones by number") {
  CHECK(qsdp::detail::nccl_result_name(ncclRemoteError) == "ncclRemoteError");
  CHECK(qsdp::detail::nccl_result_name(ncclInProgress) == "ncclInProgress");
  // 12: not a result NCCL defines yet, but inside the enum's value range (its enumerators fit in 4
  // bits); a value beyond that range would be undefined behaviour to form, which UBSan reports.
  CHECK(qsdp::detail::nccl_result_name(static_cast<ncclResult_t>(12)) == "ncclResult_t 12");
}
#endif  // QSDP_TEST_CUDA_RUNTIME && QSDP_TEST_NCCL

TEST_SUITE_END();
