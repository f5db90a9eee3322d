#!/usr/bin/env bash
# Builds and runs the aggregation benchmarks and prints the markdown table for
# docs/benchmarks.md: bytes of client input per second per strategy, and the ratio to the triad
# bandwidth measured in the same run with the same thread count.
# usage: bench/run_aggregation_bench.sh [BENCHMARK_FILTER]   (default: everything; the
#        n=100, P=1e7 robust cases take minutes each)
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
filter=${1:-.}
bench/build_bench.sh aggregation_bench
out=$(mktemp) again=$(mktemp)
build-bench/bench/aggregation_bench --benchmark_filter="Copy|Triad|$filter" \
  --benchmark_out="$out" --benchmark_out_format=json >&2
# The baseline once more at the end: the VM's bandwidth drifts, and the best of both is the
# stricter yardstick.
build-bench/bench/aggregation_bench --benchmark_filter="Copy|Triad" \
  --benchmark_out="$again" --benchmark_out_format=json >&2
python3 - "$out" "$again" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
triad, copy, rows, runs = {}, {}, {}, {}
for b in data["benchmarks"] + json.load(open(sys.argv[2]))["benchmarks"]:
    if b.get("run_type", "iteration") != "iteration": continue  # skip mean/median/stddev rows
    name = b["name"].split("/")
    bps = b.get("bytes_per_second")
    if bps is None:
        rows[tuple(name[:5])] = (name, None, b.get("error_message", "error"))
        continue
    if name[0] in ("BM_Triad", "BM_Copy"):
        best = triad if name[0] == "BM_Triad" else copy
        best[name[1]] = max(best.get(name[1], 0), bps)
    else:  # repeated strategies: keep the best run, like the baseline
        key = tuple(name[:5])
        runs[key] = runs.get(key, 0) + 1
        if key not in rows or rows[key][1] is None or bps > rows[key][1]: rows[key] = (name, bps, None)
ctx = data["context"]
print(f"Machine: {ctx.get('num_cpus')} CPUs at {ctx.get('mhz_per_cpu')} MHz; "
      f"memory baseline in this run (best of 10, at start and end): triad {triad.get('1',0)/1e9:.1f} GB/s (1 thread), "
      f"{triad.get('2',0)/1e9:.1f} GB/s (2 threads); copy {copy.get('1',0)/1e9:.1f} / {copy.get('2',0)/1e9:.1f} GB/s.\n")
print("| strategy | mode | n | P | threads | input GB/s | vs triad |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for key, (name, bps, err) in rows.items():
    mode = {"BM_StrategyOneByOne": "one by one", "BM_StrategyShared": "one by one, held (FoldShared)"}.get(name[0], "batch")
    if runs.get(key, 1) > 1: mode += f" (best of {runs[key]})"
    strategy, n, p, t = name[1], name[2], name[3], name[4]
    if bps is None:
        print(f"| {strategy} | {mode} | {n} | {int(p):.0e} | {t} | {err} | |")
    else:
        print(f"| {strategy} | {mode} | {n} | {int(p):.0e} | {t} | {bps/1e9:.2f} | {bps/triad[t]:.0%} |")
PY
rm -f "$out" "$again"
