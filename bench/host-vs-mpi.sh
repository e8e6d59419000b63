#!/usr/bin/env bash
# The host backend against raw MPI (Open MPI, or MPICH when mpirun is MPICH's) and against
# unilink's own mpi backend, in both timing methods, as ratios taken in one run (the
# machine may be shared: absolute numbers drift, ratios measured side by side much less).
#
#   bench/host-vs-mpi.sh [BUILD_DIR]     (default ./build; needs mpirun and the mpi plugin;
#                                         raw MPI needs BUILD_DIR/bin/raw_mpi_bench)
#
# Methods: b2b  = nccl-tests' back-to-back loop (n calls timed together; what a training
#                 step issuing collectives back to back sees);
#          sync = --sync-per-call (barrier, one timed call, max over ranks, median: what a
#                 latency-bound code waiting for each call sees).
# For each method, collective and np (2 and 4), one round runs unilink-bench
# --backends host,mpi and raw_mpi_bench under the same mpirun line, one after the other;
# rounds are interleaved (REPEAT) and each table shows medians over rounds of
# speedup = time[peer] / time[host] (> 1: host faster). Thread ranks (-t 2, no mpirun)
# are compared with the np=2 raw MPI numbers of the same round.
# Environment: ITERS (default 20), MAXBYTES (allreduce, default 256M), COLL_MAXBYTES
# (others, default 64M), REPEAT (default 1), METHODS (default "b2b sync"), COLLS
# (default "allreduce allgather reduce_scatter broadcast alltoall"), OUT (raw logs).
set -u
BUILD=${1:-build}
BENCH="$BUILD/bin/unilink-bench"
RAW="$BUILD/bin/raw_mpi_bench"
[ -x "$BENCH" ] || { echo "host-vs-mpi.sh: $BENCH not found (build first, or pass the build dir)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "host-vs-mpi.sh: mpirun not found" >&2; exit 2; }
command -v python3 >/dev/null || { echo "host-vs-mpi.sh: python3 not found" >&2; exit 2; }
[ -x "$RAW" ] || echo "host-vs-mpi.sh: $RAW not built: no raw MPI columns" >&2
ITERS=${ITERS:-20}
MAXBYTES=${MAXBYTES:-256M}
COLL_MAXBYTES=${COLL_MAXBYTES:-64M}
REPEAT=${REPEAT:-1}
METHODS=${METHODS:-b2b sync}
COLLS=${COLLS:-allreduce allgather reduce_scatter broadcast alltoall}
OUT=${OUT:-$(mktemp -d /tmp/host-vs-mpi.XXXXXX)}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export UNILINK_PLUGIN_PATH="${UNILINK_PLUGIN_PATH:-$BUILD/lib}"
# Placement as Open MPI does it by default: np <= cores binds each rank to a core; more
# ranks than cores run unbound.
NCPU=$(nproc)
OPEN_MPI=0; mpirun --version 2>&1 | grep -qi "open mpi" && OPEN_MPI=1
mpirun_np() { # np -> the mpirun command line for it
  if [ "$OPEN_MPI" = 0 ]; then echo mpirun -np "$1"; # MPICH's hydra: no such flags
  elif [ "$1" -le "$NCPU" ]; then echo mpirun --bind-to core -np "$1";
  else echo mpirun --oversubscribe --bind-to none -np "$1"; fi
}

run() { # name, then the command
  local name=$1; shift
  echo "+ $*" >&2
  timeout 300 "$@" > "$OUT/$name.log" 2>&1 || echo "host-vs-mpi.sh: '$name' failed (rc $?), see $OUT/$name.log" >&2
}

sizes() { # collective, part (small|large) -> bench size flags
  local max=$COLL_MAXBYTES; [ "$1" = allreduce ] && max=$MAXBYTES
  # small sizes get many iterations: a few microseconds each, 20 would be noise
  if [ "$2" = small ]; then echo -b 8 -e 64K -f 8 -n 500 -w 50; else echo -b 512K -e "$max" -f 8 -n "$ITERS" -w 3; fi
}

for rep in $(seq 1 "$REPEAT"); do
  for m in $METHODS; do
    flag=""; [ "$m" = sync ] && flag=--sync-per-call
    for coll in $COLLS; do
      for part in small large; do
        for np in 2 4; do
          tag="$m-$coll-np$np-$part-r$rep"
          # shellcheck disable=SC2046
          run "uni-$tag" $(mpirun_np $np) "$BENCH" $coll $(sizes $coll $part) --backends host,mpi $flag
          [ -x "$RAW" ] && run "raw-$tag" $(mpirun_np $np) "$RAW" $coll $(sizes $coll $part) $flag
        done
        [ "$coll" = allreduce ] && run "thr-$m-$coll-$part-r$rep" "$BENCH" $coll -t 2 $(sizes $coll $part) --backends host $flag
      done
    done
  done
done

python3 - "$OUT" "$REPEAT" "$OPEN_MPI" <<'PYEOF'
import glob, math, re, statistics, sys
out, rep, ompi = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
raw_name = "raw Open MPI" if ompi else "raw MPICH"
row = re.compile(r"^\s+\d+\s+\d+\s")

def blocks(path):
    """backend -> size -> out-of-place time (us) from nccl-tests blocks; a file with no
    "# Backend:" line (the raw bench) is one block named "raw" """
    res, cur = {}, "raw"
    try: lines = open(path, errors="replace").read().splitlines()
    except OSError: return res
    for line in lines:
        if line.startswith("# Backend: "):
            cur = line.split()[2]
        elif line.startswith("# Side by side") or line.startswith("# unilink per size"):
            cur = None
        elif cur and row.match(line):
            f = line.split()
            res.setdefault(cur, {})[int(f[0])] = float(f[5])
    return res

def human(b):
    for u, s in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= s and b % s == 0: return f"{b // s}{u}"
    return str(b)

def med(v):
    v = [x for x in v if x is not None and not math.isnan(x)]
    return statistics.median(v) if v else float("nan")

methods = sorted({p.split("/")[-1].split("-")[1] for p in glob.glob(f"{out}/uni-*.log")})
colls = []
for p in sorted(glob.glob(f"{out}/uni-*.log")):
    c = p.split("/")[-1].split("-")[2]
    if c not in colls: colls.append(c)
for m in methods:
    name = {"b2b": "back to back (nccl-tests' method)", "sync": "synchronized per call"}.get(m, m)
    for coll in colls:
        for np in (2, 4):
            rounds = []  # per round: size -> (host, mpi backend, raw)
            for r in range(1, rep + 1):
                d = {}
                for part in ("small", "large"):
                    u = blocks(f"{out}/uni-{m}-{coll}-np{np}-{part}-r{r}.log")
                    w = blocks(f"{out}/raw-{m}-{coll}-np{np}-{part}-r{r}.log").get("raw", {})
                    for s, t in u.get("host", {}).items():
                        d[s] = (t, u.get("mpi", {}).get(s), w.get(s))
                rounds.append(d)
            sizes = sorted(set().union(*[d.keys() for d in rounds]))
            if not sizes: continue
            print(f"\n## {coll}, np={np}, {name}; medians of {rep} round(s); speedup = time[peer]/time[host]")
            print(f"{'size':>8} {'host us':>10} {raw_name + ' us':>16} {'mpi-backend us':>15} {'vs raw':>8} {'vs backend':>10}")
            for s in sizes:
                th = med([d[s][0] for d in rounds if s in d])
                tm = med([d[s][1] for d in rounds if s in d])
                tr = med([d[s][2] for d in rounds if s in d])
                sr = med([d[s][2] / d[s][0] for d in rounds if s in d and d[s][2] and d[s][0] > 0])
                sm = med([d[s][1] / d[s][0] for d in rounds if s in d and d[s][1] and d[s][0] > 0])
                print(f"{human(s):>8} {th:10.2f} {tr:16.2f} {tm:15.2f} {sr:7.2f}x {sm:9.2f}x")
    for part_files in [sorted(glob.glob(f"{out}/thr-{m}-allreduce-*-r*.log"))]:
        if not part_files: continue
        rounds = []
        for r in range(1, rep + 1):
            d = {}
            for part in ("small", "large"):
                t = blocks(f"{out}/thr-{m}-allreduce-{part}-r{r}.log").get("host", {})
                w = blocks(f"{out}/raw-{m}-allreduce-np2-{part}-r{r}.log").get("raw", {})
                for s, v in t.items(): d[s] = (v, w.get(s))
            rounds.append(d)
        sizes = sorted(set().union(*[d.keys() for d in rounds]))
        print(f"\n## allreduce, THREAD ranks (2, no mpirun) against {raw_name} np=2, {name}")
        print(f"{'size':>8} {'host us':>10} {raw_name + ' us':>16} {'vs raw':>8}")
        for s in sizes:
            th = med([d[s][0] for d in rounds if s in d]); tr = med([d[s][1] for d in rounds if s in d])
            sr = med([d[s][1] / d[s][0] for d in rounds if s in d and d[s][1] and d[s][0] > 0])
            print(f"{human(s):>8} {th:10.2f} {tr:16.2f} {sr:7.2f}x")
print(f"\nraw logs: {out}")
PYEOF
