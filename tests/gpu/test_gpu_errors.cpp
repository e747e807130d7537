// SPDX-License-Identifier: Apache-2.0
// Bad input on the device path ends in a qsdp::error that names the problem.
#include <doctest/doctest.h>

#include <string>

#include "gpu_support.hpp"

TEST_CASE("host pointers given to the device collectives are refused, naming the argument") {
  const std::string host = gpu_test::device_bad_input("host send pointer");
  CHECK(host.find("send") != std::string::npos);
  CHECK(host.find("is host memory") != std::string::npos);
  const std::string pinned = gpu_test::device_bad_input("pinned recv pointer");
  CHECK(pinned.find("recv") != std::string::npos);
  CHECK(pinned.find("pinned host memory") != std::string::npos);
}

TEST_CASE("a stream of another device than the communicator's is refused") {
  const std::string m = gpu_test::device_bad_input("stream of another device");
  CHECK(m.find("the stream belongs to device 0, the communicator to device 1") !=
        std::string::npos);
}

TEST_CASE("the first call of a signature cannot be captured in a CUDA graph, and says so") {
  const std::string m = gpu_test::device_bad_input("captured first call");
  CHECK(m.find("captur") != std::string::npos);
}

TEST_CASE("a corrupt or misplaced packet decodes to NaN and is reported with the field") {
  const std::string corrupt = gpu_test::device_bad_input("corrupt header");
  CHECK(corrupt.find("packet has 5 bits per value, decoder expects 8") != std::string::npos);
  CHECK(corrupt.find("NOT SET TO NaN") == std::string::npos);
  const std::string misplaced = gpu_test::device_bad_input("misplaced packet");
  CHECK(misplaced.find("packet holds 4096 values, decoder was asked for 4095") !=
        std::string::npos);
}

TEST_CASE("a device call counter must be device memory, 8-byte aligned, and not null") {
  CHECK(gpu_test::device_bad_input("null call counter") ==
        "qsdp::encode (device): device_rng_position.call is null; expected a std::uint64_t in "
        "device memory holding the call index");
  const std::string host = gpu_test::device_bad_input("host call counter");
  CHECK(host.find("device_rng_position.call") != std::string::npos);
  CHECK(host.find("is host memory") != std::string::npos);
  const std::string misaligned = gpu_test::device_bad_input("misaligned call counter");
  CHECK(misaligned.find("device_rng_position.call") != std::string::npos);
  CHECK(misaligned.find("is not 8-byte aligned") != std::string::npos);
}
