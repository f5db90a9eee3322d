#!/usr/bin/env bash
# Runs docs/gossip.md's semi-decentralized example over mutual TLS RUNS times (default 10) on
# 127.0.0.1 and counts, per run, the server exchanges that reached their peers (9 expected: six
# peers, every=2, sample=3, 8 rounds, a server in async mode with a buffer of 3) and the waits
# that ended on a timer ("stopped waiting for ..." in a peer's log, which names what it waited
# for). Exits non-zero if any run lost an exchange or a wait ran out. runs/semidecentralized-loop/
# keeps the last run's logs. Needs build/ (scripts/build.sh).
# usage: scripts/semidecentralized_loop.sh [RUNS]
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
runs=${1:-10}
plexus=build/apps/plexus/plexus
[ -x "$plexus" ] || { echo "semidecentralized_loop.sh: needs build/ (scripts/build.sh)" >&2; exit 1; }
out=runs/semidecentralized-loop
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
failed=0
echo "| run | seconds | exchanges (of 9) | waits that ran out | final accuracy, min over peers |"
echo "| ---: | ---: | ---: | ---: | ---: |"
for run in $(seq 1 "$runs"); do
  rm -rf "$out"; mkdir -p "$out"
  "$plexus" certs init --dir "$out/certs" >/dev/null
  "$plexus" certs issue --dir "$out/certs" --server localhost >/dev/null
  for i in 0 1 2 3 4 5; do "$plexus" certs issue --dir "$out/certs" --peer "peer-$i" >/dev/null; done
  tls=(--tls-ca "$out/certs/ca.crt")
  sport=$(free_port)
  start=$(date +%s.%N)
  "$plexus" server --mode async --buffer-size 3 --server-lr 1 --rounds 3 --listen "127.0.0.1:$sport" --no-eval \
    --db "$out/server.db" --linger-s 10 "${tls[@]}" --tls-cert "$out/certs/localhost.crt" \
    --tls-key "$out/certs/localhost.key" >"$out/server.log" 2>&1 &
  server=$!
  ports=(); for i in 0 1 2 3 4 5; do ports+=("$(free_port)"); done
  pids=()
  for i in 0 1 2 3 4 5; do
    seeds=(); [ "$i" -gt 0 ] && seeds=(--peers "127.0.0.1:${ports[0]}")
    "$plexus" peer --listen "127.0.0.1:${ports[$i]}" --num-partitions 6 --partition-index "$i" --rounds 8 \
      --gossip semidecentralized:every=2,sample=3 --server "localhost:$sport" "${seeds[@]}" --local-steps 20 \
      --eval-every 0 --test-subset 2000 --db "$out/peer$i.db" --summary-out "$out/peer$i.json" "${tls[@]}" \
      --tls-cert "$out/certs/peer-$i.crt" --tls-key "$out/certs/peer-$i.key" >"$out/peer$i.log" 2>&1 &
    pids+=($!)
  done
  status=0
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  wait "$server" || status=1
  seconds=$(echo "$(date +%s.%N) - $start" | bc)
  read -r exchanges accuracy < <(python3 - "$out" <<'PY'
import json, sys
s = [json.load(open(f"{sys.argv[1]}/peer{i}.json")) for i in range(6)]
print(sum(x["server_exchanges"] for x in s), min(x["final_test_accuracy"] for x in s))
PY
)
  waits=$(cat "$out"/peer*.log | grep -c "stopped waiting for" || true)
  printf "| %d | %.1f | %d | %d | %.4f |\n" "$run" "$seconds" "$exchanges" "$waits" "$accuracy"
  if [ "$status" -ne 0 ] || [ "$exchanges" -ne 9 ] || [ "$waits" -ne 0 ]; then
    failed=$((failed + 1))
    grep -h "stopped waiting for\|no average" "$out"/peer*.log | sed 's/^/    /' >&2 || true
  fi
done
echo "runs with a lost exchange or a wait that ran out: $failed of $runs"
[ "$failed" -eq 0 ]
