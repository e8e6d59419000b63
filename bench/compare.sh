#!/usr/bin/env bash
# The main comparison: allreduce busbw of the host backend (measured on this machine)
# next to modeled NVLink (DGX H100) and PCIe Gen5 (8-GPU server) nodes, in one table
# and one plot. Extra arguments go to unilink-bench (e.g. --ranks 4, -n 5).
#
# Usage: bench/compare.sh [unilink-bench options]
#   BUILD_DIR=dir   build directory (default: <repo>/build)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
bench=$build/bin/unilink-bench
if [ ! -x "$bench" ]; then
  echo "compare.sh: $bench not found; build first:" >&2
  echo "  cmake -S $repo -B $build && cmake --build $build -j" >&2
  exit 2
fi
export UNILINK_PLUGIN_PATH=${UNILINK_PLUGIN_PATH:-$build/lib}

backends=host
if "$bench" --available sim >/dev/null; then
  backends="$backends,sim:dgx-h100,sim:pcie5-8gpu"
else
  echo "# sim backend not available: $("$bench" --available sim || true); host only" >&2
fi

plot=$build/compare.png
# 10 timed iterations keep the sweep (8 B .. 128 MiB, x4 steps) well under 2 minutes on
# 2 cores (~40 s); modeled backends time 2 iterations (--model-iters), their data still moves.
"$bench" allreduce -b 8 -e 256M -f 4 -n 10 -w 1 -c 1 --backends "$backends" --plot "$plot" "$@"
echo "Plot: $plot"
