#!/usr/bin/env bash
# tests/crosscheck_layer_torch.py, tests/crosscheck_titans_torch.py and the
# chunked PyTorch peer's own check (tools/bench/bench_torch_layer.py --check)
# where a python3 with PyTorch is installed (e.g. apt-get install python3-torch);
# otherwise skipped (exit 77). The titans check also runs miras-train and
# miras-eval from MIRAS_LAYER's directory.
# tests/crosscheck_torch.sh MIRAS_LAYER
set -uo pipefail
layer=${1:?usage: tests/crosscheck_torch.sh MIRAS_LAYER}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import torch' 2>/dev/null; then
    rc=0
    "$py" tests/crosscheck_layer_torch.py "$layer" || rc=1
    tools=$(dirname "$layer")
    "$py" tests/crosscheck_titans_torch.py "$layer" "$tools/miras-train" "$tools/miras-eval" || rc=1
    "$py" tools/bench/bench_torch_layer.py --check --threads 1 || rc=1
    exit $rc
  fi
done
echo "skipped: no python3 with PyTorch (e.g. apt-get install python3-torch)"
exit 77
