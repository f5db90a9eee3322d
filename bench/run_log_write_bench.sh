#!/usr/bin/env bash
# Builds and runs bench/log_write_bench and prints the table for docs/benchmarks.md: logging an
# update's values into a file on tmpfs (/dev/shm unless PLEXUS_LOG_WRITE_DIR says otherwise) as
# the server does today (a copy into memory, then pwrite) and as a log that is the update's own
# memory would (a copy into a shared mapping of the file), each against the copy into memory alone
# in the same run (best of three repetitions). About half a minute.
# usage: bench/run_log_write_bench.sh
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"
cd "$(dirname "$0")/.."
bench/build_bench.sh log_write_bench
out=$(mktemp)
trap 'rm -f "$out"' EXIT
build-bench/bench/log_write_bench --benchmark_out="$out" --benchmark_out_format=json >&2
python3 - "$out" "${PLEXUS_LOG_WRITE_DIR:-/dev/shm}" <<'PY'
import json, sys
best = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("run_type", "iteration") != "iteration" or "bytes_per_second" not in b:
        continue
    name, mib = b["name"].split("/")[:2]
    best[(name, mib)] = max(best.get((name, mib), 0), b["bytes_per_second"])
print(f"Files in {sys.argv[2]}; GB/s of values, and against the copy into memory alone.\n")
print("| values | copy into memory (baseline) | copy, then pwrite (today's log) | vs baseline | copy into the kept mapping | vs baseline | mapped each time | vs baseline |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for mib in ("4", "40"):
    base = best[("BM_HeapCopy", mib)]
    cells = [f"{base / 1e9:.2f}"]
    for name in ("BM_HeapCopyThenPwrite", "BM_MappedCopy", "BM_MappedCopyEachTime"):
        r = best.get((name, mib), 0)
        cells += [f"{r / 1e9:.2f}", f"{r / base:.2f}"]
    print(f"| {mib} MiB | " + " | ".join(cells) + " |")
PY
