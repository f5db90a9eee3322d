#!/usr/bin/env bash
# Edge aggregators as real processes on 127.0.0.1 (docs/benchmarks.md, issue 41): 400 clients
# (bench/federation_load: the real client runtime, no training) in sync rounds of all 400, the
# MLP (636 KB updates), strategy fedavg_exact, evaluation off, every update durable before it is
# acknowledged; once under one flat server, once under a root with 4 edges of 100 clients each
# (plexus server --upstream); both without TLS and with mutual TLS on every link (each load client,
# edge and server with its own certificate from plexus certs). Prints per run:
# the root's upload and download bytes per round (what the tree takes off it should be about the
# fan-out), rounds per minute over the whole run (joins included), the peak RSS of the root, of
# the largest edge and of the largest load process, updates refused or lost, and the model's hash
# (the same in both runs: fedavg_exact through a tree is the flat server's sum).
# usage: bench/run_tree.sh [ROUNDS]   (default 5)
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
rounds=${1:-5}
bench/build_bench.sh --full federation_load
ulimit -n 65536 2>/dev/null || true
work=$(mktemp -d -p "$PWD/build")
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
plexus=build/apps/plexus/plexus
port=$((20000 + RANDOM % 20000))
edges=4
per_edge=100
clients=$((edges * per_edge))

# Mutual TLS: one CA, a certificate for the servers' address, one per load client (ids load-N,
# the same under every edge), one per edge at the root, and one for plexus status.
certs=$work/certs
"$plexus" certs init --dir "$certs" >/dev/null
"$plexus" certs issue --dir "$certs" --server 127.0.0.1 >/dev/null
for c in $(seq 0 $((clients - 1))); do "$plexus" certs issue --dir "$certs" --client "load-$c" >/dev/null; done
for e in $(seq $edges) ; do "$plexus" certs issue --dir "$certs" --client "edge-$e" >/dev/null; done
"$plexus" certs issue --dir "$certs" --client status >/dev/null
tls=()          # the servers' flags in this run
status_tls=()   # plexus status's
load_tls=()     # federation_load's
use_tls() {  # on | off
  if [ "$1" = on ]; then
    tls=(--tls-cert "$certs/127.0.0.1.crt" --tls-key "$certs/127.0.0.1.key" --tls-ca "$certs/ca.crt")
    status_tls=(--tls-ca "$certs/ca.crt" --tls-cert "$certs/status.crt" --tls-key "$certs/status.key")
    load_tls=(--tls-dir "$certs")
  else
    tls=() status_tls=() load_tls=()
  fi
}

wait_for() {  # ADDRESS
  local address=$1
  for _ in $(seq 150); do
    "$plexus" status --server "$address" "${status_tls[@]}" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "run_tree.sh: no server at $address" >&2
  return 1
}

server() {  # NAME ADDRESS FLAGS...: a server in the background, its summary in $work/NAME.json
  local name=$1 address=$2
  shift 2
  "$plexus" server --listen "$address" --db "$work/$name.db" --no-eval --rate-limit 0 --linger-s 30 \
    --strategy fedavg_exact --rounds "$rounds" --round-deadline-s 600 --selection-wait-s 120 \
    --summary-out "$work/$name.json" "${tls[@]}" "$@" >"$work/$name.log" 2>&1 &
}

load() {  # NAME ADDRESS CLIENTS: a load process in the background, its peak RSS in NAME.time
  /usr/bin/time -f '%M' -o "$work/$1.time" build/bench/federation_load --server "$2" --clients "$3" "${load_tls[@]}" \
    >"$work/$1.load.json" 2>"$work/$1.load.log" &
}

run_flat() {  # NAME
  local root=127.0.0.1:$port
  port=$((port + 1))
  server "$1-root" "$root" --clients-per-round $clients --min-clients $clients
  wait_for "$root"
  load "$1-load" "$root" $clients
  wait
}

run_tree() {  # NAME
  local root=127.0.0.1:$port
  port=$((port + 1))
  server "$1-root" "$root" --clients-per-round $edges --min-clients $edges
  wait_for "$root"
  for e in $(seq $edges); do
    local edge=127.0.0.1:$port
    port=$((port + 1))
    local upstream_tls=()
    [ ${#tls[@]} -gt 0 ] && upstream_tls=(--upstream-tls-ca "$certs/ca.crt" --upstream-tls-cert "$certs/edge-$e.crt"
      --upstream-tls-key "$certs/edge-$e.key")
    server "$1-edge$e" "$edge" --clients-per-round $per_edge --min-clients $per_edge --upstream "$root" \
      --upstream-client-id "edge-$e" "${upstream_tls[@]}"
    wait_for "$edge"
    load "$1-load$e" "$edge" $per_edge
  done
  wait
}

for security in plain mtls; do
  use_tls $([ $security = mtls ] && echo on || echo off)
  echo "== flat, $security: 1 server, $clients clients" >&2
  run_flat "flat-$security"
  echo "== tree, $security: 1 root, $edges edges x $per_edge clients" >&2
  run_tree "tree-$security"
done
python3 - "$work" "$rounds" <<'PY'
import glob, json, os, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def summary(name):
    return json.load(open(os.path.join(work, name + ".json")))
def rss_mib(path):
    return int(open(path).read().split()[-1]) / 1024
print("| run | root upload bytes per round | root download bytes per round | rounds per minute | root peak RSS | largest edge peak RSS | largest load process peak RSS | updates refused or lost | model SHA-256 |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
shas = []
for run in ("flat-plain", "tree-plain", "flat-mtls", "tree-mtls"):
    root = summary(run + "-root")
    t = root["transfers"]
    edges = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(work, run + "-edge*.json")))]
    loads = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(work, run + "-load*.load.json")))]
    lost = sum(l["refused"] + l["errors"] for l in loads)
    load_rss = max(rss_mib(p) for p in glob.glob(os.path.join(work, run + "-load*.time")))
    edge_rss = f"{max(e['peak_rss_bytes'] for e in edges) / 2**20:.0f} MiB" if edges else "-"
    shas.append(root["final_model_sha256"])
    print(f"| {run} | {t['upload_bytes_received'] / rounds / 1e6:.1f} MB | {t['download_bytes'] / rounds / 1e6:.1f} MB | "
          f"{rounds / root['wall_time_s'] * 60:.1f} | {root['peak_rss_bytes'] / 2**20:.0f} MiB | {edge_rss} | "
          f"{load_rss:.0f} MiB | {lost} | {root['final_model_sha256'][:16]} |")
PY
