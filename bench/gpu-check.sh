#!/usr/bin/env bash
# gpu-check.sh: the one-GPU device check of unilink (docs/nvidia.md, "The one-GPU check").
#
# The GPU machine may have a driver and nothing else (no toolkit, no NCCL, no network), a
# few minutes, and one output folder. So the check runs from binaries prepared HERE:
#
#   bench/gpu-check.sh --prepare [DIR] [--build BUILD] [--no-build] [-j N]
#                      [--nccl-lib FILE] [--carry-nccl auto|yes|no] [--max-mib 60]
#       builds (Release, RPATH $ORIGIN/../lib) into BUILD (default build-gpucheck) the target
#       gpucheck-tools and collects into DIR (default build-gpucheck/carry, git-ignored):
#       bin/ (unilink-info, unilink-conformance, unilink-bench, ul_gpu_probe, ul_kernel_check,
#       raw_nccl_bench), lib/ (libunilink, the cuda and nccl plugins), vendor/ (libcudart.so.13
#       and, where it fits, libnccl.so.2 compressed). Stripped; fails above --max-mib.
#       --no-build collects from an existing BUILD as it is.
#
#   bench/gpu-check.sh [--from DIR] [--vendor-lib LIBDIR] [--nccl FILE] [--budget SEC]
#                      [--no-gate] [--keep-logs] OUTDIR
#       runs on the GPU machine; writes only under OUTDIR (summary.txt, logs.txt,
#       logs.tar.gz; scratch in OUTDIR/tmp, removed at the end). --vendor-lib puts LIBDIR
#       first on LD_LIBRARY_PATH (the fake runtimes of tests/fakegpu for a dry run).
#       --nccl names the libnccl.so.2 to use (else: carried, the python wheel nvidia-nccl,
#       ldconfig, $CUDA_HOME/lib64). --budget is the wall-clock limit of all steps (default
#       400 s); each step has its own timeout inside it. --no-gate runs every step even when
#       the probe found no usable device (to see each step fail or skip cleanly).
#
# Steps, one summary line each (PASS / FAIL / SKIP + figures; SKIP wherever a figure is
# missing, never OK):
#   1 probe             nvidia-smi, driver, runtime, NCCL, unilink-info (cuda/nccl available?)
#   2 kernels           ul_kernel_check: device kernels vs the core's reductions, bit for bit
#   3 cuda-conformance  --backend cuda: thread 4 ranks (default path, then staged), process 2
#   4 nccl-conformance  1 rank; 2 ranks must fail promptly with UL_ERR_INVALID_USAGE
#                       "Duplicate GPU" (one GPU; with >= 2 GPUs they must pass)
#   5 nccl-overhead     raw_nccl_bench: raw NCCL vs unilink on one cudaStream_t
#   6 cuda-bench        unilink-bench on device memory, 2 thread ranks, small sizes
#   7 overall
# Exit status: 0 no FAIL, 1 a FAIL, 2 usage or preparation error.
set -u
SRC="$(cd "$(dirname "$0")/.." && pwd)"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"

usage() { sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
die() { echo "gpu-check: $*" >&2; exit 2; }

MODE=run DIR="" BUILD="" NO_BUILD=0 JOBS="" NCCL_LIB="" CARRY_NCCL=auto MAX_MIB=60
VENDOR_LIB="" NCCL_OPT="" BUDGET=400 GATE=1 KEEP_LOGS=0 OUTDIR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) MODE=prepare
      if [ $# -gt 1 ] && [ "${2#-}" = "$2" ]; then DIR=$2; shift; fi ;;
    --build) BUILD=${2:?}; shift ;;
    --no-build) NO_BUILD=1 ;;
    -j) JOBS=${2:?}; shift ;;
    -j[0-9]*) JOBS=${1#-j} ;;
    --nccl-lib) NCCL_LIB=${2:?}; shift ;;
    --carry-nccl) CARRY_NCCL=${2:?}; shift ;;
    --max-mib) MAX_MIB=${2:?}; shift ;;
    --from) DIR=${2:?}; shift ;;
    --vendor-lib) VENDOR_LIB=${2:?}; shift ;;
    --nccl) NCCL_OPT=${2:?}; shift ;;
    --budget) BUDGET=${2:?}; shift ;;
    --no-gate) GATE=0 ;;
    --keep-logs) KEEP_LOGS=1 ;;
    -h|--help) usage 0 ;;
    -*) echo "gpu-check: unknown option $1" >&2; usage 2 ;;
    *) [ -z "$OUTDIR" ] || usage 2; OUTDIR=$1 ;;
  esac
  shift
done
abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$PWD" "$1" ;; esac; }
BUILD=$(abspath "${BUILD:-$SRC/build-gpucheck}")
DIR=$(abspath "${DIR:-$SRC/build-gpucheck/carry}")

# =========================================================================================
# --prepare (here, with the toolkit)
# =========================================================================================
TOOLS_REQ="unilink-info unilink-conformance unilink-bench ul_gpu_probe"
TOOLS_OPT="ul_kernel_check raw_nccl_bench"
PLUGINS="libunilink-cuda.so libunilink-nccl.so"

copy_stripped() { # src dst: copy, drop debug info (keeps the dynamic symbols plugins need)
  cp -L "$1" "$2" || return 1
  if command -v strip >/dev/null 2>&1; then strip --strip-debug "$2" 2>/dev/null || true; fi
  chmod u+w "$2"
}

prepare() {
  [ -n "$OUTDIR" ] && die "--prepare takes DIR, not OUTDIR"
  local jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
  if [ "$NO_BUILD" = 0 ]; then
    local home
    home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
    [ -z "$home" ] || [ "$home" -ef "$SRC" ] ||
      die "$BUILD was configured from $home, not $SRC: remove it or pass --build DIR"
    if [ ! -f "$BUILD/CMakeCache.txt" ]; then
      echo "gpu-check: configuring $BUILD (Release, cuda + nccl, RPATH \$ORIGIN)"
      mkdir -p "$BUILD" || die "cannot create $BUILD"
      cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DUNILINK_WITH_NCCL=ON \
        -DUNILINK_WITH_CUDA=ON -DUNILINK_WITH_MPI=OFF -DUNILINK_WITH_ZE=OFF \
        -DUNILINK_BUILD_TESTS=OFF -DUNILINK_BUILD_EXAMPLES=OFF -DUNILINK_BUILD_FUZZ=OFF \
        -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON >"$BUILD/gpucheck-configure.log" 2>&1 ||
        { tail -30 "$BUILD/gpucheck-configure.log"; die "configure failed ($BUILD/gpucheck-configure.log)"; }
    fi
    echo "gpu-check: building gpucheck-tools in $BUILD (-j$jobs)"
    cmake --build "$BUILD" -j"$jobs" --target gpucheck-tools >"$BUILD/gpucheck-build.log" 2>&1 || {
      tail -30 "$BUILD/gpucheck-build.log"
      grep -q "gpucheck-tools" "$BUILD/gpucheck-build.log" &&
        echo "gpu-check: is bench/gpucheck in the build? bench/CMakeLists.txt needs add_subdirectory(gpucheck)" >&2
      die "build failed ($BUILD/gpucheck-build.log)"
    }
  fi
  [ -d "$BUILD/bin" ] && [ -d "$BUILD/lib" ] || die "no build in $BUILD"
  case "$DIR" in "$SRC"/*) ;; *) echo "gpu-check: note: $DIR is outside the repository; only paths inside it can be carried" >&2 ;; esac
  rm -rf "$DIR" && mkdir -p "$DIR/bin" "$DIR/lib" "$DIR/vendor" || die "cannot create $DIR"
  local t missing=""
  for t in $TOOLS_REQ; do
    [ -x "$BUILD/bin/$t" ] || die "missing $BUILD/bin/$t"
    copy_stripped "$BUILD/bin/$t" "$DIR/bin/$t" || die "copy $t"
  done
  for t in $TOOLS_OPT; do
    if [ -x "$BUILD/bin/$t" ]; then copy_stripped "$BUILD/bin/$t" "$DIR/bin/$t" || die "copy $t"
    else missing="$missing $t"; fi
  done
  local so
  so=$(cd "$BUILD/lib" && ls libunilink.so.*.*.* 2>/dev/null | head -1)
  [ -n "$so" ] || die "no libunilink.so.X.Y.Z in $BUILD/lib"
  copy_stripped "$BUILD/lib/$so" "$DIR/lib/$so" || die "copy $so"
  (cd "$DIR/lib" && ln -sf "$so" "${so%.*.*}" && ln -sf "${so%.*.*}" libunilink.so)
  for t in $PLUGINS; do
    if [ -f "$BUILD/lib/$t" ]; then copy_stripped "$BUILD/lib/$t" "$DIR/lib/$t" || die "copy $t"
    else missing="$missing $t"; fi
  done
  # The runtime the plugins were linked against; never libcuda (the machine's driver is used).
  local rt=""
  for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib"; do
    [ -f "$d/libcudart.so.13" ] && { rt="$d/libcudart.so.13"; break; }
  done
  if [ -n "$rt" ]; then cp -L "$rt" "$DIR/vendor/libcudart.so.13" || die "copy libcudart"
  else missing="$missing libcudart.so.13"; fi
  # NCCL: 200+ MiB of already-compressed fatbins; carried only when it fits.
  local nccl="$NCCL_LIB" nccl_note="not carried (--carry-nccl no)"
  if [ -z "$nccl" ]; then
    local nl
    nl=$(sed -n 's/^NCCL_LIBRARY:FILEPATH=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
    [ -n "$nl" ] && [ -e "$(dirname "$nl")/libnccl.so.2" ] && nccl="$(dirname "$nl")/libnccl.so.2"
    [ -z "$nccl" ] && [ -e "$CUDA_HOME/lib64/libnccl.so.2" ] && nccl="$CUDA_HOME/lib64/libnccl.so.2"
  fi
  if [ "$CARRY_NCCL" != no ] && [ -n "$nccl" ]; then
    local used left raw est
    used=$(du -sb "$DIR" | cut -f1)
    left=$(( MAX_MIB * 1048576 - used - 2097152 ))
    raw=$(stat -L -c %s "$nccl")
    if [ "$raw" -le "$left" ]; then
      cp -L "$nccl" "$DIR/vendor/libnccl.so.2" && nccl_note="carried as is ($((raw >> 20)) MiB)"
    elif command -v zstd >/dev/null 2>&1; then
      # a fast estimate first: the strong compression gains little on fatbins
      est=$(zstd -3 -T0 -c "$nccl" | wc -c)
      if [ "$CARRY_NCCL" = yes ] || [ "$est" -le $(( left * 13 / 10 )) ]; then
        zstd -19 -T0 --long=27 -q -c "$nccl" >"$DIR/vendor/libnccl.so.2.zst"
        local z; z=$(stat -c %s "$DIR/vendor/libnccl.so.2.zst")
        if [ "$z" -le "$left" ] || [ "$CARRY_NCCL" = yes ]; then
          nccl_note="carried zstd-compressed ($((raw >> 20)) -> $((z >> 20)) MiB)"
        else
          rm -f "$DIR/vendor/libnccl.so.2.zst"
          nccl_note="not carried: $((raw >> 20)) MiB, zstd -19 $((z >> 20)) MiB > $((left >> 20)) MiB left"
        fi
      else
        nccl_note="not carried: $((raw >> 20)) MiB, zstd -3 $((est >> 20)) MiB > $((left >> 20)) MiB left; the check uses the machine's NCCL (python wheel nvidia-nccl, ldconfig) or skips steps 4-5"
      fi
    else
      nccl_note="not carried: $((raw >> 20)) MiB and no zstd"
    fi
  elif [ -z "$nccl" ]; then
    nccl_note="not carried (no libnccl.so.2 here)"
  fi
  local commit dirty cuda_ver nccl_hdr
  commit=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)
  dirty=$(git -C "$SRC" status --porcelain 2>/dev/null | grep -c . || true)
  cuda_ver=$("$CUDA_HOME/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  nccl_hdr=$(sed -n 's/^#define NCCL_VERSION_CODE //p' "$CUDA_HOME/include/nccl.h" 2>/dev/null)
  {
    echo "prepared=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit=$commit (+$dirty changed files)"
    echo "build=$BUILD ($(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt"))"
    echo "cuda_toolkit=${cuda_ver:-?}"
    echo "nccl_header=${nccl_hdr:-?}"
    echo "kernel_archs=$(sed -n 's/^UNILINK_GPUCHECK_CUDA_ARCHITECTURES:STRING=//p' "$BUILD/CMakeCache.txt")"
    echo "nccl=$nccl_note"
    echo "missing=${missing:- none}"
  } >"$DIR/MANIFEST"
  local total
  total=$(du -sb "$DIR" | cut -f1)
  echo "size=$((total >> 20)) MiB ($total bytes)" >>"$DIR/MANIFEST"
  cat "$DIR/MANIFEST"
  (cd "$DIR" && find . -type f -printf '%10s  %p\n' | sort -k2)
  [ "$total" -le $(( MAX_MIB * 1048576 )) ] || die "$DIR is $((total >> 20)) MiB, over --max-mib $MAX_MIB"
  local rel=${DIR#"$SRC"/}
  echo "gpu-check: prepared. On the GPU machine (carry \"$rel\"):"
  echo "  bench/gpu-check.sh --from $rel \"\$OUT\""
}

if [ "$MODE" = prepare ]; then prepare; exit 0; fi

# =========================================================================================
# the check (on the GPU machine)
# =========================================================================================
[ -n "$OUTDIR" ] || usage 2
mkdir -p "$OUTDIR" || die "cannot create $OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
LOGS="$OUTDIR/logs"
SUM="$OUTDIR/summary.txt"
rm -rf "$LOGS" "$OUTDIR/tmp" "$OUTDIR/.vendor"
mkdir -p "$LOGS" "$OUTDIR/tmp"
: >"$SUM"
T0=$(date +%s)
DEADLINE=$((T0 + BUDGET))
NPASS=0 NFAIL=0 NSKIP=0
log() { printf '[gpu-check %3ds] %s\n' $(( $(date +%s) - T0 )) "$*"; }
summ() { # step name status figures...
  local n=$1 name=$2 st=$3; shift 3
  case "$st" in PASS) NPASS=$((NPASS + 1)) ;; FAIL) NFAIL=$((NFAIL + 1)) ;; *) NSKIP=$((NSKIP + 1)) ;; esac
  printf '%s %-17s %-4s %s\n' "$n" "$name" "$st" "$*" | tee -a "$SUM.steps"
}
cleanup() { rm -rf "$OUTDIR/tmp" "$OUTDIR/.vendor"; }
trap cleanup EXIT

BIN="$DIR/bin"
[ -x "$BIN/ul_gpu_probe" ] || chmod +x "$BIN"/* 2>/dev/null # a copy that dropped the mode bits
[ -x "$BIN/ul_gpu_probe" ] || {
  : >"$SUM.steps"
  summ 1 probe FAIL "no prepared tools in $DIR (run bench/gpu-check.sh --prepare here first)"
  mv "$SUM.steps" "$SUM"; exit 1; }

# --- libraries: ours, the carried runtime, NCCL; the driver stays the machine's own -------
export TMPDIR="$OUTDIR/tmp"
export UNILINK_PLUGIN_PATH="$DIR/lib"
export UNILINK_TIMEOUT_MS=15000
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
NCCL_FILE="" NCCL_FROM=""
find_nccl() {
  local f p py
  if [ -n "$NCCL_OPT" ]; then
    NCCL_OPT=$(abspath "$NCCL_OPT")
    [ -d "$NCCL_OPT" ] && NCCL_OPT="$NCCL_OPT/libnccl.so.2"
    [ -e "$NCCL_OPT" ] && { NCCL_FILE=$NCCL_OPT; NCCL_FROM="--nccl"; return; }
  fi
  if [ -n "$VENDOR_LIB" ] && [ -e "$VENDOR_LIB/libnccl.so.2" ]; then
    NCCL_FILE="$VENDOR_LIB/libnccl.so.2"; NCCL_FROM="--vendor-lib"; return
  fi
  if [ -e "$DIR/vendor/libnccl.so.2" ]; then NCCL_FILE="$DIR/vendor/libnccl.so.2"; NCCL_FROM=carried; return; fi
  for f in "$DIR/vendor/libnccl.so.2.zst" "$DIR/vendor/libnccl.so.2.xz"; do
    [ -e "$f" ] || continue
    mkdir -p "$OUTDIR/.vendor"
    case "$f" in
      *.zst) command -v zstd >/dev/null 2>&1 && zstd -d -q -c "$f" >"$OUTDIR/.vendor/libnccl.so.2" ;;
      *.xz) command -v xz >/dev/null 2>&1 && xz -d -c "$f" >"$OUTDIR/.vendor/libnccl.so.2" ;;
    esac
    [ -s "$OUTDIR/.vendor/libnccl.so.2" ] && { NCCL_FILE="$OUTDIR/.vendor/libnccl.so.2"; NCCL_FROM="carried (compressed)"; return; }
  done
  for py in python3 /opt/torch/.venv/bin/python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    p=$(PYTHONDONTWRITEBYTECODE=1 timeout 20 "$py" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
    [ -n "$p" ] && [ -e "$p/lib/libnccl.so.2" ] && { NCCL_FILE="$p/lib/libnccl.so.2"; NCCL_FROM="python wheel ($py)"; return; }
  done
  for f in /opt/*/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 \
           /usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2 \
           /usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2; do
    [ -e "$f" ] && { NCCL_FILE=$f; NCCL_FROM="python wheel"; return; }
  done
  f=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
  [ -n "$f" ] && [ -e "$f" ] && { NCCL_FILE=$f; NCCL_FROM=ldconfig; return; }
  [ -e "$CUDA_HOME/lib64/libnccl.so.2" ] && { NCCL_FILE="$CUDA_HOME/lib64/libnccl.so.2"; NCCL_FROM=CUDA_HOME; }
}
find_nccl
LDP="$DIR/lib:$DIR/vendor"
[ -n "$VENDOR_LIB" ] && LDP="$(abspath "$VENDOR_LIB"):$LDP"
[ -n "$NCCL_FILE" ] && LDP="$LDP:$(dirname "$NCCL_FILE")"
# the driver: only where the loader would not find libcuda.so.1 by itself
if [ -z "$VENDOR_LIB" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
    [ -e "$d/libcuda.so.1" ] && { LDP="$LDP:$d"; break; }
  done
fi
export LD_LIBRARY_PATH="$LDP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# run_to LOG MAXSEC cmd...: under a timeout that also respects the total budget.
# Sets RC (124: timed out, 125: no time left) and SECS.
run_to() {
  local logf=$1 max=$2 left t s; shift 2
  left=$(( DEADLINE - $(date +%s) - 3 ))
  t=$max; [ "$left" -lt "$t" ] && t=$left
  if [ "$t" -lt 5 ]; then RC=125; SECS=0; echo "(not run: total budget of ${BUDGET}s spent)" >>"$logf"; return; fi
  { echo "\$ $*"; echo "# timeout ${t}s, $(date -u +%H:%M:%S)"; } >>"$logf"
  s=$(date +%s)
  timeout -k 5 "$t" "$@" >>"$logf" 2>&1
  RC=$?
  SECS=$(( $(date +%s) - s ))
  echo "# rc=$RC after ${SECS}s" >>"$logf"
}
rc_text() { # a sentence for an abnormal RC
  case "$RC" in
    124|137) echo "timed out after ${SECS}s" ;;
    125) echo "not run: total budget spent" ;;
    126|127) echo "cannot execute (rc=$RC)" ;;
    *) if [ "$RC" -gt 128 ]; then echo "crashed (signal $((RC - 128)))"; else echo "rc=$RC"; fi ;;
  esac
}
kv() { sed -n "s/^$1=//p" "$2" | head -1; }

: >"$SUM.steps"
log "output in $OUTDIR; prepared tools in $DIR; budget ${BUDGET}s"

# --- 1. probe ------------------------------------------------------------------------------
L1="$LOGS/01-probe.log"
{
  echo "## host"; uname -a; echo "nproc=$(nproc 2>/dev/null)"; df -h /dev/shm "$OUTDIR" 2>&1
  echo "## MANIFEST of $DIR"; cat "$DIR/MANIFEST" 2>/dev/null
  echo "## libraries"; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "nccl_file=${NCCL_FILE:-none} (${NCCL_FROM:-not found})"
  ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnccl|libcudart' || echo "(ldconfig: no libcuda/libnccl/libcudart)"
} >"$L1" 2>&1
GPU_NAME="" DRIVER=""
if command -v nvidia-smi >/dev/null 2>&1; then
  run_to "$L1" 20 nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,mig.mode.current --format=csv
  q=$(timeout 20 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
  GPU_NAME=${q%%,*}; DRIVER=$(echo "${q#*,}" | tr -d ' ')
  run_to "$L1" 20 nvidia-smi topo -m
else
  echo "(no nvidia-smi)" >>"$L1"
fi
P1="$LOGS/01-probe.kv"
run_to "$P1" 30 "$BIN/ul_gpu_probe" --nccl "${NCCL_FILE:-none}"
PROBE_RC=$RC
run_to "$L1" 30 "$BIN/unilink-info" --backends
avail() { awk -v b="$1" '$1 == b && ($2 == "available" || $2 == "unavailable") { print $2; exit }' "$L1"; }
why() { awk -v b="$1" '$1 == b && $2 == "unavailable" { f = 1; next } f && $1 == "reason" { $1 = ""; sub(/^ +/, ""); print; exit } f && /^  [a-z]/ { exit }' "$L1"; }
UL_CUDA=$(avail cuda) UL_NCCL=$(avail nccl)
FAKE=$(kv fake "$P1"); FAKE=${FAKE:-0}
DEVS=$(kv devices "$P1"); DEVS=${DEVS:-0}
[ -n "$GPU_NAME" ] || GPU_NAME=$(sed -n 's/^device0=\(.*\) cc=.*/\1/p' "$P1")
NCCL_VER=$(kv nccl_version "$P1")
F1="gpu=\"${GPU_NAME:-?}\" cc=$(kv cc "$P1") devices=$DEVS driver=${DRIVER:-?} driver_cuda=$(kv driver_cuda_version "$P1") runtime=$(kv runtime_version "$P1") nccl=${NCCL_VER:-none}${NCCL_FILE:+ ($NCCL_FROM)} unilink: cuda=${UL_CUDA:-?} nccl=${UL_NCCL:-?}"
[ "$FAKE" = 1 ] && F1="FAKE RUNTIME (tests/fakegpu): $F1"
USABLE=0
if [ "$PROBE_RC" = 0 ] && [ "$UL_CUDA" = available ]; then
  USABLE=1
  if [ -n "$NCCL_FILE" ] && [ "$UL_NCCL" != available ]; then
    summ 1 probe FAIL "$F1; nccl plugin unavailable: $(why nccl)"
  else
    summ 1 probe PASS "$F1"
  fi
elif [ "$PROBE_RC" = 0 ]; then
  summ 1 probe FAIL "$F1; a device is there but the cuda plugin is unavailable: $(why cuda)"
else
  err=$(kv cuda_error "$P1"); [ -n "$err" ] || err=$(kv cudart_error "$P1")
  [ -n "$err" ] || err=$(rc_text)
  summ 1 probe FAIL "no usable CUDA device: $err; $F1"
fi
cat "$P1" >>"$L1"
GATE_WHY=""
[ "$USABLE" = 1 ] || GATE_WHY="no usable CUDA device (step 1)"
[ "$GATE" = 0 ] && GATE_WHY=""
NCCL_WHY=""
[ -n "$NCCL_FILE" ] || NCCL_WHY="no libnccl.so.2 here (carried, python wheel, ldconfig, $CUDA_HOME)"
[ -z "$NCCL_WHY" ] && [ "$UL_NCCL" != available ] && [ "$GATE" = 1 ] && NCCL_WHY="nccl plugin unavailable: $(why nccl)"

# conformance result of one log: sets CST (PASS/FAIL/SKIP) and CFIG
conf_result() { # log label
  local line
  line=$(grep -E '^summary: [0-9]+ cases' "$1" | tail -1)
  if [ "$RC" = 125 ]; then CST=SKIP; CFIG="$2 SKIP (total budget spent)"; return; fi
  if [ "$RC" = 3 ]; then CST=SKIP; CFIG="$2 SKIP (backend unavailable: $(grep -m1 'unavailable here' "$1" | sed 's/.*here: //'))"; return; fi
  if [ "$RC" = 0 ] && [ -n "$line" ]; then
    local f; f=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
    if [ "${f:-1}" = 0 ]; then CST=PASS; else CST=FAIL; fi
  elif [ "$RC" = 1 ] && [ -n "$line" ]; then CST=FAIL
  elif [ "$RC" = 0 ]; then CST=SKIP; line="no summary line"
  else CST=FAIL; line="$(rc_text)${line:+; $line}"; fi
  line=${line#summary: }
  CFIG="$2 $CST ($line; ${SECS}s)"
}
merge() { # statuses...: FAIL if any, PASS if all PASS, else SKIP
  local s r=PASS
  for s in "$@"; do
    [ "$s" = FAIL ] && { echo FAIL; return; }
    [ "$s" = PASS ] || r=SKIP
  done
  echo "$r"
}

# --- 2. kernels ----------------------------------------------------------------------------
L2="$LOGS/02-kernels.log"
if [ -n "$GATE_WHY" ]; then summ 2 kernels SKIP "$GATE_WHY"
elif [ ! -x "$BIN/ul_kernel_check" ]; then summ 2 kernels SKIP "ul_kernel_check not prepared (built without nvcc)"
else
  if [ "$FAKE" = 1 ]; then run_to "$L2" 120 "$BIN/ul_kernel_check" --no-huge -s 20000
  else run_to "$L2" 150 "$BIN/ul_kernel_check"; fi
  res=$(grep -E '^kernel-check: RESULT' "$L2" | tail -1 | sed 's/^kernel-check: RESULT //')
  st=${res%% *}; fig=${res#* }
  if [ "$RC" = 125 ]; then summ 2 kernels SKIP "total budget spent"
  elif [ "$RC" = 3 ]; then summ 2 kernels SKIP "no CUDA device for ul_kernel_check"
  elif [ -z "$res" ] || { [ "$RC" != 0 ] && [ "$RC" != 1 ]; }; then summ 2 kernels FAIL "$(rc_text)${res:+; $res}"
  elif [ "$FAKE" = 1 ]; then
    if [ "$st" = PASS ]; then summ 2 kernels SKIP "fake runtime: the host model ran, not the device's PTX ($fig)"
    else summ 2 kernels FAIL "under the fake runtime: $fig"; fi
  else summ 2 kernels "$st" "$fig"; fi
fi

# --- 3. cuda conformance -------------------------------------------------------------------
if [ -n "$GATE_WHY" ]; then summ 3 cuda-conformance SKIP "$GATE_WHY"
else
  CONF=(--backend cuda --quick --timeout-ms 15000)
  run_to "$LOGS/03a-cuda-thread4.log" 90 "$BIN/unilink-conformance" "${CONF[@]}" --launcher thread --ranks 4 \
    --json "$LOGS/03a-cuda-thread4.json"
  conf_result "$LOGS/03a-cuda-thread4.log" "thread4/default"; S3A=$CST F3A=$CFIG
  run_to "$LOGS/03b-cuda-thread4-staged.log" 90 env UNILINK_CUDA_PATH=staged "$BIN/unilink-conformance" \
    "${CONF[@]}" --launcher thread --ranks 4 --json "$LOGS/03b-cuda-thread4-staged.json"
  conf_result "$LOGS/03b-cuda-thread4-staged.log" "thread4/staged"; S3B=$CST F3B=$CFIG
  run_to "$LOGS/03c-cuda-process2.log" 90 "$BIN/unilink-conformance" "${CONF[@]}" --launcher process --ranks 2 \
    --json "$LOGS/03c-cuda-process2.json"
  conf_result "$LOGS/03c-cuda-process2.log" "process2"; S3C=$CST F3C=$CFIG
  summ 3 cuda-conformance "$(merge "$S3A" "$S3B" "$S3C")" "$F3A; $F3B; $F3C"
fi

# --- 4. nccl conformance -------------------------------------------------------------------
if [ -n "$GATE_WHY" ]; then summ 4 nccl-conformance SKIP "$GATE_WHY"
elif [ -n "$NCCL_WHY" ]; then summ 4 nccl-conformance SKIP "$NCCL_WHY"
else
  CONF=(--backend nccl --quick --timeout-ms 15000)
  run_to "$LOGS/04a-nccl-rank1.log" 75 "$BIN/unilink-conformance" "${CONF[@]}" --launcher thread --ranks 1 \
    --json "$LOGS/04a-nccl-rank1.json"
  conf_result "$LOGS/04a-nccl-rank1.log" "ranks1"; S4A=$CST F4A=$CFIG
  L4B="$LOGS/04b-nccl-rank2.log"
  if [ "${DEVS:-1}" -ge 2 ]; then
    run_to "$L4B" 75 "$BIN/unilink-conformance" "${CONF[@]}" --launcher thread --ranks 2
    conf_result "$L4B" "ranks2 ($DEVS GPUs)"; S4B=$CST F4B=$CFIG
  else
    # one GPU: NCCL refuses two ranks on it; unilink must say so promptly, not hang or crash
    run_to "$L4B" 45 "$BIN/unilink-conformance" "${CONF[@]}" --launcher thread --ranks 2 --filter 'allreduce/*' -v
    dup=0 usage=0 passed=""
    grep -qi 'duplicate gpu' "$L4B" && dup=1
    grep -q 'UL_ERR_INVALID_USAGE' "$L4B" && usage=1
    passed=$(grep -E '^summary: ' "$L4B" | sed -n 's/.* \([0-9]*\) passed.*/\1/p' | tail -1)
    if [ "$RC" = 3 ] || [ "$RC" = 125 ]; then
      S4B=SKIP F4B="ranks2 SKIP ($(rc_text | sed 's/^rc=3$/backend unavailable/'))"
    elif [ "$RC" = 1 ] && [ "$dup" = 1 ] && [ "$usage" = 1 ] && [ "${passed:-0}" = 0 ]; then
      S4B=PASS F4B="ranks2 on one GPU PASS (UL_ERR_INVALID_USAGE \"Duplicate GPU\" after ${SECS}s)"
    else
      S4B=FAIL F4B="ranks2 on one GPU FAIL (expected a prompt UL_ERR_INVALID_USAGE \"Duplicate GPU\": $(rc_text), duplicate_gpu_text=$dup invalid_usage=$usage passed=${passed:-?})"
    fi
  fi
  summ 4 nccl-conformance "$(merge "$S4A" "$S4B")" "nccl ${NCCL_VER:-?}: $F4A; $F4B"
fi

# --- 5. raw NCCL vs unilink ------------------------------------------------------------------
L5="$LOGS/05-nccl-overhead.log"
if [ -n "$GATE_WHY" ]; then summ 5 nccl-overhead SKIP "$GATE_WHY"
elif [ -n "$NCCL_WHY" ]; then summ 5 nccl-overhead SKIP "$NCCL_WHY"
elif [ ! -x "$BIN/raw_nccl_bench" ]; then summ 5 nccl-overhead SKIP "raw_nccl_bench not prepared (built without NCCL)"
else
  q=(); [ "$FAKE" = 1 ] && q=(-q -s 8,1K,64K,1M)
  run_to "$L5" 90 "$BIN/raw_nccl_bench" "${q[@]}"
  res=$(grep -E '^raw-nccl-bench: RESULT' "$L5" | tail -1 | sed 's/^raw-nccl-bench: RESULT //')
  row() { awk -v m="$1" -v c="$2" -v b="$3" -v f="$4" '$1 == m && $2 == c && $3 == b { print $f; exit }' "$L5"; }
  fig5=""
  for c in allreduce allgather sendrecv; do
    r8=$(row pipelined $c 8 4); u8=$(row pipelined $c 8 5); s8=$(row sync $c 8 4); su8=$(row sync $c 8 5)
    n8=$(row null $c 8 5)
    big=$(awk -v c=$c '$1 == "pipelined" && $2 == c && $3 ~ /^[0-9]+$/ { b = $3; r = $7 } END { if (b) printf "%s@%dMiB", r, b / 1048576 }' "$L5")
    fig5="$fig5 $c 8B pipelined ${r8:-?}/${u8:-?} sync ${s8:-?}/${su8:-?} null ${n8:-?} us, ratio ${big:-?};"
  done
  fig5="raw/unilink us per call:${fig5%;}"
  [ "$FAKE" = 1 ] && fig5="fake runtime, not a GPU's figures: $fig5"
  case "$RC:${res%% *}" in
    0:PASS) summ 5 nccl-overhead PASS "$fig5" ;;
    125:*) summ 5 nccl-overhead SKIP "total budget spent" ;;
    3:*) summ 5 nccl-overhead SKIP "raw_nccl_bench: ${res#SKIP }" ;;
    *) summ 5 nccl-overhead FAIL "$(rc_text)${res:+; $res}" ;;
  esac
fi

# --- 6. cuda bench on device memory ----------------------------------------------------------
if [ -n "$GATE_WHY" ]; then summ 6 cuda-bench SKIP "$GATE_WHY"
else
  B=(--backends cuda -t 2 -b 8 -e 4M -f 8 -n 20 -w 5 -c 1)
  st6=() fig6=""
  for run in "allreduce default" "sendrecv default" "allreduce staged"; do
    set -- $run
    l="$LOGS/06-bench-$1-$2.log"
    if [ "$2" = staged ]; then run_to "$l" 40 env UNILINK_CUDA_PATH=staged "$BIN/unilink-bench" "$1" "${B[@]}"
    else run_to "$l" 40 "$BIN/unilink-bench" "$1" "${B[@]}"; fi
    rows=$(awk '/^ *[0-9]+ +[0-9]+ /' "$l")
    wrong=$(echo "$rows" | awk 'NF >= 13 { w += $9 + $13 } END { print w + 0 }')
    lat=$(echo "$rows" | awk '$1 == 8 { print $6; exit }')
    bw=$(echo "$rows" | awk 'NF >= 8 { b = $1; g = $7 } END { if (b) printf "%s GB/s@%dKiB", g, b / 1024 }')
    if [ "$RC" = 125 ]; then s=SKIP; f="$1/$2 SKIP (total budget spent)"
    elif grep -q 'skipped backend cuda' "$l"; then s=SKIP; f="$1/$2 SKIP ($(grep -m1 'skipped backend' "$l" | sed 's/^# //'))"
    elif [ "$RC" = 0 ] && [ -n "$rows" ] && [ "$wrong" = 0 ] && [ -n "$lat" ]; then s=PASS; f="$1/$2 ${lat}us@8B ${bw}"
    elif [ "$RC" = 0 ] && [ -n "$rows" ] && [ "$wrong" = 0 ]; then s=SKIP; f="$1/$2 no 8 B row"
    else s=FAIL; f="$1/$2 FAIL ($(rc_text), #wrong=${wrong:-?}, rows=$(echo "$rows" | grep -c .))"; fi
    st6+=("$s"); fig6="$fig6${fig6:+; }$f"
  done
  [ "$FAKE" = 1 ] && fig6="fake runtime, not a GPU's figures: $fig6"
  summ 6 cuda-bench "$(merge "${st6[@]}")" "2 thread ranks on one GPU: $fig6"
fi

# --- 7. overall + files -----------------------------------------------------------------------
TOTAL=$(( $(date +%s) - T0 ))
if [ "$NFAIL" -gt 0 ]; then ST=FAIL; elif [ "$NSKIP" -gt 0 ]; then ST=SKIP; else ST=PASS; fi
summ 7 overall "$ST" "pass=$NPASS fail=$NFAIL skip=$NSKIP in ${TOTAL}s (budget ${BUDGET}s)"
{
  echo "# unilink gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname 2>/dev/null): $(sed -n 's/^commit=//p' "$DIR/MANIFEST" 2>/dev/null)"
  [ "$FAKE" = 1 ] && echo "# FAKE RUNTIME (tests/fakegpu): no figure below is a GPU's"
  echo "# step name              status figures"
  cat "$SUM.steps"
  if [ -f "$L5" ] && grep -q '^pipelined' "$L5"; then
    echo
    echo "## raw NCCL vs unilink, us per call (step 5; medians; ratio = unilink / raw)"
    grep -E '^# (NCCL|unilink|check|us per|raw NCCL| *mode)' "$L5"
    grep -E '^(pipelined|sync|null) ' "$L5"
  fi
} >"$SUM"
rm -f "$SUM.steps"
# Few files come back from a device run (8 at most): logs as one text and one tarball.
(cd "$LOGS" && for f in *; do echo "===== $f"; cat "$f"; done) >"$OUTDIR/logs.txt" 2>/dev/null
tar -czf "$OUTDIR/logs.tar.gz" -C "$OUTDIR" logs 2>/dev/null
[ "$KEEP_LOGS" = 1 ] || rm -rf "$LOGS"
echo
cat "$SUM"
log "done: $OUTDIR/summary.txt, logs.txt, logs.tar.gz"
[ "$NFAIL" = 0 ]
