#!/usr/bin/env bash
# The GPU check, in one call on a machine with an NVIDIA GPU (bench/gpu/README.md):
#   1. configure and build the CUDA targets for sm_90 (Release, Ninja when present);
#   2. run every GPU test (ctest -L gpu): device packets byte-identical to the host codec's, all
#      collectives through the one-GPU multi-rank communicator, one NCCL rank, bad input;
#   3. compute-sanitizer memcheck and racecheck on a short GPU test, where the tool works;
#   4. the device codec benchmarks (1 GiB of bf16, bucket 1024) next to a device-to-device copy;
#   5. the NCCL drop-in example (all three collectives through NCCL on every GPU);
#   6. qsdp.torch's CUDA extension (pip install with the machine's torch, nanobind and
#      scikit-build-core, no build isolation, sm_90) and tests/python/test_torch_cuda.py, where pytest
#      is there;
# and prints a short table last. Logs and raw output go to $OUT (or build/gpu-check/out).
#
#   bash bench/gpu/check.sh [--skip-bench]
# Dependencies without a registry: bash bench/gpu/prepare-deps.sh here first, carry .deps.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

skip_bench=0
[[ "${1:-}" == "--skip-bench" ]] && skip_bench=1
out="${OUT:-build/gpu-check/out}"
mkdir -p "${out}"
build=build/gpu-check
summary=()
note() { summary+=("$1"); echo "==> $1"; }
start=${SECONDS}

if [[ -d /usr/local/cuda/bin ]]; then export PATH="/usr/local/cuda/bin:${PATH}"; fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | tee "${out}/gpu.txt"
nvcc --version | tail -2 | tee "${out}/nvcc.txt"

# NCCL: the toolkit's, or the pip wheel's (nvidia-nccl-cu13) where only that exists.
nccl_hint=()
if ! ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h >/dev/null 2>&1; then
  wheel=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null ||
    python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  if [[ -n "${wheel}" ]]; then
    nccl_hint=(-DNCCL_ROOT="${wheel}")
    export LD_LIBRARY_PATH="${wheel}/lib:${LD_LIBRARY_PATH:-}"
  fi
fi
prefix=()
if [[ -d .deps/usr ]]; then
  prefix=(-DCMAKE_PREFIX_PATH="${PWD}/.deps/usr" -Ddoctest_DIR="${PWD}/.deps/usr/lib/cmake/doctest"
    -Dbenchmark_DIR="${PWD}/.deps/usr/lib/x86_64-linux-gnu/cmake/benchmark")
  export LD_LIBRARY_PATH="${PWD}/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

# --- 1. build -----------------------------------------------------------------------------------
if cmake -S . -B "${build}" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DQSDP_BUILD_TESTS=ON -DQSDP_BUILD_BENCH=ON -DQSDP_BUILD_EXAMPLES=ON "${prefix[@]}" "${nccl_hint[@]}" \
  >"${out}/configure.log" 2>&1 &&
  cmake --build "${build}" -j "$(nproc)" --target qsdp_gpu_tests qsdp_gpu_codec_bench qsdp_nccl_drop_in \
    >"${out}/build.log" 2>&1; then
  note "build (sm_90): ok in $((SECONDS - start)) s"
else
  tail -40 "${out}/configure.log" "${out}/build.log"
  note "build (sm_90): FAILED (see build.log)"
  printf '%s\n' "${summary[@]}"
  exit 1
fi
grep -E "qsdp 0.1|NCCL" "${out}/configure.log" | head -3

# --- 2. GPU tests -------------------------------------------------------------------------------
t=${SECONDS}
ctest --test-dir "${build}" -L gpu --output-on-failure -j 1 --timeout 600 >"${out}/ctest-gpu.log" 2>&1
rc=$?
grep -E "tests passed|Skipped|Failed|\*\*\*" "${out}/ctest-gpu.log" | tail -25
note "GPU tests: $(grep -E 'tests passed' "${out}/ctest-gpu.log" || echo 'no summary') ($((SECONDS - t)) s, exit ${rc})"

# --- 3. sanitizers ------------------------------------------------------------------------------
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    t=${SECONDS}
    timeout 240 compute-sanitizer --tool "${tool}" --error-exitcode 9 "${build}/tests/gpu/qsdp_gpu_tests" \
      --test-case="device decode_accumulate*,device all_gather*" >"${out}/sanitizer-${tool}.log" 2>&1
    rc=$?
    tail -3 "${out}/sanitizer-${tool}.log"
    note "compute-sanitizer ${tool}: exit ${rc} ($((SECONDS - t)) s; 0 = clean, 9 = errors found, other = tool failed)"
  done
else
  note "compute-sanitizer: not on this machine"
fi

# --- 4. benchmarks ------------------------------------------------------------------------------
if [[ ${skip_bench} -eq 0 ]]; then
  t=${SECONDS}
  "${build}/bench/qsdp_gpu_codec_bench" --benchmark_min_time=0.2 >"${out}/gpu-codec-bench.txt" 2>&1
  rc=$?
  note "device codec bench: exit ${rc} ($((SECONDS - t)) s)"
fi

# --- 5. NCCL drop-in ----------------------------------------------------------------------------
t=${SECONDS}
"${build}/examples/qsdp_nccl_drop_in" --count 16777216 --repeats 5 >"${out}/nccl-drop-in.txt" 2>&1
note "NCCL drop-in: exit $? ($((SECONDS - t)) s)"

# --- 6. qsdp.torch on CUDA tensors ------------------------------------------------------------
t=${SECONDS}
py="${build}/python"
if python3 -c 'import torch, nanobind, scikit_build_core' 2>/dev/null; then
  if python3 -m pip install --no-build-isolation --no-deps --quiet --target "${py}" \
    --config-settings=cmake.define.QSDP_PYTHON_CUDA=ON \
    --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=90 . >"${out}/python-install.log" 2>&1; then
    note "qsdp.torch install (CUDA extension, sm_90): ok in $((SECONDS - t)) s"
    if python3 -c 'import pytest' 2>/dev/null; then
      t=${SECONDS}
      (cd tests/python && PYTHONPATH="${PWD}/../../${py}" timeout 600 python3 -m pytest -q -p no:cacheprovider \
        test_torch_cuda.py test_torch_codec.py) >"${out}/pytest-cuda.log" 2>&1
      rc=$?
      tail -5 "${out}/pytest-cuda.log"
      note "qsdp.torch CUDA tests: $(tail -1 "${out}/pytest-cuda.log") ($((SECONDS - t)) s, exit ${rc})"
    else
      note "qsdp.torch CUDA tests: no pytest on this machine"
    fi
  else
    tail -30 "${out}/python-install.log"
    note "qsdp.torch install (CUDA extension): FAILED (see python-install.log)"
  fi
else
  note "qsdp.torch: this machine lacks torch, nanobind or scikit-build-core"
fi

# --- table --------------------------------------------------------------------------------------
echo
echo "=== qsdp GPU check ($((SECONDS - start)) s) on $(cat "${out}/gpu.txt" 2>/dev/null) ==="
printf '%s\n' "${summary[@]}"
cat "${out}/nccl-drop-in.txt"
[[ -f "${out}/gpu-codec-bench.txt" ]] && sed -n '/^median bandwidth/,$p' "${out}/gpu-codec-bench.txt"
