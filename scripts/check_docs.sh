#!/usr/bin/env bash
# Checks what users read (README.md, docs/, the headers, examples, benchmarks, the Python package):
#
#   * no development-log words: issue numbers, "in progress", "landed", "not yet", "so far",
#     "session", "for now", "today", "blocked", TODO/FIXME (CHANGELOG.md, the history, is exempt);
#   * README.md at most 15 KiB and every page under docs/ at most 16 KiB;
#   * README.md's C++ example is examples/quickstart.cpp, which CI compiles and runs;
#   * every relative link in README.md, CONTRIBUTING.md and docs/ names a file that exists.
#
#   scripts/check_docs.sh        # exit 1 and a list of what is wrong, or "docs: ok"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

status=0
fail() {
  echo "docs: $*" >&2
  status=1
}

# --- development-log words ----------------------------------------------------------------------
log_words='\bissues? ?#?[0-9]+|\bin progress\b|\blanded\b|\bnot yet\b|\bso far\b|\bsessions?\b|\bfor now\b|\btoday\b|\byesterday\b|\bblocked\b|\bTODO\b|\bFIXME\b'
if hits=$(grep -rniEI --exclude-dir=__pycache__ "${log_words}" README.md CONTRIBUTING.md docs include examples bench python); then
  fail "development-log words where users read them (history goes into CHANGELOG.md):"
  echo "${hits}" >&2
fi

# --- page sizes ----------------------------------------------------------------------------------
readme_bytes=$(wc -c <README.md)
((readme_bytes <= 15360)) || fail "README.md is ${readme_bytes} bytes; expected at most 15360"
while IFS= read -r page; do
  bytes=$(wc -c <"${page}")
  ((bytes <= 16384)) || fail "${page} is ${bytes} bytes; expected at most 16384 (split it)"
done < <(find docs -name '*.md')

# --- the README's C++ example is the compiled quickstart -----------------------------------------
# The first ```cpp block of README.md, byte for byte.
readme_example=$(awk '/^```cpp$/ {inside = 1; next} inside && /^```$/ {exit} inside {print}' README.md)
if [[ "${readme_example}" != "$(cat examples/quickstart.cpp)" ]]; then
  fail "README.md's first C++ example differs from examples/quickstart.cpp (keep them identical):"
  diff <(echo "${readme_example}") examples/quickstart.cpp >&2 || true
fi
example_lines=$(wc -l <examples/quickstart.cpp)
((example_lines <= 15)) || fail "examples/quickstart.cpp has ${example_lines} lines; expected at most 15"

# --- relative links resolve ----------------------------------------------------------------------
while IFS= read -r page; do
  dir=$(dirname "${page}")
  # [text](target) links that are not URLs or anchors; the part before any '#'.
  while IFS= read -r target; do
    target="${target%%#*}"
    [[ -z "${target}" ]] && continue
    [[ -e "${dir}/${target}" ]] || fail "${page}: link to ${target}, which does not exist"
  done < <(grep -oE '\]\([^)[:space:]]+\)' "${page}" | sed -E 's/^\]\((.*)\)$/\1/' |
    grep -vE '^(https?:|mailto:|#)' || true)
done < <(find README.md CONTRIBUTING.md docs -name '*.md' 2>/dev/null)

((status == 0)) && echo "docs: ok"
exit "${status}"
