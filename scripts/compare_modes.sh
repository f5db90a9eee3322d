#!/usr/bin/env bash
# Simulated comparison of the federation modes on heterogeneous devices (docs/modes.md): the
# same 10 virtual clients, whose times per local step spread from 10 to 40 ms (ratio 4), train
# the MLP on Fashion-MNIST (Dirichlet(1.0) label skew) with the same budget of tasks; the table
# gives the virtual time at which each mode's published model first reaches each target test
# accuracy, and the best and final accuracy. Takes about 2 minutes on 2 cores after the build.
# usage: scripts/compare_modes.sh [TARGET_ACCURACY...]   (default 0.80 0.85; runs/compare-modes/
#        keeps each run's summary JSON and metrics CSV)
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
targets=("${@:-0.80 0.85}")
scripts/setup.sh >/dev/null
scripts/build.sh build full >/dev/null
out=runs/compare-modes
mkdir -p "$out"
common=(--clients 10 --partition dirichlet:1.0 --seed 3 --test-subset 2000 --ms-per-step 10 --speed-ratio 4
        --task-overhead-ms 50 --local-steps 50 --staleness poly:a=0.5 --max-staleness 1000)
run() {  # name, extra flags...
  local name=$1; shift
  echo "== $name" >&2
  build/apps/plexus/plexus sim "${common[@]}" "$@" --summary-out "$out/$name.json" --metrics-out "$out/$name.csv" \
    | tail -1 >&2
}
# 300 training tasks in every mode.
run sync-fedavg --mode sync --clients-per-round 10 --rounds 30
run sync-fedavg-dbw --mode sync --clients-per-round 10 --min-clients 5 --backup-workers dynamic --rounds 1000 \
  --max-tasks 300
run async-fedasync --mode async --buffer-size 1 --server-lr 0.9 --rounds 300
run async-fedbuff --mode async --buffer-size 5 --server-lr 1.0 --rounds 60
run semiasync-fedcompass --mode semiasync --server-lr 0.9 --q-min 10 --q-max 50 --rounds 1000 --max-tasks 300
python3 - "$out" ${targets[*]} <<'PY'
import json, sys, os
out, targets = sys.argv[1], [float(t) for t in sys.argv[2:]]
print("| mode | versions | tasks | " + " | ".join(f"virtual time to {t:.0%}" for t in targets) +
      " | best accuracy | final accuracy | virtual time |")
print("| --- | ---: | ---: | " + " | ".join("---:" for _ in targets) + " | ---: | ---: | ---: |")
for name in ["sync-fedavg", "sync-fedavg-dbw", "async-fedasync", "async-fedbuff", "semiasync-fedcompass"]:
    s = json.load(open(os.path.join(out, name + ".json")))
    rows = s["rounds"]
    cells = []
    for t in targets:
        hit = next((r["virtual_time_s"] for r in rows if (r["test_accuracy"] or 0) >= t), None)
        cells.append("not reached" if hit is None else f"{hit:.1f} s")
    best = max((r["test_accuracy"] or 0) for r in rows)
    print(f"| {name} | {len(rows)} | {s.get('tasks_trained', '')} | " + " | ".join(cells) +
          f" | {best:.4f} | {s['final_test_accuracy']:.4f} | {s['virtual_time_s']:.1f} s |")
PY
