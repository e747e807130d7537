#!/usr/bin/env bash
# Configure, build and run the whole qsdp test suite.
#
#   scripts/test.sh            # preset "release" (build/release)
#   CI=true scripts/test.sh    # preset "ci" (build/ci, warnings are errors)
#
# Missing Debian/Ubuntu packages are installed with apt-get when run as root;
# otherwise the script lists them and exits 1.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# --- dependencies -----------------------------------------------------------
# shellcheck source=scripts/lib/packages.sh
source scripts/lib/packages.sh
ensure_packages cmake:cmake g++:g++ make:make python3:python3 doctest-dev:/usr/include/doctest/doctest.h \
  libbenchmark-dev libopenmpi-dev openmpi-bin

# CUDA toolkit headers (optional): enables the __half / __nv_bfloat16 support.
if [[ -d /usr/local/cuda/bin ]]; then
  export PATH="/usr/local/cuda/bin:${PATH}"
fi

# Open MPI refuses to start as root unless told otherwise (containers).
if [[ "$(id -u)" -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# --- configure, build, test -------------------------------------------------
if [[ "${CI:-}" == "true" ]]; then
  preset=ci
else
  preset=release
fi

# stage <name> <command>...: run a command and report how long it took.
stage() {
  local name="$1"
  shift
  local start=${SECONDS}
  echo "==> ${name}: $*"
  "$@"
  echo "==> ${name} finished in $((SECONDS - start))s"
}

total_start=${SECONDS}
stage configure cmake --preset "${preset}"
stage build cmake --build --preset "${preset}" -j "$(nproc)"
stage test ctest --preset "${preset}"
echo "==> all stages passed in $((SECONDS - total_start))s (preset ${preset})"
