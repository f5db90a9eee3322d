#!/usr/bin/env bash
# Local training throughput: the client's LibTorch trainer (bench/train_throughput.cpp) against
# PyTorch in Python (bench/train_throughput.py) on the same TorchScript model, data, batch sizes
# and thread counts, measured in the same run. Prints the table of docs/benchmarks.md. A few
# minutes on 2 cores (builds the full profile's benchmark target first).
# usage: bench/run_train_bench.sh
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"
cd "$(dirname "$0")/.."
bench/build_bench.sh --full train_throughput
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 bench/make_train_bench_inputs.py "$work"
echo "| batch | threads | Plexus client (examples/s) | PyTorch in Python (examples/s) | ratio |"
echo "| ---: | ---: | ---: | ---: | ---: |"
for batch in 32 128; do
  for threads in 1 2; do
    plexus=$(build/bench/train_throughput "$work/mlp_bn.pt" "$work/data.safetensors" "$threads" "$batch" 2 3)
    pytorch=$(/usr/bin/python3 bench/train_throughput.py "$work/mlp_bn.pt" "$work/data.safetensors" "$threads" "$batch" 2 3)
    ratio=$(python3 -c "print(f'{$plexus / $pytorch:.2f}')")
    echo "| $batch | $threads | $plexus | $pytorch | $ratio |"
  done
done
