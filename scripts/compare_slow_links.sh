#!/usr/bin/env bash
# Training over slow links (issue 42, docs/slow-links.md): the language model (`--model tinylm`,
# the fortunes corpus) on 8 simulated workers whose links carry 100 Mbit/s each way with 50 ms of
# latency, every worker in every round, each step of local training costing 90 virtual ms (what
# one tinylm step of 16 windows takes on this project's 2-core machine). Every run does the same
# local compute, STEPS inner AdamW steps per worker, and differs in how often and how the workers
# synchronise:
#   every-step   H = 1: the workers' one-step updates averaged after every step (FedAvg), the
#                closest this engine comes to data-parallel training that all-reduces every step
#   diloco-H20   DiLoCo: 20 inner steps, then the outer Nesterov step (outer lr 0.7, momentum 0.9)
#   diloco-H100  the same with 100 inner steps
#   ...-int8     the same with the pseudo-gradients uploaded and the models downloaded in int8
#   diloco-gossip-H20  DiLoCo with no server (`--mode gossip --gossip diloco`): the 8 workers are
#                peers whose pseudo-gradients travel as CRDT contributions each peer pulls from
#                the others, every peer taking the same outer step
#   diloco-eager-gossip-H20  the same with eager updates: each peer steps at once with its own
#                fresh pseudo-gradient in place of the part of the average still in flight, and
#                trains on while the exchange goes on
#   diloco-streaming-gossip-F4  Streaming DiLoCo over the same peers: 4 fragments (every fourth
#                tensor), one exchanged every 5 steps, so each fragment every 20; the exchange
#                overlapped with the next 5 steps and mixed in half and half
#   ...-gossip-...-int8  the same peers with their pseudo-gradients (or fragments) in int8
#   demo         DeMo: one plain SGD step per round, the momentum kept in the dct codec's decaying
#                residual (decay 0.999), its 8 largest DCT coefficients of every 64 values uploaded,
#                the server stepping by the sign of their mean (lr 0.002); models downloaded whole
#   demo-gossip  DeMo between the same peers (`--gossip demo`): each peer's fast components are its
#                CRDT contribution, every peer steps by the sign of their mean
# For each: virtual time and bytes (every message once: up + down, or what the peers sent) until the validation loss first falls
# to TARGET bits per character, the final loss, and the communication it saved against
# every-step averaging. Writes runs/compare-slow-links/ (each run's summary JSON and metrics CSV,
# table.md, bits-per-char.png). About 30 minutes on 2 cores after the build. RUNS (a comma list,
# default all) runs only those; the table takes every run's JSON in the output folder (the runs are
# seeded: a rerun gives the same figures).
# usage: scripts/compare_slow_links.sh [TARGET_BITS_PER_CHAR] [STEPS] [RUNS]   (defaults 4.6, 200, all)
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
target=${1:-4.6}
steps=${2:-200}
out=runs/compare-slow-links
scripts/setup.sh >/dev/null
scripts/build.sh build full >/dev/null
mkdir -p "$out"
common=(--model tinylm --clients 8 --latency-ms 50 --down-mbps 100 --up-mbps 100
  --ms-per-step 90 --batch-size 16 --test-subset 100 --seed 1)
adamw=(--optimizer adamw --lr 0.002 --weight-decay 0.01)
runs=(every-step diloco-H20 diloco-H100 every-step-int8 diloco-H20-int8 diloco-gossip-H20 diloco-gossip-H20-int8
  diloco-eager-gossip-H20 diloco-streaming-gossip-F4 diloco-streaming-gossip-F4-int8 demo demo-gossip)
selected=("${runs[@]}")
if [ -n "${3:-}" ]; then IFS=, read -r -a selected <<<"$3"; fi
for run in "${selected[@]}"; do
  mode=(--clients-per-round 8)  # every worker in every round
  case $run in
    every-step*) args=("${adamw[@]}" --strategy fedavg --local-steps 1 --rounds "$steps") ;;
    diloco-H20*) args=("${adamw[@]}" --strategy diloco --local-steps 20 --rounds $((steps / 20))) ;;
    diloco-H100*) args=("${adamw[@]}" --strategy diloco --local-steps 100 --rounds $((steps / 100))) ;;
    diloco-gossip-H20) mode=(--mode gossip --gossip diloco); args=("${adamw[@]}" --local-steps 20 --rounds $((steps / 20))) ;;
    diloco-gossip-H20-int8) mode=(--mode gossip --gossip diloco:codec=int8)
      args=("${adamw[@]}" --local-steps 20 --rounds $((steps / 20))) ;;
    diloco-eager-gossip-H20) mode=(--mode gossip --gossip diloco:eager=true)
      args=("${adamw[@]}" --local-steps 20 --rounds $((steps / 20))) ;;
    diloco-streaming-gossip-F4) mode=(--mode gossip --gossip diloco:fragments=4,mix=0.5)
      args=("${adamw[@]}" --local-steps 5 --rounds $((steps / 5))) ;;
    diloco-streaming-gossip-F4-int8) mode=(--mode gossip --gossip diloco:fragments=4,mix=0.5,codec=int8)
      args=("${adamw[@]}" --local-steps 5 --rounds $((steps / 5))) ;;
    demo) args=(--strategy demo:lr=0.002 --codec dct:chunk=64,k=8,decay=0.999 --optimizer sgd --lr 1 --momentum 0
      --local-steps 1 --rounds "$steps") ;;
    demo-gossip) mode=(--mode gossip --gossip demo:lr=0.002,chunk=64,k=8,decay=0.999)
      args=(--optimizer sgd --lr 1 --momentum 0 --local-steps 1 --rounds "$steps") ;;
    *) echo "compare_slow_links.sh: unknown run '$run' (known: ${runs[*]})" >&2; exit 2 ;;
  esac
  if [[ $run == *-int8 && $run != *gossip* ]]; then args+=(--codec int8 --download-codec int8); fi
  echo "== $run: ${args[*]}" >&2
  build/apps/plexus/plexus sim "${mode[@]}" "${common[@]}" "${args[@]}" --summary-out "$out/$run.json" \
    --metrics-out "$out/$run.csv" | tail -1 >&2
done
python3 - "$out" "$target" "$steps" "${runs[@]}" <<'PY' | tee "$out/table.md"
import json, os, sys
out, target, steps, runs = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
rows = {r: json.load(open(os.path.join(out, r + ".json"))) for r in runs}
def traffic(summary, x):  # every message once: the server modes' uploads and downloads, or what the peers sent
    if summary.get("mode") == "gossip":
        return x["bytes_sent_per_node"] * summary["nodes"]
    return x["bytes_up"] + x["bytes_down"]
base_bytes = traffic(rows["every-step"], rows["every-step"]["rounds"][-1])
unigram = rows["every-step"]["unigram_bits_per_char"]
print(f"Target {target} bits per character (the corpus's unigram baseline: {unigram:.2f}); "
      f"equal compute: {steps} inner steps per worker in every run.\n")
print("| run | rounds | bytes in all (MB) | vs every-step | virtual time (s) | reached the target at | "
      "bytes to the target (MB) | final bits per char |")
print("| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
for r in runs:
    s = rows[r]
    last = s["rounds"][-1]
    total = traffic(s, last)
    hit = next((x for x in s["rounds"] if x.get("test_bits_per_char") is not None and x["test_bits_per_char"] <= target),
               None)
    reached = "not reached" if hit is None else f"{hit['virtual_time_s']:.0f} s (round {hit['round']})"
    to_target = "-" if hit is None else f"{traffic(s, hit) / 1e6:.0f}"
    print(f"| {r} | {len(s['rounds'])} | {total / 1e6:.0f} | {base_bytes / total:.1f}x less | "
          f"{last['virtual_time_s']:.0f} | {reached} | {to_target} | {s['final_test_bits_per_char']:.3f} |")
PY
# Virtual time and bits per character: the server modes' CSV columns 10 and 18, gossip's 10 and 4 (the loss in nats).
plot=()
for run in "${runs[@]}"; do
  if [[ $run == *gossip* ]]; then cols='10:($4/log(2))'; else cols='10:18'; fi
  plot+=("'$out/$run.csv' using $cols with linespoints title '$run'")
done
if command -v gnuplot >/dev/null; then
  gnuplot -e "set terminal png size 900,560; set output '$out/bits-per-char.png'; set datafile separator ',';
    set key top right; set xlabel 'virtual time (s)'; set ylabel 'validation bits per character'; set logscale x;
    plot $(IFS=,; echo "${plot[*]}")"
  echo "plot: $out/bits-per-char.png" >&2
fi
