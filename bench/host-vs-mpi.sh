#!/usr/bin/env bash
# Host backend against the mpi backend (Open MPI or MPICH underneath), as ratios taken
# in one run wherever possible (the machine may be shared: absolute numbers drift,
# ratios measured side by side much less).
#
#   bench/host-vs-mpi.sh [BUILD_DIR]        (default: ./build; needs mpirun and the mpi plugin)
#
# Runs, each printed as a table of speedup = time[mpi] / time[host] (> 1: host faster):
#   1. process mode: mpirun -np 2 and -np 4 unilink-bench allreduce --backends host,mpi
#      (host ranks are the MPI processes, bootstrapped over MPI: shared memory + CMA)
#   2. thread mode: unilink-bench allreduce -t 2 --backends host (no mpirun), compared
#      with the np=2 mpi numbers of run 1 taken just before
#   3. allgather, reduce_scatter, broadcast, alltoall, np 2 and 4, host,mpi side by side
#      (16 B to 64 KiB with 500 iterations, 512 KiB up with ITERS)
# Environment: ITERS (default 20), MAXBYTES (allreduce, default 256M), COLL_MAXBYTES
# (others, default 64M), REPEAT (default 1: repeat everything and report medians),
# OUT (folder for the raw logs, default a temporary one), PLOT=1 (write PNG plots there).
set -u
BUILD=${1:-build}
BENCH="$BUILD/bin/unilink-bench"
[ -x "$BENCH" ] || { echo "host-vs-mpi.sh: $BENCH not found (build first, or pass the build dir)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "host-vs-mpi.sh: mpirun not found" >&2; exit 2; }
command -v python3 >/dev/null || { echo "host-vs-mpi.sh: python3 not found" >&2; exit 2; }
ITERS=${ITERS:-20}
MAXBYTES=${MAXBYTES:-256M}
COLL_MAXBYTES=${COLL_MAXBYTES:-64M}
REPEAT=${REPEAT:-1}
OUT=${OUT:-$(mktemp -d /tmp/host-vs-mpi.XXXXXX)}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export UNILINK_PLUGIN_PATH="${UNILINK_PLUGIN_PATH:-$BUILD/lib}"
# Placement as Open MPI does it by default: np <= cores binds each rank to a core; more
# ranks than cores run unbound. (Unbound ranks of a short run may start on one core and
# stay there for milliseconds until the kernel spreads them: whichever backend runs
# first then pays a context switch per operation, which is noise, not a difference.)
NCPU=$(nproc)
OPEN_MPI=0; mpirun --version 2>&1 | grep -qi "open mpi" && OPEN_MPI=1
mpirun_np() { # np -> the mpirun command line for it
  if [ "$OPEN_MPI" = 0 ]; then echo mpirun -np "$1"; # MPICH's hydra: no such flags
  elif [ "$1" -le "$NCPU" ]; then echo mpirun --bind-to core -np "$1";
  else echo mpirun --oversubscribe --bind-to none -np "$1"; fi
}

plotarg() { [ "${PLOT:-0}" = 1 ] && echo "--plot $OUT/$1.png"; }

run() { # name, then the command
  local name=$1; shift
  echo "+ $*" >&2
  timeout 240 "$@" > "$OUT/$name.log" 2>&1 || echo "host-vs-mpi.sh: '$name' failed (rc $?), see $OUT/$name.log" >&2
}

for rep in $(seq 1 "$REPEAT"); do
  # 8-byte latency gets its own many-iteration run: -n 20 is too few for 1 us events.
  for np in 2 4; do
    run "lat-np$np-r$rep" $(mpirun_np $np) "$BENCH" allreduce -b 8 -e 8 -n 2000 -w 200 --backends host,mpi
    run "allreduce-np$np-r$rep" $(mpirun_np $np) "$BENCH" allreduce -b 16 -e "$MAXBYTES" -f 4 -n "$ITERS" -w 3 --backends host,mpi $(plotarg "allreduce-np$np")
  done
  run "thread-lat-r$rep" "$BENCH" allreduce -t 2 -b 8 -e 8 -n 2000 -w 200 --backends host
  run "thread-allreduce-r$rep" "$BENCH" allreduce -t 2 -b 16 -e "$MAXBYTES" -f 4 -n "$ITERS" -w 3 --backends host $(plotarg thread-allreduce)
  for coll in allgather reduce_scatter broadcast alltoall; do
    for np in 2 4; do
      # Small sizes get more iterations (a few microseconds each; 20 would be noise).
      run "$coll-np$np-r$rep.small" $(mpirun_np $np) "$BENCH" $coll -b 16 -e 64K -f 8 -n 500 -w 50 --backends host,mpi
      run "$coll-np$np-r$rep" $(mpirun_np $np) "$BENCH" $coll -b 512K -e "$COLL_MAXBYTES" -f 8 -n "$ITERS" -w 3 --backends host,mpi
    done
  done
done

python3 - "$OUT" "$REPEAT" <<'EOF'
import glob, os, re, statistics, sys
out, rep = sys.argv[1], int(sys.argv[2])
row = re.compile(r"^\s+\d+\s+\d+\s")

def blocks(path):
    """backend -> size -> [time, busbw, roof%, algorithm] (out-of-place) from the
    per-backend nccl-tests blocks ("# Backend: X", 13-field rows, then the
    "# unilink per size [X]" comment lines with algorithm and %roof)"""
    res, cur, extra = {}, None, None
    for line in open(path, errors="replace"):
        if line.startswith("# Backend: "):
            cur = line.split()[2]; res.setdefault(cur, {}); extra = None
        elif line.startswith("# unilink per size ["):
            extra = line.split("[", 1)[1].split("]", 1)[0]
        elif line.startswith("# Side by side"):
            cur = extra = None
        elif cur and extra is None and row.match(line):
            f = line.split()
            res[cur][int(f[0])] = [float(f[5]), float(f[7]), float("nan"), ""]
        elif extra and line.startswith("#") and len(line.split()) >= 3:
            f = line[1:].split()
            if f[0].isdigit() and int(f[0]) in res.get(extra, {}):
                ent = res[extra][int(f[0])]
                ent[3] = f[1]
                try: ent[2] = float(f[2].lstrip(">"))
                except (IndexError, ValueError): pass
    return res

def side(path):
    """size -> (t_host, t_mpi, busbw_host, busbw_mpi, roof%) from a host,mpi run"""
    b = blocks(path); h, m = b.get("host", {}), b.get("mpi", {})
    return {s: (h[s][0], m[s][0], h[s][1], m[s][1], h[s][2]) for s in h if s in m}

def single(path):
    """size -> (time, busbw, roof%, algorithm) from a one-backend run"""
    return {s: tuple(v) for s, v in blocks(path).get("host", {}).items()}

def load(name, fn):
    runs = [fn(p) for p in sorted(glob.glob(f"{out}/{name}-r*.log"))]
    runs = [r for r in runs if r]
    return runs

def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else float("nan")

def human(b):
    for u, s in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= s and b % s == 0: return f"{b // s}{u}"
    return str(b)

def table(title, runs, mpi_runs=None, thread=False):
    if not runs:
        print(f"\n## {title}: no data (see the logs in {out})"); return
    sizes = sorted(set().union(*[r.keys() for r in runs]))
    print(f"\n## {title}  (median of {rep} run(s); speedup = time[mpi]/time[host])")
    print(f"{'size':>8} {'host us':>10} {'mpi us':>10} {'host GB/s':>10} {'mpi GB/s':>9} {'speedup':>8} {'%roof':>6}")
    for s in sizes:
        if thread:
            th = med([r[s][0] for r in runs if s in r]); bh = med([r[s][1] for r in runs if s in r])
            roof = med([r[s][2] for r in runs if s in r])
            tm = med([r[s][1] for r in mpi_runs if s in r]) if mpi_runs else float("nan")
            bm = med([r[s][3] for r in mpi_runs if s in r]) if mpi_runs else float("nan")
        else:
            th = med([r[s][0] for r in runs if s in r]); tm = med([r[s][1] for r in runs if s in r])
            bh = med([r[s][2] for r in runs if s in r]); bm = med([r[s][3] for r in runs if s in r])
            roof = med([r[s][4] for r in runs if s in r])
        sp = tm / th if th > 0 else float("nan")
        print(f"{human(s):>8} {th:10.2f} {tm:10.2f} {bh:10.2f} {bm:9.2f} {sp:7.2f}x {roof:6.1f}")

for np in (2, 4):
    table(f"allreduce fp32 sum, process mode, np={np}: 8-byte latency", load(f"lat-np{np}", side))
    table(f"allreduce fp32 sum, process mode, np={np}", load(f"allreduce-np{np}", side))
table("allreduce fp32 sum, THREAD mode, 2 ranks, 8-byte latency (mpi: process np=2)",
      load("thread-lat", single), load("lat-np2", side), thread=True)
table("allreduce fp32 sum, THREAD mode, 2 ranks (mpi: process np=2, separate run)",
      load("thread-allreduce", single), load("allreduce-np2", side), thread=True)
for coll in ("allgather", "reduce_scatter", "broadcast", "alltoall"):
    for np in (2, 4):
        table(f"{coll}, process mode, np={np}", load(f"{coll}-np{np}", side))
print(f"\nraw logs: {out}")
EOF
