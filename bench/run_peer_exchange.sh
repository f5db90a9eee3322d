#!/usr/bin/env bash
# Model exchange between two `plexus peer` nodes over 127.0.0.1 (bench/peer_exchange.cpp), for
# docs/gossip.md: 0.4, 4 and 40 MB models, D-PSGD on two nodes with nothing trained, so each
# round is encode + SHA-256, chunked transfer, reassembly + hash check + decode, average; model
# bytes per second in each direction, both directions at once, with and without TLS, against one
# raw TCP stream over loopback measured in the same run; and the heap a peer holds per idle link.
# Prints a markdown table. About a minute on 2 cores.
# usage: bench/run_peer_exchange.sh
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"
cd "$(dirname "$0")/.."
bench/build_bench.sh --full peer_exchange
echo "| model | raw TCP GB/s | exchange GB/s | vs raw | with TLS GB/s | vs raw | heap per idle link |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
table_row='
import json, sys
r = json.loads(sys.stdin.read())
print("| %g MB | %.2f | %.3f | %.3f | %.3f | %.3f | %.1f KB |" % (r["model_mb"], r["raw_tcp_gbps"], r["exchange_gbps"],
      r["exchange_vs_raw"], r["exchange_tls_gbps"], r["exchange_tls_vs_raw"], r["bytes_per_idle_link"] / 1024))'
for spec in "0.4 100" "4 30" "40 8"; do
  set -- $spec
  build/bench/peer_exchange --mb "$1" --rounds "$2" | python3 -c "$table_row"
done
