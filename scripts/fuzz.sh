#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang, AddressSanitizer and UndefinedBehaviorSanitizer
# (portable profile, build-fuzz/) and runs each under ctest's `fuzz` label: first the inputs that
# once crashed (fuzz/regressions/), then fuzzing from the seed corpus (fuzz/corpus/).
#   scripts/fuzz.sh                    30000 inputs per target from seed 1: the same inputs on every
#                                      machine (the test command runs this)
#   scripts/fuzz.sh --explore SECONDS  random seeds, SECONDS per target, corpus kept between runs
# A crash leaves its input under build-fuzz/fuzz/work/<target>/artifacts/; copy it into
# fuzz/regressions/<target>/ once fixed.
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
cd "$(dirname "$0")/.."
runs=30000 seed=1 seconds=0
case "${1:-}" in
  "") ;;
  --explore) runs=-1 seed=0 seconds=${2:?usage: scripts/fuzz.sh [--explore SECONDS]} ;;
  -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: scripts/fuzz.sh [--explore SECONDS]" >&2; exit 2 ;;
esac
scripts/setup.sh >/dev/null
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPLEXUS_PROFILE=portable -DPLEXUS_BUILD_TESTS=OFF -DPLEXUS_BUILD_FUZZ=ON >/dev/null
fi
cmake -DPLEXUS_FUZZ_RUNS="$runs" -DPLEXUS_FUZZ_SEED="$seed" -DPLEXUS_FUZZ_SECONDS="$seconds" build-fuzz >/dev/null
cmake --build build-fuzz -j2
# A repeatable run starts from the seed corpus alone, not from what earlier runs added.
if [ "$seed" != 0 ]; then rm -rf build-fuzz/fuzz/work/*/corpus/*; fi
ctest --test-dir build-fuzz --output-on-failure -j2 -L fuzz
