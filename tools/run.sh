#!/usr/bin/env bash
# The main job, on a fresh machine: installs what is missing, builds, then
#   (default)     trains a small Yaad model and, for contrast, a linear-attention
#                 model on MQAR (multi-query associative recall), prints the
#                 accuracy of each and where the logs, plots and checkpoints are;
#   --data FILE   trains a small byte-level language model on FILE instead and
#                 prints a sample from it.
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

# MQAR (Zoology): vocabulary 64, sequences of 32 tokens holding 4 key-value
# pairs; 2 layers, d_model 32, 2 heads; 2,000 AdamW steps each, one thread
# (at d_model 32 a second thread costs more than it gains). Chance accuracy
# is 1/32. Yaad runs with its preset's defaults and chunks of 8 tokens.
common=(--task mqar --vocab 64 --seq-len 32 --pairs 4 --d-model 32 --layers 2 --heads 2
  --batch 32 --steps 2000 --lr 1e-2 --eval-every 500 --threads 1)
build/tools/miras-train --model yaad "${common[@]}" --set chunk=8 --out runs/mqar-yaad
build/tools/miras-train --model linear-attention "${common[@]}" --out runs/mqar-linear-attention
echo
for m in yaad linear-attention; do
  printf '%-18s ' "$m"
  build/tools/miras-eval "runs/mqar-$m/ckpt.safetensors" --mqar 32:4 | grep -i 'acc' | head -n 1
done
echo "outputs: runs/mqar-*/log.csv, runs/mqar-*/loss.svg (train/validation loss and"
echo "accuracy), runs/mqar-*/ckpt.safetensors"
