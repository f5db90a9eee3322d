#!/usr/bin/env bash
# What central differential privacy costs, measured (docs/privacy.md): the MLP on Fashion-MNIST
# with 100 simulated clients (Dirichlet(0.5) label skew), 10 per version, 200 versions, at noise
# multipliers 0, 0.5, 1 and 2, with a fixed clip (1.0) and adaptive clipping (from 0.1, median
# target), in sync rounds and in FedBuff (buffers of 10); then 1,000
# clients with 100 per version and a fixed clip, where the same noise is spread over ten times as
# many updates; then DP-FTRL's tree aggregation (trees of 10 versions) in the same three settings.
# The table gives
# the final and best test accuracy and ε at δ = 1e-5 after the last version. Takes about
# 20 minutes on 2 cores after the build.
# usage: scripts/compare_privacy.sh [ROUNDS]   (default 200; runs/compare-privacy/ keeps each run's
#        summary JSON and metrics CSV; PLEXUS_BIN=path runs another plexus binary)
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
rounds=${1:-200}
plexus=${PLEXUS_BIN:-build/apps/plexus/plexus}
if [ -z "${PLEXUS_BIN:-}" ]; then
  scripts/setup.sh >/dev/null
  scripts/build.sh build full >/dev/null
fi
out=runs/compare-privacy
mkdir -p "$out"
names=()
run() {  # name, flags...
  local name=$1; shift
  names+=("$name")
  echo "== $name" >&2
  "$plexus" sim --partition dirichlet:0.5 --seed 5 --test-subset 2000 --rounds "$rounds" "$@" \
    --summary-out "$out/$name.json" --metrics-out "$out/$name.csv" | tail -1 >&2
}
small=(--clients 100 --clients-per-round 10)
fedbuff=(--mode async --buffer-size 10 --max-concurrency 10 --clients 100)
for z in 0 0.5 1 2; do
  run "sync-100-fixed-z$z" "${small[@]}" --dp "central:clip=1,noise=$z"
  run "sync-100-adaptive-z$z" "${small[@]}" --dp "adaptive:clip=0.1,noise=$z"
  run "fedbuff-100-fixed-z$z" "${fedbuff[@]}" --dp "central:clip=1,noise=$z"
  run "fedbuff-100-adaptive-z$z" "${fedbuff[@]}" --dp "adaptive:clip=0.1,noise=$z"
done
for z in 0 0.5 1 2; do
  run "sync-1000-fixed-z$z" --clients 1000 --clients-per-round 100 --dp "central:clip=1,noise=$z"
done
# DP-FTRL (tree aggregation, no sampling assumed): trees of 10 versions, each client at most once
# per tree (100 clients fill a tree of 10 x 10 updates; 1,000 fill one of 10 x 100).
for z in 1 4; do
  run "sync-100-tree-z$z" "${small[@]}" --dp "tree:clip=1,noise=$z,restart=10"
  run "fedbuff-100-tree-z$z" "${fedbuff[@]}" --dp "tree:clip=1,noise=$z,restart=10"
  run "sync-1000-tree-z$z" --clients 1000 --clients-per-round 100 --dp "tree:clip=1,noise=$z,restart=10"
done
python3 - "$out" "${names[@]}" <<'PY'
import json, os, sys
out, names = sys.argv[1], sys.argv[2:]
print("| run | mode | clients (per version) | clip | noise z | versions | final accuracy | best accuracy | ε at δ = 1e-5 |")
print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
for name in names:
    s = json.load(open(os.path.join(out, name + ".json")))
    rows = s["rounds"]
    best = max((r["test_accuracy"] or 0) for r in rows)
    eps = s.get("dp_epsilon")
    per = s["clients_per_round"] if s["mode"] == "sync" else 10
    clip = ("adaptive from %g" % s["dp_clip"]) if s["dp_adaptive_clip"] else "%g" % s["dp_clip"]
    if s.get("dp_mechanism") == "tree": clip += ", tree of %d" % s["dp_tree_restart"]
    mode = "sync" if s["mode"] == "sync" else "FedBuff"
    print(f"| {name} | {mode} | {s['clients']} ({per}) | {clip} | {s['dp_noise_multiplier']:g} | {len(rows)} | "
          f"{s['final_test_accuracy']:.4f} | {best:.4f} | {'not private' if eps is None else f'{eps:.2f}'} |")
PY
