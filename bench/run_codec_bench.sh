#!/usr/bin/env bash
# Builds and runs the codec benchmarks and prints the table for docs/compression.md: encode and
# decode speed per codec in GB/s of float32 model, and the ratio to a single-threaded triad
# measured in the same run (best of three repetitions each), and the server's fold of one coded
# upload into FedAvg, decoded first or straight from its codes, and the finiteness scan every
# decoder runs. About a minute on 2 cores.
# usage: bench/run_codec_bench.sh
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"
cd "$(dirname "$0")/.."
bench/build_bench.sh codec_bench
out=$(mktemp)
build-bench/bench/codec_bench --benchmark_out="$out" --benchmark_out_format=json >&2
python3 - "$out" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
best = {}
for b in data["benchmarks"]:
    if b.get("run_type", "iteration") != "iteration":
        continue
    parts = b["name"].split("/")
    name = parts[0] if parts[0] in ("BM_Triad", "BM_Triad2", "BM_FoldFloat32") else parts[0] + "/" + parts[1]
    best[name] = max(best.get(name, 0), b["bytes_per_second"])
triad = best.pop("BM_Triad")
triad2 = best.pop("BM_Triad2")
fold32 = best.pop("BM_FoldFloat32")
print(f"Triad in this run: {triad / 1e9:.1f} GB/s on one thread, {triad2 / 1e9:.1f} GB/s on two.\n")
print("| codec | threads | encode GB/s | vs triad | decode GB/s | vs triad |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for key in [k for k in best if k.startswith("BM_Encode")]:
    codec = key.split("/")[1]
    two = codec.endswith("_2threads")
    base = triad2 if two else triad
    enc, dec = best[key], best.get(key.replace("Encode", "Decode"), 0)
    print(f"| {codec.removesuffix('_2threads')} | {2 if two else 1} | {enc / 1e9:.2f} | {enc / base:.2f} | "
          f"{dec / 1e9:.2f} | {dec / base:.2f} |")
print()
print("Folding one upload into FedAvg's running sum on two threads, in GB/s of float32 model "
      "(a float32 delta: " + f"{fold32 / 1e9:.2f} GB/s, {fold32 / triad2:.2f} of the two-thread triad).\n")
print("| codec | decode, then fold | vs triad | fold from the codes | vs triad | speed-up |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for key in [k for k in best if k.startswith("BM_DecodeThenFold")]:
    codec = key.split("/")[1]
    slow, fast = best[key], best.get(key.replace("DecodeThenFold", "FoldFromCodes"), 0)
    print(f"| {codec} | {slow / 1e9:.2f} | {slow / triad2:.2f} | {fast / 1e9:.2f} | {fast / triad2:.2f} | "
          f"{fast / slow:.2f} |")
piece, whole = best["BM_CheckFinite/65536"], best["BM_CheckFinite/10000000"]
print(f"\nThe finiteness scan decoders run on values as they arrive (AllFinite), one thread: "
      f"{piece / 1e9:.1f} GB/s over a 256 KB piece in cache, {whole / 1e9:.1f} GB/s over the 40 MB delta "
      f"({whole / triad:.2f} of the one-thread triad).")
PY
