#include <algorithm>
#include <cmath>
#include <cstdio>
#include <qsdp/collectives.hpp>
#include <vector>
int main() {  // 4 ranks as threads; all_gather 8-bit shards, then reduce_scatter (avg) them back
  qsdp::run_local(4, [q = qsdp::stochastic<8>{.seed = 7}](qsdp::local_communicator& comm) {
    std::vector<float> shard(1 << 20), full(4 << 20), out(1 << 20);  // full: all 4 shards
    for (std::size_t i = 0; i < shard.size(); ++i) shard[i] = std::sin(i / 1000.0f + comm.rank());
    qsdp::all_gather(comm, q, shard.data(), full.data(), shard.size());
    qsdp::reduce_scatter(comm, q, full.data(), out.data(), out.size(), qsdp::reduce_op::avg);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = std::fabs(out[i] - shard[i]);
    std::printf("rank %d: max error %.4f\n", comm.rank(), std::ranges::max(out));
  });
}
