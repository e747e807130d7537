// SPDX-License-Identifier: Apache-2.0
/// @file
/// qsdp::call_options, the last (defaulted) argument of every collective, and its defaults: what a
/// caller may tune per call without changing what the call computes; qsdp::call_counters, what a
/// communicator's calls did with the size gate.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qsdp {

/// A size gate to opt into (call_options::min_compressed_bytes), 32 KiB per peer: measured on 4
/// ranks over shaped 1 and 10 Gbit/s links (docs/benchmarks/small-messages.md), compressing fp32 at
/// 8 bits starts to pay between 16 and 64 KiB per rank; below that, a compressed call (encode,
/// exchange, decode) costs more than moving the values as they are. The collectives' default is
/// no gate: the policy the caller names is the policy applied, at every size.
inline constexpr std::size_t recommended_min_compressed_bytes = 32 * 1024;

/// call_options::max_pieces unless the caller says otherwise: 2. Measured on 4 ranks over shaped 1
/// and 10 Gbit/s links at 64 MiB per rank (docs/benchmarks/collectives.md): at 1 Gbit/s 2
/// pieces beat 8 and one piece in every case; at 10 Gbit/s 8 pieces beat 2 in fp32 all_gather
/// (0.111-0.114 s against 0.113-0.121 s, both well ahead of one piece's 0.143-0.158 s) and the
/// three counts were within the runs' noise otherwise; 8 pieces lost 5-7 % to one in bf16
/// reduce_scatter at 1 Gbit/s.
inline constexpr std::size_t default_max_pieces = 2;
/// The largest call_options::max_pieces.
inline constexpr std::size_t max_pieces_limit = 64;
/// The least a pipeline piece holds: 1 MiB of uncompressed values per peer, so that a piece's own
/// costs (a packet header, a codec call, one more exchange) stay small against its bytes.
inline constexpr std::size_t min_piece_bytes = std::size_t{1} << 20;

/// Options of one collective call: the last argument of every collective, defaulted.
struct call_options {
  /// The size gate, off by default (0: every call compressed with the caller's policy). A call in
  /// which every rank sends each peer fewer than this many bytes of
  /// uncompressed values -- count * sizeof(T) for all_gather and reduce_scatter, the whole buffer
  /// for all_reduce -- moves its values uncompressed instead, exactly as the policy qsdp::identity
  /// would (reduce_scatter and all_reduce still sum in fp32 in rank order, so results stay
  /// bit-identical across ranks and between host and device), and in one exchange: each rank's call
  /// descriptor travels in front of its values and is checked before they are used, instead of in a
  /// round trip of its own. qsdp::recommended_min_compressed_bytes is the measured choice; the
  /// communicator's call_counters say how many calls it gated. Part of the call's signature: every
  /// rank must pass the same value (a rank that passes another makes every rank throw, like another
  /// policy). One limit, as on the device (docs/reference/cuda.md): once a signature is agreed,
  /// repeats skip the separate round trip, so a rank that repeats an agreed gated call while
  /// another makes a different one (another count or gate) exchanges blocks of another size;
  /// local_communicator then throws on every rank, over MPI it is an erroneous program (a
  /// fault_options::timeout bounds the wait). A gated all_reduce sends its whole buffer to every
  /// peer: world x the buffer per rank, which the recommended 32 KiB keeps small for the worlds it
  /// was measured on (4 ranks).
  std::size_t min_compressed_bytes = 0;

  /// The pipeline. A compressed call cuts each phase into at most this many pieces, each its own
  /// packets with its own call index (docs/reference/wire-format.md), so that piece k + 1 is
  /// encoded while piece k is on the wire and piece k - 1 is decoded: on an MPI communicator the
  /// pieces move by non-blocking collectives, on a device communicator on a second stream
  /// (where it allows it: docs/reference/cuda-collectives.md). Every piece but the last holds at
  /// least qsdp::min_piece_bytes of values per peer, so calls below twice that run whole. 1 runs
  /// every phase whole (encode all, exchange, decode all), in the packets of earlier versions. 1 to
  /// qsdp::max_pieces_limit. It changes which random numbers a call draws, not its error bounds;
  /// part of the call's signature like the gate (every rank must pass the same value).
  std::size_t max_pieces = default_max_pieces;
};

/// What a communicator's collectives did with the size gate: how many calls it ran with the
/// caller's policy and how many it sent uncompressed, with their bytes of values (count *
/// sizeof(T) per call: what this rank sends each peer, the gate's measure; all_reduce's whole
/// buffer). Counted once per call that completed on this rank, grouped calls one by one. Host
/// communicators keep theirs in `comm.workspace().counters`, device communicators in
/// `comm.state().counters`; reset by assigning `{}`.
struct call_counters {
  std::uint64_t compressed_calls = 0;  ///< calls run with the caller's policy
  std::uint64_t compressed_bytes = 0;  ///< their bytes of values
  std::uint64_t gated_calls = 0;       ///< calls the size gate sent uncompressed
  std::uint64_t gated_bytes = 0;       ///< their bytes of values

  /// Counts one completed call.
  /// @param gated  true when the size gate sent the call uncompressed
  /// @param bytes  the call's bytes of values (the gate's measure)
  void count(bool gated, std::uint64_t bytes) noexcept {
    (gated ? gated_calls : compressed_calls) += 1;
    (gated ? gated_bytes : compressed_bytes) += bytes;
  }
};

/// Where a communicator's host collectives spent their time, in seconds summed over calls since
/// the communicator was made (host_workspace::timings): `calls`, the wall time inside the
/// collectives (the blocking ones, group_end, and the started ones on their progress thread);
/// `encode` and `decode`, the host codec's share of it (decode: decoding, or summing for a
/// reduce_scatter, the received packets). The rest is the exchanges: the wire, and waiting for the
/// peers, which one rank cannot tell apart. Calls the size gate sends uncompressed count in
/// `calls` only.
struct call_timings {
  double calls_seconds = 0;   ///< inside the collectives
  double encode_seconds = 0;  ///< encoding packets
  double decode_seconds = 0;  ///< decoding or summing received packets

  /// @return the time inside the collectives neither encoding nor decoding: exchanges and waits
  double exchange_seconds() const noexcept {
    return calls_seconds - encode_seconds - decode_seconds;
  }
};

}  // namespace qsdp
