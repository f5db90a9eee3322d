#!/usr/bin/env bash
# The measurements of docs/gossip.md, each a table on standard output (runs/compare-gossip/ keeps
# every run's summary JSON and metrics CSV):
#   accuracy    64 nodes, Fashion-MNIST Dirichlet(0.5), 20 local steps per round: Epidemic
#               Learning, D-PSGD on a ring, an exponential graph and a 4-regular graph, push-sum,
#               beside a sync FedAvg simulation of the same 64 clients (all per round, the same
#               local steps: the same examples seen); bytes per node to reach 80%
#   byzantine   40 nodes on a 4-regular graph, 10% ALIE or IPM attackers (at their published
#               strengths and at stronger ones), each neighbour merge
#   churn       64 nodes: 20% crash and rejoin every 10 rounds; a partition after round 10 that
#               heals after round 20, and how many rounds consensus took to recover; what the
#               nodes' SWIM membership made of it (suspicions, burials, refutations, wrong views)
#   scale       1,000 training nodes (MLP) in one process; 10,000 nodes moving models only
#   determinism the same seed twice, and under mpirun -np 2
# Run time on 2 cores after the build: accuracy 2.5 min, byzantine 4, churn 3, scale 3 (and about
# 13 GiB of memory for the 10,000 nodes), determinism 1.
# usage: scripts/compare_gossip.sh [SECTION...]   (default: all five)
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
sections=("${@:-accuracy byzantine churn scale determinism}")
scripts/setup.sh >/dev/null
scripts/build.sh build full >/dev/null
out=runs/compare-gossip
mkdir -p "$out"
plexus=build/apps/plexus/plexus
run() {  # name, flags...
  local name=$1; shift
  echo "== $name" >&2
  local start=$SECONDS
  "$plexus" sim "$@" --summary-out "$out/$name.json" --metrics-out "$out/$name.csv" | tail -1 >&2
  echo "   ($((SECONDS - start)) s)" >&2
}
table() {  # python that prints a table from the JSON files in $out
  python3 - "$out" "$@"
}

for section in ${sections[*]}; do
  case $section in
  accuracy)
    common=(--clients 64 --rounds 30 --local-steps 20 --partition dirichlet:0.5 --seed 1 --test-subset 2000)
    run fedavg "${common[@]}" --clients-per-round 64
    run el "${common[@]}" --mode gossip --gossip el:s=3 --node-test-subset 500
    run dpsgd-ring "${common[@]}" --mode gossip --gossip dpsgd --topology ring --node-test-subset 500
    run dpsgd-exponential "${common[@]}" --mode gossip --gossip dpsgd --topology exponential --node-test-subset 500
    run dpsgd-regular4 "${common[@]}" --mode gossip --gossip dpsgd --topology regular:d=4 --node-test-subset 500
    run pushsum "${common[@]}" --mode gossip --gossip pushsum --node-test-subset 500
    table <<'PY'
import json, sys, os
out = sys.argv[1]
print("| run | final accuracy (average model) | nodes' own: mean / min | consensus distance | round reaching 80% | MB sent + received per node to 80% |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for name in ["fedavg", "el", "dpsgd-ring", "dpsgd-exponential", "dpsgd-regular4", "pushsum"]:
    s = json.load(open(os.path.join(out, name + ".json")))
    rows = s["rounds"]
    if name == "fedavg":  # each client downloads and uploads one model per round
        per_node = lambda r: (r["bytes_down"] + r["bytes_up"]) / s["clients"]
        own, dist = "-", "-"
    else:  # a node receives, on average, what it sends
        per_node = lambda r: 2 * r["bytes_sent_per_node"]
        own = f"{s['mean_node_accuracy']:.4f} / {s['min_node_accuracy']:.4f}"
        dist = f"{s['consensus_distance']:.3f}"
    hit = next((r for r in rows if (r["test_accuracy"] or 0) >= 0.80), None)
    reach = "not reached" if hit is None else str(hit["round"])
    mb = "-" if hit is None else f"{per_node(hit) / 1e6:.1f}"
    print(f"| {name} | {s['final_test_accuracy']:.4f} | {own} | {dist} | {reach} | {mb} |")
PY
    ;;
  byzantine)
    common=(--mode gossip --gossip dpsgd --topology regular:d=4 --clients 40 --rounds 20 --local-steps 20
            --partition dirichlet:1.0 --seed 2 --test-subset 2000 --node-test-subset 500 --eval-nodes 36)
    for merge in mean clipped balance trimmed_mean:beta=0.2; do
      tag=${merge%%:*}
      run "byz-none-$tag" "${common[@]}" --merge "$merge"
      for attack in alie alie:z=10 ipm ipm:eps=10; do
        run "byz-$attack-$tag" "${common[@]}" --merge "$merge" --attack "$attack" --attackers 0.1
      done
    done
    table <<'PY'
import json, sys, os
out = sys.argv[1]
attacks = ["none", "alie", "alie:z=10", "ipm", "ipm:eps=10"]
print("| merge | no attack | " + " | ".join(f"10% {a}" for a in attacks[1:]) + " |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for tag in ["mean", "clipped", "balance", "trimmed_mean"]:
    cells = []
    for attack in attacks:
        s = json.load(open(os.path.join(out, f"byz-{attack}-{tag}.json")))
        cells.append(f"{s['mean_node_accuracy']:.4f} (min {s['min_node_accuracy']:.4f})")
    print(f"| {tag} | " + " | ".join(cells) + " |")
PY
    ;;
  churn)
    common=(--mode gossip --clients 64 --rounds 40 --local-steps 20 --partition dirichlet:0.5 --seed 4
            --test-subset 2000 --node-test-subset 500)
    for g in el:s=3 dpsgd; do
      tag=${g%%:*}
      run "steady-$tag" "${common[@]}" --gossip "$g"
      run "churn-$tag" "${common[@]}" --gossip "$g" --churn 0.2:10
      run "partition-$tag" "${common[@]}" --gossip "$g" --partition-at 10 --heal-at 20
    done
    table <<'PY'
import json, sys, os
out = sys.argv[1]
print("| gossip | steady: final accuracy | 20% churn every 10 rounds: final accuracy | partition 10..20: final accuracy | consensus distance before / at heal | rounds to recover |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for tag in ["el", "dpsgd"]:
    st = json.load(open(os.path.join(out, f"steady-{tag}.json")))
    ch = json.load(open(os.path.join(out, f"churn-{tag}.json")))
    pa = json.load(open(os.path.join(out, f"partition-{tag}.json")))
    before = pa["rounds"][9]["consensus_distance"]
    at_heal = pa["rounds"][19]["consensus_distance"]
    rec = pa["rounds_to_recover"]
    print(f"| {tag} | {st['final_test_accuracy']:.4f} | {ch['final_test_accuracy']:.4f} | {pa['final_test_accuracy']:.4f} | "
          f"{before:.3f} / {at_heal:.3f} | {'not within the run' if rec is None else rec} |")
print()
print("| run | liveness | suspicions | suspects buried | refutations | most wrong views in a round | wrong views at the end | virtual time |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for tag in ["el", "dpsgd"]:
    for kind in ["steady", "churn", "partition"]:
        s = json.load(open(os.path.join(out, f"{kind}-{tag}.json")))
        worst = max(r.get("membership_errors", 0) for r in s["rounds"])
        print(f"| {kind} {tag} | {s.get('liveness', 'oracle')} | {s.get('suspicions', 0)} | {s.get('deaths', 0)} | "
              f"{s.get('refutations', 0)} | {worst} | {s['rounds'][-1].get('membership_errors', 0)} | {s['virtual_time_s']:.0f} s |")
PY
    ;;
  scale)
    run scale-1000 --mode gossip --gossip el:s=3 --clients 1000 --rounds 5 --local-steps 10 --test-subset 2000 \
      --node-test-subset 500
    run scale-10000-protocol --mode gossip --gossip el:s=3 --train none --clients 10000 --rounds 3
    table <<'PY'
import json, sys, os
out = sys.argv[1]
print("| run | nodes | rounds | real time per round | peak RSS | peak RSS per node | final accuracy |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for name in ["scale-1000", "scale-10000-protocol"]:
    s = json.load(open(os.path.join(out, name + ".json")))
    per_round = s["wall_time_s"] / s["rounds_completed"]
    acc = f"{s['final_test_accuracy']:.4f}" if s["train"] else "(no training)"
    print(f"| {name} | {s['nodes']} | {s['rounds_completed']} | {per_round:.1f} s | {s['peak_rss_bytes'] / 2**30:.2f} GiB | "
          f"{s['peak_rss_bytes'] / s['nodes'] / 2**20:.2f} MiB | {acc} |")
PY
    ;;
  determinism)
    common=(--mode gossip --gossip el:s=3 --clients 16 --rounds 3 --local-steps 10 --train-subset 8000 --seed 9
            --test-subset 1000)
    run det-a "${common[@]}"
    run det-b "${common[@]}"
    echo "== det-mpi (mpirun -np 2)" >&2
    mpirun --allow-run-as-root --oversubscribe -np 2 "$plexus" sim "${common[@]}" --summary-out "$out/det-mpi.json" \
      | tail -1 >&2
    table <<'PY'
import json, sys, os
out = sys.argv[1]
hashes = {n: json.load(open(os.path.join(out, f"det-{n}.json")))["final_model_sha256"] for n in ["a", "b", "mpi"]}
print("| run | final_model_sha256 |")
print("| --- | --- |")
for n, h in hashes.items():
    print(f"| {n} | {h} |")
print()
print("identical:", len(set(hashes.values())) == 1)
PY
    ;;
  *)
    echo "unknown section '$section' (accuracy, byzantine, churn, scale, determinism)" >&2
    exit 2
    ;;
  esac
done
