#!/usr/bin/env bash
# qsdp.torch's tests (tests/python): a virtual environment with torch and pytest from PyPI,
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
# libraries is about 5 GB there (it runs on a CPU).
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
  stage "python deps" "${venv}/bin/pip" install --quiet --disable-pip-version-check torch pytest
fi

if [[ "${what}" != deps ]]; then
  # The CUDA toolkit's headers give the extension bfloat16 and float16 (nvcc is not used yet).
  if [[ -d /usr/local/cuda/bin ]]; then
    export PATH="/usr/local/cuda/bin:${PATH}"
  fi
  werror=()
  [[ "${CI:-}" == "true" ]] && werror=(--config-settings=cmake.define.QSDP_WERROR=ON)
  stage "python install" "${venv}/bin/pip" install --quiet --disable-pip-version-check \
    "${werror[@]}" .
  # Run from the test folder, so that `import qsdp` is the installed package, not python/qsdp.
  (cd tests/python && stage "python test" "${venv}/bin/python" -m pytest -q -p no:cacheprovider .)
fi
