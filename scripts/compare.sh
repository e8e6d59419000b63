#!/bin/sh
# The main job: install, build, and compare interconnects with unilink-bench
# (allreduce, host backend measured here + modeled NVLink/PCIe lines when the sim
# backend is built). Prints the table and the path of the plot.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
exec bench/compare.sh "$@"
