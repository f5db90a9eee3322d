#!/usr/bin/env bash
# Installs what is needed and builds one benchmark target: by default in build-bench/ (portable
# profile); with --full in the full build, build/, with benchmarks switched on there, for the
# benchmarks that need the server, the client or the peer. Both with the build type users build
# (scripts/build.sh: RelWithDebInfo, -O2 -g), so that what is measured is what runs
# (bench/compare_build_types.sh measures the other choices).
# usage: bench/build_bench.sh [--full] TARGET
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
full=0
if [ "${1:-}" = "--full" ]; then
  full=1
  shift
fi
script_no_options "$@"
if [ $# -ne 1 ]; then echo "build_bench.sh: needs one TARGET; see $0 --help" >&2; exit 2; fi
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
if [ $full = 1 ]; then
  scripts/build.sh build full >/dev/null
  cmake -DPLEXUS_BUILD_BENCH=ON build >/dev/null
  cmake --build build -j2 --target "$1" >/dev/null
  exit 0
fi
# Configured every time: a build-bench/ configured as Release before 2026-12-05 switches over.
cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPLEXUS_PROFILE=portable \
  -DPLEXUS_BUILD_BENCH=ON -DPLEXUS_BUILD_TESTS=OFF >/dev/null
cmake --build build-bench -j2 --target "$1" >/dev/null
