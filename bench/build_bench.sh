#!/usr/bin/env bash
# Installs what is needed and builds one benchmark target in build-bench/ (Release, portable
# profile). usage: bench/build_bench.sh TARGET
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
if [ $# -ne 1 ]; then echo "build_bench.sh: needs one TARGET; see $0 --help" >&2; exit 2; fi
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
if [ ! -f build-bench/build.ninja ]; then
  cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLEXUS_PROFILE=portable \
    -DPLEXUS_BUILD_BENCH=ON -DPLEXUS_BUILD_TESTS=OFF >/dev/null
fi
cmake --build build-bench -j2 --target "$1" >/dev/null
