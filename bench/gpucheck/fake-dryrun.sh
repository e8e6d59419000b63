#!/usr/bin/env bash
# fake-dryrun.sh BUILD FAKELIB OUT: the one-GPU check end to end under the fake vendor
# runtimes (CTest fakegpu.gpu_check): --prepare from BUILD as it is, then the check from the
# prepared folder with FAKELIB (tests/fakegpu's libcudart.so.13 + libnccl.so.2) first on
# LD_LIBRARY_PATH and one fake GPU, as on the H200 machine. Fails unless the summary has every
# step, step 1 sees the fake device, steps 3 and 4 PASS (every sub-run, the "Duplicate GPU"
# error for 2 NCCL ranks on one GPU included), steps 2, 5 and 6 do not FAIL, and the check
# left only its three files in its output folder.
set -u
[ $# -eq 3 ] || { echo "usage: $0 BUILD FAKELIB OUT" >&2; exit 2; }
BUILD=$1 FAKE=$2 OUT=$3
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
bad=0
fail() { echo "FAIL: $*"; bad=1; }

rm -rf "$OUT" && mkdir -p "$OUT" || exit 2
if ! "$SRC/bench/gpu-check.sh" --prepare "$OUT/carry" --build "$BUILD" --no-build >"$OUT/prepare.log" 2>&1; then
  cat "$OUT/prepare.log"
  echo "FAIL: --prepare"
  exit 1
fi
size=$(du -sb "$OUT/carry" | cut -f1)
[ "$size" -le $((64 * 1048576)) ] || fail "prepared folder is $((size >> 20)) MiB (> 64 MiB)"

FAKEGPU_GPUS=1 "$SRC/bench/gpu-check.sh" --from "$OUT/carry" --vendor-lib "$FAKE" --budget 240 \
  "$OUT/check" >"$OUT/check.log" 2>&1
rc=$?
S="$OUT/check/summary.txt"
if [ ! -f "$S" ]; then
  cat "$OUT/check.log"
  echo "FAIL: no summary.txt (rc=$rc)"
  exit 1
fi
status() { awk -v n="$1" '$1 == n { print $3; exit }' "$S"; }
for n in 1 2 3 4 5 6 7; do
  [ -n "$(status $n)" ] || fail "no summary line for step $n"
done
[ "$(status 1)" = PASS ] || fail "step 1 (probe) is $(status 1), expected PASS"
grep -q '^1 .*FAKE RUNTIME' "$S" || fail "step 1 does not say FAKE RUNTIME"
grep -q '^1 .*devices=1 ' "$S" || fail "step 1 does not see exactly one fake GPU"
for n in 3 4; do
  [ "$(status $n)" = PASS ] || fail "step $n is $(status $n), expected PASS"
done
grep -q '^4 .*UL_ERR_INVALID_USAGE "Duplicate GPU"' "$S" || fail "step 4 lacks the Duplicate GPU error"
for n in 2 5 6; do
  [ "$(status $n)" != FAIL ] || fail "step $n FAILed"
done
# step 2 must never claim a device result under the fake runtime
[ "$(status 2)" != PASS ] || fail "step 2 PASSes under the fake runtime (no device PTX ran)"
# only the three result files remain (scratch and decompressed libraries removed)
left=$(cd "$OUT/check" && ls -A | sort | tr '\n' ' ')
[ "$left" = "logs.tar.gz logs.txt summary.txt " ] || fail "unexpected files in the output folder: $left"
if [ "$bad" != 0 ]; then
  echo "--- check output"
  cat "$OUT/check.log"
  exit 1
fi
cat "$S"
echo "fake dry run: PASS"
