#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang, AddressSanitizer and UndefinedBehaviorSanitizer
# (portable profile, build-fuzz/) and runs each under ctest's `fuzz` label: first the inputs that
# once crashed (fuzz/regressions/), then SECONDS of fuzzing from the seed corpus (fuzz/corpus/).
# A crash leaves its input under build-fuzz/fuzz/work/<target>/artifacts/; copy it into
# fuzz/regressions/<target>/ once fixed.
# usage: scripts/fuzz.sh [SECONDS]   (default 20 per target)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
scripts/setup.sh >/dev/null
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPLEXUS_PROFILE=portable -DPLEXUS_BUILD_TESTS=OFF -DPLEXUS_BUILD_FUZZ=ON >/dev/null
fi
cmake -DPLEXUS_FUZZ_SECONDS="$seconds" build-fuzz >/dev/null
cmake --build build-fuzz -j2
ctest --test-dir build-fuzz --output-on-failure -j2 -L fuzz
