// SPDX-License-Identifier: Apache-2.0
// qsdp-bench's host backends for half values (qsdp_bench_host.hpp).
#include "qsdp_bench_host.hpp"

void qsdp_bench::run_host_half(const options& o) {
  dispatch_policy<host::all_widths, host::rotated_widths, true>(
      o, [&](const auto& q, const std::string& name) { host::run_host<__half>(o, q, name); });
}
