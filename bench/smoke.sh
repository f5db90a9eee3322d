#!/usr/bin/env bash
# The benchmarks as a smoke run (CI's `bench-smoke` stage): builds every benchmark of bench/ in
# BUILD_DIR (a configured full build) and runs each once on tiny inputs, so that none of them
# breaks unseen. Each run must exit 0 and print what its script reads (rows, JSON fields, rates
# above zero); nothing is asserted on time, and no figure from here goes into docs/.
# usage: bench/smoke.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
if [ $# -ne 1 ]; then echo "smoke.sh: needs BUILD_DIR; see $0 --help" >&2; exit 2; fi
cd "$(dirname "$0")/.."
build=$1
cmake -DPLEXUS_BUILD_BENCH=ON "$build" >/dev/null
targets=(aggregation_bench codec_bench crdt_bench secagg_bench log_write_bench ingest_durability peer_exchange
  federation_load raw_rounds train_throughput)
cmake --build "$build" -j2 --target "${targets[@]}" >/dev/null
work=$(mktemp -d -p "$PWD/$build")
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT

# check NAME FILE PYTHON_CONDITION: the condition over `out` (the file's text) must hold.
check() {
  local name=$1 file=$2 condition=$3
  if ! python3 - "$file" "$condition" <<'PY'; then
import json, sys
out = open(sys.argv[1]).read()
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
    echo "bench smoke: $name printed something else than expected ($condition):" >&2
    cat "$file" >&2
    exit 1
  fi
  echo "bench smoke: $name ok"
}

# Google Benchmark suites: the smallest case or two of each; a rate per case.
gbench() {
  local name=$1 filter=$2 cases=$3
  "$build/bench/$name" --benchmark_filter="$filter" --benchmark_format=json >"$work/$name.json"
  check "$name" "$work/$name.json" \
    "sum(1 for b in json.loads(out)['benchmarks'] if b.get('run_type') == 'iteration' and b['real_time'] > 0) >= $cases"
}
gbench aggregation_bench '^BM_Strategy/(fedavg|median)/10/1000000/1/' 2
gbench codec_bench '^BM_((Encode|Decode)/int8|CheckFinite/65536)/' 3
gbench crdt_bench '^BM_(BareMerge|CrdtResolve)/fedavg/10/100000$' 2
gbench secagg_bench '^BM_MaskKeystream/' 1
PLEXUS_LOG_WRITE_DIR="$work" gbench log_write_bench '^BM_(HeapCopy|HeapCopyThenPwrite|MappedCopy)/4/' 3

# The durable-ingest variants: four table rows with a rate.
"$build/bench/ingest_durability" --dir "$work/ingest" --params 100000 --updates 40 --buffer 4 --codec int8 \
  >"$work/ingest.md"
check ingest_durability "$work/ingest.md" \
  "sum(1 for l in out.splitlines() if l.startswith('| logged') or l.startswith('| unlogged')) == 4 and 'GB/s' in out"

# The end-to-end federation's wire baseline: a rate above zero.
"$build/bench/raw_rounds" --clients 3 --mb 0.1 --rounds 3 >"$work/raw_rounds.json"
check raw_rounds "$work/raw_rounds.json" "json.loads(out)['update_bytes_per_s'] > 0"

# The peer exchange against its raw streams: every rate above zero.
"$build/bench/peer_exchange" --mb 0.1 --rounds 3 >"$work/peer.json"
check peer_exchange "$work/peer.json" \
  "all(json.loads(out)[k] > 0 for k in ('duplex_tcp_gbps', 'duplex_tls_gbps', 'exchange_gbps', 'exchange_tls_gbps'))"

# The load generator against a real server: two clients, three sync rounds of a small model.
python3 bench/make_zero_model.py 10000 "$work/model.safetensors"
# A port the kernel just gave out and nobody holds (a random one could be taken).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$build/apps/plexus/plexus" server --listen 127.0.0.1:$port --db "$work/load.db" --no-eval --rate-limit 0 \
  --initial-model "$work/model.safetensors" --clients-per-round 2 --min-clients 2 --rounds 3 --linger-s 10 \
  >"$work/server.log" 2>&1 &
server_pid=$!
# Clients start once the server answers (one that connects too early waits out gRPC's backoff).
for _ in $(seq 150); do
  "$build/apps/plexus/plexus" status --server 127.0.0.1:$port >/dev/null 2>&1 && break
  sleep 0.2
done
if ! "$build/bench/federation_load" --server 127.0.0.1:$port --clients 2 >"$work/load.json" 2>"$work/load.log"; then
  echo "bench smoke: federation_load failed; its log, then the server's:" >&2
  cat "$work/load.log" "$work/server.log" >&2
  exit 1
fi
if ! wait "$server_pid"; then
  echo "bench smoke: the server of federation_load's run failed:" >&2
  cat "$work/server.log" >&2
  exit 1
fi
server_pid=""
check federation_load "$work/load.json" \
  "(lambda r: r['updates'] == 6 and r['errors'] == 0 and r['update_bytes_per_s'] > 0)(json.loads(out))"

# Local training throughput: one epoch of the benchmark's model and data, one thread.
/usr/bin/python3 bench/make_train_bench_inputs.py "$work" >/dev/null
"$build/bench/train_throughput" "$work/mlp_bn.pt" "$work/data.safetensors" 1 128 1 1 >"$work/train.txt"
check train_throughput "$work/train.txt" "float(out) > 0"
