#!/usr/bin/env bash
# What durable acknowledgements cost asynchronous ingest (docs/benchmarks.md): builds
# bench/ingest_durability and runs it twice, the database on this checkout's disk and then on
# tmpfs (/dev/shm, where a sync costs nothing: what remains is the CPU of writing the log).
# Each run drives the real AsyncEngine over a real SqliteStore with 4 MB updates from 10 clients
# (300 updates), with the update log as the server runs it and with the log skipped (the
# baseline, in the same run), and with int8 uploads logged as their codes (as the server keeps
# them into FedAvg), and prints a markdown table with the ratios. About a minute.
# usage: bench/run_ingest_durability.sh
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"
cd "$(dirname "$0")/.."
bench/build_bench.sh --full ingest_durability
disk=$(mktemp -d -p "$PWD/build")
shm=""
if [ -d /dev/shm ]; then shm=$(mktemp -d -p /dev/shm); fi
trap 'rm -rf "$disk" ${shm:+"$shm"}' EXIT
echo "Database on disk ($(df --output=source "$disk" | tail -1)):"
echo
build/bench/ingest_durability --dir "$disk" --params 1000000 --updates 300 --buffer 10 --codec int8
if [ -n "$shm" ]; then
  echo
  echo "Database on tmpfs (/dev/shm):"
  echo
  build/bench/ingest_durability --dir "$shm" --params 1000000 --updates 300 --buffer 10 --codec int8
fi
