#!/usr/bin/env bash
# The main job. For now: trains a small 2-layer MLP with SGD written in
# miras ops and prints the loss falling.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
configure_build build
exec build/tools/miras-demo "$@"
