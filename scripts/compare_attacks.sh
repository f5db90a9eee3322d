#!/usr/bin/env bash
# Robust aggregators against attackers in simulation (docs/simulation.md): 20 virtual clients,
# 10 sampled per round, 20 rounds, MLP on Fashion-MNIST (IID), 20% of the clients malicious; the
# final test accuracy per strategy and attack, next to the attack-free run. 35 runs: about 6 minutes
# on 2 cores after the build (375 s on 2026-12-01, the table unchanged bit for bit).
# usage: scripts/compare_attacks.sh   (runs/compare-attacks/ keeps each run's summary JSON)
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
scripts/build.sh build full >/dev/null
out=runs/compare-attacks
mkdir -p "$out"
strategies=(fedavg median trimmed_mean:beta=0.2 krum:f=2 geomed:iters=10)
attacks=(none signflip gaussian labelflip ipm alie minmax)
for s in "${strategies[@]}"; do
  for a in "${attacks[@]}"; do
    name="${s%%:*}-$a"
    echo "== $s $a" >&2
    build/apps/plexus/plexus sim --clients 20 --clients-per-round 10 --rounds 20 --seed 5 --test-subset 2000 \
      --strategy "$s" --attack "$a" --attackers 0.2 --summary-out "$out/$name.json" | tail -1 >&2
  done
done
python3 - "$out" "${strategies[*]}" "${attacks[*]}" <<'PY'
import json, os, sys
out, strategies, attacks = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
print("| strategy | " + " | ".join(("no attack" if a == "none" else a) for a in attacks) + " |")
print("| --- | " + " | ".join("---:" for _ in attacks) + " |")
for s in strategies:
    cells = []
    for a in attacks:
        j = json.load(open(os.path.join(out, f"{s.split(':')[0]}-{a}.json")))
        cells.append(f"{j['final_test_accuracy']:.3f}")
    print(f"| {s} | " + " | ".join(cells) + " |")
PY
