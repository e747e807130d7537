#!/usr/bin/env bash
# The FSDP2 table of docs/benchmarks/convergence.md: examples/torch_fsdp2/train.py under torchrun on 4
# CPU processes, once per run (fp32, w8g8, w4g4, w4g4d), the same model, weights and data order; one
# CSV of losses per run, the table (markdown) on stdout and a PNG of the curves (matplotlib, where
# installed) next to the CSVs.
#
#   bash examples/torch_fsdp2/run_table.sh [--python PY] [--out DIR] [--steps 400] [--runs "fp32 w8g8"]
#                                          [--net RATE] [extra train.py options...]
# PY: a Python with torch and qsdp installed (pip install . at the repository root). --net RATE runs
# each rank in its own network namespace, the links shaped to RATE (1gbit, 10gbit; bench/net/run.sh
# --env-ranks, as root) instead of torchrun on this machine's loopback.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python=python3
out="torch_fsdp2_runs"
steps=400
runs="fp32 w8g8 w4g4 w4g4d"
net=""
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python) python="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --net) net="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) extra+=("$1"); shift ;;
  esac
done
"${python}" -c "import torch, qsdp.torch" || {
  echo "run_table.sh: ${python} lacks torch or qsdp (pip install torch; pip install . at the root)" >&2
  exit 2
}
mkdir -p "${out}"
declare -A what=(
  [fp32]="fp32|fp32"
  [w8g8]="random_shift<8>|stochastic<8>"
  [w4g4]="random_shift<4>|stochastic<4>"
  [w4g4d]="random_shift<4> of differences|hadamard<stochastic<4>>, bucket 256"
)
started=$(date +%s)
rows=()
fp32_val=
fp32_step=
if [[ -n "${net}" ]]; then
  launch=(bash "${here}/../../bench/net/run.sh" --ranks 4 --rate "${net}" --env-ranks -- "${python}")
else
  launch=("${python}" -m torch.distributed.run --standalone --nproc-per-node 4)
fi
for run in ${runs}; do
  [[ -n "${what[${run}]:-}" ]] || { echo "run_table.sh: unknown run '${run}'" >&2; exit 2; }
  echo "run_table.sh: ${run} ..." >&2
  final=$("${launch[@]}" "${here}/train.py" --compress "${run}" --steps "${steps}" \
            --csv "${out}/${run}.csv" "${extra[@]}" | tee -a /dev/stderr | grep '^final:')
  read -r _ _ _ _ s _ train _ val _ secs _ ag _ rs _ step _ collective <<<"${final}"
  [[ "${run}" == fp32 ]] && { fp32_val="${val}"; fp32_step="${step}"; }
  versus="-"
  [[ -n "${fp32_val}" ]] && versus=$(awk -v v="${val}" -v f="${fp32_val}" \
                                       'BEGIN { printf "%+.2f %%", 100 * (v - f) / f }')
  speedup="-"
  [[ -n "${fp32_step}" ]] && speedup=$(awk -v s="${step}" -v f="${fp32_step}" \
                                         'BEGIN { printf "%.2fx", f / s }')
  IFS='|' read -r weights grads <<<"${what[${run}]}"
  rows+=("| ${run} | ${weights} | ${grads} | ${train} | ${val} | ${versus} | ${ag} | ${rs} | ${step} | ${speedup} | ${collective} | ${secs} |")
done
echo "| run | weights | gradients | final train loss | validation loss | vs fp32 | all-gather bytes | reduce-scatter bytes | step (s) | step speedup | in qsdp collectives (s/step) | seconds |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "(${steps} steps, 4 processes, links ${net:-unshaped (loopback)}, $(( $(date +%s) - started )) s in all; bytes as a fraction of uncompressed; step: median seconds of a step, slowest rank)"
if "${python}" -c "import matplotlib" 2>/dev/null; then
  "${python}" "${here}/../fsdp_train/plot_losses.py" "${out}/losses.png" "${out}"/*.csv >&2
fi
