#!/usr/bin/env bash
# Needle in a haystack end to end: tests/test_niah.sh BUILD_DIR.
# Trains a small attention model on the pass key at 176 bytes (the training
# target labels the answer and its terminator) and requires it to learn the
# task (teacher-forced answer accuracy a >= 0.9). Then miras-eval's greedy
# answers, judged up to the terminator on 64 held-out prompts at the
# training length: where a >= 0.99, at least 0.95 must match exactly; below
# that (one build's rounding: 1.0 in the plain build here, 0.985 under the
# sanitizers), at least a^8 - 0.1, what eight bytes each right with
# probability a give. A scorer that misjudges answers fails either bar.
# About a minute on one idle core. Then the bench's length-generalisation
# suites' machinery, for 3 steps.
set -uo pipefail
build=${1:?usage: tests/test_niah.sh BUILD_DIR}
train=$build/tools/miras-train eval=$build/tools/miras-eval
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# the last validation accuracy in a miras-train log.csv (by column name)
last_val_acc() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "val_acc") c = i; next }
           c && $c != "" { a = $c } END { print a }' "$1"
}
# value >= bar (awk: floating point)
at_least() { awk -v v="$1" -v b="$2" 'BEGIN { exit !(v != "" && v + 0 >= b + 0) }'; }

"$train" --task niah --niah passkey --seq-len 176 --model attention --d-model 32 --layers 2 \
  --heads 2 --batch 16 --steps 1500 --lr 3e-3 --warmup 100 --eval-every 500 --eval-batches 8 \
  --seed 1 --threads 1 --out "$tmp/run" >"$tmp/train.out" 2>&1 || tail -n 5 "$tmp/train.out"
acc=$(last_val_acc "$tmp/run/log.csv" 2>/dev/null)
echo "# teacher-forced answer accuracy (answer bytes and terminator): ${acc:-none}"
check "niah: the trained model's teacher-forced accuracy reaches 0.9" at_least "$acc" 0.9

"$eval" "$tmp/run/ckpt.safetensors" --niah 176 --examples 64 --threads 1 --json \
  >"$tmp/eval.json" 2>"$tmp/eval.err" || cat "$tmp/eval.err"
exact=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["niah"][0]["accuracy"])' \
  "$tmp/eval.json" 2>/dev/null)
echo "# miras-eval --niah 176: exact match ${exact:-none}"
if at_least "$acc" 0.99; then bar=0.95
else bar=$(awk -v a="$acc" 'BEGIN { print a ^ 8 - 0.1 }'); fi
check "niah: greedy answers up to the terminator match exactly on >= $bar at 176 bytes" \
  at_least "$exact" "$bar"
# the text form says the same count
check "niah: miras-eval's text output agrees with its JSON" bash -c \
  "'$eval' '$tmp/run/ckpt.safetensors' --niah 176 --examples 64 --threads 1 | \
   grep -q \"niah      passkey, 176 bytes: \$(python3 -c 'import json,sys; \
   print(json.load(open(sys.argv[1]))[\"niah\"][0][\"hits\"])' '$tmp/eval.json')/64 exact\""

# miras-bench's length-generalisation suites: miras-eval run on each checkpoint, its
# accuracies as the case's points (3 training steps: the machinery only)
"$build/tools/miras-bench" quality --suite niah-long-passkey,mqar-long --steps 3 \
  --variants gated-deltanet --threads 1 --out "$tmp/q" --json-only >"$tmp/q.jsonl" 2>"$tmp/q.err" ||
  tail -n 3 "$tmp/q.err"
check "niah-long / mqar-long: five points per case, from miras-eval's lengths" python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
want = {"niah-long-passkey": [(192, 0), (384, 0), (768, 0), (1536, 0), (3072, 0)],
        "mqar-long": [(64, 4), (128, 4), (256, 4), (64, 8), (64, 16)]}
assert sorted(r["suite"] for r in rows) == sorted(want), rows
for r in rows:
    assert r["status"] == "ok", r
    got = [(p["length"], p.get("pairs", 0)) for p in r["points"]]
    assert got == want[r["suite"]], got
    assert all(0 <= p["accuracy"] <= 1 for p in r["points"]) and r["eval_wall_s"] > 0
    assert r["cpu_s"] > 0 and r["eval_cpu_s"] > 0, r
' "$tmp/q.jsonl"
check "niah-long / mqar-long: the per-length tables and charts" bash -c \
  "grep -q '| 192 (1x) | 384 (2x) | 768 (4x) | 1536 (8x) | 3072 (16x) |' \
     '$tmp/q/quality-niah-long-passkey-points.md' && \
   grep -q 'L=128 N=4' '$tmp/q/quality-mqar-long-points.md' && \
   [ \$(grep -c '<polyline class=\"series\"' '$tmp/q/quality-niah-long-passkey-points.svg') = 1 ]"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
