#!/usr/bin/env bash
# Many `plexus peer` processes on one machine (127.0.0.1, plaintext): N peers (64 by default),
# Epidemic Learning, the MLP on IID Fashion-MNIST, a few short rounds; every peer joins through
# peer 0. Prints a markdown row for docs/gossip.md: peers, rounds, wall time from the first start
# to the last exit, the peers' own test accuracy (mean and lowest, on 1000 test examples), peak
# RSS per peer (mean and highest), CPU seconds per peer and bytes sent per peer; the summaries
# are kept in the work directory.
# usage: scripts/peer_scale.sh [N [ROUNDS [WORKDIR]]]   (default 64 3 /tmp/plexus_peer_scale)
set -euo pipefail
source "$(dirname "$0")/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
n=${1:-64}
rounds=${2:-3}
work=${3:-/tmp/plexus_peer_scale}
plexus=build/apps/plexus/plexus
[ -x "$plexus" ] || { echo "peer_scale: build first (scripts/build.sh)" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work"
base=$((20000 + RANDOM % 20000))
start=$(date +%s.%N)
pids=()
for i in $(seq 0 $((n - 1))); do
  peers=""
  [ "$i" -gt 0 ] && peers="--peers 127.0.0.1:$base"
  OMP_NUM_THREADS=1 "$plexus" peer --listen "127.0.0.1:$((base + i))" $peers --num-partitions "$n" \
    --partition-index "$i" --rounds "$rounds" --local-steps 5 --gossip el:s=3 --eval-every 0 \
    --test-subset 1000 --give-up-s 600 --summary-out "$work/s$i.json" >"$work/peer$i.log" 2>&1 &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
end=$(date +%s.%N)
if [ "$failed" -gt 0 ]; then
  echo "peer_scale: $failed of $n peers failed; logs in $work" >&2
  exit 1
fi
python3 - "$work" "$n" "$rounds" "$start" "$end" <<'PY'
import json, sys, glob
work, n, rounds, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
s = [json.load(open(f)) for f in glob.glob(work + "/s*.json")]
assert len(s) == n, f"{len(s)} summaries for {n} peers"
acc = [x["final_test_accuracy"] for x in s]
rss = [x["peak_rss_bytes"] / 2**20 for x in s]
cpu = [x["cpu_seconds"] for x in s]
sent = [x["bytes_sent"] / 2**20 for x in s]
done = sum(1 for x in s if x["rounds_completed"] == rounds)
print("| peers | rounds | wall s | accuracy mean / lowest | peak RSS per peer MB mean / highest | CPU s per peer | MB sent per peer |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
print(f"| {n} | {rounds} ({done} peers completed all) | {end - start:.0f} | {sum(acc)/n:.3f} / {min(acc):.3f} "
      f"| {sum(rss)/n:.0f} / {max(rss):.0f} | {sum(cpu)/n:.1f} | {sum(sent)/n:.1f} |")
PY
