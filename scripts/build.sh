#!/usr/bin/env bash
# Configures and builds Plexus with Ninja (and ccache when present).
# usage: scripts/build.sh [BUILD_DIR] [PROFILE]   PROFILE: full (default) | portable | edge
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
profile=${2:-full}
jobs=${PLEXUS_JOBS:-2}
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPLEXUS_PROFILE="$profile"
fi
cmake --build "$build_dir" -j "$jobs"
