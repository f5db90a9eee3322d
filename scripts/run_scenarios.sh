#!/usr/bin/env bash
# Runs the scenarios of simulations/scenarios/ and prints the results table of docs/simulation.md:
# final and best test accuracy, the round and virtual time at which 80% and 85% were first
# reached, and peak memory per run (real times are in each summary JSON); draws every run's
# accuracy curves into one plot. About 10 minutes on 2 cores after the build (615 s on 2026-12-01,
# most of it the 100-round CNN run dirichlet_fedavg).
# usage: scripts/run_scenarios.sh [RUN...]   (default: all runs below; runs/scenarios/ keeps each
#        run's summary JSON and metrics CSV, and accuracy.png)
# A RUN is NAME or NAME:extra-flags, e.g. "modes_heterogeneous:--mode async".
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
scripts/build.sh build full >/dev/null
out=runs/scenarios
mkdir -p "$out"
default_runs=(
  "iid_fedavg"
  "modes_heterogeneous"
  "modes_heterogeneous:--mode async --buffer-size 5"
  "modes_heterogeneous:--mode semiasync"
  "attackers_20pct"
  "attackers_20pct:--strategy median"
  "attackers_20pct:--strategy trimmed_mean:beta=0.2"
  "million_clients"
  "dirichlet_fedavg"
)
runs=("${@}")
[ ${#runs[@]} -eq 0 ] && runs=("${default_runs[@]}")
names=()
for run in "${runs[@]}"; do
  scenario=${run%%:*}
  extra=""
  [[ "$run" == *:* ]] && extra=${run#*:}
  name=$scenario
  [ -n "$extra" ] && name="$scenario$(echo "$extra" | tr -c 'a-zA-Z0-9=.\n' '_' | sed 's/__*/_/g')"
  names+=("$name")
  echo "== $name" >&2
  # shellcheck disable=SC2086  # extra holds several flags
  build/apps/plexus/plexus sim --scenario "simulations/scenarios/$scenario.toml" $extra \
    --summary-out "$out/$name.json" --metrics-out "$out/$name.csv" | tail -1 >&2
done
csvs=()
for n in "${names[@]}"; do csvs+=("$out/$n.csv"); done
build/apps/plexus/plexus plot "${csvs[@]}" --out "$out/accuracy.png" >&2
python3 - "$out" "${names[@]}" <<'PY'
import json, os, sys
out, names = sys.argv[1], sys.argv[2:]
def first(rows, target):
    for r in rows:
        if (r.get("test_accuracy") or 0) >= target:
            return f"{r['round']} / {r.get('virtual_time_s', 0):.0f} s"
    return "-"
print("| run | clients | strategy | final acc. | best acc. | 80% at (round / virtual) | 85% at (round / virtual) | peak memory |")
print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
for n in names:
    s = json.load(open(os.path.join(out, n + ".json")))
    rows = s["rounds"]
    best = max((r.get("test_accuracy") or 0) for r in rows)
    print(f"| {n} | {s['clients']:,} | {s['strategy']} | {s['final_test_accuracy']:.3f} | {best:.3f} | "
          f"{first(rows, 0.80)} | {first(rows, 0.85)} | {s['peak_rss_bytes'] / 2**20:.0f} MiB |")
PY
