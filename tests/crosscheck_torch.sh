#!/usr/bin/env bash
# tests/crosscheck_layer_torch.py where a python3 with PyTorch is installed
# (e.g. apt-get install python3-torch); otherwise skipped (exit 77).
# tests/crosscheck_torch.sh MIRAS_LAYER
set -uo pipefail
layer=${1:?usage: tests/crosscheck_torch.sh MIRAS_LAYER}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import torch' 2>/dev/null; then
    exec "$py" tests/crosscheck_layer_torch.py "$layer"
  fi
done
echo "skipped: no python3 with PyTorch (e.g. apt-get install python3-torch)"
exit 77
