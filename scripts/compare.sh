#!/bin/sh
# The main job: install, build what the comparison needs, then write the report that
# answers "how much does the interconnect matter": measured here (host threads and
# processes, the mpi backend over Open MPI, every real GPU backend present), modeled per
# interconnect family (8-GPU node), a training-step table, the claims page rerun.
# Output: BUILD/compare/report.html (self-contained), report.md, raw/ (every tool's output).
#
# Usage: scripts/compare.sh [--topology FILE] [--model 70B] [--gpus 64]
#                           [--interconnects a,b,c] [--json] [--quick]
#   BUILD_DIR=dir   build directory (default: build, the "default" preset)
set -eu
cd "$(dirname "$0")/.."
[ "${UNILINK_SKIP_SETUP:-0}" = 1 ] || scripts/setup.sh
build=${BUILD_DIR:-build}
if [ ! -f "$build/CMakeCache.txt" ]; then
  if [ "$build" = build ]; then cmake --preset default >/dev/null
  else cmake -S . -B "$build" >/dev/null; fi
fi
jobs=$(nproc 2>/dev/null || echo 2)
# Only the programs and plugins the report runs: a full build (fuzzers, every test) would
# not fit the 2-minute budget on 2 cores. GPU plugins only when their target exists.
targets="unilink-bench unilink-model unilink-info"
for t in unilink-mpi raw_mpi_bench unilink-nccl unilink-cuda unilink-ze; do
  if cmake --build "$build" --target help 2>/dev/null | grep -q "\.\.\. $t\$"; then
    case $t in
      unilink-nccl|unilink-cuda) command -v nvidia-smi >/dev/null 2>&1 || continue ;;
      unilink-ze) ls /dev/dri/renderD* >/dev/null 2>&1 || continue ;;
    esac
    targets="$targets $t"
  fi
done
# shellcheck disable=SC2086
cmake --build "$build" -j "$jobs" --target $targets >/dev/null
exec python3 scripts/report/unilink_report.py --build "$build" "$@"
