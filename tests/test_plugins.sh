#!/usr/bin/env bash
# Plugins in the driver programs: tests/test_plugins.sh BUILD_DIR PLUGIN_SO.
# PLUGIN_SO is examples/custom_component.c built with -DMIRAS_PLUGIN (the
# Cauchy bias "cauchy", its key cauchy_c, the preset "titans-cauchy"). With
# MIRAS_PLUGINS naming it, every tool finds them with no change of its own;
# without it they are unknown; a plugin that does not load is exit 1 with a
# message naming it. Prints "ok - …" / "FAIL - …" and "N passed, M failed".
set -uo pipefail
build=${1:?usage: tests/test_plugins.sh BUILD_DIR PLUGIN_SO}
so=${2:?usage: tests/test_plugins.sh BUILD_DIR PLUGIN_SO}
train=$build/tools/miras-train eval=$build/tools/miras-eval
gradcheck=$build/tools/miras-gradcheck bench=$build/tools/miras-bench
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
with() { MIRAS_PLUGINS=$so "$@"; }
unset MIRAS_PLUGINS
mqar=(--task mqar --vocab 64 --seq-len 32 --pairs 2 --d-model 16 --layers 1 --heads 2
  --batch 4 --eval-every 5 --eval-batches 1 --threads 1)

# ------------------------------------------------------------------ found through the plugin
check "without the plugin, bias=cauchy is unknown (exit 2)" status 2 "cauchy" \
  "$train" --model titans --set bias=cauchy "${mqar[@]}" --steps 5 --out "$tmp/none"
check "train --keys lists the plugin's bias and its key" bash -c "
  MIRAS_PLUGINS='$so' '$train' --set bias=cauchy --keys > '$tmp/keys' &&
  grep -q '^  bias=l2 .*: .*logcosh, cauchy$' '$tmp/keys' &&
  grep -q '^  cauchy_c=1  (> 0)  cauchy: c' '$tmp/keys'"
check "train --model titans --set bias=cauchy: 5 steps and a checkpoint" bash -c "
  MIRAS_PLUGINS='$so' '$train' --model titans --set bias=cauchy --set cauchy_c=0.5 \
    ${mqar[*]} --steps 5 --out '$tmp/run' > '$tmp/train.out' 2>&1 &&
  test -s '$tmp/run/ckpt.safetensors' && grep -q 'titans' '$tmp/train.out'"
check "the checkpoint names the bias and its key" bash -c "
  grep -aq 'bias=cauchy' '$tmp/run/ckpt.safetensors' &&
  grep -aq 'cauchy_c=0.5' '$tmp/run/ckpt.safetensors'"
check "eval reads the checkpoint with the plugin" bash -c "
  MIRAS_PLUGINS='$so' '$eval' '$tmp/run/ckpt.safetensors' > '$tmp/eval.out' 2>&1"
check "eval without the plugin -> exit 1 naming the bias" status 1 "cauchy" \
  "$eval" "$tmp/run/ckpt.safetensors"
check "train --model titans-cauchy (the plugin's preset): 5 steps" bash -c "
  MIRAS_PLUGINS='$so' '$train' --model titans-cauchy ${mqar[*]} --steps 5 \
    --out '$tmp/preset' > /dev/null 2>&1 && test -s '$tmp/preset/ckpt.safetensors'"
check "gradcheck --model titans-cauchy" bash -c "
  MIRAS_PLUGINS='$so' '$gradcheck' --model titans-cauchy > '$tmp/gc.out' 2>&1 &&
  grep -q '^ok    titans-cauchy ' '$tmp/gc.out' && grep -q '^1 passed, 0 failed' '$tmp/gc.out'"
check "bench layer --variants titans-cauchy" bash -c "
  MIRAS_PLUGINS='$so' '$bench' layer --variants titans-cauchy --chunks 8 --seq-len 16 \
    --reps 1 --threads 1 --json-only > '$tmp/bench.out' 2>&1 &&
  grep -q '\"name\":\"layer.titans-cauchy.b8\".*bias cauchy' '$tmp/bench.out'"
check "a path listed twice (and empty entries) loads once" bash -c "
  MIRAS_PLUGINS=':$so::$so:' '$train' --keys | grep -q 'logcosh, cauchy$'"

# ------------------------------------------------------------------ a plugin that does not load
check "train with a missing plugin -> exit 1 naming it" status 1 \
  "^miras-train: MIRAS_PLUGINS: plugin '$tmp/no-such-plugin.so': cannot load: .*No such file" \
  env MIRAS_PLUGINS="$so:$tmp/no-such-plugin.so" "$train" --keys
check "gradcheck with a missing plugin -> exit 1 naming it" status 1 \
  "plugin '$tmp/no-such-plugin.so'" env MIRAS_PLUGINS="$tmp/no-such-plugin.so" \
  "$gradcheck" --models
check "eval with a missing plugin -> exit 1 naming it" status 1 \
  "plugin '$tmp/no-such-plugin.so'" env MIRAS_PLUGINS="$tmp/no-such-plugin.so" \
  "$eval" "$tmp/run/ckpt.safetensors"
printf 'not an ELF file\n' > "$tmp/garbage.so"
check "a file that is not a shared object -> exit 1 naming it" status 1 \
  "plugin '$tmp/garbage.so': cannot load" env MIRAS_PLUGINS="$tmp/garbage.so" "$train" --keys
lib=$(find "$build/src" -maxdepth 1 -name 'libmiras.so*' | head -n 1)
check "a shared object without mi_plugin_init -> exit 1 saying so" status 1 \
  "plugin '$lib': no mi_plugin_init" env MIRAS_PLUGINS="$lib" "$train" --keys
# A program of the user's own that does not read the list first: the registry's
# first use says so on stderr and goes on with what loaded (no exit).
check "a library program with a missing plugin warns and goes on" bash -c "
  MIRAS_PLUGINS='$tmp/no-such-plugin.so' '$build/examples/custom_component' --quick \
    > '$tmp/user.out' 2> '$tmp/user.err' &&
  grep -q \"^miras: warning: MIRAS_PLUGINS: plugin '$tmp/no-such-plugin.so'\" '$tmp/user.err'"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
