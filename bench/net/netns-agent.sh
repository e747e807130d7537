#!/usr/bin/env bash
# OpenMPI's "rsh agent" for bench/net/run.sh: called as `netns-agent.sh [ssh options] HOST COMMAND...`,
# it runs COMMAND inside the network namespace that owns HOST's address (the map in $QSDP_NETNS_MAP).
set -euo pipefail
while [[ $# -gt 0 && "$1" == -* ]]; do shift; done  # ssh-style options, if any
host="$1"
shift
ns="$(awk -v h="${host}" '$1 == h { print $2 }' "${QSDP_NETNS_MAP:?set by bench/net/run.sh}")"
[[ -n "${ns}" ]] || { echo "netns-agent: no namespace for host ${host}" >&2; exit 1; }
exec ip netns exec "${ns}" /bin/sh -c "$*"
