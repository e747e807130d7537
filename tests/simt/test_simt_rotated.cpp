// SPDX-License-Identifier: Apache-2.0
// The emulated kernels of qsdp::hadamard<Inner> (tests/simt/simt_checks.hpp): rotated packets
// and their decodes, bit for bit the host's.
#define QSDP_SIMT_EMULATION 1
#include "simt_checks.hpp"  // first: it includes simt_emulation.hpp, which redefines CUDA built-ins

TEST_SUITE_BEGIN("simt");

using namespace simt_checks;

// ---- qsdp::hadamard<Inner>: the rotation fused into encode and decode (hadamard_kernels.cuh)

TEST_CASE("emulated kernels: hadamard<Inner> writes the host's rotated packets and decodes them") {
  sweep_rotated(qsdp::hadamard<qsdp::stochastic<4>>{});
  sweep_rotated(qsdp::hadamard<qsdp::uniform<8>>{}, false);
  if (!short_sweeps()) {
    sweep_rotated(qsdp::hadamard<qsdp::random_shift<2>>{}, false);
    sweep_rotated(qsdp::hadamard<qsdp::symmetric<3>>{}, false);
  }
}

TEST_CASE("emulated kernels: rotated packets are summed before one inverse, as on the host") {
  using rotated4 = qsdp::hadamard<qsdp::stochastic<4>>;
  check_reduce<rotated4, __nv_bfloat16>(rotated4{{.bucket_size = 2048}}, 9000, 4);
  check_reduce<rotated4, float>(rotated4{{.bucket_size = 128}}, 3001, 3, 8);  // skewed output
  check_reduce<rotated4, __nv_bfloat16>(rotated4{{.bucket_size = 512}}, 9000, 3, 0, true);
  using rotated8 = qsdp::hadamard<qsdp::random_shift<8>>;
  check_reduce<rotated8, float>(rotated8{{.bucket_size = 4096}}, 20000, 2);
  // decode_accumulate: one rotation (summed, then transformed back), and three (each packet
  // transformed back and added in turn), flagged buckets in both.
  check_accumulate(qsdp::hadamard<qsdp::uniform<4>>{{.bucket_size = 64}}, 64 * 40 + 13);
  check_accumulate(qsdp::hadamard<qsdp::uniform<4>>{{.bucket_size = 64}}, 64 * 40 + 13, 4, true);
  check_accumulate(qsdp::hadamard<qsdp::symmetric<2>>{{.bucket_size = 1024}}, 1024 * 5 + 45, 0,
                   true);
}

TEST_SUITE_END();
