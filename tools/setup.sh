#!/usr/bin/env bash
# Installs what the build needs (as root, with apt-get) or says exactly what
# to install, then configures and builds build/. Sourced by run.sh and test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Open MPI: data-parallel miras-train (optional to the build, -Dmpi=auto; tests/test_mpi.sh).
packages=(gcc meson ninja-build pkg-config cmake libopenblas-dev libdnnl-dev check
  libopenmpi-dev openmpi-bin)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing packages: ${missing[*]}" >&2
    echo "setup: install them with: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

# configure_build DIR [meson options...]: configures DIR once, then builds it;
# on a failure, the end of meson's or ninja's output (which name the error) and 1.
configure_build() {
  local dir=$1 log
  shift
  log=$(mktemp)
  if { [ ! -f "$dir/build.ninja" ] && ! meson setup "$dir" "$@" >"$log" 2>&1; } ||
     ! ninja -C "$dir" >"$log" 2>&1; then
    tail -n 40 "$log"
    rm -f "$log"
    echo "configure_build: $dir did not build" >&2
    return 1
  fi
  rm -f "$log"
}
