#!/usr/bin/env bash
# Installs what Plexus needs, builds the portable subset (core, aggregators, coordinator: no
# LibTorch, gRPC or SQLite, so the dependency rules are checked by the build), the edge profile
# (a device's client) and the full project, runs the unit tests of each and the integration tests
# of the portable and full builds, cross-builds the edge profile for aarch64 and riscv64 (no
# LibTorch) and runs the federations of the `cross` label with their clients under qemu, then the
# fuzz targets (30000 inputs each from a fixed seed, so the same inputs on every machine); between
# the full build's tests and the cross builds, every benchmark runs once on tiny inputs
# (bench/smoke.sh: a smoke run, nothing asserted on time).
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"
cd "$(dirname "$0")/.."

# Stages and their shares of the 40 minutes CI may take on a cold 2-core machine (seconds). A fresh
# clone with an empty ccache measured, 2026-12-03: portable 254, edge 236, full-build 361 (what the
# portable and edge builds compiled alike comes from ccache), full-tests 265, aarch64 396, riscv64
# 397, cross-both 31, fuzz 245; 2186 in all, with every package already installed (setup 1). The
# table is printed at the end, also when a stage fails, and written to build/ci-timing.csv; a stage
# past its share says so in every run.
# The bench-smoke stage (2026-12-06: 24 s with its targets built) took its 90 s from the two
# cross builds' shares.
declare -A stage_budget=([setup]=240 [portable]=255 [edge]=240 [full-build]=390 [full-tests]=300
  [bench-smoke]=90 [aarch64]=345 [riscv64]=345 [cross-both]=35 [fuzz]=160)
stage_order=() stage_name="" stage_start=0
declare -A stage_seconds=()
stage() {  # ends the running stage and starts the one named (none: just ends it)
  if [ -n "$stage_name" ]; then stage_seconds[$stage_name]=$((SECONDS - stage_start)); fi
  stage_name=${1:-} stage_start=$SECONDS
  if [ -n "$stage_name" ]; then stage_order+=("$stage_name"); fi
}
timing_table() {
  local rc=$? failed=$stage_name total=0 budget_total=0 s b flag csv=""
  stage
  echo
  echo "== CI timing (seconds; share = this stage's part of the 40-minute budget)"
  printf '%-12s %8s %8s  %s\n' stage seconds share ""
  for name in "${stage_order[@]}"; do
    s=${stage_seconds[$name]:-0} b=${stage_budget[$name]:-0} flag=""
    total=$((total + s)) budget_total=$((budget_total + b))
    if [ "$s" -gt "$b" ]; then flag="OVER its share by $((s - b)) s"; fi
    if [ "$rc" -ne 0 ] && [ "$name" = "$failed" ]; then flag="FAILED${flag:+; $flag}"; fi
    printf '%-12s %8d %8d  %s\n' "$name" "$s" "$b" "$flag"
    csv+="$name,$s,$b"$'\n'
  done
  printf '%-12s %8d %8d  %s\n' total "$total" "$budget_total" "$([ "$total" -gt 2400 ] && echo "OVER the 40 minutes")"
  if [ -d build ]; then printf 'stage,seconds,share\n%s' "$csv" >build/ci-timing.csv; fi
  return "$rc"
}
trap timing_table EXIT

stage setup
scripts/setup.sh
# The tests that train skip without the data set; setup installed it, so its absence here is an
# error, not a reason to pass with those tests skipped.
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  if [ ! -s "/usr/share/datasets/fashion-mnist/$f" ]; then
    echo "test.sh: /usr/share/datasets/fashion-mnist/$f is missing although scripts/setup.sh installs dataset-fashion-mnist" >&2
    exit 1
  fi
done
if [ ! -s /usr/share/games/fortunes/fortunes ]; then  # the language model's corpus (--model tinylm)
  echo "test.sh: /usr/share/games/fortunes is missing although scripts/setup.sh installs fortunes" >&2
  exit 1
fi

stage portable
echo "== portable subset (PLEXUS_PROFILE=portable)"
scripts/build.sh build-portable portable
ctest --test-dir build-portable --output-on-failure -L 'unit|integration'

stage edge
echo "== edge profile (PLEXUS_PROFILE=edge: what a device needs), so that it cannot break unseen"
scripts/build.sh build-edge edge
ctest --test-dir build-edge --output-on-failure -j2 -L unit

stage full-build
echo "== full build"
scripts/build.sh build full
stage full-tests
ctest --test-dir build --output-on-failure -j2 -L 'unit|integration'

stage bench-smoke
echo "== benchmarks, once each on tiny inputs (bench/smoke.sh)"
bench/smoke.sh build

echo "== aarch64 and riscv64 edge builds under qemu (scripts/cross-build.sh)"
# Their federations run once, below, with both foreign clients at once, rather than once per
# architecture as well.
stage aarch64
PLEXUS_CROSS_FEDERATION=0 scripts/cross-build.sh aarch64
stage riscv64
PLEXUS_CROSS_FEDERATION=0 scripts/cross-build.sh riscv64
stage cross-both
echo "== the cross federations with both foreign clients at once"
PLEXUS_CROSS_CLIENT="$(command -v qemu-aarch64-static) $PWD/build-aarch64/apps/plexus/plexus;$(command -v qemu-riscv64-static) -L $PWD/build-riscv64-sysroot/root $PWD/build-riscv64/apps/plexus/plexus" \
  ctest --test-dir build -L cross --output-on-failure --no-tests=error

stage fuzz
echo "== fuzz targets (scripts/fuzz.sh: clang, ASan, UBSan)"
scripts/fuzz.sh
