#!/usr/bin/env bash
# The sanitizer builds (docs/reliability.md). clang rather than g++: it compiles the instrumented
# tests about twice as fast, and CI builds the whole suite with g++ already.
#   asan  the host test suite (unit, MPI, fuzz corpus replay; not the examples) built with clang under
#         AddressSanitizer + UndefinedBehaviorSanitizer; any report fails the test that caused it
#   tsan  the in-process communicator tests (run_local, the collectives, sharded training) under
#         ThreadSanitizer
#
#   scripts/sanitize.sh [asan] [tsan]     both when no argument is given
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/lib/packages.sh
source scripts/lib/packages.sh
# shellcheck source=scripts/lib/stage.sh
source scripts/lib/stage.sh
ensure_packages cmake:cmake clang:clang++ libclang-rt-dev make:make doctest-dev:/usr/include/doctest/doctest.h \
  libopenmpi-dev openmpi-bin

# The CUDA toolkit's headers give the host tests __half / __nv_bfloat16 (nvcc itself is not used).
if [[ -d /usr/local/cuda/bin ]]; then
  export PATH="/usr/local/cuda/bin:${PATH}"
fi

builds=("$@")
((${#builds[@]} > 0)) || builds=(asan tsan)
for preset in "${builds[@]}"; do
  case "${preset}" in
    asan | tsan) ;;
    *)
      echo "scripts/sanitize.sh: unknown build '${preset}'; expected asan or tsan" >&2
      exit 2
      ;;
  esac
  stage "${preset} configure" cmake --preset "${preset}"
  stage "${preset} build" cmake --build --preset "${preset}" -j "$(nproc)"
  stage "${preset} test" ctest --preset "${preset}"
done
