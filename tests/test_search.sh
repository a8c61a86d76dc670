#!/usr/bin/env bash
# miras-bench search (docs/search.md): tests/test_search.sh BUILD_DIR [mpi].
# Without `mpi`, on the --quick search (quick-mqar, 4 combinations and
# gated-deltanet, 8 then 16 steps: a few seconds):
#   - --list names the invalid combinations of the whole space, each with a reason;
#   - the JSON lines: one per trial, each key once, every trial of both rungs there;
#   - the report: search.md with a miras-train command per top configuration, the
#     SVG with its frontier and the preset named;
#   - killed with kill -9 mid-run (the whole process group), a rerun with the same
#     --out runs only what is missing: no key twice, every key present, and the
#     metrics those of an uninterrupted run;
#   - --jobs 2 gives the same trials and metrics as --jobs 1;
#   - a trial past --max-rss-mb or --max-seconds is recorded so and not promoted;
#   - bad options, and a rerun with other --set values, are refused (exit 2).
# With `mpi`: the same search under `mpirun -np 2` gives the same trials and metrics
# as --jobs 1 (exit 77, skipped, without mpirun).
# Prints "ok - …" / "FAIL - …" per check and ends with "search: N passed, M failed".
set -uo pipefail
build=${1:?usage: tests/test_search.sh BUILD_DIR [mpi]}
mode=${2:-}
bench=$build/tools/miras-bench
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive

# keys DIR: every trial's "key status value", sorted; fails on a key seen twice or a bad line
keys() {
  python3 - "$1" <<'EOF'
import glob, json, sys
seen = {}
for f in sorted(glob.glob(sys.argv[1] + "/trials*.jsonl")):
    for line in open(f):
        t = json.loads(line)
        if t["key"] in seen:
            print("  key twice:", t["key"], file=sys.stderr)
            sys.exit(1)
        seen[t["key"]] = f'{t["key"]} {t["status"]} {t["value"]!r}'
print("\n".join(sorted(seen.values())))
EOF
}
same_trials() { # same_trials A B: the same keys with the same status and metric
  keys "$1" >"$tmp/a.keys" && keys "$2" >"$tmp/b.keys" && [ -s "$tmp/a.keys" ] &&
    { cmp -s "$tmp/a.keys" "$tmp/b.keys" || { diff "$tmp/a.keys" "$tmp/b.keys" | head -5; false; }; }
}

"$bench" search --quick --out "$tmp/ref" >"$tmp/ref.out" 2>"$tmp/ref.err"
rc=$?

if [ "$mode" = mpi ]; then
  if ! command -v mpirun >/dev/null; then
    echo "search-mpi: skipped (no mpirun: apt-get install openmpi-bin)"
    exit 77
  fi
  # as tests/test_mpi.sh: root, more ranks than cores, shared memory only
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
    OMPI_MCA_btl_vader_single_copy_mechanism=none
  check "the --jobs 1 search ran" [ "$rc" = 0 ]
  timeout 300 mpirun --oversubscribe -np 2 "$bench" search --quick --out "$tmp/mpi" \
    >"$tmp/mpi.out" 2>"$tmp/mpi.err"
  check "mpirun -np 2: exit 0" [ $? = 0 ]
  check "mpirun -np 2: one JSON-lines file per rank" \
    test -s "$tmp/mpi/trials.rank0.jsonl" -a -s "$tmp/mpi/trials.rank1.jsonl"
  check "mpirun -np 2: the trials and metrics of --jobs 1" same_trials "$tmp/ref" "$tmp/mpi"
  check "mpirun -np 2: rank 0 wrote the report" test -s "$tmp/mpi/search-quick-mqar.svg"
  echo "search-mpi: $passed passed, $failed failed"
  [ "$failed" = 0 ]
  exit
fi

# the whole space: the invalid combinations, each with the library's reason
"$bench" search --list --out "$tmp/list" >"$tmp/list.txt" 2>&1
check "--list: exit 0" [ $? = 0 ]
check "--list: counts valid and invalid combinations" \
  grep -Eq '^# base titans: [0-9]+ valid combinations, [1-9][0-9]* invalid' "$tmp/list.txt"
check "--list: an invalid combination with its reason" \
  grep -Eq $'^titans\\+memory=matrix\\+bias=lattice-enc\\+[^\t]*\tinvalid: .*encod' "$tmp/list.txt"
check "--list: implicit GD off the delta rule is invalid, with why" \
  grep -Eq $'memory=mlp\\+bias=l2\\+retention=l2\\+algorithm=implicit\tinvalid: .*implicit' \
  "$tmp/list.txt"
check "--list: the quick search's candidates are valid" \
  grep -q $'^titans+memory=matrix+bias=l2+retention=none+algorithm=gd\tvalid$' "$tmp/list.txt"

one=titans+memory=matrix+bias=l2+retention=none+algorithm=gd
check "--only: that candidate alone, beside the presets" \
  bash -c '"$1" search --list --only "$2" --presets gated-deltanet | grep -c valid$ | grep -qx 1' \
  _ "$bench" "$one"
check "--only: an invalid combination is refused" status 2 "not a valid candidate" \
  "$bench" search --list --only titans+memory=mlp+bias=l2+retention=l2+algorithm=implicit

check "--quick: exit 0" [ "$rc" = 0 ]
# rung 0: 4 combinations + the preset at 8 steps; rung 1: the best 2 + the preset at 16
check "--quick: 8 trials, each key once" [ "$(keys "$tmp/ref" | wc -l)" = 8 ]
check "--quick: 5 trials at 8 steps, 3 at 16" \
  [ "$(keys "$tmp/ref" | grep -c '^quick-mqar|8|1|')" = 5 -a \
    "$(keys "$tmp/ref" | grep -c '^quick-mqar|16|1|')" = 3 ]
check "--quick: each trial ok with a metric" \
  [ "$(keys "$tmp/ref" | grep -Ec ' ok [0-9.]+(e-?[0-9]+)?$')" = 8 ]
check "--quick: the frontier chart names the preset" \
  grep -q 'class="frontier"' "$tmp/ref/search-quick-mqar.svg"
check "--quick: the chart marks gated-deltanet" grep -q '>gated-deltanet</text>' \
  "$tmp/ref/search-quick-mqar.svg"
check "--quick: the top configurations with their miras-train commands" \
  grep -Eq '^1\. `.*miras-train .*--model (titans|gated-deltanet)' "$tmp/ref/search.md"
check "--quick: the table has every candidate" \
  [ "$(grep -c '^| memory=matrix\|^| gated-deltanet (preset)' "$tmp/ref/search.md")" -ge 5 ]

# kill -9 mid-run: the process group (the search, its workers, their miras-train runs)
setsid "$bench" search --quick --out "$tmp/kill" >"$tmp/kill.out" 2>"$tmp/kill.err" &
pid=$!
for _ in $(seq 600); do
  [ "$(cat "$tmp/kill/trials.jsonl" 2>/dev/null | wc -l)" -ge 3 ] && break
  sleep 0.05
done
kill -9 -- -"$pid" 2>/dev/null
wait "$pid" 2>/dev/null
before=$(wc -l <"$tmp/kill/trials.jsonl")
check "kill -9: stopped mid-way (3 to 7 trials done, got $before)" [ "$before" -ge 3 -a "$before" -lt 8 ]
"$bench" search --quick --out "$tmp/kill" >"$tmp/resume.out" 2>"$tmp/resume.err"
check "resume: exit 0" [ $? = 0 ]
check "resume: said what it found" grep -q "^search: $before trials already in" "$tmp/resume.err"
ran=$(grep -c '^\[quick-mqar rung' "$tmp/resume.err")
check "resume: ran only the $((8 - before)) missing trials (ran $ran)" [ "$ran" = $((8 - before)) ]
check "resume: no key twice, every key there, the metrics of an uninterrupted run" \
  same_trials "$tmp/ref" "$tmp/kill"
"$bench" search --quick --out "$tmp/kill" >"$tmp/again.out" 2>"$tmp/again.err"
# kill -9 of the search alone: its workers die with it, their miras-train runs outlive
# them and hold their directories; the rerun waits for them instead of failing the trial
setsid "$bench" search --quick --out "$tmp/orphan" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 600); do
  [ "$(cat "$tmp/orphan/trials.jsonl" 2>/dev/null | wc -l)" -ge 1 ] && break
  sleep 0.05
done
sleep 0.2
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
"$bench" search --quick --out "$tmp/orphan" >/dev/null 2>"$tmp/orphan.err"
check "kill -9 of the search alone: the rerun ends with the trials of an uninterrupted run" \
  same_trials "$tmp/ref" "$tmp/orphan"

"$bench" search --quick --report --out "$tmp/kill" >"$tmp/report.out" 2>"$tmp/report.err"
check "--report: runs nothing, writes the report" \
  [ "$(grep -c '^\[quick-mqar rung' "$tmp/report.err")" = 0 -a -s "$tmp/kill/search.md" ]
check "a finished search rerun runs nothing" [ "$(grep -c '^\[quick-mqar rung' "$tmp/again.err")" = 0 ]

"$bench" search --quick --jobs 2 --out "$tmp/jobs" >"$tmp/jobs.out" 2>"$tmp/jobs.err"
check "--jobs 2: exit 0" [ $? = 0 ]
check "--jobs 2: the trials and metrics of --jobs 1" same_trials "$tmp/ref" "$tmp/jobs"

# the caps: a trial past one is recorded as such and not promoted
statuses() { python3 -c '
import glob, json, sys
print(" ".join(sorted(json.loads(l)["status"] for f in glob.glob(sys.argv[1] + "/trials*.jsonl")
                      for l in open(f))))' "$1"; }
"$bench" search --quick --max-rss-mb 1 --out "$tmp/rss" >/dev/null 2>&1
check "--max-rss-mb 1: the 5 trials of rung 0 over-memory, none promoted" \
  [ "$(statuses "$tmp/rss")" = "$(echo over-memory{,,,,})" ]
"$bench" search --quick --budgets 2000 --max-seconds 1 --presets '' \
  --memories matrix --biases l2 --retentions none --algorithms gd --out "$tmp/cpu" >/dev/null 2>&1
check "--max-seconds 1: a 2000-step trial over-time" [ "$(statuses "$tmp/cpu")" = over-time ]

check "bad: a rerun with other --set values than its --out's" status 2 'other --set values' \
  "$bench" search --quick --set chunk=2 --out "$tmp/ref"
check "bad: --eta 1" status 2 'eta wants a number above 1' "$bench" search --eta 1
check "bad: an unknown memory" status 2 "no memory named 'tensor'.*known: vector" \
  "$bench" search --memories tensor --list
check "bad: --grid without values" status 2 'grid wants KEY=V1,V2' "$bench" search --grid chunk
check "bad: --budgets not increasing" status 2 'budgets wants up to 16 increasing' \
  "$bench" search --budgets 20,10 --list
check "bad: an unknown task" status 2 "no quality suite 'nope'" "$bench" search --suite nope
check "bad: search after another option" status 2 'search comes first' "$bench" --threads 1 search

echo "search: $passed passed, $failed failed"
[ "$failed" = 0 ]
