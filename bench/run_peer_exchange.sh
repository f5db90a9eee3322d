#!/usr/bin/env bash
# Model exchange between two `plexus peer` nodes over 127.0.0.1 (bench/peer_exchange.cpp), for
# docs/gossip.md: 0.4, 4 and 40 MB models, D-PSGD on two nodes with nothing trained, so each
# round is the chunked transfer (CRC-32C per chunk on plaintext, TLS records otherwise),
# decoding as it arrives, checks, average; model bytes per second in each direction, both
# directions at once, with and without TLS, against two opposite raw streams at once on one
# loopback connection (plain TCP, and TLS 1.3 through the same OpenSSL contexts) measured in the
# same run; the one-stream figure the table had before issue 39 as a last column; and the heap a
# peer holds per idle link. Prints a markdown table. About two minutes on 2 cores.
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"
cd "$(dirname "$0")/.."
bench/build_bench.sh --full peer_exchange
echo "| model | duplex TCP GB/s | exchange GB/s | vs duplex | duplex TLS GB/s | exchange TLS GB/s | vs duplex TLS | one TCP stream GB/s | heap per idle link |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
table_row='
import json, sys
r = json.loads(sys.stdin.read())
print("| %g MB | %.2f | %.3f | %.3f | %.2f | %.3f | %.3f | %.2f | %.1f KB |" % (r["model_mb"], r["duplex_tcp_gbps"],
      r["exchange_gbps"], r["exchange_vs_duplex"], r["duplex_tls_gbps"], r["exchange_tls_gbps"],
      r["exchange_tls_vs_duplex"], r["raw_tcp_gbps"], r["bytes_per_idle_link"] / 1024))'
for spec in "0.4 100" "4 30" "40 8"; do
  set -- $spec
  build/bench/peer_exchange --mb "$1" --rounds "$2" | python3 -c "$table_row"
done
