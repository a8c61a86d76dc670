#!/usr/bin/env bash
# The shared library exports only the mi_-prefixed API (src/libmiras.map):
# tests/exports.sh LIBMIRAS_SO. Prints the count, or the symbols that leak.
set -uo pipefail
lib=${1:?usage: tests/exports.sh LIBMIRAS_SO}
symbols=$(nm -D --defined-only "$lib" | awk '{print $3}')
leaks=$(grep -v '^mi_' <<< "$symbols")
if [ -n "$leaks" ]; then
  echo "exports: $(wc -l <<< "$leaks") symbols without the mi_ prefix:"
  echo "$leaks" | head -n 40
  exit 1
fi
echo "exports: $(wc -l <<< "$symbols") symbols, every one mi_-prefixed"
