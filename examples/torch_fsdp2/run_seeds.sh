#!/usr/bin/env bash
# Compressed FSDP2 runs against the uncompressed run of the same seed, over several seeds:
# examples/torch_fsdp2/nanogpt.py under torchrun on 4 CPU processes, for each precision and seed one
# uncompressed run (--compress fp32) and each compressed run (--no-reference), one CSV of losses at
# every step per run (DIR/<precision>_s<seed>_<run>.csv), then the summary of
# examples/torch_fsdp2/compare_seeds.py (markdown) on stdout. A run whose CSV is already in DIR with
# every step is kept, so an interrupted study resumes where it stopped.
#
#   bash examples/torch_fsdp2/run_seeds.sh [--python PY] [--out DIR] [--seeds "1 2 3"]
#        [--runs "identity w8g8 w4g4d"] [--mixed "fp32 bf16"] [extra nanogpt.py options...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python=python3
out="torch_fsdp2_seeds"
seeds="1 2 3"
runs="identity w8g8 w4g4d"
mixed="fp32 bf16"
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python) python="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --mixed) mixed="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) extra+=("$1"); shift ;;
  esac
done
"${python}" -c "import torch, qsdp.torch" || {
  echo "run_seeds.sh: ${python} lacks torch or qsdp (pip install torch; pip install . at the root)" >&2
  exit 2
}
mkdir -p "${out}"
started=$(date +%s)
total=0
for m in ${mixed}; do for s in ${seeds}; do for r in fp32 ${runs}; do total=$((total + 1)); done; done; done
done_runs=0
for m in ${mixed}; do
  for s in ${seeds}; do
    for r in fp32 ${runs}; do
      done_runs=$((done_runs + 1))
      csv="${out}/${m}_s${s}_${r}.csv"
      if [[ -f "${csv}" ]] && (($(wc -l <"${csv}") > 1)); then
        echo "run_seeds.sh: ${done_runs}/${total}: ${m} seed ${s} ${r}: kept ${csv}" >&2
        continue
      fi
      echo "run_seeds.sh: ${done_runs}/${total}: ${m} seed ${s} ${r} ($(( $(date +%s) - started )) s elapsed)" >&2
      "${python}" -m torch.distributed.run --standalone --nproc-per-node 4 "${here}/nanogpt.py" \
        --compress "${r}" --no-reference --mixed "${m}" --seed "${s}" \
        --csv "${csv}" "${extra[@]}" 2>&1 | grep '^final:' >&2
    done
  done
done
"${python}" "${here}/compare_seeds.py" "${out}"
echo
echo "($(( $(date +%s) - started )) s in all; nanogpt.py options: ${extra[*]:-defaults})"
