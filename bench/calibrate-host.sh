#!/usr/bin/env bash
# Measures, on this machine, two choices of the host backend's selection, per collective,
# rank count and placement, and writes them as a tuning file the library reads through
# UNILINK_TUNING_FILE:
#
#   bench/calibrate-host.sh [BUILD_DIR] [FILE]     (default ./build, auto)
#
# FILE auto: this host's cache, ${XDG_CACHE_HOME:-~/.cache}/unilink/host-tuning-<host
# name>.txt, which the library reads by default (UNILINK_TUNING_FILE=auto) as long as the
# machine-id line written first still names this machine (decision 0020).
#
# 1. Where the staged (one-shot) algorithm stops beating the direct one: both forced
#    (UNILINK_ALGO) at 1 KiB to 1 MiB. With r(s) the median over rounds of staged time /
#    direct time, the limit is the size L that minimises the sum of log r(s) over s <= L
#    (staged where it pays, over all sizes; 0: direct everywhere).
# 2. Process ranks with private (malloc) buffers: from which size bouncing through the
#    scratch beats the direct algorithm's single copies (decision 0014), both forced at
#    256 KiB to 64 MiB. With r(s) = bounce time / direct time, bounce_from is the size L
#    that minimises the sum of -log r(s) over s < L (single copies below L, bounce from L;
#    the smallest size on a tie, i.e. bounce everywhere unless single copies pay). Also
#    where ranks outnumber CPUs: without a measurement those never bounce.
#
# Both in nccl-tests' back-to-back method, in ROUNDS interleaved rounds (default 3).
# Process ranks run under mpirun (NPS, default "2 4"), thread ranks with -t (THREADS,
# default "2"; an empty list runs none). Environment: ITERS (default 100), COLLS.
set -u
BUILD=${1:-build}
FILE=${2:-auto} # auto: resolved below, by tuning_rules.cached_table_path
BENCH="$BUILD/bin/unilink-bench"
SRC_DIR=$(cd "$(dirname "$0")" && pwd)
[ -x "$BENCH" ] || { echo "calibrate-host.sh: $BENCH not found (build first)" >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-100}
NPS=${NPS-2 4} # empty: no process ranks
THREADS=${THREADS-2} # empty: no thread ranks
COLLS=${COLLS:-allreduce reduce_scatter allgather broadcast alltoall}
OMPIRUN=$(command -v mpirun.openmpi || command -v mpirun || true)
LOGS=$(mktemp -d /tmp/unilink-calibrate.XXXXXX)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export UNILINK_PLUGIN_PATH="${UNILINK_PLUGIN_PATH:-$BUILD/lib}"
export UNILINK_TUNING_FILE=none # measure the algorithms themselves, not a previous table
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
      # 2. private buffers between processes: single copies against bounce
      if [ "$place" = process ]; then
        for algo in direct bounce; do
          log="$LOGS/$coll-$place-$n-$algo-r$r.private"
          echo "+ $coll $place $n $algo malloc buffers round $r" >&2
          # shellcheck disable=SC2086
          UNILINK_ALGO="$coll:$algo" timeout 600 $pre "$BENCH" $coll -b 256K -e 64M -f 4 \
            -n 20 -w 3 -c 0 --buffers malloc --backends host > "$log" 2>&1 ||
            echo "calibrate-host.sh: $coll $place $n $algo (malloc buffers) failed, see $log" >&2
        done
      fi
    done
  done
done
python3 - "$LOGS" "$FILE" "$ROUNDS" "$NCPU" "$SRC_DIR" <<'PYEOF'
import glob, os, statistics, sys, time
logs, path, rounds, ncpu = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, sys.argv[5])
from host_vs_mpi_report import parse  # the one reader of nccl-tests tables in bench/
from tuning_rules import bounce_from, staged_limit, machine_id, cached_table_path  # tested on their own
if path == "auto":  # the library's default table for this host
    path = cached_table_path()
    if not path:
        sys.exit("calibrate-host.sh: neither XDG_CACHE_HOME nor HOME is set: give a FILE")
    os.makedirs(os.path.dirname(path), exist_ok=True)
def times(p):
    return parse(p)[0]
lines = [machine_id(),  # first: the library reads a cached table only on this machine
         f"# unilink host tuning, measured by bench/calibrate-host.sh on {time.strftime('%Y-%m-%d')}",
         f"# {ncpu} CPUs for the ranks; {rounds} interleaved rounds, back-to-back medians",
         "# <collective> <ranks> <placement> <largest size (nccl-tests' bytes) that runs staged>",
         "# <collective> <ranks> process bounce_from <smallest size at which private buffers bounce>"]

def ratios(coll, place, n, algo, base, ext):
    """size -> median over rounds of time[algo] / time[base]"""
    per = {}
    for r in range(1, rounds + 1):
        a = times(f"{logs}/{coll}-{place}-{n}-{algo}-r{r}.{ext}")
        d = times(f"{logs}/{coll}-{place}-{n}-{base}-r{r}.{ext}")
        for size in a:
            if size in d and size > 0 and d[size] > 0:
                per.setdefault(size, []).append(a[size] / d[size])
    return {s: statistics.median(per[s]) for s in sorted(per)}

def keys_of(ext):
    return sorted({tuple(os.path.basename(p)[:-len(ext) - 1].rsplit("-", 4)[:3])
                   for p in glob.glob(f"{logs}/*.{ext}")})

# (log extension, first algorithm of the ratio, its rule, what the line says, what the
# comment shows): the staged limits from the .log runs, bounce_from from the .private ones
LIMITS = [("log", None, staged_limit, "", "staged/direct"),
          ("private", "bounce", bounce_from, "bounce_from ", "bounce/single-copy")]
for ext, first, rule, key, what in LIMITS:
    for coll, place, n in keys_of(ext):
        algo = first or ("oneshot" if coll == "allreduce" else "staged")
        ratio = ratios(coll, place, n, algo, "direct", ext)  # time[algo] / time[direct]
        if not ratio:
            print(f"calibrate-host.sh: no {ext} data for {coll} {place} {n}", file=sys.stderr)
            continue
        shown = " ".join(f"{s >> 10}K:{ratio[s]:.2f}" for s in sorted(ratio))
        lines.append(f"{coll} {n} {place} {key}{rule(ratio)}   # {what} time: {shown}")
open(path, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
print(f"\nwrote {path}; the library reads it with UNILINK_TUNING_FILE={path}"
      + (" or, on this host, by default (UNILINK_TUNING_FILE=auto)" if path == cached_table_path() else ""))
PYEOF
