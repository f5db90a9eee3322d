#!/usr/bin/env bash
# What the Python binding costs per task against training (docs/benchmarks.md, docs/python.md):
# a `plexus server` and one Python client running the example loop of docs/python.md
# (tests/integration/python_client.py: AdamW, batches of 64, 50 steps a task) on 127.0.0.1, for
# the built-in MLP and CNN, 6 rounds each. The client's summary holds the time inside the user's
# training function and the binding's own time: the task's weights into the PyTorch model
# (NumPy views of the client's copy, copied into the parameters) and back out (the parameters'
# arrays checked and copied into the update), both sides of the language boundary. Prints a
# markdown table. About a minute on 2 cores.
# usage: bench/run_python_binding.sh
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
scripts/build.sh build full >/dev/null
plexus=build/apps/plexus/plexus
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
echo "| model | parameters | tasks | training per task ms | binding per task ms | binding / training |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for model in mlp cnn; do
  port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$plexus" server --listen "127.0.0.1:$port" --db "$work/$model.db" --rounds 6 --clients-per-round 1 \
    --min-clients 1 --model "$model" --local-steps 50 --test-subset 1000 >"$work/$model-server.log" 2>&1 &
  flag=""
  if [ "$model" = cnn ]; then flag="--cnn"; fi
  PYTHONPATH=build/python /usr/bin/python3 tests/integration/python_client.py "127.0.0.1:$port" 0 1 $flag \
    >"$work/$model-client.log" 2>&1
  wait
  tail -n 1 "$work/$model-client.log" | /usr/bin/python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
model, params = sys.argv[1], {"mlp": 159010, "cnn": 421642}[sys.argv[1]]
n = s["tasks_timed"]
print("| %s | %d | %d | %.1f | %.2f | %.2f%% |" % (model, params, n, 1000 * s["train_s"] / n,
      1000 * s["binding_s"] / n, 100 * s["binding_s"] / s["train_s"]))' "$model"
done
