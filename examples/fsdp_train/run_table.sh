#!/usr/bin/env bash
# The table of docs/benchmarks/convergence.md: the same model, data order and seed trained with ten
# weight/gradient quantizer settings on 4 in-process ranks; one CSV of losses per run, the table (markdown)
# on stdout and a PNG of the loss curves (matplotlib) next to the CSVs.
#
#   bash examples/fsdp_train/run_table.sh [--bin build/release/examples/qsdp_fsdp_train] [--out DIR]
#                                         [--steps 3000] [extra qsdp_fsdp_train options...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
bin="${root}/build/release/examples/qsdp_fsdp_train"
out="fsdp_runs"
steps=3000
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) extra+=("$1"); shift ;;
  esac
done
[[ -x "${bin}" ]] || { echo "run_table.sh: ${bin} is not built (cmake --build --preset release --target qsdp_fsdp_train)" >&2; exit 2; }
mkdir -p "${out}"
# name | weights | grads | stored (the master weights kept through this quantizer; fp32: exact)
runs=(
  "fp32|fp32|fp32|fp32"
  "W8G8 stochastic|stochastic8|stochastic8|fp32"
  "W8G8 random_shift|random_shift8|stochastic8|fp32"
  "W4G4 random_shift|random_shift4|stochastic4|fp32"
  "W8 nearest, G fp32|nearest8|fp32|fp32"
  "W4 nearest, G fp32|nearest4|fp32|fp32"
  "W8G8 delta, hadamard|delta_random_shift8|hadamard_stochastic8|fp32"
  "W4G4 delta, hadamard|delta_random_shift4|hadamard_stochastic4|fp32"
  "stored nearest4, G fp32|fp32|fp32|nearest4"
  "stored random_shift4, G fp32|fp32|fp32|random_shift4"
)
started=$(date +%s)
rows=()
for spec in "${runs[@]}"; do
  IFS='|' read -r name weights grads stored <<<"${spec}"
  file="${out}/$(tr ' ,' '__' <<<"${name}").csv"
  echo "run_table.sh: ${name} (weights ${weights}, grads ${grads}, stored ${stored}) ..." >&2
  final=$("${bin}" --weights "${weights}" --grads "${grads}" --store "${stored}" --steps "${steps}" \
                   --log "${file}" "${extra[@]}" |
          tee -a /dev/stderr | grep '^final:')
  read -r _ _ s _ train _ val _ valq _ secs <<<"${final}"
  rows+=("| ${name} | ${weights} | ${grads} | ${stored} | ${train} | ${val} | ${valq} | ${secs} |")
done
total=$(( $(date +%s) - started ))
echo "| run | weights | gradients | stored | final train loss | validation loss | validation, quantized weights | seconds |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "${#runs[@]} runs of ${steps} steps in ${total} s"
if python3 -c 'import matplotlib' 2>/dev/null; then
  python3 "${here}/plot_losses.py" "${out}/losses.png" "${out}"/*.csv
else
  echo "run_table.sh: no matplotlib (pip install matplotlib); no plot" >&2
fi
