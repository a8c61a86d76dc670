#!/usr/bin/env bash
# Sourced by the install tests: stage_install NAME BUILD_DIR installs BUILD_DIR
# into a fresh staging directory (DESTDIR) and sets
#   stage     the staging directory (removed on exit)
#   pc_flags  pkg-config on the staged miras.pc: pc_flags --cflags --libs
# (the .pc names the final prefix, /usr/local; pc_flags points it into the stage).
stage_install() {
  local name=$1 build=$2 pc prefix
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  DESTDIR=$stage meson install -C "$build" --quiet >/dev/null
  pc=$(find "$stage" -name miras.pc)
  if [ -z "$pc" ]; then echo "$name: meson install wrote no miras.pc" >&2; exit 1; fi
  prefix=$stage$(sed -n 's/^prefix=//p' "$pc")
  staged_pc_dir=$(dirname "$pc") staged_prefix=$prefix
}
pc_flags() { PKG_CONFIG_PATH=$staged_pc_dir pkg-config --define-variable=prefix="$staged_prefix" "$@" miras; }
