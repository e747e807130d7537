#!/usr/bin/env bash
# Build and run the qsdp codec demo (examples/codec_demo.cpp).
#
#   scripts/demo.sh [demo arguments...]     e.g. scripts/demo.sh --size 1048576
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v make >/dev/null 2>&1 || missing+=(make)

if ((${#missing[@]} > 0)); then
  if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing missing packages: ${missing[*]}"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
  else
    echo "error: missing packages: ${missing[*]}" >&2
    echo "install them with:" >&2
    echo "  sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
fi

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
