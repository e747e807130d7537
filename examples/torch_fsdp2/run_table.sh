#!/usr/bin/env bash
# The FSDP2 tables of docs/benchmarks: examples/torch_fsdp2/train.py under torchrun on 4 CPU
# processes, once per run (fp32, w8g8, w4g4, w4g4d, the wire-only ideals wire8, wire4, and on
# request mx8, mx4d, nv4d, mx8e, mx4e), the same model, weights and data order; one CSV of losses per run, the
# tables (markdown) on stdout -- losses and step times, then where each step's time goes and each
# compressed run's speedup as a fraction of its wire-only ideal's -- and a PNG of the curves.
#
#   bash examples/torch_fsdp2/run_table.sh [--python PY] [--out DIR] [--steps 400] [--runs "fp32 w8g8"]
#                                          [--repeat N] [--net RATE [--nodes S]]
#                                          [extra train.py options...]
# PY: a Python with torch and qsdp installed (pip install . at the repository root). --net RATE runs
# each rank in its own network namespace, the links shaped to RATE (1gbit, 10gbit; bench/net/run.sh
# --env-ranks, as root) instead of torchrun on this machine's loopback; with --nodes S, the ranks
# form nodes of S that share a namespace and a hostname (bench/net/run.sh --node-namespaces): a
# node's ranks talk over its loopback, unshaped, and each node has one link of RATE.
# --repeat N runs the whole list N times, interleaved (fp32, w8g8, ..., fp32, w8g8, ...), and the
# tables show the median over the N runs of each figure (the step and each part of the breakdown
# apart) beside every run's step; the losses are those of the first round, and a line says where a
# later round's differ. Later rounds' CSVs go to DIR/round2, DIR/round3, ...
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python=python3
out="torch_fsdp2_runs"
steps=400
runs="fp32 w8g8 w4g4 w4g4d wire8 wire4"
net=""
nodes=1
repeat=1
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python) python="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --net) net="$2"; shift 2 ;;
    --nodes) nodes="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) extra+=("$1"); shift ;;
  esac
done
[[ "${repeat}" =~ ^[1-9][0-9]*$ ]] || { echo "run_table.sh: --repeat ${repeat}: expected a count >= 1" >&2; exit 2; }
[[ "${nodes}" =~ ^[1-9][0-9]*$ ]] || { echo "run_table.sh: --nodes ${nodes}: expected ranks per node >= 1" >&2; exit 2; }
if (( nodes > 1 )) && [[ -z "${net}" ]]; then
  echo "run_table.sh: --nodes ${nodes}: needs --net RATE (the nodes are network namespaces)" >&2
  exit 2
fi
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
  [mx8]="mxfp8<e4m3>|mxfp8<e4m3, stochastic>"
  [mx4d]="mxfp4 of differences|hadamard<mxfp4<stochastic>>"
  [nv4d]="nvfp4 of differences|hadamard<nvfp4<stochastic>>"
  [mx8e]="mxfp8<e4m3>, kept encoded (MX linear)|mxfp8<e4m3, stochastic>"
  [mx4e]="mxfp4, kept encoded (MX linear)|hadamard<mxfp4<stochastic>>"
  [wire8]="w8g8's bytes, no codec|w8g8's bytes, no codec"
  [wire4]="w4g4's bytes, no codec|w4g4's bytes, no codec"
)
for run in ${runs}; do
  [[ -n "${what[${run}]:-}" ]] || { echo "run_table.sh: unknown run '${run}'" >&2; exit 2; }
done
declare -A ideal_of=([w8g8]=wire8 [w4g4]=wire4 [w4g4d]=wire4)
declare -A final_of=() breakdown_of=() steps_of=()
started=$(date +%s)
if [[ -n "${net}" ]]; then
  node_args=()
  (( nodes > 1 )) && node_args=(--node-size "${nodes}" --node-namespaces)
  launch=(bash "${here}/../../bench/net/run.sh" --ranks 4 --rate "${net}" "${node_args[@]}" --env-ranks -- "${python}")
else
  launch=("${python}" -m torch.distributed.run --standalone --nproc-per-node 4)
fi
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { printf "%.4f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
differ=()
for ((round = 1; round <= repeat; ++round)); do
  dir="${out}"
  (( round > 1 )) && { dir="${out}/round${round}"; mkdir -p "${dir}"; }
  for run in ${runs}; do
    echo "run_table.sh: ${run} (round ${round} of ${repeat}, $(( $(date +%s) - started )) s in) ..." >&2
    output=$("${launch[@]}" "${here}/train.py" --compress "${run}" --steps "${steps}" \
               --csv "${dir}/${run}.csv" "${extra[@]}" | tee -a /dev/stderr)
    final=$(grep '^final:' <<<"${output}")
    breakdown=$(grep '^breakdown:' <<<"${output}")
    read -r _ _ _ _ _ _ train _ val _ _ _ _ _ _ _ step _ <<<"${final}"
    steps_of[${run}]+="${step} "
    if (( round == 1 )); then
      final_of[${run}]="${final}"
    else
      read -r _ _ _ _ _ _ train1 _ val1 _ <<<"${final_of[${run}]}"
      [[ "${train} ${val}" == "${train1} ${val1}" ]] ||
        differ+=("${run}: round ${round} ended at train ${train} val ${val}, round 1 at ${train1} ${val1}")
    fi
    breakdown_of[${run}]+="${breakdown}"$'\n'
  done
done
# The median over the rounds of field N (1-based, as awk counts) of each round's breakdown line.
breakdown_median() { awk -v n="$2" '{ print $n }' <<<"${breakdown_of[$1]}" | median; }
declare -A step_of=()
for run in ${runs}; do step_of[${run}]=$(median <<<"${steps_of[${run}]}"); done
rows=()
fp32_val=
for run in ${runs}; do
  read -r _ _ _ _ s _ train _ val _ secs _ ag _ rs _ _ _ collective <<<"${final_of[${run}]}"
  step="${step_of[${run}]}"
  if [[ "${run}" == wire* ]]; then train="-"; val="-"; fi  # timing only: the weights are not gathered
  [[ "${run}" == fp32 ]] && fp32_val="${val}"
  versus="-"
  [[ -n "${fp32_val}" && "${val}" != "-" ]] && versus=$(awk -v v="${val}" -v f="${fp32_val}" \
                                       'BEGIN { printf "%+.2f %%", 100 * (v - f) / f }')
  speedup="-"
  [[ -n "${step_of[fp32]:-}" ]] && speedup=$(awk -v s="${step}" -v f="${step_of[fp32]}" \
                                              'BEGIN { printf "%.2fx", f / s }')
  IFS='|' read -r weights grads <<<"${what[${run}]}"
  each=$(sed 's/ *$//; s/ / \/ /g' <<<"${steps_of[${run}]}")
  rows+=("| ${run} | ${weights} | ${grads} | ${train} | ${val} | ${versus} | ${ag} | ${rs} | ${step} | ${each} | ${speedup} | ${collective} | ${secs} |")
done
echo "| run | weights | gradients | final train loss | validation loss | vs fp32 | all-gather bytes | reduce-scatter bytes | step (s) | each round's step (s) | step speedup | in qsdp collectives (s/step) | seconds |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
where="links ${net:-unshaped (loopback)}"
(( nodes > 1 )) && where="2 nodes of ${nodes} ranks (one namespace each, loopback within), links of ${net} between them"
(( nodes > 1 && 4 / nodes != 2 )) && where="$((4 / nodes)) nodes of ${nodes} ranks (one namespace each, loopback within), links of ${net} between them"
echo "(${steps} steps, 4 processes, ${where}, ${repeat} round(s), $(( $(date +%s) - started )) s in all; bytes as a fraction of uncompressed; step: median seconds of a step, slowest rank, then the median over the rounds; losses and the last two columns from round 1)"
for line in "${differ[@]}"; do echo "losses differ between rounds: ${line}"; done
echo
echo "| run | step (s) | compute | collectives | hooks | encode | decode | exchange and wait | speedup over fp32 | wire-only ideal's speedup | share of the ideal |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for run in ${runs}; do
  # breakdown: run R step M compute P collectives C hooks H encode E decode D exchange W
  step="${step_of[${run}]}"
  compute=$(breakdown_median "${run}" 7)
  inside=$(breakdown_median "${run}" 9)
  hooks=$(breakdown_median "${run}" 11)
  encode=$(breakdown_median "${run}" 13)
  decode=$(breakdown_median "${run}" 15)
  exchange=$(breakdown_median "${run}" 17)
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
echo "(per-step medians in seconds, slowest rank, each the median over the rounds; compute: the step outside the collectives; hooks: the collectives' time outside qsdp's calls (the FSDP2 hooks' Python, copies and allocations); exchange and wait: qsdp's calls less their codec; wire8 / wire4 move w8g8's / w4g4's bytes with no codec, the bound of any codec at those bytes; w4g4d is set against wire4, whose bytes are close to its own)"
if "${python}" -c "import matplotlib" 2>/dev/null; then
  "${python}" "${here}/../fsdp_train/plot_losses.py" "${out}/losses.png" "${out}"/*.csv >&2
fi
