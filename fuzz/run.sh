#!/usr/bin/env bash
# Run the libFuzzer targets of fuzz/ for a bounded time each.
#   fuzz/run.sh [-t SECONDS] [-b BUILD_FUZZ_DIR] [--merge] [TARGET...]
# TARGET: parse_int, catalog, topology (default: every fuzz_* binary in the build dir).
# The seed corpus fuzz/corpus/<target>/ is read only; new inputs go to
# <build>/corpus-new/<target>/ and crashes to <build>/artifacts/<target>/. --merge adds
# the new inputs that raise coverage to fuzz/corpus/<target>/ (then commit them).
# Exit status: 0 when every target ran its time without a finding.
set -u
here=$(cd "$(dirname "$0")" && pwd)
seconds=20
build=""
merge=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    -t) seconds=$2; shift 2 ;;
    -b) build=$2; shift 2 ;;
    --merge) merge=1; shift ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ -z "$build" ]; then
  for d in "$here/../build/fuzz" "$here/../build-fuzz/fuzz"; do
    [ -d "$d" ] && build=$d && break
  done
fi
if [ -z "$build" ] || [ ! -d "$build" ]; then
  echo "run.sh: no build folder with fuzz targets (configure with -DUNILINK_BUILD_FUZZ=ON, pass -b)" >&2
  exit 2
fi
case "$seconds" in ''|*[!0-9]*) echo "run.sh: -t needs whole seconds, got '$seconds'" >&2; exit 2 ;; esac
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$build"/fuzz_*; do [ -x "$f" ] && targets+=("$(basename "$f" | sed 's/^fuzz_//')"); done
fi
[ -n "${UNILINK_DATA_DIR:-}" ] || export UNILINK_DATA_DIR="$here/../data"
status=0
for t in "${targets[@]}"; do
  exe="$build/fuzz_$t"
  if [ ! -x "$exe" ]; then echo "run.sh: $exe not built" >&2; status=1; continue; fi
  seeds="$here/corpus/$t"
  new="$build/corpus-new/$t"
  art="$build/artifacts/$t"
  mkdir -p "$new" "$art"
  dict=()
  [ -f "$here/json.dict" ] && [ "$t" != parse_int ] && dict=(-dict="$here/json.dict")
  echo "== fuzz_$t: ${seconds}s, seeds $(ls "$seeds" | wc -l) in $seeds"
  "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -print_final_stats=1 -artifact_prefix="$art/" "${dict[@]}" "$new" "$seeds" 2>"$build/fuzz_$t.log"
  rc=$?
  tail -n 12 "$build/fuzz_$t.log"
  if [ $rc -ne 0 ]; then
    echo "== fuzz_$t FAILED (exit $rc): reproducer in $art/, full log $build/fuzz_$t.log"
    status=1
  elif [ $merge -eq 1 ]; then
    "$exe" -merge=1 "$seeds" "$new" >/dev/null 2>&1 && echo "== fuzz_$t: merged into $seeds ($(ls "$seeds" | wc -l) files)"
  fi
done
exit $status
