#!/usr/bin/env bash
# Runs qsdp-bench (or any MPI program) with one rank per network namespace, the namespaces joined by a
# bridge through veth pairs whose namespace ends are shaped with tc: a real TCP network of a given
# rate and delay, entirely inside this machine. Everything it creates is removed on exit, on error and
# on Ctrl-C.
#
#   sudo bench/net/run.sh [--ranks 4] [--rate 1gbit] [--delay 0ms] [--subnet 10.77.0]
#                         [--bench build/release/bench/qsdp-bench] -- [qsdp-bench arguments]
#   sudo bench/net/run.sh [--ranks 4] [--rate 1gbit] ... --env-ranks -- COMMAND [ARGUMENTS]
#   sudo bench/net/run.sh --ranks 4 --node-size 2 [--inside-rate 10gbit] --rate 1gbit
#                         --bench build/release/bench/qsdp-bench-two-level -- --node-size 2 ...
#   sudo bench/net/run.sh --ranks 4 --node-size 2 --node-namespaces --rate 1gbit
#                         --bench build/release/bench/qsdp-bench-two-level -- --node-size 0 ...
#
# --node-size S groups ranks 0..S-1, S..2S-1, ... into "nodes": traffic between two ranks of one node
# runs at --inside-rate (default: unshaped), traffic to other nodes at --rate (each rank's own link,
# as each GPU of a cluster has its own NIC). Without it every link runs at --rate.
#
# --node-namespaces (with --node-size S) makes each node one network namespace with a hostname of
# its own (a UTS namespace: node0, node1, ...) holding its S ranks, joined to the others by one link
# shaped to --rate (the node's NIC): Open MPI runs one daemon per node and moves a node's own traffic
# through shared memory (btl vader), only the traffic between nodes over shaped TCP; under
# --env-ranks gloo reaches a node-mate through the namespace's loopback, unshaped. --inside-rate
# does not apply.
#
# --env-ranks starts COMMAND once in each namespace, without MPI, with torchrun's variables set
# (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK -- 0, 1 and RANK, or the rank's place
# in its node, S and the node's index under --node-namespaces --, MASTER_ADDR = rank 0's address,
# MASTER_PORT = $QSDP_NET_PORT or 29500) and GLOO_SOCKET_IFNAME=eth0, so torch.distributed's env://
# rendezvous and gloo's sockets use the shaped links; if one rank fails, the others are stopped 10 s
# later.
#
# The ranks reach each other only through the shaped links (OpenMPI: btl tcp,self -- and vader within
# a node under --node-namespaces -- with btl_tcp_if_include / oob_tcp_if_include set to the subnet);
# mpirun itself runs in the calling namespace on the bridge's address and starts each host's daemon
# through `ip netns exec` (plm_rsh_agent = bench/net/netns-agent.sh). Needs root (CAP_NET_ADMIN),
# iproute2 and tc; where it cannot create namespaces it says why and exits with 77 (ctest: skipped), 2
# for bad arguments, else the benchmark's own exit status.
set -euo pipefail

ranks=4
rate=1gbit
delay=0ms
subnet=10.77.0
bench=""
env_ranks=0
node_size=1
inside_rate=none
node_namespaces=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --delay) delay="$2"; shift 2 ;;
    --subnet) subnet="$2"; shift 2 ;;
    --bench) bench="$2"; shift 2 ;;
    --env-ranks) env_ranks=1; shift ;;
    --node-size) node_size="$2"; shift 2 ;;
    --inside-rate) inside_rate="$2"; shift 2 ;;
    --node-namespaces) node_namespaces=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,38p' "$0"; exit 0 ;;
    *) echo "bench/net/run.sh: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
[[ -n "${bench}" ]] || bench="${root}/build/release/bench/qsdp-bench"

die() { echo "bench/net/run.sh: $*" >&2; exit 2; }
cannot() { echo "bench/net/run.sh: cannot run here: $*" >&2; exit 77; }
[[ "${ranks}" =~ ^[0-9]+$ && "${ranks}" -ge 2 && "${ranks}" -le 200 ]] || die "--ranks ${ranks}: expected 2..200"
[[ "${subnet}" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "--subnet ${subnet}: expected three octets, e.g. 10.77.0"
(( env_ranks )) && { [[ $# -gt 0 ]] || die "--env-ranks: expected a command after --"; }
[[ "${node_size}" =~ ^[0-9]+$ && "${node_size}" -ge 1 && $((ranks % node_size)) -eq 0 ]] ||
  die "--node-size ${node_size}: expected a divisor of --ranks ${ranks}"
if (( node_namespaces )); then
  (( node_size > 1 )) || die "--node-namespaces: expected --node-size of 2 or more"
  [[ "${inside_rate}" == none ]] || die "--inside-rate with --node-namespaces: a node's ranks share memory, not a link"
elif (( node_size > 1 )) && [[ "${delay}" != "0ms" && "${delay}" != "0" ]]; then
  die "--delay with --node-size: not supported (the per-destination classes have no netem stage)"
fi
(( env_ranks )) || [[ -x "${bench}" ]] || die "${bench} is not an executable (build it: cmake --build --preset release --target qsdp-bench)"
[[ "$(id -u)" -eq 0 ]] || cannot "needs root to create network namespaces and shape links (run it with sudo)"
command -v ip >/dev/null && command -v tc >/dev/null || cannot "needs ip and tc (Debian: apt-get install iproute2)"
(( env_ranks )) || command -v mpirun >/dev/null || cannot "needs mpirun (Debian: apt-get install openmpi-bin)"
(( node_namespaces == 0 )) || command -v unshare >/dev/null || cannot "needs unshare (Debian: apt-get install util-linux)"

# One namespace per rank, or per node under --node-namespaces: each is a host of the hostfile.
hosts="${ranks}"
per_host=1
if (( node_namespaces )); then
  hosts=$((ranks / node_size))
  per_host="${node_size}"
fi
tag="qn$$"  # unique per run: names never clash with another run's
bridge="${tag}br"
ns_name() { echo "${tag}n$1"; }
created_ns=()
mpirun_pid=""
rank_pids=()
stopper_pid=""
cleanup() {
  set +e
  [[ -n "${stopper_pid}" ]] && kill "${stopper_pid}" 2>/dev/null
  for pid in "${rank_pids[@]}"; do kill "${pid}" 2>/dev/null; done
  [[ -n "${mpirun_pid}" ]] && kill "${mpirun_pid}" 2>/dev/null && pkill -f "^orted .*oob_tcp_if_include ${subnet}\.0/24"
  for ns in "${created_ns[@]}"; do ip netns del "${ns}" 2>/dev/null; done
  ip link del "${bridge}" 2>/dev/null
  for ((i = 0; i < hosts; ++i)); do ip link del "${tag}v${i}" 2>/dev/null; done
  rm -f "${hostfile:-}" "${agentmap:-}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "${tag}probe" 2>/dev/null || cannot "'ip netns add' failed (no CAP_NET_ADMIN in this container?)"
if (( node_namespaces )) && ! ip netns exec "${tag}probe" unshare --uts /bin/sh -c 'hostname probe' 2>/dev/null; then
  ip netns del "${tag}probe"
  cannot "'unshare --uts' failed (no CAP_SYS_ADMIN in this container?)"
fi
ip netns del "${tag}probe"

ip link add "${bridge}" type bridge 2>/dev/null || cannot "'ip link add ... type bridge' failed"
ip addr add "${subnet}.254/24" dev "${bridge}"
ip link set "${bridge}" up

hostfile="$(mktemp)"
agentmap="$(mktemp)"
rate_bits=$(numfmt --from=si "$(tr 'kmgt' 'KMGT' <<<"${rate%bit}")") ||
  die "--rate ${rate}: expected a rate such as 1gbit, 10gbit or 500mbit"
burst=$((rate_bits / 8 / 250))  # 4 ms of traffic at the rate
(( burst < 65536 )) && burst=65536
for ((i = 0; i < hosts; ++i)); do
  ns="$(ns_name "${i}")"
  ip netns add "${ns}"
  created_ns+=("${ns}")
  ip link add "${tag}v${i}" type veth peer name eth0 netns "${ns}"
  ip link set "${tag}v${i}" master "${bridge}" up
  ip netns exec "${ns}" ip addr add "${subnet}.$((i + 1))/24" dev eth0
  ip netns exec "${ns}" ip link set eth0 up
  ip netns exec "${ns}" ip link set lo up
  # Egress of each rank: optional delay (netem), then the rate (tbf); with nodes, an htb class per
  # destination: the node's other ranks at --inside-rate (or unshaped), everyone else at --rate.
  if (( node_size > 1 && ! node_namespaces )); then
    inside="${inside_rate}"
    [[ "${inside}" == none ]] && inside=1000gbit
    ip netns exec "${ns}" tc qdisc add dev eth0 root handle 1: htb default 20 ||
      cannot "tc could not shape the link (no sch_htb in this kernel?)"
    inside_bits=$(numfmt --from=si "$(tr 'kmgt' 'KMGT' <<<"${inside%bit}")") ||
      die "--inside-rate ${inside_rate}: expected a rate such as 10gbit, or none"
    inside_burst=$((inside_bits / 8 / 250))  # 4 ms at the rate, as for --rate
    (( inside_burst < 65536 )) && inside_burst=65536
    ip netns exec "${ns}" tc class add dev eth0 parent 1: classid 1:10 htb rate "${inside}" \
      burst "${inside_burst}" cburst "${inside_burst}"
    ip netns exec "${ns}" tc class add dev eth0 parent 1: classid 1:20 htb rate "${rate}" burst "${burst}"
    first=$(( i / node_size * node_size ))
    for ((peer = first; peer < first + node_size; ++peer)); do
      (( peer == i )) && continue
      ip netns exec "${ns}" tc filter add dev eth0 protocol ip parent 1: prio 1 u32 \
        match ip dst "${subnet}.$((peer + 1))/32" flowid 1:10
    done
  elif [[ "${delay}" != "0ms" && "${delay}" != "0" ]]; then
    ip netns exec "${ns}" tc qdisc add dev eth0 root handle 1: netem delay "${delay}" limit 100000
    ip netns exec "${ns}" tc qdisc add dev eth0 parent 1: handle 2: tbf rate "${rate}" burst "${burst}" latency 100ms
  else
    ip netns exec "${ns}" tc qdisc add dev eth0 root tbf rate "${rate}" burst "${burst}" latency 100ms ||
      cannot "tc could not shape the link (no sch_tbf in this kernel?)"
  fi
  echo "${subnet}.$((i + 1)) slots=${per_host}" >>"${hostfile}"
  hostname_column=""  # netns-agent.sh sets a node's hostname where the map names one
  (( node_namespaces )) && hostname_column=" node${i}"
  echo "${subnet}.$((i + 1)) ${ns}${hostname_column}" >>"${agentmap}"
done
if (( node_namespaces )); then
  echo "bench/net/run.sh: ${hosts} nodes of ${node_size} ranks, one namespace and hostname each, on ${bridge}, links ${rate} between nodes, delay ${delay}, shared memory (MPI) or loopback (--env-ranks) within, subnet ${subnet}.0/24" >&2
elif (( node_size > 1 )); then
  echo "bench/net/run.sh: ${ranks} namespaces on ${bridge} in nodes of ${node_size}, links ${rate} between nodes, ${inside_rate} within, subnet ${subnet}.0/24" >&2
else
  echo "bench/net/run.sh: ${ranks} namespaces on ${bridge}, links ${rate}, delay ${delay}, subnet ${subnet}.0/24" >&2
fi

export QSDP_NETNS_MAP="${agentmap}" QSDP_NET_RATE="${rate}" QSDP_NET_DELAY="${delay}"

if (( env_ranks )); then
  declare -A rank_of=()
  for ((i = 0; i < ranks; ++i)); do
    host=$((i / per_host))
    in_node=()  # a node's ranks see its hostname: each enters a UTS namespace that sets it
    (( node_namespaces )) && in_node=(unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "node${host}")
    ip netns exec "$(ns_name "${host}")" "${in_node[@]}" timeout "${QSDP_NET_TIMEOUT:-3600}" \
      env RANK="${i}" WORLD_SIZE="${ranks}" LOCAL_RANK=$((i % per_host)) LOCAL_WORLD_SIZE="${per_host}" \
      GROUP_RANK="${host}" MASTER_ADDR="${subnet}.1" MASTER_PORT="${QSDP_NET_PORT:-29500}" \
      GLOO_SOCKET_IFNAME=eth0 "$@" </dev/null &
    rank_pids+=($!)
    rank_of[$!]="${i}"
  done
  status=0
  running=("${rank_pids[@]}")
  while (( ${#running[@]} > 0 )); do
    set +e
    wait -n -p done_pid "${running[@]}"
    rank_status=$?
    set -e
    still=()
    for pid in "${running[@]}"; do [[ "${pid}" == "${done_pid}" ]] || still+=("${pid}"); done
    running=("${still[@]}")
    if (( rank_status != 0 && status == 0 )); then
      status="${rank_status}"
      echo "bench/net/run.sh: rank ${rank_of[${done_pid}]} exited with ${rank_status}; stopping the others in 10 s" >&2
      ( sleep 10; for pid in "${rank_pids[@]}"; do kill "${pid}" 2>/dev/null; done ) &
      stopper_pid=$!
    fi
  done
  rank_pids=()
  exit "${status}"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# More ranks than cores: Open MPI's busy-polling ranks would starve each other's senders, so let them
# yield while they wait.
extra_mca=()
if (( ranks > $(nproc) )); then extra_mca=(--mca mpi_yield_when_idle 1); fi
# One daemon per host; under --node-namespaces it places the node's ranks in order (ranks 0..S-1 on
# node0) and they share memory. Every node sees the same cores, so nothing is bound.
placement=(--map-by node)
btl=tcp,self
if (( node_namespaces )); then
  placement=(--map-by slot --bind-to none)
  btl=tcp,vader,self
fi
# Now and then (twice in about 30 runs here) one rank's daemon never comes up and mpirun waits for it
# until the timeout, silently. So watch the daemons start: if fewer than `hosts` are up after
# QSDP_NET_START_TIMEOUT seconds (default 60), stop this try and start again, three tries at most.
daemons_up() { pgrep -c -f "^orted .*oob_tcp_if_include ${subnet}\.0/24" || true; }
start_timeout="${QSDP_NET_START_TIMEOUT:-60}"
for attempt in 1 2 3; do
  timeout "${QSDP_NET_TIMEOUT:-3600}" mpirun -n "${ranks}" --hostfile "${hostfile}" "${placement[@]}" "${extra_mca[@]}" \
    --mca plm_rsh_agent "${here}/netns-agent.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca pml ob1 --mca btl "${btl}" --mca btl_tcp_if_include "${subnet}.0/24" \
    --mca oob_tcp_if_include "${subnet}.0/24" -x QSDP_NETNS_MAP -x QSDP_NET_RATE -x QSDP_NET_DELAY \
    "${bench}" --backend mpi "$@" </dev/null &
  mpirun_pid=$!
  up=0
  for ((waited = 0; waited < start_timeout; ++waited)); do
    kill -0 "${mpirun_pid}" 2>/dev/null || break  # already over (a short run, or a failure)
    (( $(daemons_up) >= hosts )) && { up=1; break; }
    sleep 1
  done
  if (( up )) || ! kill -0 "${mpirun_pid}" 2>/dev/null; then
    set +e
    wait "${mpirun_pid}"
    status=$?
    mpirun_pid=""
    exit "${status}"
  fi
  echo "bench/net/run.sh: $(daemons_up) of ${hosts} MPI daemons up after ${start_timeout} s (try ${attempt} of 3); starting again" >&2
  kill "${mpirun_pid}" 2>/dev/null
  wait "${mpirun_pid}" 2>/dev/null || true
  pkill -f "^orted .*oob_tcp_if_include ${subnet}\.0/24" || true
  mpirun_pid=""
  sleep 2
done
echo "bench/net/run.sh: the MPI daemons did not all start in 3 tries" >&2
exit 1
