// SPDX-License-Identifier: Apache-2.0
// nccl_communicator::synchronize on real NCCL communicators: it returns once the work is done, and
// a wait that cannot end (a rank that never joins, a stream held up) times out, aborts the
// communicator and leaves it refusing further calls. Aborted communicators are never destroyed
// again here: ncclCommAbort freed them.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "nccl_watchdog_support.hpp"
#include "support.hpp"

#if QSDP_TEST_NCCL
#include <nccl.h>

#include <memory>
#include <stdexcept>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

void require_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

void require_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}

int device_count() {
  int devices = 0;
  require_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  return devices;
}

using qsdp_test::contains;
using qsdp_test::error_of;

/// Ranks 0..n-1 of one ncclCommInitAll, rank r on device r (NCCL refuses two ranks on one GPU),
/// each with a stream and a wrapper. The destructor frees what is still alive: a communicator that
/// its wrapper aborted is already freed and is skipped; with `abort_survivors`, the others are
/// aborted too (their peers are gone, so a destroy could wait for them).
struct nccl_ranks {
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  std::vector<std::unique_ptr<qsdp::nccl_communicator>> wrappers;
  bool abort_survivors = false;

  nccl_ranks(int n, qsdp::fault_options options) : comms(static_cast<std::size_t>(n)) {
    std::vector<int> devices(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) devices[static_cast<std::size_t>(r)] = r;
    require_nccl(ncclCommInitAll(comms.data(), n, devices.data()), "ncclCommInitAll");
    for (int r = 0; r < n; ++r) {
      require_cuda(cudaSetDevice(r), "cudaSetDevice");
      cudaStream_t stream = nullptr;
      require_cuda(cudaStreamCreate(&stream), "cudaStreamCreate");
      streams.push_back(stream);
      wrappers.push_back(
          std::make_unique<qsdp::nccl_communicator>(comms[static_cast<std::size_t>(r)], options));
    }
  }
  nccl_ranks(const nccl_ranks&) = delete;
  nccl_ranks& operator=(const nccl_ranks&) = delete;
  ~nccl_ranks() {
    for (std::size_t r = 0; r < comms.size(); ++r) {
      (void)cudaSetDevice(static_cast<int>(r));
      const bool aborted = wrappers[r]->aborted();
      if (!aborted && !abort_survivors) (void)cudaStreamSynchronize(streams[r]);
      wrappers[r].reset();  // before the stream its scratch was used on
      if (!aborted) (void)(abort_survivors ? ncclCommAbort(comms[r]) : ncclCommDestroy(comms[r]));
      (void)cudaStreamDestroy(streams[r]);
    }
  }
  int size() const { return static_cast<int>(comms.size()); }
};

/// Every rank runs body(rank) on its own thread (on its device), as NCCL needs for collectives
/// whose first call synchronises the host; the first exception is rethrown.
void on_every_rank(nccl_ranks& ranks, auto&& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> failures(static_cast<std::size_t>(ranks.size()));
  for (int r = 0; r < ranks.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        require_cuda(cudaSetDevice(r), "cudaSetDevice");
        body(r);
      } catch (...) {
        failures[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& f : failures)
    if (f) std::rethrow_exception(f);
}

/// Checks what nccl_all_gather gathered: rank r's chunk holds r + 1.
void check_gathered(const std::vector<float>& gathered, std::size_t count, int world) {
  REQUIRE(gathered.size() == count * static_cast<std::size_t>(world));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < gathered.size(); ++i)
    wrong += gathered[i] != static_cast<float>(i / count + 1);
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("nccl synchronize returns once an all_gather of every rank is done") {
  const int world = device_count() >= 2 ? 2 : 1;
  constexpr std::size_t count = 10000;
  nccl_ranks ranks(world, {.timeout = 60s});
  std::vector<std::vector<float>> gathered(static_cast<std::size_t>(world));
  on_every_rank(ranks, [&](int r) {
    const auto i = static_cast<std::size_t>(r);
    gathered[i] = gpu_test::nccl_all_gather(*ranks.wrappers[i], count, ranks.streams[i], true);
  });
  for (const auto& g : gathered) check_gathered(g, count, world);
  for (const auto& w : ranks.wrappers) CHECK_FALSE(w->aborted());
}

TEST_CASE("nccl synchronize times out when a rank never joins, and aborts the communicator") {
  if (device_count() < 2) {
    MESSAGE("needs 2 GPUs (NCCL puts one rank on each): this case checks nothing here");
    return;
  }
  constexpr std::size_t count = 4096;
  nccl_ranks ranks(2, {.timeout = 500ms});
  ranks.abort_survivors = true;  // rank 1's peer is aborted below
  // Together first: opens NCCL's connections and agrees on the call, so the second call is only
  // enqueued and nothing waits for rank 1 before synchronize().
  on_every_rank(ranks, [&](int r) {
    const auto i = static_cast<std::size_t>(r);
    (void)gpu_test::nccl_all_gather(*ranks.wrappers[i], count, ranks.streams[i], true);
  });
  require_cuda(cudaSetDevice(0), "cudaSetDevice");
  qsdp::nccl_communicator& rank0 = *ranks.wrappers[0];
  (void)gpu_test::nccl_all_gather(rank0, count, ranks.streams[0], false);  // rank 1 stays away
  const auto start = clock_type::now();
  const std::string m = error_of([&] { rank0.synchronize(ranks.streams[0]); });
  const auto elapsed = clock_type::now() - start;
  INFO(m);
  CHECK(contains(m, "qsdp::nccl_communicator::synchronize: timed out"));
  CHECK(contains(m, "did not complete within 500 ms (fault_options::timeout"));
  CHECK(contains(m, "aborted with ncclCommAbort"));
  CHECK(elapsed >= 500ms);
  CHECK(elapsed < 500ms + 30s);  // generous: ncclCommAbort tears down connections
  CHECK(rank0.aborted());
  CHECK(rank0.native() == nullptr);
  CHECK(contains(error_of([&] { rank0.check_async_error(); }), "the communicator was aborted"));
  CHECK(contains(error_of([&] { rank0.synchronize(ranks.streams[0]); }),
                 "qsdp::nccl_communicator::synchronize: the communicator was aborted"));
}

TEST_CASE("nccl synchronize times out on a stream that is held up, and aborts the communicator") {
  nccl_ranks ranks(1, {.timeout = 500ms});
  qsdp::nccl_communicator& comm = *ranks.wrappers[0];
  require_cuda(cudaSetDevice(0), "cudaSetDevice");
  gpu_test::stream_gate gate(ranks.streams[0]);
  // Let the stream go later than the timeout: ncclCommAbort may wait for the device to idle.
  std::thread opener([&] {
    std::this_thread::sleep_for(2s);
    gate.open();
  });
  const auto start = clock_type::now();
  const std::string m = error_of([&] { comm.synchronize(ranks.streams[0]); });
  const auto elapsed = clock_type::now() - start;
  opener.join();
  INFO(m);
  CHECK(contains(m, "timed out: the work queued on the stream did not complete within 500 ms"));
  CHECK(contains(m, "do not use or destroy it again"));
  CHECK_FALSE(contains(m, "asynchronous error"));
  CHECK(elapsed >= 500ms);
  CHECK(elapsed < 500ms + 30s);
  CHECK(comm.aborted());
  std::byte* none = nullptr;
  CHECK(contains(error_of([&] { comm.all_gather_bytes(none, none, 0, ranks.streams[0]); }),
                 "qsdp::nccl_communicator::all_gather_bytes: the communicator was aborted"));
}

TEST_CASE(
    "nccl synchronize with abort_on_failure off: the timeout throws, the communicator lives") {
  nccl_ranks ranks(1, {.timeout = 200ms, .abort_on_failure = false});
  qsdp::nccl_communicator& comm = *ranks.wrappers[0];
  require_cuda(cudaSetDevice(0), "cudaSetDevice");
  {
    gpu_test::stream_gate gate(ranks.streams[0]);
    const std::string m = error_of([&] { comm.synchronize(ranks.streams[0]); });
    INFO(m);
    CHECK(contains(m, "timed out"));
    CHECK(contains(m, "the communicator was not aborted"));
    CHECK_FALSE(comm.aborted());
    gate.open();
    CHECK_NOTHROW(comm.synchronize(ranks.streams[0]));  // the same work, now done
  }
  check_gathered(gpu_test::nccl_all_gather(comm, 1000, ranks.streams[0], true), 1000, 1);
  CHECK(comm.native() == ranks.comms[0]);
}

TEST_CASE("a non-blocking NCCL communicator (ncclInProgress) initialises and exchanges") {
  require_cuda(cudaSetDevice(0), "cudaSetDevice");
  ncclUniqueId id;
  require_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t raw = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(&raw, 1, id, 0, &config);
  REQUIRE((started == ncclSuccess || started == ncclInProgress));
  cudaStream_t stream = nullptr;
  require_cuda(cudaStreamCreate(&stream), "cudaStreamCreate");
  {
    qsdp::nccl_communicator comm(raw, {.timeout = 60s});  // waits out the initialisation
    CHECK(comm.size() == 1);
    check_gathered(gpu_test::nccl_all_gather(comm, 5000, stream, true), 5000, 1);
    CHECK_FALSE(comm.aborted());
  }
  // Non-blocking teardown: finalize, wait until it is done, then destroy.
  ncclResult_t finalized = ncclCommFinalize(raw);
  ncclResult_t state = finalized;
  const auto give_up = clock_type::now() + 60s;
  while (state == ncclInProgress && clock_type::now() < give_up) {
    std::this_thread::sleep_for(1ms);
    require_nccl(ncclCommGetAsyncError(raw, &state), "ncclCommGetAsyncError");
  }
  CHECK(state == ncclSuccess);
  CHECK(ncclCommDestroy(raw) == ncclSuccess);
  (void)cudaStreamDestroy(stream);
}

#else
TEST_CASE("nccl synchronize and its watchdog") {
  MESSAGE("NCCL was not found when the tests were built: these cases check nothing here");
}
#endif
