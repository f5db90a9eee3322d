#!/usr/bin/env bash
# Builds and runs the secure-aggregation benchmarks and prints the table for docs/privacy.md: a
# member's CPU per round beyond training and the server's unmasking, each against the ChaCha20
# keystream of one mask of the same length measured in the same run (the floor: a member expands
# k + 1 masks, the server one per survivor and one per surviving neighbour of each dropped member;
# with threads, the time on all of them), and the bytes a member sends.
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"
cd "$(dirname "$0")/.."
bench/build_bench.sh secagg_bench
out=$(mktemp)
build-bench/bench/secagg_bench --benchmark_out="$out" --benchmark_out_format=json >&2
python3 - "$out" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
runs = {b["name"]: b for b in data["benchmarks"] if b.get("run_type", "iteration") == "iteration"}
mask = next(b for n, b in runs.items() if n.startswith("BM_MaskKeystream"))
mask_ms = mask["real_time"]
ctx = data["context"]
print(f"Machine: {ctx.get('num_cpus')} CPUs at {ctx.get('mhz_per_cpu')} MHz; one mask of the "
      f"MLP's 159,010 values (ChaCha20 keystream) takes {mask_ms:.3f} ms in this run.\n")
print("| what | n | degree k | threads | ms | in masks of keystream | upload bytes (float32: 636,040) | key-exchange bytes |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for name, b in runs.items():
    parts = name.split("/")
    if parts[0] == "BM_MemberRound":
        k = int(parts[1])
        print(f"| member, one round beyond training (advertise, share, encode, mask, unmask) | {k + 1} | {k} | 1 | "
              f"{b['real_time']:.2f} | {b['real_time'] / mask_ms:.1f} (floor {k + 1}) | {int(b['upload_bytes']):,} | "
              f"{int(b['key_bytes']):,} |")
    elif parts[0] == "BM_ServerUnmask":
        n, k = int(parts[1]), int(b["degree"])
        floor = n - n // 10 + (n // 10) * round(k * 0.9)  # a dropped member's surviving neighbours
        threads = int(parts[3])
        print(f"| server, unmasking with 10% dropped after sharing keys | {n} | {k} | {threads} | {b['real_time']:.1f} | "
              f"{b['real_time'] * threads / mask_ms:.0f} (floor {floor}) | | |")
PY
rm -f "$out"
