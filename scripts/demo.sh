#!/usr/bin/env bash
# The main job: installs what Plexus needs, builds it, and runs a small local federation on
# Fashion-MNIST with default settings (plexus sim: 10 virtual clients, 5 per round, 20 rounds).
# Extra arguments go to `plexus sim` (see `build/apps/plexus/plexus sim --help`); it prints an estimate of
# the training time before it starts (a CNN with non-IID data takes minutes on 2 cores).
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build full
mkdir -p runs
exec build/apps/plexus/plexus sim --metrics-out runs/sim-metrics.csv --summary-out runs/sim-summary.json "$@"
