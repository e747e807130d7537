// SPDX-License-Identifier: Apache-2.0
// Groups of device collectives (qsdp::group_start / qsdp::group_end over run_local_cuda): a group
// gives every call the bytes of the same call made alone on the device and of the same group on
// the host; ranks whose groups differ all throw; calls a group cannot hold are refused.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <qsdp/collectives.hpp>

#include "gpu_support.hpp"
#include "group_mix.hpp"

namespace {

using outputs = std::vector<std::vector<std::vector<std::byte>>>;

/// The mix as one host group per run on run_local's ranks.
outputs host_group_mix(int world, std::size_t gate, int repeats = 1) {
  using namespace gpu_test::mix;
  const qsdp::call_options options{.min_compressed_bytes = gate};
  outputs out(static_cast<std::size_t>(world));
  qsdp::run_local(world, [&](qsdp::local_communicator& comm) {
    mix_host b = make_mix(comm.rank(), world);
    auto at = [](auto& v) { return v.data(); };
    for (int g = 0; g < repeats; ++g) {
      if (g > 0) b = make_mix(comm.rank(), world);  // the in-place buffers start over
      qsdp::group_start(comm);
      issue_mix(comm, b, at, options);
      qsdp::group_end(comm);
    }
    issue_after(comm, b, at);
    out[static_cast<std::size_t>(comm.rank())] = outputs_of(b, comm.rank());
  });
  return out;
}

void require_same(const outputs& a, const outputs& b, const char* what) {
  REQUIRE(a.size() == b.size());
  for (std::size_t r = 0; r < a.size(); ++r) {
    REQUIRE(a[r].size() == b[r].size());
    for (std::size_t c = 0; c < a[r].size(); ++c) {
      INFO(what << ": rank " << r << ", call " << c);
      CHECK(a[r][c] == b[r][c]);
    }
  }
}

}  // namespace

TEST_CASE("a device group gives the bits of its calls made alone and of the host's group") {
  // Gate 0 compresses every call; 1 GiB gates the group and every call alone.
  for (const std::size_t gate : {std::size_t{0}, std::size_t{1} << 30}) {
    for (const int world : {2, 3}) {
      INFO("world " << world << ", gate " << gate);
      const outputs host = host_group_mix(world, gate);
      require_same(gpu_test::device_group_mix(world, false, gate), host,
                   "device calls one by one against the host group");
      require_same(gpu_test::device_group_mix(world, true, gate), host,
                   "device group against the host group");
      // A group's second run skips the agreement and draws the next call indices, as the host's.
      require_same(gpu_test::device_group_mix(world, true, gate, 2), host_group_mix(world, gate, 2),
                   "second device group against the second host group");
    }
  }
}

TEST_CASE("ranks whose device groups differ all throw, naming the difference") {
  for (const auto& e : gpu_test::device_group_misuse(3, "shorter group"))
    CHECK(e.find("group holds") != std::string::npos);
  for (const auto& e : gpu_test::device_group_misuse(3, "empty group"))
    CHECK(e.find("rank 1's group holds 1 calls, rank 0's 0") != std::string::npos);
  for (const auto& e : gpu_test::device_group_misuse(3, "other count")) {
    CHECK(e.find("call 1 of the group") != std::string::npos);
    CHECK(e.find("count") != std::string::npos);
  }
}

TEST_CASE("a device group refuses another stream, all_reduce and a group_end without a start") {
  for (const auto& e : gpu_test::device_group_misuse(2, "other stream"))
    CHECK(e.find("a group's calls are ordered on one stream") != std::string::npos);
  for (const auto& e : gpu_test::device_group_misuse(2, "all_reduce in group"))
    CHECK(e.find("called while a group is open") != std::string::npos);
  for (const auto& e : gpu_test::device_group_misuse(2, "group_end without start"))
    CHECK(e.find("no group is open") != std::string::npos);
}
