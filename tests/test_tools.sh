#!/usr/bin/env bash
# Tests of the driver programs miras-train, miras-eval and miras-sample, run
# by tools/test.sh on each build: tests/test_tools.sh BUILD_DIR [--quick].
# --quick (the sanitizer pass) trains fewer steps in the smoke tests.
# Prints "ok - …" / "FAIL - …" per check and ends with "N passed, M failed".
set -uo pipefail
build=${1:?usage: tests/test_tools.sh BUILD_DIR [--quick]}
quick=${2:-}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
train=$build/tools/miras-train eval=$build/tools/miras-eval sample=$build/tools/miras-sample
text=$src/data/tinyshakespeare.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
no_leftovers() { # no file but the expected ones, no temporary files
  [ -z "$(find "$1" -name '*.tmp*' 2>/dev/null)" ]
}

# A small text of our own, quick to train on, for the error and resume tests.
python3 - "$tmp/small.txt" <<'EOF'
import random, sys
random.seed(1)
words = "the sky is blue and the grass is green here we go there and back again".split()
open(sys.argv[1], "w").write(" ".join(random.choice(words) for _ in range(6000)))
EOF
tiny=(--d-model 16 --layers 1 --heads 2 --seq-len 16 --batch 4 --eval-batches 1)
small="--d-model 16 --layers 1 --heads 2 --batch 2 --eval-batches 1"

# ------------------------------------------------------------------ usage
for p in "$train" "$eval" "$sample"; do
  n=$(basename "$p")
  check "$n --help" bash -c "'$p' --help | grep -q '^usage: $n'"
  check "$n --version" bash -c "'$p' --version | grep -q '^$n '"
  check "$n bad flag -> exit 2" status 2 "unknown option '--bogus'.*--help" "$p" --bogus
done
check "train bad number -> exit 2" status 2 "--steps: 'ten'" "$train" --steps ten
# --keys: every key of the three tables, each with its default, the component names, and
# the keys of the other mixer kinds that have their own (hope's)
check "train --keys lists the model, block and component keys" bash -c "'$train' --keys > '$tmp/keys' &&
  grep -q '^hope (--model hope):' '$tmp/keys' && grep -q '^  memory_chunk=1 ' '$tmp/keys' &&
  grep -q '^  window=64  (in \[1, 16777216\])' '$tmp/keys' && grep -q '^  gate_rank=32 ' '$tmp/keys' &&
  grep -q '^  kl_init_sd=0  (>= 0)' '$tmp/keys' && grep -q '^  bias=l2 .*: .*yaad' '$tmp/keys' &&
  grep -q '^  lq_form=frobenius .*: frobenius, paper$' '$tmp/keys'"
check "train unknown model -> exit 2" status 2 "unknown spec 'no-such-model'" \
  "$train" --model no-such-model --data "$tmp/small.txt" --out "$tmp/x"
check "train bad --set -> exit 2" status 2 "bias" \
  "$train" --set bias=nonesuch --data "$tmp/small.txt" --out "$tmp/x" "${tiny[@]}"
check "train lm without --data -> exit 2" status 2 "needs --data" "$train" --task lm
check "train NIAH prompt too short -> exit 2" status 2 "cannot hold the needle" \
  "$train" --task niah --seq-len 16 --out "$tmp/x"
check "train text too short for the window -> exit 2" status 2 "too short" \
  "$train" --data "$tmp/small.txt" --seq-len 100000 --out "$tmp/x"
check "train --resume with --lr -> exit 2" status 2 "only --steps" \
  "$train" --resume "$tmp/none" --lr 1
check "eval without checkpoint -> exit 2" status 2 "no checkpoint" "$eval"
check "eval bad --mqar -> exit 2" status 2 "not L:N" "$eval" x --mqar 64
check "bench unknown option -> exit 2 naming it" status 2 "unknown argument '--bogus'" \
  "$build/tools/miras-bench" --bogus
check "bench option without its value -> exit 2" status 2 "--threads wants a value" \
  "$build/tools/miras-bench" layer --threads
check "train --d-model beyond the model's range -> exit 2 naming it" status 2 \
  "--d-model must be in \[1, 65536\], got 100000" "$train" --d-model 100000
check "nothing written by usage errors" test ! -e "$tmp/x"

# ------------------------------------------------------------------ miras-bench
bench=$build/tools/miras-bench
for sub in layer train quality; do
  check "bench $sub --variants bogus -> exit 2 naming it and the known ones" status 2 \
    "'bogus'.*(known|preset).*gated-deltanet" "$bench" $sub --variants bogus --json-only
done
# every table ends with the machine it was measured on, and the ISA each library really ran
machine_line() {
  env ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell "$bench" ops --reps 1 --budget-s 0.05 \
    > "$tmp/machine.out" 2>&1 &&
    grep -Eq '^machine: .+ \([0-9]+ CPUs online\); OpenBLAS core Haswell, oneDNN ISA avx2, own kernels [a-z0-9+]+$' \
      "$tmp/machine.out"
}
check "bench prints the machine: CPU model, OpenBLAS core, oneDNN ISA (capped: avx2), own kernels" \
  machine_line
# a train and a layer case report their step's matrix-product GFLOP and GFLOP/s (mi_flops)
case_flops() {
  "$bench" "$@" --reps 1 --threads 1 --batch 1 --seq-len 16 --json-only > "$tmp/flops.jsonl" \
    2>/dev/null && python3 - "$tmp/flops.jsonl" <<'PY'
import json, sys
c = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
sys.exit(0 if c and all(r["gflop"] > 0 and r["gflops"] > 0 for r in c) else 1)
PY
}
check "bench train reports gflop > 0 and gflops > 0" case_flops train --variants transformer
check "bench layer reports gflop > 0 and gflops > 0" case_flops layer --variants titans --chunks 1,16
# and the share of the FMA peak measured on the case's thread count (mi_fma_peak)
case_peak() {
  "$bench" train --variants transformer --reps 1 --threads 1 --batch 1 --seq-len 16 \
    > "$tmp/peak.out" 2>/dev/null &&
    grep -Eq '^train\.transformer +1 .* [0-9.]+ +[0-9]+% +[0-9.]+ (MB|GB) ' "$tmp/peak.out" &&
    grep -Eq '^peak = GFLOP/s / the f32 FMA peak on 1 thread, [0-9.]+ GFLOP/s' "$tmp/peak.out"
}
check "bench train prints GFLOP/s as a share of the measured f32 FMA peak" case_peak
# a train variant's own +KEY=VALUE reach the mixer (and the case's config says so); an
# unknown key fails that case naming it; a '+' without KEY= is a usage error
train_override() {
  "$bench" train --variants hope+recompute=true --reps 1 --threads 2 --batch 2 --seq-len 16 \
    --json-only > "$tmp/override.jsonl" 2>/dev/null &&
    grep -q '"name":"train.hope+recompute=true","config":"mixer hope chunk=16 memory_chunk=16 recompute=true;' \
      "$tmp/override.jsonl"
}
check "bench train SPEC+KEY=VALUE: the override reaches the mixer" train_override
unknown_override() {
  "$bench" train --variants titans+bogus_key=1 --reps 1 --threads 1 --batch 1 --seq-len 16 \
    > "$tmp/override.out" 2>&1
  [ $? = 1 ] && grep -q "train.titans+bogus_key=1 .*bogus_key" "$tmp/override.out"
}
check "bench train with an unknown override key -> the case fails naming it" unknown_override
check "bench train 'hope+recompute' (no =VALUE) -> exit 2" status 2 "each override is \+KEY=VALUE" \
  "$bench" train --variants hope+recompute
# --rounds N: the case list N times over; a case's JSON has each round's median, its median
# is theirs, and a target relative to another case is the median of the per-round ratios
rounds_relative() {
  "$bench" layer --variants titans,memora --chunks 16 --rounds 3 --reps 1 --threads 2 \
    > "$tmp/rounds.out" 2>/dev/null && python3 - "$tmp/rounds.out" <<'PY'
import json, re, statistics, sys
lines = open(sys.argv[1]).read().splitlines()
c = {r["name"]: r for r in (json.loads(l) for l in lines if l.startswith("{"))}
t, m = c["layer.titans.b16"], c["layer.memora.b16"]
ok = all(r["rounds"] == 3 and len(r["round_median_ms"]) == 3 and
         abs(r["median_ms"] - statistics.median(r["round_median_ms"])) <= 1e-3 * r["median_ms"]
         for r in (t, m))
q = statistics.median(a / b for a, b in zip(m["round_median_ms"], t["round_median_ms"]))
line = [l for l in lines if l.startswith("layer.memora.b16 ") and "x layer.titans.b16" in l]
got = line and re.search(r" ([0-9.]+)x layer\.titans\.b16 \(median of 3 rounds' ratios, "
                         r"[0-9.]+-[0-9.]+\), target <= 1\.5x: (met|missed)$", line[0])
sys.exit(0 if ok and got and abs(float(got.group(1)) - q) <= 0.006 else 1)
PY
}
check "bench layer --rounds 3: each round's median, their median, the ratio to titans" \
  rounds_relative
# each train case runs its own mixer, whichever ran before it (a case's spec is its own)
train_cases_own_spec() {
  "$bench" train --variants titans,gated-deltanet --reps 1 --threads 1 --batch 1 --seq-len 16 \
    --json-only > "$tmp/two.jsonl" 2>/dev/null && python3 - "$tmp/two.jsonl" <<'PY'
import json, sys
c = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
sys.exit(0 if len(c) == 2 and c[0]["gflop"] != c[1]["gflop"] and c[0]["loss"] != c[1]["loss"]
         else 1)
PY
}
check "bench train titans,gated-deltanet: two different models ran" train_cases_own_spec
check "bench ops --rounds -> exit 2 (layer and train only)" status 2 \
  "--rounds is an option of layer and train" "$bench" ops --rounds 2
check "bench ops --variants -> exit 2 (ops has none)" status 2 "--variants is an option of" \
  "$bench" ops --variants titans
# A suite whose data is not found is skipped; under --check that is a failure. A copy of
# miras-bench outside any checkout, run from elsewhere, finds no tests/data/.
mkdir -p "$tmp/elsewhere/a/b" && cp "$bench" "$tmp/elsewhere/a/b/"
skipped_fails_check() {
  local abs
  abs=$(cd "$build" && pwd)
  (cd "$tmp/elsewhere" && status 1 "--check: 0 cases failed, 1 skipped" \
     env LD_LIBRARY_PATH="$abs/src" a/b/miras-bench quality --suite quick-lm \
     --variants linear-attention --steps 1 --check --train "$abs/tools/miras-train" \
     --out "$tmp/elsewhere/q" --json-only) &&
    grep -q "skipping suite quick-lm: tests/data/quality_text.txt not found" "$tmp/err"
}
check "bench quality --check, a suite skipped for its data -> exit 1 naming it" \
  skipped_fails_check
# --seed replaces the suite's seed in every case's command (and so in its checkpoint)
seed_reaches_train() {
  (cd "$src" && "$bench" quality --suite quick-mqar --variants linear-attention --steps 2 \
     --seed 7 --out "$tmp/qseed" --json-only > "$tmp/qseed.jsonl" 2>/dev/null) &&
    grep -q '"status":"ok"' "$tmp/qseed.jsonl" && grep -q -- '--seed 7 ' "$tmp/qseed.jsonl" &&
    ! grep -q -- '--seed 1 ' "$tmp/qseed.jsonl"
}
check "bench quality --seed N runs every case with seed N" seed_reaches_train
# each case's CPU time is its own run's: positive, at most its wall time on every core
cpu_of_case() {
  python3 - "$tmp/qseed.jsonl" <<'PY'
import json, os, sys
c = [json.loads(l) for l in open(sys.argv[1]) if '"status":"ok"' in l][0]
sys.exit(0 if 0 < c["cpu_s"] <= (os.cpu_count() or 1) * c["wall_s"] + 0.05 else 1)
PY
}
check "bench quality records each case's CPU time (cpu_s) beside its wall time" cpu_of_case
# --replot: the reports from JSON lines, a later line of a suite and variant replacing an
# earlier one, a table's lines passed over; a malformed line named by file and line
replot_ok() {
  local pt='"points":[{"length":192,"accuracy":0.5},{"length":384,"accuracy":0.25}]'
  {
    echo "{\"suite\":\"niah-long-passkey\",\"variant\":\"moneta\",\"steps\":3,\"val_acc\":0.1,\"wall_s\":2,\"cpu_s\":1,$pt,\"status\":\"ok\"}"
    echo "| a table's line |"
    echo "{\"suite\":\"niah-long-passkey\",\"variant\":\"gated-deltanet\",\"steps\":3,\"val_acc\":0.9,$pt,\"status\":\"ok\"}"
  } > "$tmp/r1.jsonl"
  echo "{\"suite\":\"niah-long-passkey\",\"variant\":\"moneta\",\"steps\":3,\"val_acc\":0.7,\"wall_s\":4,\"cpu_s\":3,\"points\":[{\"length\":192,\"accuracy\":0.875}],\"status\":\"ok\"}" \
    > "$tmp/r2.jsonl"
  "$bench" quality --replot "$tmp/r1.jsonl,$tmp/r2.jsonl" --out "$tmp/rp" > "$tmp/rp.out" 2>&1 &&
    grep -q '| `moneta` | 0.700 | 0.875 | - | 4.00 s (3.00 s CPU) |' "$tmp/rp/quality-niah-long-passkey-points.md" &&
    grep -q '| `gated-deltanet` | 0.900 | 0.500 | 0.250 |' "$tmp/rp/quality-niah-long-passkey-points.md" &&
    [ "$(grep -c '<polyline class="series"' "$tmp/rp/quality-niah-long-passkey-points.svg")" = 2 ]
}
check "bench quality --replot: tables and charts from earlier JSON lines, later lines win" replot_ok
printf '{"suite":"niah-long-passkey","variant":"x","status":"ok"}\n{"suite":"nope","variant":"x","status":"ok"}\n' \
  > "$tmp/r3.jsonl"
check "bench quality --replot, an unknown suite -> exit 1 naming file and line" status 1 \
  "r3.jsonl:2: unknown suite 'nope'" "$bench" quality --replot "$tmp/r3.jsonl" --out "$tmp/rp3"
check "bench quality --replot with --suite -> exit 2 (it runs nothing)" status 2 \
  "--replot runs nothing" "$bench" quality --replot "$tmp/r3.jsonl" --suite lm
check "bench quality --seed 0 -> exit 2" status 2 "--seed wants a positive integer" \
  "$bench" quality --seed 0

# ------------------------------------------------------------------ missing and unwritable
check "train missing --data -> exit 1" status 1 "no-such.txt" \
  "$train" --data "$tmp/no-such.txt" --out "$tmp/m" "${tiny[@]}"
check "eval missing checkpoint -> exit 1" status 1 "cannot load checkpoint" "$eval" "$tmp/none"
check "sample missing checkpoint -> exit 1" status 1 "cannot load checkpoint" "$sample" "$tmp/none"
check "train --resume missing -> exit 1" status 1 "cannot load checkpoint" \
  "$train" --resume "$tmp/none"
: >"$tmp/afile"
check "train --out is a file -> exit 1" status 1 "not a directory|cannot create" \
  "$train" --data "$tmp/small.txt" --out "$tmp/afile/run" "${tiny[@]}" --steps 2
check "train --out unwritable -> exit 1" status 1 "cannot (create|write)" \
  "$train" --data "$tmp/small.txt" --out /proc/miras-test-run "${tiny[@]}" --steps 2

# ------------------------------------------------------------------ resume, bit for bit
common=(--data "$tmp/small.txt" "${tiny[@]}" --steps 40 --eval-every 10 --log-every 5 --lr 3e-3)
"$train" "${common[@]}" --out "$tmp/full" >"$tmp/full.out" 2>&1
"$train" "${common[@]}" --out "$tmp/part" --stop-at 20 >/dev/null 2>&1
cp "$tmp/part/ckpt.safetensors" "$tmp/at20.safetensors"
"$train" --resume "$tmp/part/ckpt.safetensors" >"$tmp/part.out" 2>&1
check "resume: 40 steps == 20 + resume 20 (checkpoint bytes: parameters, optimizer, metadata)" \
  cmp -s "$tmp/full/ckpt.safetensors" "$tmp/part/ckpt.safetensors"
check "resume: identical log.csv" cmp -s "$tmp/full/log.csv" "$tmp/part/log.csv"
check "resume: identical validation lines" bash -c \
  "diff <(grep -E '^step (30|40)/' '$tmp/full.out' | grep 'val loss') \
        <(grep -E '^step (30|40)/' '$tmp/part.out' | grep 'val loss')"
check "resume: log has 8 rows" test "$(wc -l <"$tmp/full/log.csv")" = 9
check "no temporary files left" no_leftovers "$tmp/full"
# stopped between log rows: the pending losses and gradient norms travel in the checkpoint
"$train" "${common[@]}" --out "$tmp/part17" --stop-at 17 >/dev/null 2>&1
"$train" --resume "$tmp/part17/ckpt.safetensors" >/dev/null 2>&1
check "resume: stopped between log rows (17), identical checkpoint and log.csv" bash -c \
  "cmp -s '$tmp/full/ckpt.safetensors' '$tmp/part17/ckpt.safetensors' && \
   cmp -s '$tmp/full/log.csv' '$tmp/part17/log.csv'"

# ------------------------------------------------------------------ gradient accumulation
# --accum 4: the batch in four micro-batches, the same update up to float rounding,
# resumable. The first step (the same parameters, sums in another order) agrees to 1e-6
# relative, loss and gradient norm; over 20 steps the losses stay within 1e-5 (they
# differ by ~1e-7) and each step's gradient norm within 1e-3: in f32 it moves by up to
# 1e-4 from one summation order to the other after a few steps (measured with and
# without accumulation, log every step: 2e-5 to 1e-4 at steps 14-17 in two builds of
# two trees), while the losses do not.
"$train" "${common[@]}" --steps 20 --log-every 1 --accum 4 --out "$tmp/accum" >/dev/null 2>&1
"$train" "${common[@]}" --steps 20 --log-every 1 --out "$tmp/noaccum" >/dev/null 2>&1
logs_close() { # logs_close A B: same rows; step 1 within 1e-6, losses 1e-5, norms 1e-3
  python3 - "$1" "$2" <<'EOF'
import csv, sys
a, b = (list(csv.reader(open(f))) for f in sys.argv[1:3])
def close(u, v, tol):
    return u == v == "" or abs(float(u) - float(v)) <= tol * max(1, abs(float(v)))
def row_ok(h, x, y):
    first = x[0] == "1"
    return len(x) == len(y) == len(h) and all(
        close(u, v, 1e-6 if first else 1e-3 if name == "grad_norm" else 1e-5)
        for name, u, v in zip(h, x, y))
ok = len(a) == len(b) > 1 and a[0] == b[0] and all(row_ok(a[0], x, y) for x, y in zip(a[1:], b[1:]))
if not ok: print(f"  {a[1]} vs {b[1]}; {a[-1]} vs {b[-1]}")
sys.exit(0 if ok else 1)
EOF
}
check "accum 4 == one pass (log.csv: step 1 within 1e-6, losses 1e-5, norms 1e-3)" \
  logs_close "$tmp/accum/log.csv" "$tmp/noaccum/log.csv"
check "accum: the checkpoint records train.accum" grep -aq '"train.accum":"4"' \
  "$tmp/accum/ckpt.safetensors"
"$train" "${common[@]}" --steps 20 --log-every 1 --accum 4 --out "$tmp/accum10" --stop-at 10 \
  >/dev/null 2>&1
"$train" --resume "$tmp/accum10/ckpt.safetensors" >/dev/null 2>&1
check "accum: stop at 10 + resume gives the same checkpoint" \
  cmp -s "$tmp/accum/ckpt.safetensors" "$tmp/accum10/ckpt.safetensors"
check "train --accum not dividing --batch -> exit 2" status 2 "--accum \(3\) must divide" \
  "$train" --data "$tmp/small.txt" "${tiny[@]}" --accum 3

# --recompute: every block recomputed in the backward, the same training bit for bit
"$train" "${common[@]}" --steps 20 --log-every 1 --recompute --out "$tmp/recompute" >/dev/null 2>&1
check "recompute == keeping the activations (identical log.csv and checkpoint)" bash -c \
  "cmp -s '$tmp/recompute/log.csv' '$tmp/noaccum/log.csv' && \
   cmp -s '$tmp/recompute/ckpt.safetensors' '$tmp/noaccum/ckpt.safetensors'"

# ------------------------------------------------------------------ gradient norm and clipping
grad_norm_ok() { # grad_norm_ok LOG ROWS: the header, and grad_norm finite and > 0 on ROWS rows
  python3 - "$1" "$2" <<'EOF'
import csv, math, sys
f = open(sys.argv[1])
header = f.readline().strip().split(",")
rows = list(csv.DictReader(f, fieldnames=header))
norms = [float(r["grad_norm"] or "nan") for r in rows] if "grad_norm" in header else []
ok = header == "step,lr,train_loss,grad_norm,val_loss,val_acc".split(",") and \
     len(norms) == int(sys.argv[2]) and all(math.isfinite(g) and g > 0 for g in norms)
if not ok: print(f"  header {header}, grad_norm {norms}")
sys.exit(0 if ok else 1)
EOF
}
check "log: grad_norm column, finite and > 0 on every row" grad_norm_ok "$tmp/full/log.csv" 8
check "progress lines show loss and norm (4 with lr, 4 with validation loss)" bash -c \
  "[ \$(grep -Ec '^step [0-9]+/40  loss [0-9.]+  norm [0-9.]+  lr ' '$tmp/full.out') = 4 ] && \
   [ \$(grep -Ec '^step [0-9]+/40  loss [0-9.]+  norm [0-9.]+  val loss ' '$tmp/full.out') = 4 ]"
clip_run() { # clip_run NAME CLIP [OPTION...]: 20 steps, validation every 10; stdout, stderr kept
  local name=$1 clip=$2
  shift 2
  "$train" --data "$tmp/small.txt" "${tiny[@]}" --steps 20 --eval-every 10 --log-every 5 \
    --clip "$clip" --out "$tmp/$name" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
}
clip_run clip-tiny 1e-6
warned='^miras-train: warning: 10 of 10 steps since step (0|10) were clipped '
warned+='\(grad norm mean [0-9.e+-]+ > --clip 1e-06\); consider a lower --lr$'
check "--clip 1e-6: a warning at each validation that most steps were clipped" bash -c \
  "[ \$(grep -c 'warning' '$tmp/clip-tiny.err') = 2 ] && \
   [ \$(grep -Ec '$warned' '$tmp/clip-tiny.err') = 2 ] && \
   grep -q 'since step 10 were' '$tmp/clip-tiny.err'"
check "--clip 1e-6: the last line counts 20 of 20 steps clipped" \
  grep -Eq '^done at step 20: .*; 20 of 20 steps clipped \(--clip 1e-06\)$' "$tmp/clip-tiny.out"
clip_run clip-huge 1e6
check "--clip 1e6: no warning, 0 of 20 steps clipped" bash -c \
  "[ ! -s '$tmp/clip-huge.err' ] && \
   grep -Eq '^done at step 20: .*; 0 of 20 steps clipped \(--clip 1e\+06\)$' '$tmp/clip-huge.out'"
clip_run clip-off 0
check "--clip 0: no warning, no count, the same log as --clip 1e6 (norms before clipping)" \
  bash -c "[ ! -s '$tmp/clip-off.err' ] && \
           grep -Eq '^done at step 20: [^;]*$' '$tmp/clip-off.out' && \
           cmp -s '$tmp/clip-off/log.csv' '$tmp/clip-huge/log.csv'"
clip_run clip-part 1e-6 --stop-at 13
"$train" --resume "$tmp/clip-part/ckpt.safetensors" >"$tmp/clip-part.out" 2>"$tmp/clip-part.err"
check "--clip 1e-6 resumed at step 13: the same warning, log and count as the whole run" bash -c \
  "diff <(grep 'since step 10' '$tmp/clip-tiny.err') '$tmp/clip-part.err' && \
   cmp -s '$tmp/clip-tiny/log.csv' '$tmp/clip-part/log.csv' && \
   grep -q '; 20 of 20 steps clipped' '$tmp/clip-part.out'"

# an older run: log.csv without grad_norm, a checkpoint without the gradient-norm keys
mkdir -p "$tmp/old"
python3 - "$tmp/part/log.csv" "$tmp/at20.safetensors" "$tmp/old" <<'EOF'
import json, struct, sys
rows = [l.rstrip("\n").split(",") for l in open(sys.argv[1])]
i = rows[0].index("grad_norm")
with open(sys.argv[3] + "/log.csv", "w") as f:
    f.writelines(",".join(r[:i] + r[i + 1:]) + "\n" for r in rows
                 if r[0] == "step" or int(r[0]) <= 20)
b = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
for k in ["grad_norm_sum", "grad_norm_count", "period_grad_norm_sum", "period_steps",
          "period_clipped", "clipped_steps", "counted_steps"]:
    del h["__metadata__"]["train." + k]
def write(path, header):
    s = json.dumps(header).encode()
    open(path, "wb").write(struct.pack("<Q", len(s)) + s + b[8 + n:])
write(sys.argv[3] + "/ckpt.safetensors", h)
h["__metadata__"]["train.loss_count"] = "-3"
write(sys.argv[3] + "/bad.safetensors", h)
EOF
"$train" --resume "$tmp/old/ckpt.safetensors" >"$tmp/old.out" 2>&1
check "resume an older run: its rows kept, new rows with grad_norm, the same training" bash -c \
  "cmp -s <(cut -d, -f1-3,5- '$tmp/full/log.csv') <(cut -d, -f1-3,5- '$tmp/old/log.csv') && \
   [ \"\$(cut -d, -f4 '$tmp/old/log.csv' | sed -n '2,5p' | tr -d '\n')\" = '' ] && \
   [ \$(cut -d, -f4 '$tmp/old/log.csv' | sed -n '6,9p' | grep -c '^[0-9]') = 4 ] && \
   grep -q 'of 20 steps since step 20 clipped' '$tmp/old.out'"
check "train --resume, a bad train.loss_count -> exit 1" status 1 \
  "train.loss_count: '-3' is not a whole number in \\[0, 20\\]" \
  "$train" --resume "$tmp/old/bad.safetensors" --out "$tmp/r"
mkdir -p "$tmp/noloss" && cp "$tmp/at20.safetensors" "$tmp/noloss/ckpt.safetensors"
printf 'step,lr,grad_norm,val_loss\n5,0.1,1,\n' >"$tmp/noloss/log.csv"
check "train --resume, a log.csv without train_loss -> exit 1" status 1 "no 'train_loss' column" \
  "$train" --resume "$tmp/noloss/ckpt.safetensors"

# ------------------------------------------------------------------ bad checkpoints
ck=$tmp/full/ckpt.safetensors
head -c 3000 "$ck" >"$tmp/truncated.safetensors"
head -c 4000 /dev/urandom >"$tmp/garbage.safetensors"
python3 - "$tmp/at20.safetensors" "$tmp/other.safetensors" <<'EOF'
# the same file claiming a model with another layer count
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["__metadata__"]["lm.layers"] = "2"
s = json.dumps(h).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(s)) + s + b[8 + n:])
EOF
# one flipped bit in the last tensor's bytes: caught by its CRC-32C
python3 - "$tmp/at20.safetensors" "$tmp/flipped.safetensors" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-1] ^= 0x01
open(sys.argv[2], "wb").write(b)
EOF
check "eval with one flipped data byte -> exit 1" status 1 "checksum mismatch \\(file corrupt\\?\\)" \
  "$eval" "$tmp/flipped.safetensors"
check "train --resume with one flipped data byte -> exit 1" status 1 "checksum mismatch" \
  "$train" --resume "$tmp/flipped.safetensors" --out "$tmp/r"
for p in "$eval" "$sample"; do
  n=$(basename "$p")
  check "$n truncated checkpoint -> exit 1" status 1 "cannot load checkpoint" "$p" "$tmp/truncated.safetensors"
  check "$n corrupted checkpoint -> exit 1" status 1 "cannot load checkpoint" "$p" "$tmp/garbage.safetensors"
  check "$n checkpoint of another model -> exit 1" status 1 "does not fit its model.*blocks.1" \
    "$p" "$tmp/other.safetensors"
done
check "train --resume truncated -> exit 1" status 1 "cannot load checkpoint" \
  "$train" --resume "$tmp/truncated.safetensors" --out "$tmp/r"
check "train --resume another model -> exit 1" status 1 "does not fit" \
  "$train" --resume "$tmp/other.safetensors" --out "$tmp/r"
check "nothing written by failed resumes" test ! -e "$tmp/r/ckpt.safetensors"
# Every train.* and opt.* value read back is checked like its option: exit 1 naming the
# key, the value and the range, before --out exists.
set_meta() { # set_meta IN OUT KEY=VALUE...: IN with those metadata values, the header resized
  python3 - "$@" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
for kv in sys.argv[3:]:
    k, v = kv.split("=", 1)
    h["__metadata__"][k] = v
s = json.dumps(h).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(s)) + s + b[8 + n:])
EOF
}
refused_before_out() { # refused_before_out PATTERN: exit 1 at once, PATTERN on stderr, no --out
  status 1 "$1" timeout 5 "$train" --resume "$tmp/badmeta.safetensors" --out "$tmp/rb" &&
    test ! -e "$tmp/rb"
}
for kv in "train.eval_every=0|train.eval_every must be >= 1, got 0" \
          "train.log_every=0|train.log_every must be >= 1, got 0" \
          "train.eval_batches=-1|train.eval_batches must be in \[1, 1048576\], got -1" \
          "train.clip=-1|train.clip must be >= 0, got -1" "train.loss_sum=abc|train.loss_sum: 'abc' .*finite number >= 0" \
          "opt.step=-1|opt.step: '-1' .*\[0, " "train.batch=0|train.batch must be in \[1, 1048576\], got 0" \
          "train.seq_len=0|train.seq_len must be in \[1, 16777216\], got 0" \
          "train.opt.lr=-1|train.opt.lr must be >= 0, got -1" \
          "train.seed=-1|train.seed: '-1' is not a whole number" "train.niah=x|train.niah: 'x' is not passkey, word" \
          "train.steps=abc|train.steps: 'abc' is not a whole number"; do
  setting=${kv%%|*} message=${kv#*|}
  set_meta "$tmp/at20.safetensors" "$tmp/badmeta.safetensors" "$setting"
  check "train --resume, $setting in the checkpoint -> exit 1 naming it, no --out" \
    refused_before_out "$message"
done
# the model's sizes: each refused within a second (timeout 5), before a model is made; within
# their ranges, a size the file's tensors cannot hold is refused before building too
for kv in "lm.layers=1000000|lm config: layers must be in \[1, 1024\], got 1000000" \
          "lm.vocab=100000000|vocab must be in \[1, 16777216\], got 100000000" \
          "lm.mlp_hidden=100000000|mlp_hidden must be in \[0, 1048576\], got 100000000" \
          "lm.d_model=1000000|d_model must be in \[1, 65536\], got 1000000" \
          "lm.layers=1000|does not fit its metadata: .*lm.layers 1000 .* the file holds" \
          "lm.d_model=65536|does not fit its metadata: .*lm.d_model 65536.* the file holds"; do
  setting=${kv%%|*} message=${kv#*|}
  set_meta "$tmp/at20.safetensors" "$tmp/badmeta.safetensors" "$setting"
  check "train --resume, $setting in the checkpoint -> exit 1 at once, no --out" \
    refused_before_out "$message"
  check "eval, $setting in the checkpoint -> exit 1 at once" status 1 "$message" \
    timeout 5 "$eval" "$tmp/badmeta.safetensors"
done
for kv in "train.next_example=-1|train.next_example: '-1' is not train.step · train.batch = 20 · 4 = 80" \
          "train.next_example=81|train.next_example: '81' is not" \
          "train.pairs=-5|train.pairs must be in \[1, 1048576\], got -5" \
          "train.opt.output=7|train.opt.output must be in \[0, 1\], got 7" \
          "train.opt.nl_form=-1|train.opt.nl_form must be in \[0, 1\], got -1" \
          "train.colour=red|unknown metadata key 'train.colour'"; do
  setting=${kv%%|*} message=${kv#*|}
  set_meta "$tmp/at20.safetensors" "$tmp/badmeta.safetensors" "$setting"
  check "train --resume, $setting in the checkpoint -> exit 1 naming it, no --out" \
    refused_before_out "$message"
done
set_meta "$tmp/at20.safetensors" "$tmp/badmeta.safetensors" train.warmup=40
check "train --resume, train.warmup >= train.steps -> exit 1, no --out" \
  refused_before_out "train.warmup \(40\) must be less than train.steps"
set_meta "$tmp/at20.safetensors" "$tmp/badmeta.safetensors" train.opt.beta1=2
check "train --resume, train.opt.beta1=2 (the optimizer's check) -> exit 1, no --out" \
  refused_before_out "bad run settings: adamw: beta1 must be in \[0, 1\), got 2"
# A checkpoint whose weights hold a NaN (a diverged run, or corruption a checksum would
# not see): every tool refuses it, naming the tensor.
python3 - "$tmp/at20.safetensors" "$tmp/nan.safetensors" <<'EOF'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
name = next(k for k, v in h.items() if k != "__metadata__" and v["dtype"] == "F32")
start = 8 + n + h[name]["data_offsets"][0]
b[start:start + 4] = struct.pack("<f", float("nan"))
h["__metadata__"] = {k: v for k, v in h["__metadata__"].items() if "crc" not in k}
s = json.dumps(h).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(s)) + s + b[8 + n:])
EOF
for p in "$eval" "$sample"; do
  check "$(basename "$p") checkpoint with a NaN weight -> exit 1 naming the tensor" status 1 \
    "tensor '.*' holds nan at index 0" "$p" "$tmp/nan.safetensors"
done
check "train --resume, a NaN weight -> exit 1, no --out" status 1 "holds nan" \
  "$train" --resume "$tmp/nan.safetensors" --out "$tmp/rn"
check "nothing written by the NaN resume" test ! -e "$tmp/rn"
# kill -9 at random points of a run that checkpoints every step: log.csv always holds every
# row up to the checkpoint's step (the log is written before the checkpoint is renamed),
# no temporary file outlives the next start, and the run resumes.
log_covers_ckpt() { # log_covers_ckpt DIR: rows 1..S in DIR/log.csv, S = the checkpoint's opt.step
  python3 - "$1" <<'EOF'
import json, struct, sys
d = sys.argv[1]
b = open(d + "/ckpt.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
step = int(json.loads(b[8:8 + n])["__metadata__"]["opt.step"])
rows = [int(l.split(",")[0]) for l in open(d + "/log.csv").read().splitlines()[1:] if l]
missing = [s for s in range(1, step + 1) if s not in rows]
if missing: print(f"  checkpoint at step {step}, log.csv lacks rows {missing[:5]}")
sys.exit(1 if missing else 0)
EOF
}
kill_trials() { # kill_trials N: N runs killed after random delays; all must keep their rows
  local bad=0 killed=0
  for i in $(seq "$1"); do
    local d=$tmp/kill$i
    "$train" --data "$tmp/small.txt" "${tiny[@]}" --steps 5000 --eval-every 1 --log-every 1 \
      --out "$d" >/dev/null 2>&1 &
    local pid=$!
    sleep "0.$((RANDOM % 9 + 1))$((RANDOM % 10))"
    kill -9 "$pid" 2>/dev/null && killed=$((killed + 1))
    wait "$pid" 2>/dev/null
    [ ! -f "$d/ckpt.safetensors" ] || log_covers_ckpt "$d" || bad=$((bad + 1))
  done
  echo "  $killed of $1 runs killed mid-run, $bad lost a log row"
  [ "$bad" = 0 ] && [ "$killed" -ge $(($1 / 2)) ]
}
check "kill -9 at 20 random points: log.csv never lacks a row the checkpoint has" kill_trials 20
# the first killed run that had written a checkpoint (a run killed before its first step
# has none: on a busy machine the earliest kills can come before it)
killed_dir=
for i in $(seq 20); do
  [ -f "$tmp/kill$i/ckpt.safetensors" ] && { killed_dir=$tmp/kill$i; break; }
done
check "a killed run resumes, and its dead temporary files are gone" bash -c \
  "[ -n '$killed_dir' ] && '$train' --resume '$killed_dir/ckpt.safetensors' --steps 5000 \
     --stop-at \$(( \$(grep -c . '$killed_dir/log.csv') + 5 )) >/dev/null 2>&1 && \
   [ -z \"\$(find '$killed_dir' -name '*.tmp.*')\" ]"

# ------------------------------------------------------------------ FIFOs
# A FIFO with no writer would block a reader forever: every loader refuses it at once.
mkfifo "$tmp/fifo"
layer=$build/tools/miras-layer
mkdir -p "$tmp/fifolog" && cp "$tmp/at20.safetensors" "$tmp/fifolog/ckpt.safetensors" &&
  mkfifo "$tmp/fifolog/log.csv"
check "train --resume FIFO -> exit 1 at once" status 1 "not a regular file \(a FIFO\)" \
  timeout 5 "$train" --resume "$tmp/fifo" --out "$tmp/ff"
check "train --data FIFO -> exit 1 at once" status 1 "not a regular file \(a FIFO\)" \
  timeout 5 "$train" --data "$tmp/fifo" --out "$tmp/ff" "${tiny[@]}"
check "train --resume with a FIFO for log.csv -> exit 1 at once" status 1 \
  "log.csv.*not a regular file \(a FIFO\)" timeout 5 "$train" --resume "$tmp/fifolog/ckpt.safetensors"
check "eval FIFO checkpoint -> exit 1 at once" status 1 "not a regular file \(a FIFO\)" \
  timeout 5 "$eval" "$tmp/fifo"
check "eval --data FIFO -> exit 1 at once" status 1 "not a regular file \(a FIFO\)" \
  timeout 5 "$eval" "$tmp/at20.safetensors" --data "$tmp/fifo"
check "sample FIFO checkpoint -> exit 1 at once" status 1 "not a regular file \(a FIFO\)" \
  timeout 5 "$sample" "$tmp/fifo"
check "layer --in FIFO -> exit 1 at once" status 1 "not a regular file \(a FIFO\)" \
  timeout 5 "$layer" --in "$tmp/fifo" --out "$tmp/ff.safetensors"
check "nothing written for FIFO inputs" test ! -e "$tmp/ff"

# ------------------------------------------------------------------ one run per --out
# The first run holds --out/.lock for its life; a second on the same --out stops at once,
# naming the holder, and the first ends with its checkpoint and log whole.
"$train" --data "$tmp/small.txt" "${tiny[@]}" --steps 300 --eval-every 150 --log-every 30 \
  --out "$tmp/locked" >"$tmp/locked.out" 2>&1 &
first=$!
for _ in $(seq 200); do grep -q "^$first$" "$tmp/locked/.lock" 2>/dev/null && break; sleep 0.05; done
check "a second run on a locked --out -> exit 1 naming the holder's pid" status 1 \
  "'$tmp/locked' is in use by another run \(process $first holds" \
  timeout 5 "$train" --data "$tmp/small.txt" "${tiny[@]}" --steps 2 --out "$tmp/locked"
wait $first
first_status=$?
check "the first run ends whole: exit 0, 10 log rows, a checkpoint that loads" bash -c \
  "[ $first_status = 0 ] && [ \$(wc -l <'$tmp/locked/log.csv') = 11 ] && \
   '$eval' '$tmp/locked/ckpt.safetensors' --max-windows 2 >/dev/null"
check "the lock is let go at exit: a resume on that --out runs" bash -c \
  "'$train' --resume '$tmp/locked/ckpt.safetensors' --steps 301 >/dev/null 2>&1"

# ------------------------------------------------------------------ stale temporary files
# A save killed between write and rename leaves NAME.tmp.PID; the next run on that --out
# removes the dead writers' files and keeps a live one's.
mkdir -p "$tmp/stale"
sh -c 'exit 0' & dead=$!
wait $dead
: >"$tmp/stale/ckpt.safetensors.tmp.$dead" && : >"$tmp/stale/log.csv.tmp.$dead"
: >"$tmp/stale/ckpt.safetensors.tmp.$$" && : >"$tmp/stale/notes.tmp.x1"
check "stale temporary files: a dead writer's removed, with a warning" bash -c \
  "'$train' --data '$tmp/small.txt' ${tiny[*]} --steps 2 --out '$tmp/stale' >/dev/null \
     2>'$tmp/stale.err' && \
   [ ! -e '$tmp/stale/ckpt.safetensors.tmp.$dead' ] && [ ! -e '$tmp/stale/log.csv.tmp.$dead' ] && \
   grep -q 'removed 2 stale temporary files' '$tmp/stale.err'"
check "stale temporary files: a live writer's and other names kept" \
  test -e "$tmp/stale/ckpt.safetensors.tmp.$$" -a -e "$tmp/stale/notes.tmp.x1"

# ------------------------------------------------------------------ NaN
# lr 1e4 overflows within a few steps (lr 1 did with the composed chunk-1 ops; the fused
# delta_scan stays finite there)
"$train" "${common[@]}" --out "$tmp/nan" --lr 1e4 --schedule constant --warmup 0 \
  --eval-every 2 >/dev/null 2>"$tmp/nan.err"
nan_status=$?
check "NaN loss stops with exit 1, naming the step" \
  bash -c "[ $nan_status = 1 ] && grep -Eq 'is (NaN|[+-]Inf) at step [0-9]+' '$tmp/nan.err'"
# (validation every 2 steps: the NaN, at step 4 here, comes after a checkpoint)
check "NaN: the last good checkpoint is named and loads" bash -c \
  "grep -Eq 'last good checkpoint is .*/nan/ckpt.safetensors \\(step [0-9]+\\)' '$tmp/nan.err' &&
   '$eval' '$tmp/nan/ckpt.safetensors' --max-windows 4 >/dev/null"

# ------------------------------------------------------------------ eval and sample
check "eval: text loss and bits per byte" bash -c \
  "'$eval' '$ck' --data '$tmp/small.txt' --max-windows 8 | grep -q 'bits/byte'"
check "eval --json parses" bash -c \
  "'$eval' '$ck' --max-windows 8 --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d[\"text\"][\"bits_per_byte\"] > 0'"
check "sample: prompt + 40 bytes" bash -c \
  "[ \$('$sample' '$ck' --prompt 'the ' --length 40 --seed 3 | head -c 44 | wc -c) = 44 ]"
check "sample: same seed, same bytes" bash -c \
  "diff <('$sample' '$ck' --length 30 --seed 5) <('$sample' '$ck' --length 30 --seed 5)"
check "sample --prompt-file --prompt-bytes --timing: the prompt's bytes, then the timing line" bash -c \
  "'$sample' '$ck' --prompt-file '$tmp/small.txt' --prompt-bytes 100 --length 20 --timing \
     > '$tmp/sample.out' 2> '$tmp/sample.err' &&
   cmp <(head -c 100 '$tmp/small.txt') <(head -c 100 '$tmp/sample.out') &&
   [ \$(wc -c < '$tmp/sample.out') = 121 ] &&
   grep -Eq '^prompt 100 bytes and the first byte: [0-9.]+ s \\(CPU [0-9.]+ s\\); 19 bytes after it: [0-9.]+ s, [0-9.]+ ms per byte \\(CPU [0-9.]+ ms\\)' '$tmp/sample.err'"
check "sample --prompt-bytes without --prompt-file -> exit 2" status 2 "needs --prompt-file" \
  "$sample" "$ck" --prompt-bytes 4
check "sample --prompt-file missing -> exit 1 naming it" status 1 "no-such.txt" \
  "$sample" "$ck" --prompt-file "$tmp/no-such.txt"

# ------------------------------------------------------------------ smoke: the loss falls
falls() { # falls LOG: last train loss < first train loss - margin
  python3 - "$1" "$2" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
first, last = float(rows[0]["train_loss"]), float(rows[-1]["train_loss"])
print(f"  loss {first:.3f} -> {last:.3f}")
sys.exit(0 if last < first - float(sys.argv[2]) else 1)
EOF
}
svg_ok() { # svg_ok FILE SERIES...: well-formed XML with a polyline of >= 2 points per series
  python3 - "$@" <<'EOF'
import sys, xml.dom.minidom
doc = xml.dom.minidom.parse(sys.argv[1])
lines = {p.getAttribute("id"): p.getAttribute("points").split() for p in doc.getElementsByTagName("polyline")}
sys.exit(0 if all(len(lines.get(s, [])) >= 2 for s in sys.argv[2:]) else 1)
EOF
}
steps=60; [ "$quick" = --quick ] && steps=30
"$train" --data "$text" --d-model 32 --layers 2 --heads 2 --seq-len 32 --batch 8 \
  --steps $steps --eval-every 15 --log-every 5 --lr 3e-3 --out "$tmp/shakespeare" \
  >/dev/null 2>"$tmp/shakespeare.err" || cat "$tmp/shakespeare.err" >&2
check "smoke: tiny LM on $(basename "$text"), loss falls" falls "$tmp/shakespeare/log.csv" 0.5
check "smoke: LM plot is well-formed SVG with train and validation loss and gradient norm" \
  svg_ok "$tmp/shakespeare/loss.svg" train_loss val_loss grad_norm
"$train" --task mqar --vocab 64 --seq-len 32 --pairs 4 --d-model 32 --layers 2 --heads 2 \
  --batch 16 --steps $steps --eval-every 15 --log-every 5 --lr 1e-2 --out "$tmp/mqar" \
  >/dev/null 2>"$tmp/mqar.err" || cat "$tmp/mqar.err" >&2
check "smoke: MQAR, loss falls" falls "$tmp/mqar/log.csv" 0.3
check "smoke: MQAR plot is well-formed SVG with losses, gradient norm and accuracy" \
  svg_ok "$tmp/mqar/loss.svg" train_loss val_loss grad_norm val_acc
check "eval MQAR checkpoint: accuracy at (32, 4) and capacity" bash -c \
  "'$eval' '$tmp/mqar/ckpt.safetensors' --mqar 32:4 --capacity 2 --examples 16 --json | \
   python3 -c 'import json,sys; d=json.load(sys.stdin); assert 0 <= d[\"mqar\"][0][\"accuracy\"] <= 1'"
check "train and eval: NIAH (passkey) and capacity run" bash -c \
  "'$train' --task niah --seq-len 160 $small --steps 3 --eval-every 3 --out '$tmp/niah' >/dev/null 2>&1 && \
   '$eval' '$tmp/niah/ckpt.safetensors' --examples 2 | grep -q 'niah      passkey, 160 bytes' && \
   '$train' --task capacity --pairs 4 --vocab 32 $small --steps 3 --eval-every 3 \
     --out '$tmp/cap' >/dev/null 2>&1 && \
   '$eval' '$tmp/cap/ckpt.safetensors' --capacity 2,4 --examples 4 | grep -q 'capacity  L=16 N=4'"
check "sample refuses a non-byte model -> exit 1" status 1 "not a byte-level model" \
  "$sample" "$tmp/mqar/ckpt.safetensors"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
