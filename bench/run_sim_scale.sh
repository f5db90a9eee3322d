#!/usr/bin/env bash
# What a simulated population costs (docs/benchmarks.md): the million-client scenario
# (simulations/scenarios/million_clients.toml: 1,000 clients per round, MLP) at several population
# sizes; prints peak RSS, real time per round and the memory per idle client: the slope of peak
# RSS between the two largest populations (smaller ones stay under the peak set while loading the
# data sets, which would hide part of their cost).
# usage: bench/run_sim_scale.sh [POPULATION...]   (default 10000 1000000 2000000)
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
sizes=("${@:-10000 1000000 2000000}")
scripts/setup.sh >/dev/null
scripts/build.sh build full >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for n in ${sizes[*]}; do
  echo "== $n clients" >&2
  build/apps/plexus/plexus sim --scenario simulations/scenarios/million_clients.toml --clients "$n" \
    --summary-out "$work/$n.json" | tail -1 >&2
done
python3 - "$work" ${sizes[*]} <<'PY'
import json, sys
work, sizes = sys.argv[1], [int(s) for s in sys.argv[2:]]
runs = {n: json.load(open(f"{work}/{n}.json")) for n in sizes}
print("| clients | per round | rounds | peak RSS | real time per round (after the first) | first round (includes joining everyone) |")
print("| ---: | ---: | ---: | ---: | ---: | ---: |")
for n, s in runs.items():
    t = [r["wall_time_s"] for r in s["rounds"]]
    later = (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else float("nan")
    print(f"| {n:,} | {s['clients_per_round']:,} | {len(t)} | {s['peak_rss_bytes'] / 2**20:.0f} MiB | {later:.1f} s | {t[0]:.1f} s |")
lo, hi = sorted(sizes)[-2:] if len(sizes) > 1 else (sizes[0], sizes[0])
if hi > lo:
    slope = (runs[hi]["peak_rss_bytes"] - runs[lo]["peak_rss_bytes"]) / (hi - lo)
    print(f"\nMemory per idle client (peak RSS slope from {lo:,} to {hi:,} clients): {slope:.0f} bytes.")
PY
