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
# PyTorch twice: with OpenBLAS held to one thread (as the client holds it: LibTorch's threads do
# the parallel work), and as a PyTorch user gets it by default (OpenBLAS starts a thread per core
# on top of torch.set_num_threads).
echo "| batch | threads | Plexus client (examples/s) | PyTorch, OpenBLAS 1 thread | ratio | PyTorch, default OpenBLAS | ratio |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for batch in 32 128; do
  for threads in 1 2; do
    args=("$work/mlp_bn.pt" "$work/data.safetensors" "$threads" "$batch" 3 3)
    plexus=$(build/bench/train_throughput "${args[@]}")
    pinned=$(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/train_throughput.py "${args[@]}")
    default=$(/usr/bin/python3 bench/train_throughput.py "${args[@]}")
    ratios=$(python3 -c "print(f'{$plexus / $pinned:.2f} {$plexus / $default:.2f}')")
    echo "| $batch | $threads | $plexus | $pinned | ${ratios% *} | $default | ${ratios#* } |"
  done
done
