#!/bin/sh
# Run any command against the fake vendor runtimes (tests/fakegpu): fake libcudart,
# libnccl and libze_loader, loaded by their sonames in place of the real ones. Device
# memory there is real memory the CPU cannot touch, so a CPU load or store of it faults
# as on a GPU. Usage:
#   scripts/fake-gpu.sh [--build DIR] [--gpus N] [--p2p yes|no] [--delay-us N] COMMAND...
# Example: scripts/fake-gpu.sh --gpus 4 build/bin/unilink-conformance --backend cuda --ranks 4
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
gpus=${FAKEGPU_GPUS:-4}
p2p=${FAKEGPU_P2P:-yes}
delay=${FAKEGPU_DELAY_US:-0}
usage() { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --build) [ $# -ge 2 ] || usage; build=$(cd "$2" && pwd); shift 2 ;;
    --gpus) [ $# -ge 2 ] || usage; gpus=$2; shift 2 ;;
    --p2p) [ $# -ge 2 ] || usage; p2p=$2; shift 2 ;;
    --delay-us) [ $# -ge 2 ] || usage; delay=$2; shift 2 ;;
    -h|--help) usage ;;
    --) shift; break ;;
    -*) echo "fake-gpu.sh: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || usage
case $gpus in ''|*[!0-9]*) echo "fake-gpu.sh: --gpus needs a number, got '$gpus'" >&2; exit 2 ;; esac
case $p2p in yes|no) ;; *) echo "fake-gpu.sh: --p2p is yes or no, got '$p2p'" >&2; exit 2 ;; esac
lib=$build/fakegpu/lib
if [ ! -e "$lib/libcudart.so.13" ] && [ ! -e "$lib/libze_loader.so.1" ]; then
  echo "fake-gpu.sh: no fake runtimes in $lib (build first: cmake --preset default && cmake --build --preset default)" >&2
  exit 2
fi
LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
UNILINK_PLUGIN_PATH=$build/lib
FAKEGPU_GPUS=$gpus FAKEGPU_P2P=$p2p FAKEGPU_DELAY_US=$delay
export LD_LIBRARY_PATH UNILINK_PLUGIN_PATH FAKEGPU_GPUS FAKEGPU_P2P FAKEGPU_DELAY_US
exec "$@"
