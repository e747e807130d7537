#!/usr/bin/env bash
# Configure, build and run the whole qsdp test suite.
#
#   scripts/test.sh            # preset "release" (build/release)
#   CI=true scripts/test.sh    # the format check (scripts/format.sh --check), the include-graph
#                              # and docs checks (scripts/check_layers.py, scripts/check_docs.sh),
#                              # the API reference (--target docs, Doxygen warnings are errors),
#                              # preset "ci" (build/ci, warnings are errors, sm_90 only), the SASS
#                              # instruction report (bench/gpu/sass_report.py), then
#                              # the sanitizer builds (scripts/sanitize.sh) and a 30-s fuzz run
#                              # (scripts/fuzz.sh, with the fuzzer the asan build made)
#   QSDP_TEST_RELIABILITY=1 scripts/test.sh   # preset "release" plus the sanitizers and the fuzz run
#   QSDP_TEST_PYTHON=1 scripts/test.sh        # also qsdp.torch's tests (scripts/python_tests.sh;
#                                             # CI runs them: torch from PyPI, ~5 GB)
#
# Missing Debian/Ubuntu packages are installed with apt-get when run as root;
# otherwise the script lists them and exits 1.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# --- dependencies -----------------------------------------------------------
# shellcheck source=scripts/lib/packages.sh
source scripts/lib/packages.sh
# shellcheck source=scripts/lib/stage.sh
source scripts/lib/stage.sh
ensure_packages cmake:cmake g++:g++ make:make python3:python3 doctest-dev:/usr/include/doctest/doctest.h \
  libbenchmark-dev libopenmpi-dev openmpi-bin clang:clang++ libclang-rt-dev doxygen:doxygen

# CUDA toolkit headers (optional): enables the __half / __nv_bfloat16 support.
if [[ -d /usr/local/cuda/bin ]]; then
  export PATH="/usr/local/cuda/bin:${PATH}"
fi

# --- configure, build, test -------------------------------------------------
if [[ "${CI:-}" == "true" ]]; then
  preset=ci
else
  preset=release
fi

total_start=${SECONDS}
python_tests=0
[[ "${preset}" == ci || "${QSDP_TEST_PYTHON:-0}" == 1 ]] && python_tests=1
python_deps_pid=
if ((python_tests)); then
  # torch, torchao and pytest download while the C++ build below keeps the cores busy.
  mkdir -p build
  bash scripts/python_tests.sh deps >build/python-deps.log 2>&1 &
  python_deps_pid=$!
fi
if [[ "${preset}" == ci ]]; then
  # The tree is clang-formatted (.clang-format); a change that is not fails here, in seconds.
  stage format bash scripts/format.sh --check
  # No include or import cycles, no detail/ header reaching back up (CONTRIBUTING.md).
  stage layers python3 scripts/check_layers.py
  # What users read: no development-log words, page sizes, the README's example, links.
  stage docs-text bash scripts/check_docs.sh
fi
stage configure cmake --preset "${preset}"
if [[ "${preset}" == ci ]]; then
  # The API reference (Doxygen) from the public headers, warnings as errors: an undocumented
  # public entity fails here.
  stage api-docs cmake --build --preset "${preset}" --target docs
fi
stage build cmake --build --preset "${preset}" -j "$(nproc)"
stage test ctest --preset "${preset}"
if ((python_tests)); then
  echo "==> python deps: waiting for the background install (build/python-deps.log)"
  if ! wait "${python_deps_pid}"; then
    cat build/python-deps.log
    echo "error: installing torch, torchao and pytest failed (log above)" >&2
    exit 1
  fi
  cat build/python-deps.log
  bash scripts/python_tests.sh test
fi
if [[ "${preset}" == ci ]]; then
  # The device kernels' instruction budget, from their sm_90 code (docs/benchmarks/gpu.md): a
  # kernel that misses it fails CI.
  if command -v nvcc >/dev/null; then
    stage sass python3 bench/gpu/sass_report.py --work build/ci/sass
  else
    echo "==> sass: skipped (no nvcc)"
  fi
fi
if [[ "${preset}" == ci || "${QSDP_TEST_RELIABILITY:-0}" == 1 ]]; then
  # docs/reliability.md: the host suite under ASan+UBSan, the in-process tests under TSan, and a
  # 30-second fuzz run (QSDP_FUZZ_SECONDS; the corpus replay in the asan stage covers every input
  # a longer run ever found).
  stage sanitizers bash scripts/sanitize.sh
  QSDP_FUZZ_PRESET=asan stage fuzz bash scripts/fuzz.sh "${QSDP_FUZZ_SECONDS:-30}"
fi
echo "==> all stages passed in $((SECONDS - total_start))s (preset ${preset})"
stage_summary
