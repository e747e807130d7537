// SPDX-License-Identifier: Apache-2.0
// The GPU tests' bridge between host test code (doctest, .cpp, g++) and device work (.cu, nvcc).
// Each helper takes and returns host vectors; its definition lives in a .cu file, explicitly
// instantiated for the policies and element types the tests use (a missing one is a link error).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <qsdp/codec.hpp>
#include <qsdp/collectives.hpp>

namespace gpu_test {

/// Whether a CUDA device can be used (false without a GPU or driver).
bool device_present();

/// Encodes x on the device. The input is copied to a device buffer at byte offset `src_offset` (any
/// value: unaligned pointers take the general path), the packet written at byte offset
/// `packet_offset`; returns the packet's compressed_size bytes.
template <class Q, class T>
std::vector<std::byte> device_encode(const Q& q, const std::vector<T>& x, std::size_t src_offset,
                                     std::size_t packet_offset, qsdp::rng_position position);

/// Decodes a packet (copied to the device at `packet_offset`) into count values written at byte
/// offset `dst_offset` of a device buffer, after synchronize_and_check (which throws on a bad
/// header).
template <class Q, class T>
std::vector<T> device_decode(const Q& q, const std::vector<std::byte>& packet, std::size_t count,
                             std::size_t packet_offset, std::size_t dst_offset);

/// Captures one device encode of x at a device_rng_position (its counter set to `first_call`,
/// stream 3) in a CUDA graph and replays the graph `replays` times; returns each replay's packet
/// and, last, the counter's final value in `final_call`.
template <class Q, class T>
std::vector<std::vector<std::byte>> graph_encode_replays(const Q& q, const std::vector<T>& x,
                                                         std::uint64_t first_call, int replays,
                                                         std::uint64_t* final_call);

/// acc += decode_accumulate of `packet_count` packets back to back, on the device.
template <class Q>
std::vector<float> device_decode_accumulate(const Q& q, const std::vector<std::byte>& packets,
                                            std::size_t packet_count, std::size_t count,
                                            std::vector<float> acc, std::size_t acc_offset);

enum class collective { all_gather, reduce_scatter, all_reduce };

/// Runs one collective among world ranks of run_local_cuda (one GPU), `calls` times in a row with
/// the same inputs; returns every rank's output of the last call. inputs[r] is rank r's send buffer
/// (all_reduce: its data). `growths` receives rank 0's workspace growth count.
template <class Q, class T>
std::vector<std::vector<T>> device_collective(collective kind, const Q& q, int world,
                                              std::size_t count,
                                              const std::vector<std::vector<T>>& inputs,
                                              qsdp::reduce_op op, int calls = 1,
                                              std::size_t* growths = nullptr,
                                              qsdp::call_options options = {});

/// The encoded all-gather among world ranks of run_local_cuda: every rank's (elements, scales) of
/// the block-scaled layout. inputs[r] is rank r's send buffer.
template <class Q, class T>
std::vector<std::pair<std::vector<std::byte>, std::vector<std::uint8_t>>> device_gather_encoded(
    const Q& q, int world, std::size_t count, const std::vector<std::vector<T>>& inputs);

/// One rank of a real NCCL communicator (ncclCommInitAll over device 0): all_gather, reduce_scatter
/// (sum) and all_reduce (sum) of x, outputs in that order. With graph_replay, each collective is
/// called once and then captured in a CUDA graph and replayed; the replay's output is returned.
/// Throws if NCCL was not found when the tests were built.
template <class Q, class T>
std::vector<std::vector<T>> nccl_one_rank(const Q& q, const std::vector<T>& x, bool graph_replay);
bool nccl_built();

/// One NCCL rank again: one plain call of `kind` (sum), then the same call captured in a CUDA graph
/// that is replayed `replays` times, then one more plain call. Returns the outputs in that order
/// (1 + replays + 1 of them). Throws if NCCL was not found when the tests were built.
template <class Q, class T>
std::vector<std::vector<T>> nccl_graph_replays(collective kind, const Q& q, const std::vector<T>& x,
                                               int replays);

/// qsdp::delta_gather on device buffers among world ranks of run_local_cuda: call c sends
/// shards[c][r] from rank r; returns every call's gathered output, [call][rank]. With reset_alone
/// >= 0, that rank resets its object before the last call: then the returned outputs stop at the
/// calls made, and `errors` (when given) receives each rank's qsdp::error message of the call after
/// the last ("" where none was thrown).
template <class Q, class T>
std::vector<std::vector<std::vector<T>>> device_delta_gather(
    const Q& q, int world, std::size_t count,
    const std::vector<std::vector<std::vector<T>>>& shards, int reset_alone = -1,
    std::vector<std::string>* errors = nullptr);

/// The message of the qsdp::error a device call with bad arguments throws, or "" if none is thrown.
/// Cases: "host send pointer", "pinned recv pointer", "stream of another device", "captured first
/// call", "corrupt header", "misplaced packet", "null call counter", "host call counter",
/// "misaligned call counter".
std::string device_bad_input(const std::string& which);

/// A two-level collective among world ranks of run_local_cuda_nodes (nodes of node_size ranks, one
/// GPU), `calls` times in a row; returns every rank's output of the last call (inputs as
/// device_collective's). With `errors`, a rank's qsdp::error is caught and its message stored
/// there (that rank's output stays empty); without, it propagates. Rank `odd_rank` (if any) calls
/// with count + 1 values, as a rank that called differently.
template <class Inside, class Across, class T>
std::vector<std::vector<T>> device_two_level(
    collective kind, const qsdp::level_policies<Inside, Across>& q, int world, int node_size,
    std::size_t count, const std::vector<std::vector<T>>& inputs, qsdp::reduce_op op, int calls = 1,
    qsdp::call_options options = {}, std::vector<std::string>* errors = nullptr, int odd_rank = -1);

/// A two_level pair of two one-rank NCCL communicators (ncclCommInitAll over device 0, twice):
/// the two-level all_gather, reduce_scatter (sum) and all_reduce (sum) of x, outputs in that
/// order; with graph_replay, each is called once, then captured in a CUDA graph and replayed (the
/// replay's output is returned). Throws if NCCL was not found when the tests were built.
template <class Inside, class Across, class T>
std::vector<std::vector<T>> nccl_two_level_one_rank(const qsdp::level_policies<Inside, Across>& q,
                                                    const std::vector<T>& x, bool graph_replay);

/// tests/gpu/group_mix.hpp's mix of all_gathers and reduce_scatters (fp32 and bf16; uniform,
/// stochastic, symmetric, hadamard, random_shift; one in two pipeline pieces; an in-place
/// all_gather and an in-place reduce_scatter) among `world` ranks of run_local_cuda, one call after
/// another or in a group, `repeats` times (a group's later runs skip the agreement), then one
/// all_gather outside any group; returns every rank's outputs of the last run, [rank][call] as
/// bytes.
std::vector<std::vector<std::vector<std::byte>>> device_group_mix(int world, bool grouped,
                                                                  std::size_t min_compressed_bytes,
                                                                  int repeats = 1);

/// Each rank's qsdp::error message ("" where none) for a misuse of device groups among `world`
/// ranks of run_local_cuda: "shorter group", "empty group", "other count", "other stream",
/// "all_reduce in group", "group_end without start".
std::vector<std::string> device_group_misuse(int world, const std::string& which);

}  // namespace gpu_test
