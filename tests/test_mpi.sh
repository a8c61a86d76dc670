#!/usr/bin/env bash
# Data-parallel miras-train over MPI (docs/distributed.md), run by tools/test.sh
# on each build: tests/test_mpi.sh BUILD_DIR [--quick]. Tiny runs (d_model 32,
# one layer, 6 steps) on 1, 2 and 4 ranks, oversubscribed, one thread each:
#   - every logged number of N ∈ {1, 2, 4} ranks within 1e-5 relative of one process;
#   - N ranks equal one process with --accum N bit for bit (the losses and norms;
#     4 ranks with small buckets), and two N-rank runs write the same checkpoint;
#   - every rank ends with the same parameters (their checkpoints are identical);
#   - rank 0's checkpoint resumes under another N (and without mpirun);
#   - a rank killed mid-run takes the job down within 13 s, and the last
#     checkpoint still resumes; a rank that hangs, within --comm-timeout + 10 s.
#   - ranks given different options, or a batch they do not divide, are refused.
# --quick (the sanitizer pass) leaves out the 4-rank runs.
# Prints "ok - …" / "FAIL - …" per check and ends with "mpi: N passed, M failed";
# without MPI (a build without it, or no mpirun) it prints one "skipped" line and
# exits 77, which meson reports as skipped (a pass would claim what did not run).
set -uo pipefail
build=${1:?usage: tests/test_mpi.sh BUILD_DIR [--quick]}
quick=${2:-}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
train=$build/tools/miras-train
if ! command -v mpirun >/dev/null || ! ldd "$train" 2>/dev/null | grep libmpi >/dev/null; then
  echo "mpi: skipped (no MPI in $build: apt-get install libopenmpi-dev openmpi-bin, then"
  echo "     reconfigure; -Dmpi=auto finds it)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/tap.sh"

# A small text of our own, quick to train on.
python3 - "$tmp/small.txt" <<'EOF'
import random, sys
random.seed(2)
words = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex".split()
open(sys.argv[1], "w").write(" ".join(random.choice(words) for _ in range(8000)))
EOF
common=(--data "$tmp/small.txt" --model gated-deltanet --d-model 32 --layers 1 --heads 2
        --seq-len 32 --batch 8 --steps 6 --log-every 1 --eval-every 3 --eval-batches 1
        --threads 1)
# Open MPI as root and on more ranks than cores; shared memory only (no network
# probing), without the single-copy (CMA) path that containers' ptrace rules refuse.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
  OMPI_MCA_btl_vader_single_copy_mechanism=none
# Under the sanitizers, LeakSanitizer ignores what Open MPI keeps at exit (only
# stacks through its libraries; full stacks, as its components are unloaded).
mpi() { # mpi N ARGS...: miras-train on N ranks
  local n=$1
  shift
  local lsan=suppressions=$src/tests/lsan_mpi.supp:fast_unwind_on_malloc=0
  LSAN_OPTIONS=${LSAN_OPTIONS:+$LSAN_OPTIONS:}$lsan \
    timeout 60 mpirun --oversubscribe -np "$n" "$train" "$@"
}
logs_close() { # logs_close A B [COLUMNS]: same rows; the numbers within 1e-5 relative
  python3 - "$@" <<'EOF'
import csv, sys
a, b = (list(csv.reader(open(f))) for f in sys.argv[1:3])
cols = sys.argv[3].split(",") if len(sys.argv) > 3 else a[0][1:]
idx = [a[0].index(c) for c in cols]
close = lambda u, v: u == v == "" or abs(float(u) - float(v)) <= 1e-5 * abs(float(v))
ok = len(a) == len(b) > 1 and a[0] == b[0] and all(
    all(close(x[i], y[i]) for i in idx) for x, y in zip(a[1:], b[1:]))
if not ok: print(f"  {a[-1]} vs {b[-1]}")
sys.exit(0 if ok else 1)
EOF
}
same_columns() { # same_columns A B COLUMNS: those columns equal, character for character
  python3 - "$@" <<'EOF'
import csv, sys
a, b = (list(csv.reader(open(f))) for f in sys.argv[1:3])
idx = [a[0].index(c) for c in sys.argv[3].split(",")]
ok = len(a) == len(b) > 1 and all([x[i] for i in idx] == [y[i] for i in idx] for x, y in zip(a, b))
if not ok: print(f"  {a[-1]} vs {b[-1]}")
sys.exit(0 if ok else 1)
EOF
}
ranks_agree() { # ranks_agree DIR N: ckpt.rankR.safetensors == ckpt.safetensors for R = 1 … N−1
  local r
  local r
  for ((r = 1; r < $2; r++)); do
    cmp -s "$1/ckpt.safetensors" "$1/ckpt.rank$r.safetensors" || return 1
  done
}

"$train" "${common[@]}" --out "$tmp/one" >/dev/null 2>&1
"$train" "${common[@]}" --accum 2 --out "$tmp/accum2" >/dev/null 2>&1
mpi 2 "${common[@]}" --out "$tmp/n2" --save-every-rank >"$tmp/n2.out" 2>"$tmp/n2.err"
code=$?
clean() { [ "$1" = 0 ] && ! grep -Eq 'Sanitizer|runtime error' "$2"; }
check "2 ranks: exit 0, no sanitizer report" clean "$code" "$tmp/n2.err"
check "2 ranks: the first line says '2 ranks'" \
  grep -q '^miras-train: 2 ranks' <(head -n 1 "$tmp/n2.out")
check "2 ranks: log.csv within 1e-5 relative of one process" \
  logs_close "$tmp/n2/log.csv" "$tmp/one/log.csv"
check "2 ranks == one process with --accum 2 (train_loss, grad_norm bit for bit)" \
  same_columns "$tmp/n2/log.csv" "$tmp/accum2/log.csv" train_loss,grad_norm
check "2 ranks: every rank's final checkpoint identical" ranks_agree "$tmp/n2" 2
check "2 ranks: the parameters' checksum line" \
  grep -q '^2 ranks: parameters identical' "$tmp/n2.out"
mpi 2 "${common[@]}" --out "$tmp/n2b" >/dev/null 2>&1
check "2 ranks twice: the same checkpoint" \
  cmp -s "$tmp/n2/ckpt.safetensors" "$tmp/n2b/ckpt.safetensors"

if [ -z "$quick" ]; then
  "$train" "${common[@]}" --accum 4 --out "$tmp/accum4" >/dev/null 2>&1
  # 3 KiB buckets: ~35 of them, parameters split between buckets, chunks padded
  mpi 4 "${common[@]}" --bucket-kb 3 --out "$tmp/n4" --save-every-rank >"$tmp/n4.out" \
    2>"$tmp/n4.err"
  code=$?
  check "4 ranks: exit 0, no sanitizer report" clean "$code" "$tmp/n4.err"
  check "4 ranks: the first line says '4 ranks'" \
    grep -q '^miras-train: 4 ranks' <(head -n 1 "$tmp/n4.out")
  check "4 ranks: log.csv within 1e-5 relative of one process" \
    logs_close "$tmp/n4/log.csv" "$tmp/one/log.csv"
  check "4 ranks == one process with --accum 4 (train_loss, grad_norm bit for bit)" \
    same_columns "$tmp/n4/log.csv" "$tmp/accum4/log.csv" train_loss,grad_norm
  check "4 ranks: every rank's final checkpoint identical" ranks_agree "$tmp/n4" 4
  mpi 1 "${common[@]}" --out "$tmp/n1" >"$tmp/n1.out" 2>&1
  check "1 rank under mpirun == no mpirun (same checkpoint)" \
    cmp -s "$tmp/n1/ckpt.safetensors" "$tmp/one/ckpt.safetensors"
fi

# resume under another N: stop a 2-rank run at step 3, go on with 4 ranks (or, quick,
# with one process); the rows stay within 1e-5 of one process's run
mpi 2 "${common[@]}" --out "$tmp/stop2" --stop-at 3 >/dev/null 2>&1
cp -r "$tmp/stop2" "$tmp/res1"
cp -r "$tmp/stop2" "$tmp/res4"
"$train" --resume "$tmp/res1/ckpt.safetensors" >/dev/null 2>&1
check "2 ranks to step 3, then one process: log.csv within 1e-5 of one process" \
  logs_close "$tmp/res1/log.csv" "$tmp/one/log.csv"
if [ -z "$quick" ]; then
  mpi 4 --resume "$tmp/res4/ckpt.safetensors" >/dev/null 2>&1
  check "2 ranks to step 3, then 4 ranks: log.csv within 1e-5 of one process" \
    logs_close "$tmp/res4/log.csv" "$tmp/one/log.csv"
fi

# ranks started with different options (MPMD: another --seed) stop at once, saying so
differ() {
  ! LSAN_OPTIONS=${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$src/tests/lsan_mpi.supp \
    timeout 60 mpirun --oversubscribe -np 1 "$train" "${common[@]}" --out "$tmp/differ" : \
    -np 1 "$train" "${common[@]}" --seed 2 --out "$tmp/differ" >"$tmp/differ.out" 2>&1 &&
    grep -q 'ranks disagree on the run.s settings' "$tmp/differ.out"
}
check "ranks given different options -> refused with a message" differ

bad_batch() { # a global batch of 7 on 2 ranks: refused, with the reason
  ! mpi 2 "${common[@]}" --batch 7 --out "$tmp/bad" >"$tmp/bad.out" 2>&1 &&
    grep -q 'must be a multiple of the ranks' "$tmp/bad.out"
}
check "a batch the ranks do not divide -> refused with a message" bad_batch

# a rank killed with SIGKILL mid-run: the job ends within 13 s with a message
# naming the last checkpoint, which resumes
long=("${common[@]}" --steps 100000 --eval-every 2 --log-every 2)
mpi 2 "${long[@]}" --out "$tmp/die" >"$tmp/die.out" 2>"$tmp/die.err" &
job=$!
for _ in $(seq 100); do [ -f "$tmp/die/ckpt.safetensors" ] && break; sleep 0.2; done
sleep 0.5
victim=$(pgrep -n -f "^$train .*--out $tmp/die") # a rank of this job (the newest), not mpirun
t0=$(date +%s)
[ -n "$victim" ] && kill -KILL "$victim"
wait "$job"
code=$?
took=$(($(date +%s) - t0))
stopped_soon() { [ "$code" != 0 ] && [ "$code" != 124 ] && [ "$took" -le 13 ]; }
check "a rank killed: the job stops with a non-zero status within 13 s (${took} s)" stopped_soon
check "a rank killed: the others say so, naming the last checkpoint" \
  grep -q 'stopped by the MPI launcher.*last checkpoint is' "$tmp/die.err"
resumes() { # two more steps from the checkpoint the killed job left
  local last
  last=$(tail -n 1 "$tmp/die/log.csv" | cut -d, -f1)
  "$train" --resume "$tmp/die/ckpt.safetensors" --out "$tmp/die-resumed" --stop-at $((last + 2)) \
    >"$tmp/resumed.out" 2>&1
}
check "a rank killed: the last checkpoint resumes" resumes

# rank 0 fails to save (its log.csv turned into a directory, which a rename cannot replace):
# the other rank names the checkpoint on disk, not the one rank 0 did not get to write
mpi 2 "${long[@]}" --out "$tmp/nosave" >"$tmp/nosave.out" 2>"$tmp/nosave.err" &
job=$!
for _ in $(seq 100); do [ -f "$tmp/nosave/ckpt.safetensors" ] && break; sleep 0.2; done
for _ in $(seq 1000); do
  mkdir "$tmp/nosave/log.csv" 2>/dev/null && break
  rm -f "$tmp/nosave/log.csv"
done
wait "$job"
code=$?
names_disk_step() { # the step rank 1 names is the checkpoint's train.step
  python3 - "$tmp/nosave.err" "$tmp/nosave/ckpt.safetensors" <<'EOF'
import json, re, struct, sys
m = re.search(r"rank 1\]: stopped by the MPI launcher.*The last checkpoint is .* \(step (\d+)\)",
              open(sys.argv[1]).read())
b = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
disk = int(json.loads(b[8:8 + n])["__metadata__"]["train.step"])
if not m or int(m.group(1)) != disk:
    print(f"  rank 1 named step {m.group(1) if m else '(none)'}, the file holds step {disk}")
sys.exit(0 if m and int(m.group(1)) == disk else 1)
EOF
}
check "rank 0 cannot save: the job stops with a non-zero status" test "$code" != 0 -a "$code" != 124
check "rank 0 cannot save: rank 1 names the step of the checkpoint on disk" names_disk_step

# a rank that hangs (SIGSTOP, which the launcher does not notice): the others give up
# after --comm-timeout 3 s, say so and end the job
mpi 2 "${long[@]}" --comm-timeout 3 --out "$tmp/hang" >"$tmp/hang.out" 2>"$tmp/hang.err" &
job=$!
for _ in $(seq 100); do [ -f "$tmp/hang/ckpt.safetensors" ] && break; sleep 0.2; done
victim=$(pgrep -n -f "^$train .*--out $tmp/hang")
t0=$(date +%s)
[ -n "$victim" ] && kill -STOP "$victim"
wait "$job"
code=$?
took=$(($(date +%s) - t0))
check "a rank hangs: the job stops within --comm-timeout 3 s + 10 s (${took} s)" stopped_soon
check "a rank hangs: the others say so" \
  grep -q 'no answer from the other ranks for 3 s' "$tmp/hang.err"

echo "mpi: $passed passed, $failed failed"
[ "$failed" = 0 ]
