#!/usr/bin/env bash
# The shaped-network sweep of docs/benchmarks/collectives.md: 4 ranks (one per network namespace, bench/net/run.sh),
# links of 1 and 10 Gbit/s, all_gather (random_shift, weight-like data) and reduce_scatter (stochastic,
# gradient-like data) of fp32 and bf16 at 8, 4 and 2 bits, 1 to 256 MiB per rank, each against plain MPI
# on the same links; plus qsdp::identity reduce_scatter (the uncompressed all-to-all qsdp itself runs)
# as a second baseline next to MPI_Reduce_scatter_block. One table (.txt) and one --json file per run.
#
#   sudo bench/net/sweep.sh OUT_DIR [--bench build/release/bench/qsdp-bench] [--rates "1gbit 10gbit"]
#                           [--dtypes "float bf16"] [--bits "8 4 2"] [--iters 3] [--min 4M] [--max 1G]
#                           [--identity 1] [--ops "all_gather reduce_scatter"] [--warmup 1]
#                           [--factor 4] [--gate SIZE] [--pieces N]
#
# --min / --max are whole-buffer sizes (qsdp-bench -b / -e, stepped by --factor): with 4 ranks, --min
# 16K --max 16M is 4 KiB to 4 MiB per rank, the small sizes where compression's fixed costs show.
# --gate passes qsdp-bench --min-compressed (the size gate; 0 compresses every size; default: the
# library's). --pieces passes qsdp-bench --max-pieces (the pipeline; 1 runs every phase whole;
# default: the library's).
#
# Takes about an hour on a 2-core VM (most of it plain MPI_Reduce_scatter_block at 1 Gbit/s). Progress
# goes to stderr, one line per run with its duration. Exit status: the first failing run's.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,21p' "$0"; exit 0; }
[[ $# -ge 1 && "$1" != -* ]] || { echo "usage: bench/net/sweep.sh OUT_DIR [options] (--help)" >&2; exit 2; }
out="$1"; shift
bench="${root}/build/release/bench/qsdp-bench"
rates="1gbit 10gbit"
dtypes="float bf16"
bits_list="8 4 2"
iters=3
min=4M
max=1G
identity=1
ops="all_gather reduce_scatter"
warmup=1
factor=4
gate=()
pieces=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bench) bench="$2"; shift 2 ;;
    --rates) rates="$2"; shift 2 ;;
    --dtypes) dtypes="$2"; shift 2 ;;
    --bits) bits_list="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --min) min="$2"; shift 2 ;;
    --max) max="$2"; shift 2 ;;
    --ops) ops="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --identity) identity="$2"; shift 2 ;;
    --factor) factor="$2"; shift 2 ;;
    --gate) gate=(--min-compressed "$2"); shift 2 ;;
    --pieces) pieces=(--max-pieces "$2"); shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "bench/net/sweep.sh: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
mkdir -p "${out}"
# nccl-tests sizes are the whole buffer: with 4 ranks, 4M..1G is 1..256 MiB per rank.
common=(-b "${min}" -e "${max}" -f "${factor}" -n "${iters}" -w "${warmup}" "${gate[@]}" "${pieces[@]}")
started=$(date +%s)
one() {  # name, qsdp-bench arguments...
  local name="$1"; shift
  local t0=$(date +%s)
  echo "sweep: ${name} ..." >&2
  "${here}/run.sh" --ranks 4 --rate "${rate}" --bench "${bench}" -- "$@" "${common[@]}" \
    --json "${out}/${name}.json" | tee "${out}/${name}.txt"
  echo "sweep: ${name} done in $(( $(date +%s) - t0 )) s (sweep total $(( $(date +%s) - started )) s)" >&2
}
for rate in ${rates}; do
  for dtype in ${dtypes}; do
    for bits in ${bits_list}; do
      if [[ " ${ops} " == *" all_gather "* ]]; then
        one "ag_${rate}_${dtype}_rs${bits}" --op all_gather --quantizer random_shift --bits "${bits}" --dtype "${dtype}"
      fi
      if [[ " ${ops} " == *" reduce_scatter "* ]]; then
        one "rs_${rate}_${dtype}_st${bits}" --op reduce_scatter --quantizer stochastic --bits "${bits}" --dtype "${dtype}"
      fi
    done
  done
  if [[ "${identity}" == 1 ]]; then
    one "rs_${rate}_float_identity" --op reduce_scatter --quantizer identity --dtype float
  fi
done
echo "sweep: all runs done in $(( $(date +%s) - started )) s" >&2
