#!/usr/bin/env bash
# Measures, on this machine, where the host backend's staged (one-shot) algorithm stops
# beating the direct one, per collective, rank count and placement, and writes the limits
# as a tuning file the library reads through UNILINK_TUNING_FILE:
#
#   bench/calibrate-host.sh [BUILD_DIR] [FILE]     (default ./build, ./unilink-tuning.txt)
#
# Both algorithms are forced (UNILINK_ALGO) at sizes 1 KiB to 1 MiB in nccl-tests'
# back-to-back method, in ROUNDS interleaved rounds (default 3); with r(s) the median over
# rounds of staged time / direct time, the limit is the size L that minimises the sum of
# log r(s) over s <= L (staged where it pays, over all sizes; 0: direct everywhere). Process ranks run under mpirun (NPS, default "2 4"), thread ranks with -t
# (THREADS, default "2"). Environment: ITERS (default 100), COLLS.
set -u
BUILD=${1:-build}
FILE=${2:-unilink-tuning.txt}
BENCH="$BUILD/bin/unilink-bench"
SRC_DIR=$(cd "$(dirname "$0")" && pwd)
[ -x "$BENCH" ] || { echo "calibrate-host.sh: $BENCH not found (build first)" >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-100}
NPS=${NPS:-2 4}
THREADS=${THREADS:-2}
COLLS=${COLLS:-allreduce reduce_scatter allgather broadcast alltoall}
OMPIRUN=$(command -v mpirun.openmpi || command -v mpirun || true)
LOGS=$(mktemp -d /tmp/unilink-calibrate.XXXXXX)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export UNILINK_PLUGIN_PATH="${UNILINK_PLUGIN_PATH:-$BUILD/lib}"
unset UNILINK_TUNING_FILE # measure the algorithms themselves, not a previous table
NCPU=$(nproc)
launch() { # placement ranks -> launcher prefix and rank flags
  if [ "$1" = thread ]; then echo "-t $2";
  elif [ "$2" -le "$NCPU" ]; then echo "$OMPIRUN --bind-to core -np $2 :";
  else echo "$OMPIRUN --oversubscribe --bind-to none -np $2 :"; fi
}
placements=""
for t in $THREADS; do placements="$placements thread:$t"; done
[ -n "$OMPIRUN" ] && for np in $NPS; do placements="$placements process:$np"; done
for r in $(seq 1 "$ROUNDS"); do
  for pl in $placements; do
    place=${pl%%:*}; n=${pl##*:}
    l=$(launch "$place" "$n"); pre=${l%%:*}; flags=""
    [ "$place" = thread ] && { pre=""; flags=$l; }
    for coll in $COLLS; do
      staged=staged; [ "$coll" = allreduce ] && staged=oneshot
      for algo in $staged direct; do
        log="$LOGS/$coll-$place-$n-$algo-r$r.log"
        echo "+ $coll $place $n $algo round $r" >&2
        # shellcheck disable=SC2086
        UNILINK_ALGO="$coll:$algo" UNILINK_ONESHOT_BYTES=1048576 timeout 300 $pre "$BENCH" $coll \
          $flags -b 1K -e 1M -f 2 -n "$ITERS" -w 10 -c 0 --backends host > "$log" 2>&1 ||
          echo "calibrate-host.sh: $coll $place $n $algo failed, see $log" >&2
      done
    done
  done
done
python3 - "$LOGS" "$FILE" "$ROUNDS" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" "$NCPU" "$SRC_DIR" <<'PYEOF'
import glob, math, os, statistics, sys, time
logs, path, rounds, cpu, ncpu = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
sys.path.insert(0, sys.argv[6])
from host_vs_mpi_report import parse  # the one reader of nccl-tests tables in bench/
def times(p):
    return parse(p)[0]
keys = sorted({tuple(os.path.basename(p)[:-4].rsplit("-", 4)[:3]) for p in glob.glob(f"{logs}/*.log")})
lines = [f"# unilink host tuning, measured by bench/calibrate-host.sh on {time.strftime('%Y-%m-%d')}",
         f"# machine: {cpu}, {ncpu} CPUs; {rounds} interleaved rounds, back-to-back medians",
         "# <collective> <ranks> <placement> <largest size (nccl-tests' bytes) that runs staged>"]
for coll, place, n in keys:
    staged = "oneshot" if coll == "allreduce" else "staged"
    per = {}
    for r in range(1, rounds + 1):
        s = times(f"{logs}/{coll}-{place}-{n}-{staged}-r{r}.log")
        d = times(f"{logs}/{coll}-{place}-{n}-direct-r{r}.log")
        for size in s:
            if size in d and size > 0 and d[size] > 0:
                per.setdefault(size, []).append(s[size] / d[size])
    sizes = sorted(per)
    if not sizes:
        print(f"calibrate-host.sh: no data for {coll} {place} {n}", file=sys.stderr)
        continue
    ratio = {s: statistics.median(per[s]) for s in sizes}  # staged time / direct time
    # The limit whose choice costs least over all measured sizes: staged up to it, direct
    # above. Minimising the summed log ratio of the staged prefix keeps one noisy point
    # from moving the limit far (a rule like "direct wins from here on" does not).
    best, limit, acc = 0.0, 0, 0.0
    for s in sizes:
        acc += math.log(ratio[s])
        if acc < best:
            best, limit = acc, s
    shown = " ".join(f"{s >> 10}K:{ratio[s]:.2f}" for s in sizes)
    lines.append(f"{coll} {n} {place} {limit}   # staged/direct time: {shown}")
open(path, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
print(f"\nwrote {path}; use it with UNILINK_TUNING_FILE={path}")
PYEOF
