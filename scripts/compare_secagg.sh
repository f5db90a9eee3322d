#!/usr/bin/env bash
# A real federation (a `plexus server` and 10 `plexus client` processes on 127.0.0.1) run twice
# with the same seeds: updates in the clear, and with secure aggregation (`--secagg`): the final
# accuracy on the whole test set, the wall time per round, the bytes of one masked update and how
# many values the clients clipped. 5 sync rounds of one local epoch, MLP, IID Fashion-MNIST. Then
# the simulator with 1,000 clients in one group per round, 10 rounds: in the clear, with --secagg,
# and with 10% of the members dropping out (--secagg-dropout 0.1, beside the same share of devices
# dropping their tasks in the clear): accuracy, the members' CPU beyond training, the server's
# unmasking and the bytes. About 10 minutes on 2 cores after the build; the tables of
# docs/privacy.md ("Secure aggregation").
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
echo "== simulator, 1,000 clients per round" >&2
sim=("$plexus" sim --clients 1000 --clients-per-round 1000 --rounds 10 --seed 5)
"${sim[@]}" --summary-out "$out/sim-clear.json" >"$out/sim-clear.log" 2>&1
"${sim[@]}" --dropout 0.1 --summary-out "$out/sim-clear-dropout.json" >"$out/sim-clear-dropout.log" 2>&1
"${sim[@]}" --secagg --summary-out "$out/sim-secagg.json" >"$out/sim-secagg.log" 2>&1
"${sim[@]}" --secagg --secagg-dropout 0.1 --summary-out "$out/sim-secagg-dropout.json" >"$out/sim-secagg-dropout.log" 2>&1
echo
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
print("| simulated run (1,000 clients per round, 10 rounds) | final accuracy | updates per round | member CPU beyond training, mean (max) ms | server's unmasking, longest ms | key bytes per member | masked bytes per member |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for name, label in (("clear", "updates in the clear"), ("clear-dropout", "in the clear, 10% of devices drop their task"),
                    ("secagg", "--secagg"), ("secagg-dropout", "--secagg --secagg-dropout 0.1")):
    s = json.load(open(os.path.join(out, f"sim-{name}.json")))
    per_round = sum(r["updates"] for r in s["rounds"]) / len(s["rounds"])
    g = s.get("secagg")
    cells = ["", "", "", ""] if g is None else [
        f"{g['member_cpu_ms_mean']:.2f} ({g['member_cpu_ms_max']:.2f})", f"{g['unmask_ms_max']:.0f}",
        f"{g['key_bytes_per_member']:,.0f}", f"{g['masked_bytes_per_member']:,.0f}"]
    print(f"| {label} | {s['final_test_accuracy']:.4f} | {per_round:.0f} | " + " | ".join(cells) + " |")
PY
echo "== simulator: FedBuff buffers as secure groups, and DP over secure aggregation" >&2
small=("$plexus" sim --clients 100 --seed 5)
"${small[@]}" --mode async --buffer-size 10 --rounds 30 --summary-out "$out/fedbuff-clear.json" >"$out/fedbuff-clear.log" 2>&1
"${small[@]}" --mode async --buffer-size 10 --rounds 30 --secagg --summary-out "$out/fedbuff-secagg.json" \
  >"$out/fedbuff-secagg.log" 2>&1
dp=(--clients-per-round 20 --rounds 20)
"${small[@]}" "${dp[@]}" --dp central:clip=1,noise=0.5 --summary-out "$out/dp-central.json" >"$out/dp-central.log" 2>&1
"${small[@]}" "${dp[@]}" --dp central:clip=1,noise=0.5 --secagg --summary-out "$out/dp-central-secagg.json" \
  >"$out/dp-central-secagg.log" 2>&1
"${small[@]}" "${dp[@]}" --dp distributed:clip=1,noise=0.5 --secagg --summary-out "$out/dp-distributed.json" \
  >"$out/dp-distributed.log" 2>&1
echo
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
print("| simulated run (100 clients) | final accuracy | versions | updates per version | epsilon at 1e-5 |")
print("| --- | ---: | ---: | ---: | ---: |")
for name, label in (("fedbuff-clear", "FedBuff, buffers of 10, in the clear"),
                    ("fedbuff-secagg", "FedBuff, buffers of 10, --secagg (groups of 12)"),
                    ("dp-central", "20 per round, --dp central:clip=1,noise=0.5"),
                    ("dp-central-secagg", "the same with --secagg"),
                    ("dp-distributed", "--dp distributed:clip=1,noise=0.5 --secagg")):
    s = json.load(open(os.path.join(out, f"{name}.json")))
    per_version = sum(r["updates"] for r in s["rounds"]) / len(s["rounds"])
    eps = s.get("dp_epsilon")
    print(f"| {label} | {s['final_test_accuracy']:.4f} | {len(s['rounds'])} | {per_version:.1f} | "
          f"{'-' if eps is None else f'{eps:.2f}'} |")
PY
