#!/usr/bin/env bash
# Copies what bench/gpu/check.sh needs on the GPU machine, which reaches no package registry, into
# .deps/ (ignored by git): doctest's header and CMake package, and Google Benchmark's headers, shared
# library and CMake package, taken from this machine's Debian packages. Their CMake files name
# absolute /usr paths; the copies are rewritten to find everything relative to .deps/usr.
#
#   bash bench/gpu/prepare-deps.sh        # then: run(command="bash bench/gpu/check.sh", carry=[".deps"])
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# shellcheck source=scripts/lib/packages.sh
source scripts/lib/packages.sh
ensure_packages doctest-dev:/usr/include/doctest/doctest.h libbenchmark-dev

deps=.deps/usr
rm -rf .deps
mkdir -p "${deps}/include" "${deps}/lib/cmake" "${deps}/lib/x86_64-linux-gnu/cmake"
cp -r /usr/include/doctest "${deps}/include/"
cp -r /usr/lib/cmake/doctest "${deps}/lib/cmake/"
cp -r /usr/include/benchmark "${deps}/include/"
cp -r /usr/lib/x86_64-linux-gnu/cmake/benchmark "${deps}/lib/x86_64-linux-gnu/cmake/"
cp -a /usr/lib/x86_64-linux-gnu/libbenchmark.so* /usr/lib/x86_64-linux-gnu/libbenchmark_main.a \
  "${deps}/lib/x86_64-linux-gnu/"

# set(_IMPORT_PREFIX "/usr") -> the prefix three or four levels above the file, wherever it lies.
sed -i 's|^set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
  "${deps}/lib/cmake/doctest/doctestTargets.cmake"
for f in "${deps}"/lib/x86_64-linux-gnu/cmake/benchmark/*.cmake; do
  sed -i 's|^set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../../.." ABSOLUTE)|' "$f"
done
# (benchmarkConfig.cmake's own "/usr" applies only when loaded from /usr itself; what matters is that
# no imported target still points there.)
if grep -rn 'set(_IMPORT_PREFIX "/usr")\|"/usr/include\|"/usr/lib/x86_64-linux-gnu/lib' "${deps}/lib" --include='*.cmake'; then
  echo "prepare-deps: absolute /usr paths left in the copied CMake files (above)" >&2
  exit 1
fi
du -sh .deps
