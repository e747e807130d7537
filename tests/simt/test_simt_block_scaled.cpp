// SPDX-License-Identifier: Apache-2.0
// The emulated kernels of the block-scaled float policies (qsdp::mx, qsdp::nvfp4;
// tests/simt/simt_checks.hpp): packets, decodes, the fused reduce-scatter and the encoded
// all-gather's unpack, bit for bit the host's.
#define QSDP_SIMT_EMULATION 1
#include "simt_checks.hpp"  // first: it includes simt_emulation.hpp, which redefines CUDA built-ins

TEST_SUITE_BEGIN("simt");

using namespace simt_checks;

// ---- The OCP Microscaling policies: one E8M0 byte per block, element codes (minifloat.hpp)

TEST_CASE("emulated kernels: the MX policies write the host's packets and decode them") {
  using qsdp::rounding;
  using mxfp4_stochastic = qsdp::mxfp4<rounding::stochastic>;
  // Blocks of 32, the spec's: one thread per block in the one-pass encode kernel; the last block
  // short, NaN and inf blocks (E8M0's NaN byte) among them.
  for (const std::size_t count : {31u, 4097u, 14003u}) {
    if (short_sweeps() && count == 4097) continue;
    check<qsdp::mxfp8<>, float>(qsdp::mxfp8<>{}, count, 0, 0, count > 100);
    check<qsdp::mxfp8<>, __nv_bfloat16>(qsdp::mxfp8<>{}, count, 0, 0, false);
    check<mxfp4_stochastic, float>(mxfp4_stochastic{.seed = 5}, count, 0, 0, count > 100);
    check<qsdp::mxfp6<qsdp::e3m2>, __half>(qsdp::mxfp6<qsdp::e3m2>{}, count, 2, 0, false);
  }
  sweep(qsdp::mxfp8<>{});  // one-pass encode kernel (blocks of 64 .. 4096) and general kernels
  sweep(mxfp4_stochastic{.seed = 5});
  if (!short_sweeps()) {
    sweep(qsdp::mxfp8<qsdp::e5m2, rounding::stochastic>{});
    sweep(qsdp::mxfp6<>{});
  }
  check_reduce<qsdp::mxfp8<>, __nv_bfloat16>(qsdp::mxfp8<>{}, 9000, 4);
  check_reduce<mxfp4_stochastic, float>(mxfp4_stochastic{}, 5000, 3, 8, true);
  check_accumulate(qsdp::mxfp4<>{}, 32 * 40 + 13);
  sweep_rotated(qsdp::hadamard<mxfp4_stochastic>{{.seed = 2}}, false);
  check_reduce<qsdp::hadamard<qsdp::mxfp8<>>, float>(
      qsdp::hadamard<qsdp::mxfp8<>>{{.bucket_size = 256}}, 3001, 3);
}

/// The unpack kernel over `world` packets (the encoded all-gather's): the host's layout of each,
/// byte for byte, at its offsets; a bad header instead gives NaN scales, zero elements and one
/// report.
template <class Q>
void check_unpack(const Q& q, std::size_t count, int world, bool bad_header) {
  const auto w = static_cast<std::size_t>(world);
  const std::size_t bytes = qsdp::compressed_size<float>(q, count);
  buffer packets(bytes * w, 0);
  const std::size_t element_bytes = qsdp::block_scaled_element_bytes(q, count);
  const std::size_t blocks = count / q.bucket_size;
  std::vector<std::byte> want_elements(element_bytes * w);
  std::vector<std::uint8_t> want_scales(blocks * w);
  for (std::size_t r = 0; r < w; ++r) {
    auto x = qsdp_test::make_data(qsdp_test::distribution::mixed_scale, count,
                                  60 + static_cast<std::uint32_t>(r));
    x[r * 7] = NAN;  // a NaN block per rank: scale 0xFF
    std::byte* packet = packets.get() + r * bytes;
    qsdp::encode(q, x.data(), count, packet, qsdp::rng_position{.call = 1});
    qsdp::unpack_block_scaled(
        q, packet, count,
        {want_elements.data() + r * element_bytes, want_scales.data() + r * blocks});
  }
  if (bad_header) packets.get()[bytes + 7] = std::byte{0x55};  // rank 1's bits
  buffer elements(element_bytes * w, 3), scales(blocks * w, 1);
  cuda::device_report failure{};
  auto* scale_out = reinterpret_cast<std::uint8_t*>(scales.get());
  cuda::launch_unpack_block_scaled(q, packets.get(), bytes, static_cast<unsigned>(world), count,
                                   qsdp::detail::expectation_for<float>(q, count), 0, &failure,
                                   elements.get(), element_bytes, scale_out, blocks, cudaStream_t{},
                                   "simt");
  INFO(qsdp::policy_name<Q>() << " count " << count << " world " << world);
  if (!bad_header) {
    CHECK(std::memcmp(elements.get(), want_elements.data(), want_elements.size()) == 0);
    CHECK(std::memcmp(scale_out, want_scales.data(), want_scales.size()) == 0);
    CHECK(failure.ready == 0);
    return;
  }
  CHECK(std::count(scale_out, scale_out + blocks * w, std::uint8_t{0xFF}) ==
        static_cast<std::ptrdiff_t>(blocks * w));
  CHECK(std::count(elements.get(), elements.get() + element_bytes * w, std::byte{0}) ==
        static_cast<std::ptrdiff_t>(element_bytes * w));
  CHECK(failure.ready == 1);
  CHECK(failure.index == 1);
}

TEST_CASE(
    "emulated kernels: the fused reduce-scatter sums any block scales and codes as the host") {
  using qsdp::rounding;
  check_reduce_any_bytes<qsdp::mxfp8<>, float>(qsdp::mxfp8<>{}, 32 * 256, 3);
  check_reduce_any_bytes<qsdp::mxfp8<qsdp::e5m2>, __nv_bfloat16>(qsdp::mxfp8<qsdp::e5m2>{},
                                                                 32 * 256, 4);
  check_reduce_any_bytes<qsdp::mxfp4<>, __nv_bfloat16>(qsdp::mxfp4<>{}, 32 * 256, 4);
  check_reduce_any_bytes<qsdp::mxfp4<rounding::stochastic>, float>(
      qsdp::mxfp4<rounding::stochastic>{.bucket_size = 64}, 64 * 128, 2);
  check_reduce_any_bytes<qsdp::nvfp4<>, float>(qsdp::nvfp4<>{.bucket_size = 32}, 32 * 256, 3);
  check_reduce_any_bytes<qsdp::nvfp4<>, __nv_bfloat16>(qsdp::nvfp4<>{.bucket_size = 32}, 32 * 256,
                                                       2);
}

TEST_CASE("emulated kernels: MX packets unpack to the host's block-scaled layout") {
  using qsdp::rounding;
  check_unpack(qsdp::mxfp8<>{}, 32 * 300, 3, false);
  check_unpack(qsdp::mxfp8<qsdp::e5m2, rounding::stochastic>{.seed = 4}, 32 * 7, 2, false);
  check_unpack(qsdp::mxfp6<qsdp::e3m2>{}, 32 * 129, 3, false);
  check_unpack(qsdp::mxfp6<>{.bucket_size = 64}, 64 * 20, 2, false);
  check_unpack(qsdp::mxfp4<rounding::stochastic>{.seed = 4}, 32 * 65, 4, false);
  check_unpack(qsdp::mxfp4<>{.bucket_size = 16}, 16 * 33, 2, false);
  check_unpack(qsdp::mxfp8<>{}, 32 * 40, 3, true);
  check_unpack(qsdp::mxfp6<>{}, 32 * 40, 2, true);
}

TEST_CASE("emulated kernels: nvfp4 writes the host's packets, tensor record included") {
  using qsdp::rounding;
  using nvfp4_stochastic = qsdp::nvfp4<rounding::stochastic>;
  // Blocks of 16, NVFP4's: the general encode kernels and the group decoder; the tensor record
  // from the magnitude kernel, at packet offsets that leave it unaligned (3) and aligned (0, 4).
  for (const std::size_t count : {0u, 15u, 4097u, 14003u}) {
    if (short_sweeps() && count == 4097) continue;
    check<qsdp::nvfp4<>, float>(qsdp::nvfp4<>{}, count, 0, 0, count > 100);
    check<qsdp::nvfp4<>, __nv_bfloat16>(qsdp::nvfp4<>{}, count, 0, 3, false);
    check<nvfp4_stochastic, float>(nvfp4_stochastic{.seed = 5}, count, 4, 4, count > 100);
    check<nvfp4_stochastic, __half>(nvfp4_stochastic{.seed = 5}, count, 2, 0, false);
  }
  // Larger blocks: the one-pass encode kernel, the span decoders and the shuffled table.
  sweep(qsdp::nvfp4<>{});
  for (const std::size_t bucket : {64u, 1024u}) {
    if (short_sweeps() && bucket == 64) continue;
    check<nvfp4_stochastic, float>(nvfp4_stochastic{.bucket_size = bucket, .seed = 5}, 14003, 0, 0,
                                   true);
    check<nvfp4_stochastic, __nv_bfloat16>(nvfp4_stochastic{.bucket_size = bucket, .seed = 5}, 4097,
                                           0, 0, false);
  }
  // Several packets, each with its own tensor scale: the fused reduce-scatter, decode_accumulate,
  // and rotated packets (summed before one inverse when their rotations agree).
  check_reduce<qsdp::nvfp4<>, __nv_bfloat16>(qsdp::nvfp4<>{}, 9000, 4);
  check_reduce<nvfp4_stochastic, float>(nvfp4_stochastic{}, 5000, 3, 8, true);
  check_accumulate(qsdp::nvfp4<>{}, 16 * 40 + 13);
  if (!short_sweeps()) {  // the span reduce and the rotated sweep run for the MX policies too
    check_reduce<qsdp::nvfp4<>, float>(qsdp::nvfp4<>{.bucket_size = 1024}, 9000, 4);
    sweep_rotated(qsdp::hadamard<nvfp4_stochastic>{{.seed = 2}}, false);
  }
  check_reduce<qsdp::hadamard<qsdp::nvfp4<>>, float>(
      qsdp::hadamard<qsdp::nvfp4<>>{{.bucket_size = 256}}, 3001, 3);
}

TEST_SUITE_END();
