#!/usr/bin/env bash
# The host backend against raw Open MPI and raw MPICH (a small raw MPI bench in bench/, the
# same timing loop), in both timing methods and with both kinds of user buffer, as ratios
# taken in one run (the machine may be shared: absolute numbers drift, ratios measured side
# by side much less).
#
#   bench/host-vs-mpi.sh [BUILD_DIR]     (default ./build; needs Open MPI's mpirun;
#                                         MPICH columns need mpicc.mpich and mpirun.mpich)
#
# Methods: b2b  = nccl-tests' back-to-back loop (n calls timed together; what a training
#                 step issuing collectives back to back sees);
#          sync = --sync-per-call (barrier, one timed call, max over ranks, median: what a
#                 latency-bound code waiting for each call sees).
# Buffers: malloc = heap memory (what numpy arrays and PyTorch CPU tensors are);
#          ul     = ul_mem_alloc (may take zero-copy paths). Raw MPI always uses malloc.
# For each round, method, collective and np (2 and 4) the host backend (both buffer kinds,
# process ranks under Open MPI's mpirun), raw Open MPI and raw MPICH run one after the
# other; rounds are interleaved (REPEAT) and each table shows medians over rounds of
# speedup = time[raw MPI] / time[host] (> 1: host faster), and %roof. Thread ranks (-t 2,
# no mpirun) are compared with the np=2 raw numbers of the same round. The last section
# checks the targets of issue 18 and lists every point that misses one; plots of the
# speedups go to OUT/host-vs-mpi-<method>-np<N>.png (gnuplot).
# Selection: first bench/calibrate-host.sh measures this machine's staged/direct limits
# into OUT/tuning.txt, which the host backend then reads (UNILINK_TUNING_FILE); CALIBRATE=0
# keeps the library's default (this host's cached table, else the built-in limits),
# TUNING=FILE uses an earlier table.
# Environment: ITERS (large sizes, default 20), MAXBYTES (allreduce and reduce_scatter,
# default 256M), COLL_MAXBYTES (others, default 64M), REPEAT (default 3), METHODS (default
# "b2b sync"), BUFFERS (default "malloc ul"), COLLS (default "allreduce allgather
# reduce_scatter broadcast alltoall reduce gather scatter"), NPS (default "2 4"), PARTS
# (default "small large": 8 B-64 KiB, 1 MiB up to the maximum; large is skipped when the
# maximum is below 1 MiB),
# OUT (raw logs), CALIBRATE, TUNING.
set -u
BUILD=${1:-build}
BENCH="$BUILD/bin/unilink-bench"
RAW="$BUILD/bin/raw_mpi_bench"
SRC_DIR=$(cd "$(dirname "$0")" && pwd)
[ -x "$BENCH" ] || { echo "host-vs-mpi.sh: $BENCH not found (build first, or pass the build dir)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "host-vs-mpi.sh: python3 not found" >&2; exit 2; }
OMPIRUN=$(command -v mpirun.openmpi || true)
[ -n "$OMPIRUN" ] || { mpirun --version 2>&1 | grep -qi "open mpi" && OMPIRUN=$(command -v mpirun); }
[ -n "$OMPIRUN" ] || { echo "host-vs-mpi.sh: Open MPI's mpirun not found" >&2; exit 2; }
[ -x "$RAW" ] || echo "host-vs-mpi.sh: $RAW not built: no raw Open MPI columns" >&2
ITERS=${ITERS:-20}
MAXBYTES=${MAXBYTES:-256M}
COLL_MAXBYTES=${COLL_MAXBYTES:-64M}
REPEAT=${REPEAT:-3}
METHODS=${METHODS:-b2b sync}
BUFFERS=${BUFFERS:-malloc ul}
COLLS=${COLLS:-allreduce allgather reduce_scatter broadcast alltoall reduce gather scatter}
NPS=${NPS:-2 4}
PARTS=${PARTS:-small large}
OUT=${OUT:-$(mktemp -d /tmp/host-vs-mpi.XXXXXX)}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export UNILINK_PLUGIN_PATH="${UNILINK_PLUGIN_PATH:-$BUILD/lib}"
# Raw MPICH: the same source built with MPICH's wrapper, run by MPICH's own launcher.
RAW_MPICH=""
if command -v mpicc.mpich >/dev/null && command -v mpirun.mpich >/dev/null; then
  RAW_MPICH="$OUT/raw_mpi_bench.mpich"
  mpicc.mpich -O2 -o "$RAW_MPICH" "$SRC_DIR/raw_mpi_bench.c" ||
    { echo "host-vs-mpi.sh: building raw_mpi_bench with MPICH failed: no MPICH columns" >&2; RAW_MPICH=""; }
else
  echo "host-vs-mpi.sh: mpicc.mpich/mpirun.mpich not found: no MPICH columns" >&2
fi
if [ -n "${TUNING:-}" ]; then
  export UNILINK_TUNING_FILE=$TUNING
elif [ "${CALIBRATE:-1}" != 0 ]; then
  NPS="$NPS" "$SRC_DIR/calibrate-host.sh" "$BUILD" "$OUT/tuning.txt" > "$OUT/calibrate.log" 2>&1 &&
    export UNILINK_TUNING_FILE="$OUT/tuning.txt" ||
    echo "host-vs-mpi.sh: calibration failed (see $OUT/calibrate.log): built-in limits" >&2
fi
echo "host-vs-mpi.sh: selection limits: ${UNILINK_TUNING_FILE:-auto: the cached calibration of this host, else built in}" >&2
# Placement as Open MPI does it by default: np <= cores binds each rank to a core; more
# ranks than cores run unbound. MPICH's hydra takes no such flags.
NCPU=$(nproc)
ompi_np() { # np -> Open MPI's command line for it
  if [ "$1" -le "$NCPU" ]; then echo "$OMPIRUN" --bind-to core -np "$1";
  else echo "$OMPIRUN" --oversubscribe --bind-to none -np "$1"; fi
}

run() { # name, then the command
  local name=$1; shift
  echo "+ $*" >&2
  timeout 600 "$@" > "$OUT/$name.log" 2>&1 || echo "host-vs-mpi.sh: '$name' failed (rc $?), see $OUT/$name.log" >&2
}

bytes_of() { # 64K, 1M, 256M, 8 -> bytes
  local v=${1%[KkMmGg]}
  case $1 in *[Kk]) echo $((v << 10)) ;; *[Mm]) echo $((v << 20)) ;; *[Gg]) echo $((v << 30)) ;; *) echo "$1" ;; esac
}

sizes() { # collective, part (small|large) -> bench size flags; none: the part has no sizes
  local max=$COLL_MAXBYTES
  case $1 in allreduce|reduce_scatter) max=$MAXBYTES ;; esac
  # small sizes get many iterations: a few microseconds each, 20 would be noise
  if [ "$2" = small ]; then echo -b 8 -e 64K -f 8 -n 500 -w 50
  elif [ "$(bytes_of "$max")" -ge $((1 << 20)) ]; then echo -b 1M -e "$max" -f 4 -n "$ITERS" -w 3; fi
}

for rep in $(seq 1 "$REPEAT"); do
  for m in $METHODS; do
    flag=""; [ "$m" = sync ] && flag=--sync-per-call
    for coll in $COLLS; do
      for part in $PARTS; do
        [ -n "$(sizes $coll $part)" ] || continue
        for np in $NPS; do
          tag="$m-$coll-np$np-$part-r$rep"
          for buf in $BUFFERS; do
            # shellcheck disable=SC2046
            run "uni-$buf-$tag" $(ompi_np $np) "$BENCH" $coll $(sizes $coll $part) --backends host --buffers $buf $flag
          done
          # shellcheck disable=SC2046
          [ -x "$RAW" ] && run "ompi-$tag" $(ompi_np $np) "$RAW" $coll $(sizes $coll $part) $flag
          # shellcheck disable=SC2046
          [ -n "$RAW_MPICH" ] && run "mpich-$tag" mpirun.mpich -np $np "$RAW_MPICH" $coll $(sizes $coll $part) $flag
        done
        if [ "$coll" = allreduce ]; then
          for buf in $BUFFERS; do
            # shellcheck disable=SC2046
            run "thr-$buf-$m-$coll-$part-r$rep" "$BENCH" $coll -t 2 $(sizes $coll $part) --backends host --buffers $buf $flag
          done
        fi
      done
    done
  done
done

[ -f "${UNILINK_TUNING_FILE:-}" ] && { echo "Selection limits measured here ($UNILINK_TUNING_FILE):"; grep -v '^#' "$UNILINK_TUNING_FILE"; }
python3 "$SRC_DIR/host_vs_mpi_report.py" "$OUT" "$REPEAT" --plot "$OUT/host-vs-mpi"
