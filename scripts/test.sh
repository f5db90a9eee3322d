#!/usr/bin/env bash
# Installs what Plexus needs, builds the portable subset (core, aggregators, coordinator: no
# LibTorch, gRPC or SQLite, so the dependency rules are checked by the build) and the full
# project, runs the unit and integration tests of both, then the fuzz targets (30000 inputs each
# from a fixed seed, so the same inputs on every machine).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "== portable subset (PLEXUS_PROFILE=portable)"
scripts/build.sh build-portable portable
ctest --test-dir build-portable --output-on-failure -L 'unit|integration'

echo "== full build"
scripts/build.sh build full
ctest --test-dir build --output-on-failure -j2 -L 'unit|integration'

echo "== fuzz targets (scripts/fuzz.sh: clang, ASan, UBSan)"
scripts/fuzz.sh
