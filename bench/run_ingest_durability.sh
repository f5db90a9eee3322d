#!/usr/bin/env bash
# What durable acknowledgements cost asynchronous ingest (docs/benchmarks.md): builds
# bench/ingest_durability and runs it with the database on this checkout's disk and then on
# tmpfs (/dev/shm, where a sync costs nothing: what remains is the CPU of writing the log), for
# 4 MB updates (1e6 parameters, 300 updates) and 40 MB updates (1e7, 150 updates), the first 50 of
# each run not timed (a long-running server's memory and files in use), from 10 clients
# whose uploads are submitted as the server's handlers submit them (one thread each, the durable
# write outside the engine's lock, rows group-committed, held back while two versions wait for
# their commit). Each run drives the real AsyncEngine
# over a real SqliteStore with the update log as the server runs it and with the log skipped (the
# baseline, in the same run), with the values copied into their files (the store lending none, as
# before it lent them on tmpfs, and as on a disk), and with int8 uploads logged as their codes; on the disk, the
# disk's own synced sequential write rate at the update's size (dd, O_DIRECT and O_DSYNC, one
# synced write per update, the better of a fresh file and of writing over it) is measured in the
# same run as the second baseline. Prints markdown
# tables with the ratios. A few minutes.
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

for size in "1000000 300 4" "10000000 150 40"; do
  read -r params updates mb <<<"$size"
  echo "### ${mb} MB updates"
  echo
  rate=$(bench/synced_write_rate.sh "$disk" "$mb" $((400 / mb)))
  echo "Database on disk ($(df --output=source "$disk" | tail -1)); the disk's synced write rate" \
    "(dd bs=${mb}M oflag=direct,dsync, the better of a fresh file and writing over it): ${rate} GB/s"
  echo
  build/bench/ingest_durability --dir "$disk" --params "$params" --updates "$updates" --buffer 10 --codec int8 |
    awk -v r="$rate" 'NR == 1 { print $0 " vs synced write |"; next } NR == 2 { print $0 " ---: |"; next }
      { split($0, f, "|"); gsub(/[^0-9.]/, "", f[7]); printf "%s %.2f |\n", $0, f[7] / r }'
  if [ -n "$shm" ]; then
    echo
    echo "Database on tmpfs (/dev/shm):"
    echo
    build/bench/ingest_durability --dir "$shm" --params "$params" --updates "$updates" --buffer 10 --codec int8
  fi
  echo
done
