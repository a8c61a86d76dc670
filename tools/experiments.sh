#!/usr/bin/env bash
# The MIRAS ablations and baseline comparisons at toy scale, in one command:
#
#   tools/experiments.sh [--no-docs] [miras-bench quality options...]
#
# builds (as tools/run.sh does), runs `miras-bench quality --suite experiments
# --threads 1 --out runs/experiments` (every case one single-threaded
# miras-train run, one after another; the suites are in tools/bench/bench_quality.c),
# then writes the results into docs/: each suite's Markdown table and chart
# (docs/experiments/quality-<suite>.svg), two summary tables (needle in a
# haystack per flavour, capacity per number of pairs) and a line saying when,
# where and how long, each between the `<!-- experiments.sh: NAME -->` and
# `<!-- /experiments.sh -->` markers of docs/experiments.md; the text around
# the markers is left alone (it describes the committed run: read it again
# after a new run).
#
# --no-docs leaves docs/ alone (for a trial run, e.g. `--no-docs --steps 3`);
# `--suite niah-long` (or mqar-long) adds the length-generalisation suites, whose
# per-length tables and charts fill the `NAME-points` blocks;
# any other option goes to miras-bench (`--data FILE`: the text of the LM and
# text-needle suites instead of the repository's data/tinyshakespeare.txt).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" # cd's to the checkout's root
configure_build build
# libgomp's default (spinning) wait wastes a core when anything else runs.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

docs=1
args=()
for a in "$@"; do
  if [ "$a" = --no-docs ]; then docs=0; else args+=("$a"); fi
done
out=runs/experiments
mkdir -p "$out"
cmd=(build/tools/miras-bench quality --suite experiments --threads 1 --out "$out"
  ${args[@]+"${args[@]}"})

# user and system CPU seconds of the finished children so far: `times`' second
# line, written by the shell itself (a subshell would count its own children)
cpu_seconds() {
  awk 'NR == 2 { split($1, u, "m"); split($2, s, "m")
    printf "%d %d\n", u[1] * 60 + u[2], s[1] * 60 + s[2] }' "$1"
}
times >"$out/times.before"
started=$(date -u '+%Y-%m-%d %H:%M UTC')
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
echo "experiments: ${cmd[*]}" >&2
# the JSON lines and the text tables on stdout into quality.out; progress on stderr
"${cmd[@]}" | tee "$out/quality.out"
wall=$(($(date +%s) - t0))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
times >"$out/times.after" # now with miras-bench and its miras-train runs
read -r user0 sys0 < <(cpu_seconds "$out/times.before")
read -r user1 sys1 < <(cpu_seconds "$out/times.after")
cpu_user=$((user1 - user0)) cpu_sys=$((sys1 - sys0))
echo "experiments: done in $((wall / 60)) min $((wall % 60)) s wall," \
  "$((cpu_user + cpu_sys)) s CPU (user $cpu_user s, system $cpu_sys s)" >&2
[ "$docs" = 1 ] || exit 0

# ---------------------------------------------------------------- into docs/
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
mkdir -p docs/experiments
model=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if ! git diff --quiet HEAD -- src 'tools/*.[ch]' 2>/dev/null; then
  commit="$commit + local changes"
fi
cat >"$gen/run.md" <<EOF
Run of $started at commit $commit: \`tools/experiments.sh\`, which ran
\`${cmd[*]}\`
with \`OMP_WAIT_POLICY=$OMP_WAIT_POLICY\`, one thread per run, on ${model:-an unknown CPU}
($(nproc) cores).

- Wall time of the whole set: **$((wall / 60)) min $((wall % 60)) s**.
- CPU time of the runs: $((cpu_user + cpu_sys)) s (user $cpu_user s, system $cpu_sys s).
- Load average (1, 5, 15 min) before: $load_before; after: $load_after.

The machine was shared with other jobs while it ran, so the wall times (the total and
each case's) are inflated against an idle machine; the CPU time is the better measure
of the cost.
EOF

suites=(ablation-p ablation-q ablation-memory ablation-momentum baseline-lm
  baseline-niah-passkey baseline-niah-word baseline-niah-text
  baseline-capacity-2 baseline-capacity-4 baseline-capacity-8)
for s in "${suites[@]}"; do
  if [ -f "$out/quality-$s.md" ]; then
    cp "$out/quality-$s.svg" docs/experiments/
    { cat "$out/quality-$s.md"; echo; echo "![$s](experiments/quality-$s.svg)"; } >"$gen/$s.md"
  else
    reason=$(grep -m 1 "\"suite\":\"$s\"" "$out/quality.out" 2>/dev/null |
      sed -n 's/.*"message":"\([^"]*\)".*/\1/p' || true)
    echo "Not run${reason:+: $reason}." >"$gen/$s.md"
  fi
done

# The suites that evaluate checkpoints again (niah-long-*, mqar-long; given with
# `--suite niah-long` or `--suite mqar-long`): the per-length table and chart, for the
# blocks NAME-points; a block whose suite did not run keeps its text.
for s in niah-long-passkey niah-long-word niah-long-text mqar-long; do
  if [ -f "$out/quality-$s-points.md" ] && grep -q "\"suite\":\"$s\"" "$out/quality.out"; then
    cp "$out/quality-$s-points.svg" docs/experiments/
    { cat "$out/quality-$s-points.md"; echo
      echo "![$s](experiments/quality-$s-points.svg)"; } >"$gen/$s-points.md"
  fi
done

# summary NAME TITLE COLUMN:SUITE...: one row per variant, the metric of
# each suite's Markdown table in its column ("-": not run or failed).
summary() {
  local name=$1 title=$2 heads="" i=0
  shift 2
  for c in "$@"; do heads="$heads|${c%%:*}"; done
  for c in "$@"; do
    i=$((i + 1))
    local f="$out/quality-${c#*:}.md"
    [ -f "$f" ] || continue
    awk -v col=$i '/^\| `/ { split($0, f, "|"); v = f[2]; x = f[3]
      gsub(/^ +| +$/, "", v); gsub(/ /, "", x); print v "\t" col "\t" x }' "$f"
  done | awk -F '\t' -v title="$title" -v heads="${heads#|}" '
    { if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 }; val[$1, $2] = $3 }
    END {
      k = split(heads, h, "|"); line = "| variant |"; rule = "|---|"
      for (i = 1; i <= k; i++) { line = line " " h[i] " |"; rule = rule "---:|" }
      print title "\n\n" line "\n" rule
      for (r = 1; r <= n; r++) {
        line = "| " order[r] " |"
        for (i = 1; i <= k; i++) line = line " " ((order[r], i) in val ? val[order[r], i] : "-") " |"
        print line
      }
    }' >"$gen/$name.md"
}
summary niah-summary "Teacher-forced accuracy on the answer bytes and the terminator, per flavour:" \
  passkey:baseline-niah-passkey word:baseline-niah-word text:baseline-niah-text
summary capacity-summary "Recall accuracy by the number of stored pairs N:" \
  "N = 2:baseline-capacity-2" "N = 4:baseline-capacity-4" "N = 8:baseline-capacity-8"

# Each marked block of docs/experiments.md gets its generated text.
doc=docs/experiments.md
if [ ! -f "$doc" ]; then
  {
    echo "# Experiments"
    for b in run "${suites[@]}" niah-summary capacity-summary; do
      printf '\n<!-- experiments.sh: %s -->\n<!-- /experiments.sh -->\n' "$b"
    done
  } >"$doc"
fi
awk -v gen="$gen" '
  /^<!-- experiments\.sh: [A-Za-z0-9._-]+ -->$/ {
    file = gen "/" $3 ".md"
    if ((getline line < file) > 0) { # generated this run: replace the block
      print; print ""; print line; skip = 1
      while ((getline line < file) > 0) print line
      close(file); print ""; next
    }
  }
  /^<!-- \/experiments\.sh -->$/ { skip = 0 }
  !skip' "$doc" >"$gen/doc.md"
mv "$gen/doc.md" "$doc"
echo "experiments: tables in $doc, charts in docs/experiments/, runs in $out/" >&2
