#!/usr/bin/env bash
# Builds and runs the CRDT-layer benchmarks and prints the markdown tables for docs/benchmarks.md:
# resolve through a replica against the bare strategy (overhead), verify-and-add per
# contribution, and Merkle digest sync against set size.
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"
cd "$(dirname "$0")/.."
bench/build_bench.sh crdt_bench
out=$(mktemp)
build-bench/bench/crdt_bench --benchmark_out="$out" --benchmark_out_format=json >&2
python3 - "$out" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
ms = {}
rows = []
for b in data["benchmarks"]:
    name = b["name"].split("/")
    t = b["real_time"]  # milliseconds (Unit kMillisecond)
    ms[tuple(name)] = t
    rows.append((name, t, b))
print("| strategy | n | P | bare merge ms | through the CRDT replica ms | overhead |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for (name, t, b) in rows:
    if name[0] != "BM_BareMerge": continue
    crdt = ms.get(("BM_CrdtResolve",) + tuple(name[1:]))
    print(f"| {name[1]} | {name[2]} | {int(name[3]):.0e} | {t:.3f} | {crdt:.3f} | {crdt - t:+.3f} ms ({(crdt - t) / t:+.0%}) |")
print()
print("| verify and add one contribution (SHA-256 of the content + Ed25519) | P | ms |")
print("| --- | ---: | ---: |")
for (name, t, b) in rows:
    if name[0] == "BM_CrdtVerifyAndAdd": print(f"| | {int(name[1]):.0e} | {t:.3f} |")
print()
print("| digest sync: set entries | differing | node hashes compared | ms (both digests built + diff) |")
print("| ---: | ---: | ---: | ---: |")
for (name, t, b) in rows:
    if name[0] == "BM_DigestSync": print(f"| {name[1]} | 1 | {int(b['node_hashes'])} | {t:.3f} |")
PY
rm -f "$out"
