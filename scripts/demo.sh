#!/usr/bin/env bash
# Build and run the qsdp demo (examples/collectives_demo.cpp): compressed collectives among 4 ranks.
#
#   scripts/demo.sh [demo arguments...]     e.g. scripts/demo.sh --size 1048576 --ranks 8
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

cmake --preset release ${extra[@]+"${extra[@]}"} >/dev/null
cmake --build --preset release --target qsdp_demo -j "$(nproc)"
exec build/release/examples/qsdp_demo "$@"
