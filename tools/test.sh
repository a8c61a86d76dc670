#!/usr/bin/env bash
# Runs every test suite three times: a plain optimised build; the same for
# an AVX2 machine (the own kernels built for x86-64-v3, oneDNN held to AVX2:
# on an AVX-512 host this is what an AVX2 user runs); then a build under
# AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer that halts
# on the first error. Exit status 0 only if everything passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

status=0
# Every test of a build is a meson test (tests/meson.build: the Check suites,
# the examples, miras-gradcheck, the drivers' and MPI scripts, the quick
# quality benchmark, the bench smoke, the install); run one at a time, each
# with its runner's output but not the per-check "ok" lines.
run_suites() {
  local dir=$1
  shift
  # (pipefail: the pipeline fails when meson test does)
  if ! meson test -C "$dir" --num-processes 1 --verbose "$@" 2>&1 \
      | grep -v -E '^(ok - |>>> |―)'; then
    status=1
  fi
}

echo "### plain build"
configure_build build
run_suites build

echo "### AVX2 build (-Dcpu=x86-64-v3, ONEDNN_MAX_CPU_ISA=AVX2, OpenBLAS Haswell kernels)"
configure_build build-avx2 -Dcpu=x86-64-v3
# (bash: an assignment before a function call holds for that call only). The
# scripts' suite (the drivers' command lines, MPI, the install) does not depend
# on the instruction set and runs in the other two passes.
ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} \
  run_suites build-avx2 --no-suite scripts

echo "### sanitizer build (ASan + UBSan + LSan)"
configure_build build-san -Dbuildtype=debugoptimized -Db_sanitize=address,undefined \
  -Db_lundef=false -Dc_args=-fno-sanitize-recover=all
# No fork: leaks are reported once, when the whole runner exits.
export CK_FORK=no
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
run_suites build-san --timeout-multiplier 3

echo "### fuzz targets (libFuzzer; only where clang is installed)"
if ! command -v clang >/dev/null; then
  echo "skipped: no clang (apt-get install clang to fuzz the loaders and parsers)"
elif ! (export CC=clang; configure_build build-fuzz -Dfuzz=true -Dbuildtype=debugoptimized \
    -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fno-sanitize-recover=all); then
  status=1
else
  unset CK_FORK
  for f in safetensors json config; do
    echo "== fuzz-$f (${FUZZ_SECONDS:-30} s from tests/fuzz/corpus/$f)"
    corpus=$(mktemp -d)
    cp tests/fuzz/corpus/$f/* "$corpus"/
    # the corpus grows in a temporary copy; a crash leaves its input in build-fuzz/
    log=$(mktemp)
    if ! build-fuzz/tests/fuzz-$f -max_total_time="${FUZZ_SECONDS:-30}" -timeout=10 \
        -artifact_prefix=build-fuzz/crash-$f- "$corpus" > "$log" 2>&1; then
      status=1
      tail -n 40 "$log"
    fi
    grep -E 'DONE|^Done' "$log" || true
    rm -f "$log"
    rm -rf "$corpus"
  done
fi

if [ $status -eq 0 ]; then echo "test.sh: all suites passed (plain, AVX2, sanitizer, fuzz)"; else echo "test.sh: FAILURES above"; fi
exit $status
