#!/usr/bin/env bash
# gpu-check.sh: on a machine with NVIDIA GPUs, build unilink, run the conformance suite
# on the nccl and cuda backends, and compare unilink-bench (nccl, cuda/p2p, cuda/staged)
# with raw NCCL (bench/raw_nccl_bench.c, nccl-tests' timing method) for allreduce,
# allgather and sendrecv. Writes one summary table. Budget: under 8 minutes.
#
#   bench/gpu-check.sh [build-dir]       env: NGPUS (default: all visible), CUDA_HOME
#
# Targets: busbw within 2% of raw NCCL at >= 1 MiB; added latency under 1 us at 8 B.
# Ranks: one per GPU (NCCL refuses two ranks on one device), so 1 GPU = 1 rank.
set -uo pipefail
SRC="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-${TMPDIR:-/tmp}/unilink-gpu-check}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
OUT="$BUILD/gpu-check"
mkdir -p "$OUT"
T0=$(date +%s)
log() { printf '[gpu-check %3ds] %s\n' $(( $(date +%s) - T0 )) "$*"; }

# ---- build (Release: timings) --------------------------------------------------------
log "configure + build in $BUILD"
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DUNILINK_WITH_NCCL=ON -DUNILINK_WITH_CUDA=ON \
      -DUNILINK_BUILD_TESTS=OFF >"$OUT/cmake.log" 2>&1 || { tail -20 "$OUT/cmake.log"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
cc -O2 -o "$BUILD/bin/raw_nccl_bench" "$SRC/bench/raw_nccl_bench.c" -I"$CUDA_HOME/include" \
   -L"$CUDA_HOME/lib64" -L"$CUDA_HOME/lib" -lnccl -lcudart \
   -Wl,-rpath,"$CUDA_HOME/lib64:$CUDA_HOME/lib" || exit 1
export UNILINK_PLUGIN_PATH="$BUILD/lib"
BIN="$BUILD/bin"

NGPUS="${NGPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || echo 1)}"
[ "$NGPUS" -ge 1 ] 2>/dev/null || NGPUS=1
log "GPUs: $NGPUS (ranks = GPUs)"
nvidia-smi topo -m >"$OUT/topo.txt" 2>&1 || true
[ -x "$BIN/unilink-info" ] && "$BIN/unilink-info" >"$OUT/unilink-info.txt" 2>&1 || true

# ---- conformance ---------------------------------------------------------------------
CONF_STATUS=""
for be in nccl cuda; do
  for path in default; do
    log "conformance $be ($NGPUS ranks)"
    if timeout 120 "$BIN/unilink-conformance" --backend "$be" --launcher thread --ranks "$NGPUS" \
         --quick >"$OUT/conformance-$be.txt" 2>&1; then
      CONF_STATUS+="$be=PASS "
    else
      CONF_STATUS+="$be=FAIL(rc=$?) "
    fi
  done
done

# ---- benchmarks ----------------------------------------------------------------------
FLAGS=(-b 8 -e 128M -f 4 -n 20 -w 5 -c 0 -t "$NGPUS" -g 1)
RAWFLAGS=(-b 8 -e 128M -f 4 -n 20 -w 5 -g "$NGPUS")
# Each run: label, env, command; output normalised to "size time algbw busbw" (out of place).
norm() { awk '/^[ \t]*[0-9]+[ \t]/ { print $1, $6, $7, $8 }'; }
run_bench() { # label coll env...
  local label=$1 coll=$2; shift 2
  log "bench $coll $label"
  if [ "$label" = raw ]; then
    env "$@" timeout 90 "$BIN/raw_nccl_bench" -C "$coll" "${RAWFLAGS[@]}" >"$OUT/$coll-$label.txt" 2>&1
  elif [ "$label" = raw-p2pdisable ]; then
    env NCCL_P2P_DISABLE=1 "$@" timeout 90 "$BIN/raw_nccl_bench" -C "$coll" "${RAWFLAGS[@]}" \
        >"$OUT/$coll-$label.txt" 2>&1
  else
    env "$@" timeout 90 "$BIN/unilink-bench" "${FLAGS[@]}" --backend "${label%%-*}" "$coll" \
        >"$OUT/$coll-$label.txt" 2>&1
  fi
  norm <"$OUT/$coll-$label.txt" >"$OUT/$coll-$label.dat"
}
LABELS=(raw nccl cuda-p2p cuda-staged)
[ "$NGPUS" -gt 1 ] && LABELS+=(raw-p2pdisable)
for coll in allreduce allgather sendrecv; do
  run_bench raw "$coll"
  run_bench nccl "$coll"
  run_bench cuda-p2p "$coll" UNILINK_CUDA_PATH=p2p
  run_bench cuda-staged "$coll" UNILINK_CUDA_PATH=staged
  [ "$NGPUS" -gt 1 ] && run_bench raw-p2pdisable "$coll"
done

# ---- summary -------------------------------------------------------------------------
# With one rank busbw is 0 by definition (factor 2(n-1)/n), so compare algbw then.
BW_COL=4; BW_NAME=busbw
[ "$NGPUS" -eq 1 ] && { BW_COL=3; BW_NAME=algbw; }
SUM="$OUT/summary.txt"
{
  echo "# unilink gpu-check: $NGPUS GPU(s), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  echo "# conformance: $CONF_STATUS"
  echo "# $BW_NAME in GB/s per size and path; overhead = unilink nccl vs raw NCCL"
  for coll in allreduce allgather sendrecv; do
    echo
    echo "## $coll"
    printf '%12s' size; for l in "${LABELS[@]}"; do printf ' %14s' "$l"; done
    printf ' %10s %10s\n' "ovh%" "add_us"
    awk -v col="$BW_COL" -v labels="${LABELS[*]}" -v dir="$OUT" -v coll="$coll" '
      BEGIN {
        n = split(labels, L, " ")
        for (i = 1; i <= n; i++) {
          f = dir "/" coll "-" L[i] ".dat"
          while ((getline line < f) > 0) {
            split(line, a, " "); bw[L[i], a[1]] = a[col]; tm[L[i], a[1]] = a[2]; sizes[a[1]] = 1
          }
        }
        m = 0; for (s in sizes) S[++m] = s + 0
        for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (S[j] < S[i]) { t = S[i]; S[i] = S[j]; S[j] = t }
        worst = 0; lat = "n/a"
        for (i = 1; i <= m; i++) {
          s = S[i]; printf "%12d", s
          for (k = 1; k <= n; k++) printf " %14s", ((L[k], s) in bw) ? bw[L[k], s] : "-"
          ovh = "-"; add = "-"
          if (((("raw", s) in bw) && (("nccl", s) in bw)) && bw["raw", s] > 0) {
            ovh = sprintf("%.2f", 100 * (bw["raw", s] - bw["nccl", s]) / bw["raw", s])
            add = sprintf("%.2f", tm["nccl", s] - tm["raw", s])
            if (s >= 1048576 && ovh + 0 > worst) worst = ovh + 0
            if (s == 8) lat = add
          }
          printf " %10s %10s\n", ovh, add
        }
        printf "# %s: worst busbw overhead >= 1 MiB: %.2f%% (target <= 2%%) %s; added latency at 8 B: %s us (target < 1 us) %s\n",
          coll, worst, (worst <= 2 ? "OK" : "MISSED"), lat, (lat != "n/a" && lat + 0 < 1 ? "OK" : "MISSED")
      }'
  done
} >"$SUM"
cat "$SUM"
log "done; raw outputs in $OUT"
