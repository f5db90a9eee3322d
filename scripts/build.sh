#!/usr/bin/env bash
# Configures and builds Plexus with Ninja (and ccache when present).
# usage: scripts/build.sh [BUILD_DIR] [PROFILE]   PROFILE: full (default) | portable | edge
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
if [ $# -gt 2 ]; then echo "build.sh: at most BUILD_DIR and PROFILE (got $# arguments); see $0 --help" >&2; exit 2; fi
case "${2:-full}" in full|portable|edge) ;; *) echo "build.sh: PROFILE must be full, portable or edge (got '$2')" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
build_dir=${1:-build}
profile=${2:-full}
jobs=${PLEXUS_JOBS:-2}
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPLEXUS_PROFILE="$profile"
fi
cmake --build "$build_dir" -j "$jobs"
