#!/usr/bin/env bash
# Installs the example's training text: Debian's `fortunes` package (about 2.6 MB of English quotations,
# jokes and definitions under /usr/share/games/fortunes; README.md names it). Needs root for apt-get.
set -euo pipefail
if [[ -d /usr/share/games/fortunes && -f /usr/share/games/fortunes/computers ]]; then
  echo "examples/fsdp_train/setup.sh: /usr/share/games/fortunes is there"
  exit 0
fi
if [[ "$(id -u)" -ne 0 ]]; then
  echo "examples/fsdp_train/setup.sh: run as root (sudo) to apt-get install fortunes" >&2
  exit 1
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -q fortunes
