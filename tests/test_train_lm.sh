#!/usr/bin/env bash
# examples/train_lm.c's checkpoint is a miras-train checkpoint: miras-eval
# evaluates it and miras-sample continues a prompt from it.
#   tests/test_train_lm.sh TRAIN_LM MIRAS_EVAL MIRAS_SAMPLE TEXT
set -uo pipefail
train_lm=${1:?usage: tests/test_train_lm.sh TRAIN_LM MIRAS_EVAL MIRAS_SAMPLE TEXT}
eval=$2 sample=$3 text=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
ckpt=$tmp/lm.safetensors

# 20 steps: below a uniform guess (ln 256 = 5.55 nats/byte) on the validation text
check "train_lm trains, validates (loss < 5 nats/byte) and writes a checkpoint" \
  bash -c '"$1" "$2" 20 "$3" > "$4/train.out" && [ -s "$3" ] && [ -z "$(ls "$4" | grep tmp)" ] &&
           awk "/^validation loss/ { ok = \$3 < 5 } END { exit !ok }" "$4/train.out"' \
  _ "$train_lm" "$text" "$ckpt" "$tmp"
check "miras-eval reads it (the text it was trained on, from its settings)" \
  bash -c '"$1" "$2" > "$3/eval.out" && grep -Eq "^text .*bits/byte" "$3/eval.out"' \
  _ "$eval" "$ckpt" "$tmp"
check "miras-eval --json on another text" \
  bash -c '"$1" "$2" --json --data "$3" --seq-len 32 | grep -q "\"bits_per_byte\""' \
  _ "$eval" "$ckpt" "$text"
check "miras-sample continues a prompt from it" \
  bash -c 'out=$("$1" "$2" --prompt "ROMEO:" --length 20 --seed 3) &&
           [ "${out:0:6}" = "ROMEO:" ] && [ ${#out} -ge 26 ]' _ "$sample" "$ckpt"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
