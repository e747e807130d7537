#!/usr/bin/env bash
# The FSDP2 tables of docs/benchmarks: examples/torch_fsdp2/train.py under torchrun on 4 CPU
# processes, once per run (fp32, w8g8, w4g4, w4g4d, and the wire-only ideals wire8, wire4), the same
# model, weights and data order; one CSV of losses per run, the tables (markdown) on stdout -- losses
# and step times, then where each step's time goes and each compressed run's speedup as a fraction
# of its wire-only ideal's -- and a PNG of the curves (matplotlib, where installed) next to the CSVs.
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
runs="fp32 w8g8 w4g4 w4g4d wire8 wire4"
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
  [wire8]="w8g8's bytes, no codec|w8g8's bytes, no codec"
  [wire4]="w4g4's bytes, no codec|w4g4's bytes, no codec"
)
declare -A ideal_of=([w8g8]=wire8 [w4g4]=wire4 [w4g4d]=wire4)
declare -A step_of=()
breakdowns=()
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
  output=$("${launch[@]}" "${here}/train.py" --compress "${run}" --steps "${steps}" \
             --csv "${out}/${run}.csv" "${extra[@]}" | tee -a /dev/stderr)
  final=$(grep '^final:' <<<"${output}")
  read -r _ _ _ _ s _ train _ val _ secs _ ag _ rs _ step _ collective <<<"${final}"
  read -r _ _ _ _ _ _ compute _ inside _ hooks _ encode _ decode _ exchange \
    <<<"$(grep '^breakdown:' <<<"${output}")"
  step_of[${run}]="${step}"
  breakdowns+=("${run}|${step}|${compute}|${inside}|${hooks}|${encode}|${decode}|${exchange}")
  if [[ "${run}" == wire* ]]; then train="-"; val="-"; fi  # timing only: the weights are not gathered
  [[ "${run}" == fp32 ]] && { fp32_val="${val}"; fp32_step="${step}"; }
  versus="-"
  [[ -n "${fp32_val}" && "${val}" != "-" ]] && versus=$(awk -v v="${val}" -v f="${fp32_val}" \
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
echo
echo "| run | step (s) | compute | collectives | hooks | encode | decode | exchange and wait | speedup over fp32 | wire-only ideal's speedup | share of the ideal |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for row in "${breakdowns[@]}"; do
  IFS='|' read -r run step compute inside hooks encode decode exchange <<<"${row}"
  speedup="-"; ideal="-"; share="-"
  fp32_step="${step_of[fp32]:-}"
  [[ -n "${fp32_step}" ]] && speedup=$(awk -v s="${step}" -v f="${fp32_step}" 'BEGIN { printf "%.2fx", f / s }')
  wire="${ideal_of[${run}]:-}"
  if [[ -n "${fp32_step}" && -n "${wire}" && -n "${step_of[${wire}]:-}" ]]; then
    ideal=$(awk -v s="${step_of[${wire}]}" -v f="${fp32_step}" 'BEGIN { printf "%.2fx", f / s }')
    share=$(awk -v s="${step}" -v w="${step_of[${wire}]}" 'BEGIN { printf "%.0f %%", 100 * w / s }')
  fi
  echo "| ${run} | ${step} | ${compute} | ${inside} | ${hooks} | ${encode} | ${decode} | ${exchange} | ${speedup} | ${ideal} | ${share} |"
done
echo
echo "(per-step medians in seconds, slowest rank; compute: the step outside the collectives; hooks: the collectives' time outside qsdp's calls (the FSDP2 hooks' Python, copies and allocations); exchange and wait: qsdp's calls less their codec; wire8 / wire4 move w8g8's / w4g4's bytes with no codec, the bound of any codec at those bytes; w4g4d is set against wire4, whose bytes are close to its own)"
if "${python}" -c "import matplotlib" 2>/dev/null; then
  "${python}" "${here}/../fsdp_train/plot_losses.py" "${out}/losses.png" "${out}"/*.csv >&2
fi
