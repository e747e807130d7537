#!/usr/bin/env bash
# Build and run the qsdp demo. Where a GPU is usable (nvidia-smi lists one) and nvcc and NCCL are
# there: the NCCL drop-in on device buffers (examples/nccl_drop_in.cu, every visible GPU). Otherwise,
# or with --host: compressed collectives among 4 in-process ranks on the host
# (examples/collectives_demo.cpp).
#
#   scripts/demo.sh [--host] [demo arguments...]   e.g. scripts/demo.sh --host --size 1048576 --ranks 8
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/lib/packages.sh
source scripts/lib/packages.sh
ensure_packages cmake:cmake g++:g++ make:make

if [[ -d /usr/local/cuda/bin ]]; then
  export PATH="/usr/local/cuda/bin:${PATH}"
fi

# The demo needs neither doctest nor google benchmark; only build the tests
# (which require doctest) when doctest is installed.
extra=()
if [[ ! -f /usr/include/doctest/doctest.h ]]; then
  extra+=(-DQSDP_BUILD_TESTS=OFF)
fi

host=0
if [[ "${1:-}" == "--host" ]]; then
  host=1
  shift
fi

cmake --preset release ${extra[@]+"${extra[@]}"} >/dev/null
if [[ ${host} -eq 0 ]] && nvidia-smi -L >/dev/null 2>&1 &&
  cmake --build --preset release --target qsdp_nccl_drop_in -j "$(nproc)" 2>/dev/null; then
  exec build/release/examples/qsdp_nccl_drop_in "$@"
fi
cmake --build --preset release --target qsdp_demo -j "$(nproc)"
exec build/release/examples/qsdp_demo "$@"
