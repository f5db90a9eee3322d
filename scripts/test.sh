#!/usr/bin/env bash
# Installs what Plexus needs, builds the portable subset (core, aggregators, coordinator: no
# LibTorch, gRPC or SQLite, so the dependency rules are checked by the build), the edge profile
# (a device's client) and the full project, runs the unit tests of each and the integration tests
# of the portable and full builds, cross-builds the edge profile for aarch64 and riscv64 (no
# LibTorch) and runs the federations of the `cross` label with their clients under qemu, then the
# fuzz targets (30000 inputs each from a fixed seed, so the same inputs on every machine).
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"
cd "$(dirname "$0")/.."
scripts/setup.sh
# The tests that train skip without the data set; setup installed it, so its absence here is an
# error, not a reason to pass with those tests skipped.
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  if [ ! -s "/usr/share/datasets/fashion-mnist/$f" ]; then
    echo "test.sh: /usr/share/datasets/fashion-mnist/$f is missing although scripts/setup.sh installs dataset-fashion-mnist" >&2
    exit 1
  fi
done

echo "== portable subset (PLEXUS_PROFILE=portable)"
scripts/build.sh build-portable portable
ctest --test-dir build-portable --output-on-failure -L 'unit|integration'

echo "== edge profile (PLEXUS_PROFILE=edge: what a device needs), so that it cannot break unseen"
scripts/build.sh build-edge edge
ctest --test-dir build-edge --output-on-failure -j2 -L unit

echo "== full build"
scripts/build.sh build full
ctest --test-dir build --output-on-failure -j2 -L 'unit|integration'

echo "== aarch64 and riscv64 edge builds under qemu (scripts/cross-build.sh)"
scripts/cross-build.sh aarch64
scripts/cross-build.sh riscv64
echo "== the cross federations with both foreign clients at once"
PLEXUS_CROSS_CLIENT="$(command -v qemu-aarch64-static) $PWD/build-aarch64/apps/plexus/plexus;$(command -v qemu-riscv64-static) -L $PWD/build-riscv64-sysroot/root $PWD/build-riscv64/apps/plexus/plexus" \
  ctest --test-dir build -L cross --output-on-failure --no-tests=error

echo "== fuzz targets (scripts/fuzz.sh: clang, ASan, UBSan)"
scripts/fuzz.sh
