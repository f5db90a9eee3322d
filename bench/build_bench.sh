#!/usr/bin/env bash
# Installs what is needed and builds one benchmark target in build-bench/ (Release, portable
# profile). usage: bench/build_bench.sh TARGET
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
if [ ! -f build-bench/build.ninja ]; then
  cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLEXUS_PROFILE=portable \
    -DPLEXUS_BUILD_BENCH=ON -DPLEXUS_BUILD_TESTS=OFF >/dev/null
fi
cmake --build build-bench -j2 --target "$1" >/dev/null
