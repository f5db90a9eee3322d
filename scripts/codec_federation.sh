#!/usr/bin/env bash
# A real federation (a `plexus server` and 4 `plexus client` processes on 127.0.0.1) beside the
# simulator with the same settings, in float32 and with `--codec CODEC` (uploads and downloads):
# the bytes the server received and sent, and the final accuracy on the whole test set. 10 sync
# rounds of one local epoch, MLP, IID Fashion-MNIST (the defaults). About 3 minutes on 2 cores
# after the build; the table of docs/compression.md ("In a real federation").
# usage: scripts/codec_federation.sh [CODEC]   (default int8; runs/codec-federation/ keeps the summaries)
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
codec=${1:-int8}
scripts/setup.sh >/dev/null
scripts/build.sh build full >/dev/null
out=runs/codec-federation
rm -rf "$out"
mkdir -p "$out"
plexus=build/apps/plexus/plexus
port=$((20000 + RANDOM % 20000))
for c in f32 "$codec"; do
  flags=()
  if [ "$c" != f32 ]; then flags=(--codec "$c"); fi
  echo "== real federation, ${c}" >&2
  "$plexus" server --listen "127.0.0.1:$port" --db "$out/$c.db" --rounds 10 --clients-per-round 4 --min-clients 4 \
    --summary-out "$out/server-$c.json" "${flags[@]}" >"$out/server-$c.log" 2>&1 &
  server=$!
  clients=()
  for i in 0 1 2 3; do
    "$plexus" client --server "127.0.0.1:$port" --num-partitions 4 --partition-index "$i" \
      >"$out/client-$c-$i.log" 2>&1 &
    clients+=($!)
  done
  wait "$server"
  for p in "${clients[@]}"; do wait "$p"; done
  port=$((port + 1))
  echo "== simulator, ${c}" >&2
  sim_flags=()
  if [ "$c" != f32 ]; then sim_flags=(--codec "$c" --download-codec "$c"); fi
  "$plexus" sim --clients 4 --clients-per-round 4 --rounds 10 "${sim_flags[@]}" --summary-out "$out/sim-$c.json" \
    >"$out/sim-$c.log" 2>&1
done
python3 - "$out" f32 "$codec" <<'PY'
import json, os, sys
out, codecs = sys.argv[1], sys.argv[2:]
print("| run | codec (both directions) | update bytes received | model bytes sent | final accuracy |")
print("| --- | --- | ---: | ---: | ---: |")
base = None
for c in codecs:
    s = json.load(open(os.path.join(out, f"server-{c}.json")))
    up, down = s["transfers"]["upload_bytes_received"], s["transfers"]["download_bytes"]
    base = base or (up, down)
    ratio = "" if c == codecs[0] else f" ({up / base[0]:.3f})"
    dratio = "" if c == codecs[0] else f" ({down / base[1]:.3f})"
    print(f"| real federation | {'float32' if c == 'f32' else c} | {up:,}{ratio} | {down:,}{dratio} | {s['final_test_accuracy']:.4f} |")
for c in codecs:
    s = json.load(open(os.path.join(out, f"sim-{c}.json")))
    r = s["rounds"][-1]
    print(f"| simulator | {'float32' if c == 'f32' else c} | {r['bytes_up']:,} | {r['bytes_down']:,} | {s['final_test_accuracy']:.4f} |")
PY
