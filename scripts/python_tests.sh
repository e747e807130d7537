#!/usr/bin/env bash
# qsdp.torch's tests (tests/python): a virtual environment with torch, torchao and pytest from PyPI,
# `pip install .` of this checkout into it (the nanobind extension, built by scikit-build-core),
# then pytest, which starts its own 3- and 4-process gloo groups on this machine.
#
#   scripts/python_tests.sh           all of it
#   scripts/python_tests.sh deps      only the environment and its packages (scripts/test.sh starts
#                                     this at the beginning of CI, in the background: it is mostly
#                                     download, while the C++ build uses the cores)
#   scripts/python_tests.sh test      the install of this checkout and pytest (deps done already)
#
# The environment is build/python-venv, or $QSDP_PYTHON_VENV; torch's wheel with its CUDA
# libraries is about 5 GB there (it runs on a CPU). $QSDP_PYTHON_CUDA (AUTO, ON, OFF) decides whether
# the install builds the CUDA extension qsdp._ext_cuda; CI sets OFF by default: on its 2 cores nvcc
# takes about 13 minutes over that extension's kernels, and without a GPU its tests only skip (the
# GPU check, bench/gpu/check.sh, builds and runs it where a GPU is).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/lib/packages.sh
source scripts/lib/packages.sh
# shellcheck source=scripts/lib/stage.sh
source scripts/lib/stage.sh

venv="$(realpath -m "${QSDP_PYTHON_VENV:-build/python-venv}")"
what="${1:-all}"
case "${what}" in
  all | deps | test) ;;
  *)
    echo "scripts/python_tests.sh: unknown step '${what}'; expected deps, test or nothing" >&2
    exit 2
    ;;
esac

if [[ "${what}" != test ]]; then
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    ensure_packages python3-venv
  fi
  mkdir -p "$(dirname "${venv}")"
  [[ -x "${venv}/bin/python" ]] || python3 -m venv "${venv}"
  # torchao (and the numpy its MX code imports) for the live comparison with its MX and NVFP4
  # reference conversions (tests/python/test_torch_torchao.py); pinned, as the golden files are.
  stage "python deps" "${venv}/bin/pip" install --quiet --disable-pip-version-check torch \
    torchao==0.18.0 numpy pytest
fi

if [[ "${what}" != deps ]]; then
  # The CUDA toolkit's headers give the extension bfloat16 and float16, its nvcc the CUDA one.
  if [[ -d /usr/local/cuda/bin ]]; then
    export PATH="/usr/local/cuda/bin:${PATH}"
  fi
  settings=()
  cuda="${QSDP_PYTHON_CUDA:-}"
  if [[ "${CI:-}" == "true" ]]; then
    # -O0: the extension's policy files compile in less than half the time of -O1, which saves
    # more than the slower tests lose; CI's tests check results, not speed (python/CMakeLists.txt).
    settings=(--config-settings=cmake.define.QSDP_WERROR=ON
      --config-settings=cmake.define.QSDP_PYTHON_CXX_FLAGS=-O0)
    cuda="${cuda:-OFF}"
  fi
  [[ -n "${cuda}" ]] && settings+=("--config-settings=cmake.define.QSDP_PYTHON_CUDA=${cuda}")
  stage "python install" "${venv}/bin/pip" install --quiet --disable-pip-version-check \
    "${settings[@]}" .
  # Run from the test folder, so that `import qsdp` is the installed package, not python/qsdp.
  (cd tests/python && stage "python test" "${venv}/bin/python" -m pytest -q -p no:cacheprovider .)
fi
