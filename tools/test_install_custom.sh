#!/usr/bin/env bash
# A user's component against the installed library: installs BUILD_DIR
# (default build) into a staging directory (DESTDIR), then builds
# examples/custom_component.c out of tree the way a user's own program and
# plugin build, with the installed headers only,
#   cc custom_component.c $(pkg-config --cflags --libs miras)
#   cc -shared -fPIC -DMIRAS_PLUGIN custom_component.c -o libcauchy_plugin.so $(…)
# runs the program (--quick: its checks and a few training steps) and loads
# the plugin into a program of its own through MIRAS_PLUGINS. Exit status 0
# only if all of it worked.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
source tools/stage_install.sh
stage_install test_install_custom "$build"
flags=$(pc_flags --cflags --libs)
libdir=$(pc_flags --variable=libdir)
user=$stage/user
mkdir "$user" && cp examples/custom_component.c "$user/"

echo "test_install_custom: cc custom_component.c ${flags//$stage/\$DESTDIR}"
cc -std=c11 -Wall -Werror -o "$user/custom" "$user/custom_component.c" $flags -lm
LD_LIBRARY_PATH=$libdir "$user/custom" --quick
echo "test_install_custom: the program registers, checks and trains its own bias"

cc -std=c11 -Wall -Werror -shared -fPIC -DMIRAS_PLUGIN \
  -o "$user/libcauchy_plugin.so" "$user/custom_component.c" $flags -lm
cat > "$user/host.c" <<'C'
/* A program that knows nothing of the bias: it finds it through MIRAS_PLUGINS. */
#include <stdio.h>
#include "extend.h"
int main(void)
{
    const mi_bias_kind *b = mi_bias_find("cauchy");
    const mi_preset *p = mi_preset_find("titans-cauchy");
    mi_miras_config c = mi_miras_config_default();
    if (!b || !p || mi_miras_config_set(&c, "bias=cauchy") != 0 ||
        mi_miras_config_set(&c, "cauchy_c=0.5") != 0)
        return fprintf(stderr, "host: the plugin's bias is not there: %s\n", mi_error()), 1;
    printf("host: found bias '%s' (%s) and preset '%s'\n", b->name, b->formula, p->name);
    mi_registry_reset();
    return 0;
}
C
cc -std=c11 -Wall -Werror -o "$user/host" "$user/host.c" $flags
MIRAS_PLUGINS=$user/libcauchy_plugin.so LD_LIBRARY_PATH=$libdir "$user/host"
if LD_LIBRARY_PATH=$libdir "$user/host" 2>/dev/null; then
  echo "test_install_custom: the host found the bias without the plugin" >&2
  exit 1
fi
echo "test_install_custom: the installed plugin loads into a program of its own"
