#!/bin/sh
# Run every test: the default build (unit, examples, conformance, bench, mpi, model),
# then the unit, host conformance and fake-GPU suites under ASan+UBSan and under TSan, then the
# mpi backend built against MPICH. Usage: scripts/test.sh [stage...]
# stages: default asan tsan mpich (all when none given)
set -eu
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
stages=${*:-default asan tsan mpich}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Criterion leaks its own bookkeeping; keep LeakSanitizer on for everything else.
export LSAN_OPTIONS="suppressions=$(pwd)/tests/lsan.supp"
export TSAN_OPTIONS="halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
status=0
for stage in $stages; do
  echo "=== unilink tests: $stage ==="
  cmake --preset "$stage" >/dev/null
  cmake --build --preset "$stage" -j "$jobs"
  dir=build; [ "$stage" = default ] || dir=build-$stage
  case $stage in
    default) sel="" ;;
    asan) sel="-L unit|example|conformance-quick|fakegpu" ;;  # fakegpu: GPU plugins on fakes
    tsan) sel="-L tsan|example" ;;  # Criterion cannot start under TSan here
    mpich) sel="-L mpi" ;;
  esac
  # shellcheck disable=SC2086
  if ! (cd "$dir" && ctest --output-on-failure -j "$jobs" $sel --timeout 900); then
    status=1
  fi
done
exit $status
