#!/usr/bin/env bash
# The library as a dependency: installs BUILD_DIR (default build) into a
# staging directory (DESTDIR), compiles a tutorial and the training example
# (examples/train_lm.c) out of tree against it the way your own program builds,
#   cc my_variant.c $(pkg-config --cflags --libs miras)
# and runs it on the staged library. Exit status 0 only if all of it worked.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
source tools/stage_install.sh
stage_install test_install "$build"
flags=$(pc_flags --cflags --libs)
echo "test_install: cc tutorial_hebbian_delta.c ${flags//$stage/\$DESTDIR}"

mkdir "$stage/user" && cp examples/tutorial_hebbian_delta.c "$stage/user/"
cc -Wall -o "$stage/user/tutorial" "$stage/user/tutorial_hebbian_delta.c" $flags
LD_LIBRARY_PATH=$(pc_flags --variable=libdir) "$stage/user/tutorial"
echo "test_install: the staged install builds and runs a program of its own"

# A training program of its own: the training API (train/train.h) is installed
# and exported; a few steps, a checkpoint, a sample.
cp examples/train_lm.c "$stage/user/"
cc -Wall -o "$stage/user/train_lm" "$stage/user/train_lm.c" $flags
LD_LIBRARY_PATH=$(pc_flags --variable=libdir) "$stage/user/train_lm" \
  tests/data/shakespeare_64k.txt 3 "$stage/user/lm.safetensors" >/dev/null
[ -s "$stage/user/lm.safetensors" ]
echo "test_install: the staged install builds and runs examples/train_lm.c (a checkpoint)"

# The op descriptor is for op authors: miras/extend.h has it, miras.h does not.
printf '#include <%s>\nint main(void) { return (int)sizeof(mi_op); }\n' extend.h \
  > "$stage/user/author.c"
cc -fsyntax-only "$stage/user/author.c" $(pc_flags --cflags)
sed 's/extend.h/miras.h/' "$stage/user/author.c" > "$stage/user/user.c"
if cc -fsyntax-only "$stage/user/user.c" $(pc_flags --cflags) 2>/dev/null; then
  echo "test_install: miras.h shows the op descriptor (mi_op), which is extend.h's" >&2
  exit 1
fi
echo "test_install: mi_op is extend.h's, not miras.h's"

# The fused ops' packed entry points are for op authors too (ops/fused.h, in
# extend.h); the backward pass's allocation tracking is in no installed header.
printf '#include <%s>\nint main(void) { return mi_delta_scan_packed(0, 0, 0, 0, 0, 0, 0) != 0; }\n' \
  extend.h > "$stage/user/fused.c"
cc -fsyntax-only -Werror=implicit-function-declaration "$stage/user/fused.c" $(pc_flags --cflags)
sed 's/extend.h/miras.h/' "$stage/user/fused.c" > "$stage/user/fused_user.c"
printf '#include <extend.h>\nint main(void) { return (int)mi_tensor_track(0); }\n' \
  > "$stage/user/track.c"
for f in fused_user.c track.c; do
  if cc -fsyntax-only -Werror=implicit-function-declaration "$stage/user/$f" \
      $(pc_flags --cflags) 2>/dev/null; then
    echo "test_install: $f compiles: an internal is in the installed headers" >&2
    exit 1
  fi
done
echo "test_install: the fused entry points are extend.h's; the engine's tracking is not installed"
