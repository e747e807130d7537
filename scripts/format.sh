#!/usr/bin/env bash
# clang-format (the repository's .clang-format) over the C++ and CUDA sources of include/, tests/,
# bench/, examples/ and python/.
#
#   scripts/format.sh           rewrites the files in place
#   scripts/format.sh --check   changes nothing; lists the files that differ and exits 1 if any does
#                               (what CI runs)
#
# The version matters: Debian 12's clang-format 14 is what the tree is formatted with.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/lib/packages.sh
source scripts/lib/packages.sh
ensure_packages clang-format:clang-format

mode=fix
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  *)
    echo "scripts/format.sh: unknown argument '$1'; expected nothing or --check" >&2
    exit 2
    ;;
esac

mapfile -t files < <(git ls-files -- include tests bench examples python |
  grep -E '\.(hpp|cpp|cu|cuh)$' | grep -v '^tests/fuzz/corpus/' || true)
if ((${#files[@]} == 0)); then
  echo "scripts/format.sh: no sources found (run it inside the git checkout)" >&2
  exit 2
fi

if [[ "${mode}" == fix ]]; then
  clang-format -i "${files[@]}"
  echo "==> formatted ${#files[@]} files with $(clang-format --version)"
  exit 0
fi

differ=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "${f}" >/dev/null 2>&1; then differ+=("${f}"); fi
done
if ((${#differ[@]} > 0)); then
  echo "==> format: ${#differ[@]} of ${#files[@]} files differ from clang-format's layout:" >&2
  printf '    %s\n' "${differ[@]}" >&2
  echo "    run scripts/format.sh to fix them" >&2
  exit 1
fi
echo "==> format: all ${#files[@]} files match $(clang-format --version)"
