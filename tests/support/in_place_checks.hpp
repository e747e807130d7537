// SPDX-License-Identifier: Apache-2.0
//
// NCCL's in-place conventions, checked on any host communicator: an all_gather whose send buffer is
// this rank's block of the receive buffer (send == recv + rank * count) and a reduce_scatter whose
// receive buffer is this rank's chunk of the send buffer (recv == send + rank * count) give the
// out-of-place calls' bytes exactly, for every kind of policy, piece count and the size gate. A
// collective draws its random numbers at its communicator's call index, so the two sequences run on
// two fresh communicators. Used by tests/test_in_place.cpp (threads) and
// tests/mpi/test_mpi_collectives.cpp (MPI ranks).
#pragma once

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <qsdp/collectives.hpp>

#include "support.hpp"

namespace qsdp_test {

/// What one in-place check differs in: sizes with a tail bucket, several pieces, the gate on or
/// off.
struct in_place_case {
  std::size_t count;  // values per rank; 0: two minimum pieces and a tail of the element type
  std::size_t max_pieces;
  std::size_t min_compressed_bytes;
};

inline constexpr in_place_case in_place_cases[] = {
    {10000, 1, 0},  // one piece, a short last bucket
    {0, 4, 0},      // three pieces: later pieces are encoded after earlier ones are decoded
    {3, 2, 0},      // fewer values than a bucket
    {1000, 2, qsdp::recommended_min_compressed_bytes},  // below the size gate: sent exactly
};

/// The values per rank of case c for element type T.
template <class T>
std::size_t in_place_count(const in_place_case& c) {
  return c.count != 0 ? c.count : 2 * (qsdp::min_piece_bytes / sizeof(T)) + 1000;
}

/// Rank r's values for a check (different on every rank and element).
template <class T>
std::vector<T> in_place_values(int rank, std::size_t n, std::uint32_t salt) {
  return convert<T>(make_data(distribution::normal, n, salt * 1000u + static_cast<unsigned>(rank)));
}

/// all_gather, reduce_scatter (sum, then avg) and all_reduce (avg) with policy q on `comm`, out of
/// place or in place; the bytes of their results, back to back.
template <class Comm, class Q, class T>
std::vector<unsigned char> in_place_sequence(Comm& comm, const Q& q, const in_place_case& c,
                                             bool in_place) {
  const int rank = comm.rank();
  const std::size_t world = static_cast<std::size_t>(comm.size());
  const std::size_t count = in_place_count<T>(c);
  const qsdp::call_options options{.min_compressed_bytes = c.min_compressed_bytes,
                                   .max_pieces = c.max_pieces};
  std::vector<unsigned char> bytes;
  const auto keep = [&](const T* values, std::size_t n) {
    const auto* first = reinterpret_cast<const unsigned char*>(values);
    bytes.insert(bytes.end(), first, first + n * sizeof(T));
  };

  const std::vector<T> shard = in_place_values<T>(rank, count, 1);
  std::vector<T> full(count * world, from_f<T>(-7.0f));
  if (in_place) {
    std::memcpy(full.data() + rank * count, shard.data(), count * sizeof(T));
    qsdp::all_gather(comm, q, full.data() + rank * count, full.data(), count, options);
  } else {
    qsdp::all_gather(comm, q, shard.data(), full.data(), count, options);
  }
  keep(full.data(), full.size());

  const std::vector<T> grads = in_place_values<T>(rank, count * world, 2);
  for (qsdp::reduce_op op : {qsdp::reduce_op::sum, qsdp::reduce_op::avg}) {
    if (in_place) {
      std::vector<T> buffer = grads;
      qsdp::reduce_scatter(comm, q, buffer.data(), buffer.data() + rank * count, count, op,
                           options);
      keep(buffer.data() + rank * count, count);
    } else {
      std::vector<T> out(count);
      qsdp::reduce_scatter(comm, q, grads.data(), out.data(), count, op, options);
      keep(out.data(), count);
    }
  }

  // all_reduce is in place by its signature; both sequences make the same call here.
  std::vector<T> reduced = grads;
  qsdp::all_reduce(comm, q, reduced.data(), reduced.size(), qsdp::reduce_op::avg, options);
  keep(reduced.data(), reduced.size());
  return bytes;
}

/// Calls check(q, c, name, T{}) for a policy of each kind (deterministic, stochastic, shifted,
/// rotated, identity), each case and each element type the build has.
template <class Check>
void for_each_in_place_check(Check&& check) {
  const auto run = [&]<class T>(T tag) {
    for (const in_place_case& c : in_place_cases) {
      check(qsdp::uniform<8>{.bucket_size = 256}, c, "uniform<8>", tag);
      check(qsdp::stochastic<4>{.bucket_size = 512, .seed = 5}, c, "stochastic<4>", tag);
      check(qsdp::random_shift<3>{.bucket_size = 1024, .seed = 6}, c, "random_shift<3>", tag);
      check(qsdp::hadamard<qsdp::stochastic<4>>{{.bucket_size = 256, .seed = 7}}, c,
            "hadamard<stochastic<4>>", tag);
      check(qsdp::identity{}, c, "identity", tag);
    }
  };
  run(float{});
#if QSDP_HAS_CUDA_HALF
  run(__nv_bfloat16{});
#endif
}

/// What a failed check names.
template <class T>
std::string in_place_label(const char* policy, const in_place_case& c) {
  return std::string(policy) + " on " + (sizeof(T) == 4 ? "float" : "bf16") + ", count " +
         std::to_string(in_place_count<T>(c)) + ", pieces " + std::to_string(c.max_pieces) +
         ", gate " + std::to_string(c.min_compressed_bytes);
}

}  // namespace qsdp_test
