#!/usr/bin/env bash
# A real federation (a `plexus server` and 10 `plexus client` processes on 127.0.0.1) run twice
# with the same seeds: updates in the clear, and with secure aggregation (`--secagg`): the final
# accuracy on the whole test set, the wall time per round, the bytes of one masked update and how
# many values the clients clipped. 5 sync rounds of one local epoch, MLP, IID Fashion-MNIST. About
# 2 minutes on 2 cores after the build; the table of docs/privacy.md ("Secure aggregation").
# usage: scripts/compare_secagg.sh   (runs/compare-secagg/ keeps the summaries and logs)
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
scripts/build.sh build full >/dev/null
out=runs/compare-secagg
rm -rf "$out"
mkdir -p "$out"
plexus=build/apps/plexus/plexus
port=$((20000 + RANDOM % 20000))
n=10
for run in clear secagg; do
  flags=()
  if [ "$run" = secagg ]; then flags=(--secagg); fi
  echo "== $run" >&2
  "$plexus" server --listen "127.0.0.1:$port" --db "$out/$run.db" --rounds 5 --clients-per-round "$n" \
    --min-clients "$n" --seed 3 --summary-out "$out/server-$run.json" "${flags[@]}" >"$out/server-$run.log" 2>&1 &
  server=$!
  clients=()
  for ((i = 0; i < n; i++)); do
    "$plexus" client --server "127.0.0.1:$port" --num-partitions "$n" --partition-index "$i" --client-id "c$i" \
      >"$out/client-$run-$i.log" 2>&1 &
    clients+=($!)
  done
  wait "$server"
  for p in "${clients[@]}"; do wait "$p"; done
  port=$((port + 1))
done
python3 - "$out" "$n" <<'PY'
import glob, json, os, re, sys
out, n = sys.argv[1], int(sys.argv[2])
print("| run | final accuracy | wall time per round (s) | upload per client and round (bytes) | values clipped |")
print("| --- | ---: | ---: | ---: | ---: |")
for run in ("clear", "secagg"):
    s = json.load(open(os.path.join(out, f"server-{run}.json")))
    rounds = s["rounds_completed"]
    if run == "clear":
        upload = f"{s['transfers']['upload_bytes_received'] // (rounds * n):,}"
        clipped = "-"
    else:
        sizes, clip = set(), 0
        for f in glob.glob(os.path.join(out, f"client-{run}-*.log")):
            for m in re.finditer(r"masked update \(\d+ values, (\d+) bytes; (\d+) values clipped", open(f).read()):
                sizes.add(int(m.group(1)))
                clip += int(m.group(2))
        upload = ", ".join(f"{b:,}" for b in sorted(sizes)) + " (masked)"
        clipped = str(clip)
    print(f"| {'updates in the clear' if run == 'clear' else '--secagg'} | {s['final_test_accuracy']:.4f} | "
          f"{s['wall_time_s'] / rounds:.2f} | {upload} | {clipped} |")
PY
