#!/usr/bin/env bash
# The main job, on a fresh machine: installs what is missing, builds, then
#   (default)     trains a small Titans model and, for contrast, a linear-attention
#                 model on MQAR (multi-query associative recall), prints the
#                 accuracy of each and where the logs, plots and checkpoints are;
#   --data FILE   trains a small byte-level language model on FILE instead and
#                 prints a sample from it (tools/run.sh --data data/tinyshakespeare.txt:
#                 Tiny Shakespeare, shipped in the repository).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
configure_build build
# libgomp's default (spinning) wait wastes the second core when anything else runs.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

if [ "${1:-}" = "--data" ]; then
  [ -n "${2:-}" ] || { echo "run.sh: --data needs a text file" >&2; exit 2; }
  out=runs/lm-gated-deltanet
  build/tools/miras-train --model gated-deltanet --task lm --data "$2" --d-model 64 \
    --layers 2 --heads 2 --seq-len 64 --batch 16 --steps 400 --lr 3e-3 --set chunk=16 \
    --eval-every 100 --out "$out"
  echo
  echo "sample (temperature 0.8):"
  build/tools/miras-sample "$out/ckpt.safetensors" --prompt "The " --length 200 \
    --temperature 0.8 --seed 1
  echo
  echo "outputs: $out/log.csv, $out/loss.svg, $out/ckpt.safetensors"
  exit 0
fi

# MQAR (Zoology) where memory capacity matters: vocabulary 128, sequences of 64
# tokens holding 12 key-value pairs, queried in any order; 2 layers, d_model
# 32, 2 heads (a 16 x 16 state per head for linear attention); 3,000 AdamW
# steps at lr 3e-3 each, one thread per model, both at once on two cores (at
# d_model 32 a second thread per model costs more than it gains). Chance
# accuracy is 1/64. Titans runs with its preset's defaults and chunks of 8 tokens.
common=(--task mqar --vocab 128 --seq-len 64 --pairs 12 --d-model 32 --layers 2 --heads 2
  --batch 32 --steps 3000 --lr 3e-3 --eval-every 750 --threads 1)
mkdir -p runs
build/tools/miras-train --model titans "${common[@]}" --set chunk=8 --out runs/mqar-titans \
  > runs/mqar-titans.out 2>&1 &
titans=$!
build/tools/miras-train --model linear-attention "${common[@]}" --out runs/mqar-linear-attention \
  > runs/mqar-linear-attention.out 2>&1 &
linear=$!
status=0
wait $titans || status=$?
wait $linear || status=$?
for m in titans linear-attention; do
  grep -v "ETA" "runs/mqar-$m.out" || true
done
[ "$status" -eq 0 ] || { echo "run.sh: a training run failed (exit $status)" >&2; exit "$status"; }
echo
for m in titans linear-attention; do
  printf '%-18s ' "$m"
  build/tools/miras-eval "runs/mqar-$m/ckpt.safetensors" --mqar 64:12 | grep -i 'acc' | head -n 1
done
echo "outputs: runs/mqar-*/log.csv, runs/mqar-*/loss.svg (train/validation loss and"
echo "accuracy), runs/mqar-*/ckpt.safetensors, runs/mqar-*.out (the progress)"
