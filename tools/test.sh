#!/usr/bin/env bash
# Runs every test suite twice: a plain optimised build, then a build under
# AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer that halts
# on the first error. Exit status 0 only if everything passed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

status=0
run_suites() {
  local dir=$1 quick=${2:-}
  for t in "$dir"/tests/test-*; do
    [ -f "$t" ] && [ -x "$t" ] || continue
    echo "== $(basename "$t") ($dir)"
    "$t" || status=1
  done
  echo "== examples/quickstart ($dir)"
  "$dir/examples/quickstart" | tail -n 1 || status=1
  for t in "$dir"/examples/tutorial_*; do
    [ -f "$t" ] && [ -x "$t" ] || continue
    echo "== examples/$(basename "$t") ($dir)"
    "$t" | tail -n 1 || status=1
  done
  echo "== miras-gradcheck --ops ($dir)"
  "$dir/tools/miras-gradcheck" --ops | tail -n 1 || status=1
  echo "== miras-gradcheck --models ($dir)"
  "$dir/tools/miras-gradcheck" --models | tail -n 1 || status=1
  echo "== miras-gradcheck --optim ($dir)"
  "$dir/tools/miras-gradcheck" --optim | tail -n 1 || status=1
  echo "== tests/test_tools.sh ($dir)"
  tests/test_tools.sh "$dir" $quick | grep -v '^ok - ' || status=1
  echo "== tests/test_mpi.sh ($dir; only where MPI is installed)"
  tests/test_mpi.sh "$dir" $quick | grep -v '^ok - ' || status=1
  echo "== miras-bench quality ($dir)"
  local qdir
  qdir=$(mktemp -d)
  if [ -z "$quick" ]; then
    # Every preset must learn: a byte LM well below chance and an MQAR accuracy
    # floor per preset (the floors are in tools/bench_quality_suites.c, suites quick-*).
    local rc=0
    "$dir/tools/miras-bench" quality --quick --check --out "$qdir" > "$qdir/out.txt" 2>&1 || rc=$?
    grep -v '^{' "$qdir/out.txt" | grep -v '^\[' || true
    if [ $rc -eq 0 ]; then echo "quality: every quick case at or above its floor"
    else echo "quality: FAILED (exit $rc)"; status=1; fi
  else
    # under the sanitizers: the machinery only, three steps of one model
    "$dir/tools/miras-bench" quality --quick --steps 3 --variants linear-attention \
      --out "$qdir" --json-only > "$qdir/q.jsonl" 2> "$qdir/q.err" \
      && [ "$(grep -c '"status":"ok"' "$qdir/q.jsonl")" -eq 2 ] \
      && echo "quality smoke: 2 passed, 0 failed" || { echo "quality smoke: FAILED"; status=1; }
  fi
  rm -rf "$qdir"
  echo "== miras-bench smoke: layer and train at toy sizes ($dir)"
  for sub in layer train; do
    "$dir/tools/bench-smoke-check" "$dir/tools/miras-bench" $sub --variants gated-deltanet \
      --seq-len 32 --batch 2 --reps 2 | tail -n 1 || status=1
  done
}

echo "### plain build"
configure_build build
run_suites build
echo "== tools/test_install.sh (build)"
tools/test_install.sh build || status=1
echo "== tests/crosscheck_layer_torch.py (build; only where PyTorch is installed)"
torch_python=
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import torch' 2>/dev/null; then torch_python=$py; break; fi
done
if [ -n "$torch_python" ]; then
  "$torch_python" tests/crosscheck_layer_torch.py build/tools/miras-layer | tail -n 1 || status=1
else
  echo "skipped: no python3 with PyTorch (e.g. apt-get install python3-torch)"
fi

echo "### sanitizer build (ASan + UBSan + LSan)"
configure_build build-san -Dbuildtype=debugoptimized -Db_sanitize=address,undefined \
  -Db_lundef=false -Dc_args=-fno-sanitize-recover=all
# No fork: leaks are reported once, when the whole runner exits.
export CK_FORK=no
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
run_suites build-san --quick

echo "### fuzz targets (libFuzzer; only where clang is installed)"
if command -v clang >/dev/null; then
  unset CK_FORK
  (export CC=clang; configure_build build-fuzz -Dfuzz=true -Dbuildtype=debugoptimized \
    -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fno-sanitize-recover=all)
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
else
  echo "skipped: no clang (apt-get install clang to fuzz the loaders and parsers)"
fi

if [ $status -eq 0 ]; then echo "test.sh: all suites passed (plain, sanitizer, fuzz)"; else echo "test.sh: FAILURES above"; fi
exit $status
