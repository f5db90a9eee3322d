#!/usr/bin/env bash
# Compression in the simulator (docs/compression.md): the same federation with every codec, bytes
# uploaded and downloaded to reach each target accuracy and the final accuracy. A codec written
# UP/DOWN compresses uploads with UP and downloads with DOWN (--download-codec); otherwise
# downloads are float32. 20 clients, 10 per round,
# Fashion-MNIST Dirichlet(0.5), MLP, 30 rounds of 20 local steps, --seed 6: about 3 minutes on 2
# cores after the build. With `cnn` first: the compression issue's setting, 100 clients, 10 per
# round, the CNN, 80 rounds of 20 local steps, codecs f32, fp16, int8, terngrad, top-k 1%, and
# fp16 and int8 both ways, target 85%: about 35 minutes.
# usage: scripts/compare_codecs.sh [cnn] [TARGET_ACCURACY...]   (default 0.75 0.80, with cnn 0.85;
#        runs/compare-codecs[-cnn]/ keeps each run's summary JSON and metrics CSV)
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
setting=(--clients 20 --clients-per-round 10 --rounds 30 --local-steps 20)
codecs=(f32 fp16 bf16 int8 qsgd terngrad topk:ratio=0.1 topk:ratio=0.01 fp16/fp16 int8/int8 topk:ratio=0.01/int8)
out=runs/compare-codecs
default_targets="0.75 0.80"
if [ "${1:-}" = cnn ]; then
  shift
  setting=(--model cnn --clients 100 --clients-per-round 10 --rounds 80 --local-steps 20)
  codecs=(f32 fp16 int8 terngrad topk:ratio=0.01 fp16/fp16 int8/int8)
  out=runs/compare-codecs-cnn
  default_targets="0.85"
fi
targets=("${@:-$default_targets}")
scripts/setup.sh >/dev/null
scripts/build.sh build full >/dev/null
mkdir -p "$out"
for c in "${codecs[@]}"; do
  echo "== $c" >&2
  down=()
  if [[ "$c" == */* ]]; then down=(--download-codec "${c#*/}"); fi
  name=${c//[:=\/]/_}
  build/apps/plexus/plexus sim "${setting[@]}" --partition dirichlet:0.5 --seed 6 --test-subset 2000 --codec "${c%%/*}" \
    "${down[@]}" --summary-out "$out/$name.json" --metrics-out "$out/$name.csv" | tail -1 >&2
done
python3 - "$out" ${targets[*]} -- "${codecs[@]}" <<'PY'
import json, sys, os
args = sys.argv[1:]
out, rest = args[0], args[1:]
split = rest.index("--")
targets, codecs = [float(t) for t in rest[:split]], rest[split + 1:]
base = None
print("| upload / download codec | MB up per round | vs f32 | MB down per round | vs f32 | " +
      " | ".join(f"MB up / up+down to {t:.0%}" for t in targets) + " | best accuracy | final accuracy |")
print("| --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in targets) + " | ---: | ---: |")
for c in codecs:
    s = json.load(open(os.path.join(out, c.replace(":", "_").replace("=", "_").replace("/", "_") + ".json")))
    rows = s["rounds"]
    up = rows[-1]["bytes_up"] / len(rows) / 1e6
    down = rows[-1]["bytes_down"] / len(rows) / 1e6
    base = base or (up, down)
    cells = []
    for t in targets:
        hit = next((r for r in rows if (r["test_accuracy"] or 0) >= t), None)
        cells.append("not reached" if hit is None else
                     f"{hit['bytes_up'] / 1e6:.1f} / {(hit['bytes_up'] + hit['bytes_down']) / 1e6:.1f} (round {hit['round']})")
    best = max((r["test_accuracy"] or 0) for r in rows)
    name = c if "/" in c else c + " / f32"
    print(f"| {name} | {up:.2f} | {up / base[0]:.3f} | {down:.2f} | {down / base[1]:.3f} | " + " | ".join(cells) +
          f" | {best:.4f} | {s['final_test_accuracy']:.4f} |")
PY
