#!/usr/bin/env bash
# Builds the libFuzzer packet fuzzer with clang (preset "fuzz") and runs it (docs/reliability.md).
#
#   scripts/fuzz.sh [seconds] [libFuzzer options...]     default 60 seconds, one process
#   scripts/fuzz.sh 3600 -runs=12000000                  the long run (docs/reliability.md)
#   QSDP_FUZZ_PRESET=asan scripts/fuzz.sh                the fuzzer of the asan build tree (preset
#                                                        asan builds it too, -O1): CI fuzzes with it,
#                                                        which saves a configure and a build
#
# New inputs go to build/<preset>/run/corpus (tests/fuzz/corpus, the committed seeds, is only read); a crash
# leaves its input in build/<preset>/run/ and fails the script. After fixing the bug, copy that input into
# tests/fuzz/corpus so that fuzz.corpus_replay keeps checking it.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/lib/packages.sh
source scripts/lib/packages.sh
# shellcheck source=scripts/lib/stage.sh
source scripts/lib/stage.sh
ensure_packages cmake:cmake make:make clang:clang++ libclang-rt-dev doctest-dev:/usr/include/doctest/doctest.h

seconds="${1:-60}"
[[ $# -gt 0 ]] && shift
if ! [[ "${seconds}" =~ ^[1-9][0-9]*$ ]]; then
  echo "scripts/fuzz.sh: seconds is '${seconds}'; expected a positive whole number" >&2
  exit 2
fi
if [[ -d /usr/local/cuda/bin ]]; then
  export PATH="/usr/local/cuda/bin:${PATH}"
fi

preset="${QSDP_FUZZ_PRESET:-fuzz}"
case "${preset}" in
  fuzz | asan) ;;
  *)
    echo "scripts/fuzz.sh: QSDP_FUZZ_PRESET is '${preset}'; expected fuzz or asan" >&2
    exit 2
    ;;
esac
stage "fuzz configure" cmake --preset "${preset}"
stage "fuzz build" cmake --build --preset "${preset}" -j "$(nproc)" --target qsdp_fuzz_packets

run_dir="build/${preset}/run"
mkdir -p "${run_dir}/corpus"
rm -f "${run_dir}"/crash-* "${run_dir}"/leak-* "${run_dir}"/timeout-* "${run_dir}"/oom-*
log="${run_dir}/fuzz.log"
echo "==> fuzz run: ${seconds} s; progress at every power of two executions (full log: ${log})"
start=${SECONDS}
set +e
# -entropic=0: libFuzzer 14's default (entropic) schedule spends 60 % of the time updating feature
# frequencies for this target's ~80k counters; the classic schedule runs 10x more inputs per second.
"build/${preset}/tests/fuzz/qsdp_fuzz_packets" -entropic=0 -max_total_time="${seconds}" -max_len=4096 -timeout=20 \
  -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="${run_dir}/" "$@" \
  "${run_dir}/corpus" tests/fuzz/corpus 2>&1 | tee "${log}" |
  grep --line-buffered -E "INITED|pulse|DONE|ERROR|SUMMARY|qsdp fuzz|stat::(number_of_executed_units|average_exec)"
fuzzer_status=${PIPESTATUS[0]}
set -e
executions=$(grep -E "^stat::number_of_executed_units" "${log}" | awk '{s += $2} END {print s + 0}')
if [[ ${fuzzer_status} -ne 0 ]] || grep -qE "^(==[0-9]+==ERROR|SUMMARY: |qsdp fuzz: property broken)" "${log}"; then
  echo "==> fuzz: FAILED (exit ${fuzzer_status}) after ${executions} executions; input and log in ${run_dir}/"
  exit 1
fi
echo "==> fuzz: ${executions} executions in $((SECONDS - start)) s, no crash;" \
  "$(find "${run_dir}/corpus" -type f | wc -l) inputs in ${run_dir}/corpus"
