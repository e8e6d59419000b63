#!/bin/sh
# Run the mpi backend across two "hosts" on one machine: two network namespaces (ulA,
# ulB) joined by a bridge, each with its own host name (UTS namespace). Open MPI starts
# its daemons through plm_rsh_agent; instead of ssh this script is the agent and runs
# the daemon inside the namespace of the host it is asked for. Needs root (CAP_NET_ADMIN,
# CAP_SYS_ADMIN) and Open MPI. Usage: netns_demo.sh BUILD_DIR [program args...]
#   (default program: BUILD_DIR/bin/unilink-mpi-check)
set -eu
if [ "${1:-}" = "--agent" ]; then
  # ssh calling convention: --agent HOST COMMAND...
  shift
  host=$1
  shift
  case "$host" in
  10.77.0.2) ns=ulA ;;
  10.77.0.3) ns=ulB ;;
  *) echo "netns_demo agent: unknown host $host" >&2; exit 255 ;;
  esac
  exec ip netns exec "$ns" unshare --uts sh -c "hostname node-$ns; $*"
fi

BUILD=$(cd "${1:?usage: netns_demo.sh BUILD_DIR [program args]}" && pwd)
shift
[ $# -gt 0 ] || set -- "$BUILD/bin/unilink-mpi-check"
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
NP=${NP:-4}

cleanup() {
  ip netns del ulA 2>/dev/null || true
  ip netns del ulB 2>/dev/null || true
  ip link del ulbr0 2>/dev/null || true
  rm -f "${HOSTS:-}"
}
trap cleanup EXIT INT TERM
cleanup
ip link add ulbr0 type bridge
ip addr add 10.77.0.1/24 dev ulbr0
ip link set ulbr0 up
for pair in ulA:2 ulB:3; do
  ns=${pair%:*}
  ip=${pair#*:}
  ip netns add "$ns"
  ip link add "v$ns" type veth peer name eth0 netns "$ns"
  ip link set "v$ns" master ulbr0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "10.77.0.$ip/24" dev eth0
  ip -n "$ns" link set eth0 up
done
HOSTS=$(mktemp)
printf '10.77.0.2 slots=%d\n10.77.0.3 slots=%d\n' $((NP / 2)) $((NP - NP / 2)) >"$HOSTS"

mpirun --allow-run-as-root --oversubscribe --bind-to none --hostfile "$HOSTS" -np "$NP" \
  --map-by node \
  --mca plm_rsh_agent "$SELF --agent" --mca plm_rsh_no_tree_spawn 1 \
  --mca oob_tcp_if_include 10.77.0.0/24 \
  --mca btl self,vader,tcp --mca btl_tcp_if_include 10.77.0.0/24 \
  --mca osc "${OSC:-ucx,rdma,sm}" -x UCX_TLS="${UCX_TLS:-tcp,self,sm}" \
  -x UNILINK_PLUGIN_PATH="$BUILD/lib" -x UNILINK_TIMEOUT_MS=${TIMEOUT_MS:-120000} -x UNILINK_MPI_CHECK_NODES=2 \
  "$@"
