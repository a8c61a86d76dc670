#!/usr/bin/env bash
# The quick quality benchmark as a test: tests/quality_check.sh BUILD_DIR [--quick].
# Plain: every preset must learn, a byte LM well below chance and an MQAR accuracy
# floor per preset (the floors are in tools/bench/bench_quality_suites.c, suites quick-*).
# --quick (the sanitizer pass): the machinery only, three steps of one model.
set -uo pipefail
build=${1:?usage: tests/quality_check.sh BUILD_DIR [--quick]}
quick=${2:-}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ -z "$quick" ]; then
  rc=0
  "$build/tools/miras-bench" quality --quick --check --out "$out" > "$out/out.txt" 2>&1 || rc=$?
  grep -v '^{' "$out/out.txt" | grep -v '^\[' || true
  if [ $rc -eq 0 ]; then echo "quality: every quick case at or above its floor"
  else echo "quality: FAILED (exit $rc)"; exit 1; fi
else
  if "$build/tools/miras-bench" quality --quick --steps 3 --variants linear-attention \
       --out "$out" --json-only > "$out/q.jsonl" 2> "$out/q.err" &&
     [ "$(grep -c '"status":"ok"' "$out/q.jsonl")" -eq 2 ]; then
    echo "quality smoke: 2 passed, 0 failed"
  else
    cat "$out/q.err"; echo "quality smoke: FAILED"; exit 1
  fi
fi
