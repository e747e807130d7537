#!/usr/bin/env bash
# OpenMPI's "rsh agent" for bench/net/run.sh: called as `netns-agent.sh [ssh options] HOST COMMAND...`,
# it runs COMMAND inside the network namespace that owns HOST's address (the map in $QSDP_NETNS_MAP:
# address, namespace and, for bench/net/run.sh --node-namespaces, the hostname COMMAND sees, set in a
# UTS namespace of its own).
set -euo pipefail
while [[ $# -gt 0 && "$1" == -* ]]; do shift; done  # ssh-style options, if any
host="$1"
shift
read -r ns name < <(awk -v h="${host}" '$1 == h { print $2, $3 }' "${QSDP_NETNS_MAP:?set by bench/net/run.sh}") || true
[[ -n "${ns:-}" ]] || { echo "netns-agent: no namespace for host ${host}" >&2; exit 1; }
if [[ -n "${name:-}" ]]; then
  exec ip netns exec "${ns}" unshare --uts /bin/sh -c "hostname '${name}' && $*"
fi
exec ip netns exec "${ns}" /bin/sh -c "$*"
