#!/usr/bin/env bash
# The disk's synced sequential write rate in GB/s, the yardstick of the durable-ingest targets
# (docs/benchmarks.md): dd with O_DIRECT and O_DSYNC, one synced write of MB megabytes at a time,
# COUNT of them, in DIR; the better of a fresh file and of writing over it once written (as the
# store writes over its spare files), so the yardstick is the disk's best. Prints the rate.
# usage: bench/synced_write_rate.sh DIR MB COUNT
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
if [ $# -ne 3 ]; then echo "synced_write_rate.sh: takes DIR MB COUNT; see $0 --help" >&2; exit 2; fi
dir=$1 mb=$2 count=$3
file="$dir/synced-write-rate.$$.bin"
trap 'rm -f "$file"' EXIT
rate() {  # the GB/s of dd's summary line
  local out=$1
  awk -v b="$(echo "$out" | awk '{print $1}')" -v s="$(echo "$out" | sed -E 's/.* copied, ([0-9.e+-]+) s.*/\1/')" \
    'BEGIN { printf "%.4f", b / s / 1e9 }'
}
fresh=$(rate "$(LC_ALL=C dd if=/dev/zero of="$file" bs="${mb}M" count="$count" oflag=direct,dsync 2>&1 | tail -1)")
over=$(rate "$(LC_ALL=C dd if=/dev/zero of="$file" bs="${mb}M" count="$count" oflag=direct,dsync conv=notrunc 2>&1 |
  tail -1)")
awk -v a="$fresh" -v b="$over" 'BEGIN { printf "%.2f\n", (a > b ? a : b) }'
