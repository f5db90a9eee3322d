#!/usr/bin/env bash
# Upload compression in the simulator (docs/compression.md): the same federation with every codec,
# bytes uploaded to reach each target accuracy and the final accuracy. 20 clients, 10 per round,
# Fashion-MNIST Dirichlet(0.5), MLP, 30 rounds of 20 local steps, --seed 6: about 3 minutes on 2
# cores after the build. With `cnn` first: the compression issue's setting, 100 clients, 10 per
# round, the CNN, 80 rounds of 20 local steps, codecs f32, fp16, int8, terngrad and top-k 1%,
# target 85%: about 20 minutes.
# usage: scripts/compare_codecs.sh [cnn] [TARGET_ACCURACY...]   (default 0.75 0.80, with cnn 0.85;
#        runs/compare-codecs[-cnn]/ keeps each run's summary JSON and metrics CSV)
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
setting=(--clients 20 --clients-per-round 10 --rounds 30 --local-steps 20)
codecs=(f32 fp16 bf16 int8 qsgd terngrad topk:ratio=0.1 topk:ratio=0.01)
out=runs/compare-codecs
default_targets="0.75 0.80"
if [ "${1:-}" = cnn ]; then
  shift
  setting=(--model cnn --clients 100 --clients-per-round 10 --rounds 80 --local-steps 20)
  codecs=(f32 fp16 int8 terngrad topk:ratio=0.01)
  out=runs/compare-codecs-cnn
  default_targets="0.85"
fi
targets=("${@:-$default_targets}")
scripts/setup.sh >/dev/null
scripts/build.sh build full >/dev/null
mkdir -p "$out"
for c in "${codecs[@]}"; do
  echo "== $c" >&2
  build/apps/plexus/plexus sim "${setting[@]}" --partition dirichlet:0.5 --seed 6 --test-subset 2000 --codec "$c" \
    --summary-out "$out/${c//[:=]/_}.json" --metrics-out "$out/${c//[:=]/_}.csv" | tail -1 >&2
done
python3 - "$out" ${targets[*]} -- "${codecs[@]}" <<'PY'
import json, sys, os
args = sys.argv[1:]
out, rest = args[0], args[1:]
split = rest.index("--")
targets, codecs = [float(t) for t in rest[:split]], rest[split + 1:]
base = None
print("| codec | MB uploaded per round | vs f32 | " + " | ".join(f"MB uploaded to {t:.0%}" for t in targets) +
      " | best accuracy | final accuracy |")
print("| --- | ---: | ---: | " + " | ".join("---:" for _ in targets) + " | ---: | ---: |")
for c in codecs:
    s = json.load(open(os.path.join(out, c.replace(":", "_").replace("=", "_") + ".json")))
    rows = s["rounds"]
    per_round = rows[-1]["bytes_up"] / len(rows) / 1e6
    base = base or per_round
    cells = []
    for t in targets:
        hit = next((r for r in rows if (r["test_accuracy"] or 0) >= t), None)
        cells.append("not reached" if hit is None else f"{hit['bytes_up'] / 1e6:.1f}")
    best = max((r["test_accuracy"] or 0) for r in rows)
    print(f"| {c} | {per_round:.2f} | {per_round / base:.3f} | " + " | ".join(cells) +
          f" | {best:.4f} | {s['final_test_accuracy']:.4f} |")
PY
