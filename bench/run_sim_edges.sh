#!/usr/bin/env bash
# Edge aggregators in the simulator (docs/benchmarks.md, issue 41): the same federation flat and
# through a tree of edges, each run with fedavg_exact, so the models must agree to the bit. Two
# settings: a small one (1,000 clients, 100 per round, 10 edges) that shows the server's bytes per
# round against flat, and the issue's large one (1,000,000 clients, 10,000 per round, 100 edges x
# 100 clients per round), the tree also under `mpirun -np 2` (the training spread over two ranks,
# the same model). Prints, per run: the server's bytes in and out per round, real time per round
# after the first (the first includes joining everyone), peak RSS (rank 0's) and the model's SHA-256.
# usage: bench/run_sim_edges.sh [--quick]   (--quick: the small setting only)
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
quick=0
[[ "${1:-}" == "--quick" ]] && quick=1 && shift
script_no_options "$@"
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
scripts/build.sh build full >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
runs=()
run() {  # NAME, then plexus sim flags
  local name=$1
  shift
  local launcher=()
  [[ $name == *-mpi2 ]] && launcher=(mpirun --allow-run-as-root --oversubscribe -np 2)
  echo "== $name: ${launcher[*]} plexus sim $*" >&2
  "${launcher[@]}" build/apps/plexus/plexus sim --strategy fedavg_exact --seed 1 "$@" --summary-out "$work/$name.json" |
    tail -1 >&2
  runs+=("$name")
}
small=(--clients 1000 --clients-per-round 100 --rounds 4 --model mlp)
run small-flat "${small[@]}"
run small-10-edges "${small[@]}" --edges 10
if [[ $quick == 0 ]]; then
  large=(--scenario simulations/scenarios/million_clients.toml --clients-per-round 10000 --rounds 3)
  run large-flat "${large[@]}"
  run large-100-edges "${large[@]}" --edges 100
  run large-100-edges-mpi2 "${large[@]}" --edges 100
fi
python3 - "$work" "${runs[@]}" <<'PY'
import json, sys
work, names = sys.argv[1], sys.argv[2:]
print("| run | clients | per round | server bytes in per round | server bytes out per round | real time per round (after the first) | peak RSS | model SHA-256 |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
for name in names:
    s = json.load(open(f"{work}/{name}.json"))
    r = s["rounds"]
    t = [x["wall_time_s"] for x in r]
    later = (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else float("nan")
    up, down = r[-1]["bytes_up"] / len(r), r[-1]["bytes_down"] / len(r)
    print(f"| {name} | {s['clients']:,} | {s['clients_per_round']:,} | {up / 1e6:.1f} MB | {down / 1e6:.1f} MB "
          f"| {later:.1f} s | {s['peak_rss_bytes'] / 2**20:.0f} MiB | {s['final_model_sha256'][:16]} |")
PY
