#!/usr/bin/env bash
# Load and ingest throughput of `plexus server` on 127.0.0.1 (docs/benchmarks.md), with
# bench/federation_load as the clients (lightweight: no training, real gRPC client runtime):
#   load:       1,000 concurrent clients, sync rounds of all 1,000, the MLP (636 KB updates), then
#               async (FedBuff) with adaptive and with fixed flow-control windows;
#   throughput: 10 and 100 clients uploading 4 MB updates and 10 uploading 40 MB (a model of 1e6
#               or 1e7 float32 parameters given to the server with --initial-model), async mode
#               with a FedBuff buffer of one update per client (no per-update durability, see
#               docs/security.md); the last run again with 2 uploads received at once
#               instead of 8 (--max-concurrent-uploads); then the same three federations with
#               --upload-only clients (one pre-encoded delta, no download or client runtime), so
#               that nearly all the CPU is the server's ingest; the 40 MB one in sync mode; and
#               the three upload-only ones with --flow-control fixed (64 KB windows).
# The baseline, measured in the same run: one TCP stream over 127.0.0.1 between two processes
# (1 MiB writes and reads, nothing else), the most any ingest over loopback could reach here.
# Prints a markdown table: updates/s, update bytes/s (what the clients uploaded, per second of
# the whole run: joins, downloads and aggregation included) and its ratio to the baseline,
# errors, the server's peak RSS, the server's CPU time (user and system, start-up included) and
# update bytes per second of it (what the server alone would ingest per core, were the clients
# elsewhere and the work spread over cores without loss).
#   endtoend:   sync FedAvg rounds of 10 clients with the full client runtime (download, the
#               lightweight "training", upload), 4 MB and 40 MB models (and FedAdam rounds at 4 MB,
#               its moments committed with every version), every update stored before
#               it is acknowledged, with the database on this checkout's disk and on tmpfs
#               (/dev/shm): the whole run's update bytes per second, joins, downloads and
#               aggregation included, and the time from the upload that completes a round to the
#               next version being served, on average and as a share of the round (the
#               server's summary, transfers.after_last_upload). Each end-to-end row also has its
#               own baseline: bench/raw_rounds moving the same rounds' bytes over loopback TCP and
#               nothing else (each model to every client, each update back, the next round's
#               downloads after the last upload; a server process and a clients process, a
#               thread per client), measured just before the federation; and each on the disk,
#               the disk's synced write rate at the update's size (bench/synced_write_rate.sh).
#   codecs:     the endtoend 4 MB rounds on tmpfs (30 of them) once per upload codec (f32, fp16,
#               bf16, int8, top-k 1%, QSGD, TernGrad, dct): the clients' encoding and the server's
#               decoding or folding from the codes in the round; update bytes counted as float32.
# usage: bench/run_load.sh [load|throughput|endtoend|codecs|all]   (default all)
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
what=${1:-all}
case "$what" in
  load|throughput|endtoend|codecs|all) ;;
  *) echo "run_load.sh: unknown run '$what' (load, throughput, endtoend, codecs or all); see $0 --help" >&2; exit 2 ;;
esac
if [ $# -gt 1 ]; then echo "run_load.sh: takes one argument at most; see $0 --help" >&2; exit 2; fi
bench/build_bench.sh --full federation_load
bench/build_bench.sh --full raw_rounds
ulimit -n 65536 2>/dev/null || true
work=$(mktemp -d -p "$PWD/build")  # on the disk (/tmp may be anything)
shm=""
trap 'rm -rf "$work" ${shm:+"$shm"}' EXIT
port=$((20000 + RANDOM % 20000))

# run NAME CLIENTS SERVER_FLAGS...: one federation; appends a table row to $work/rows.
run() {
  local name=$1 clients=$2; shift 2
  echo "== $name" >&2
  build/apps/plexus/plexus server --listen 127.0.0.1:$port --db "${DB_DIR:-$work}/$name.db" --no-eval --rate-limit 0 \
    --linger-s 30 --summary-out "$work/$name.json" "$@" >"$work/$name.server.log" 2>&1 &
  local pid=$!
  # Start the clients once the server answers: a client that connects too early waits out gRPC's
  # reconnect backoff, which would count against the server.
  for _ in $(seq 150); do
    build/apps/plexus/plexus status --server 127.0.0.1:$port >/dev/null 2>&1 && break
    sleep 0.2
  done
  build/bench/federation_load --server 127.0.0.1:$port --clients "$clients" ${LOAD_FLAGS:-} \
    >"$work/$name.load.json" 2>"$work/$name.load.log"
  wait $pid
  echo "   $(grep -c 'refused' "$work/$name.load.log" || true) warnings from the clients" >&2
  python3 - "$name" "$work/$name.load.json" "$work/$name.json" "$baseline" "${RAW:-}" "${SYNCED:-}" >>"$work/rows" <<'PY'
import json, sys
name, load, server = sys.argv[1], json.loads(open(sys.argv[2]).read()), json.load(open(sys.argv[3]))
baseline = float(sys.argv[4])
raw = json.loads(sys.argv[5])["update_bytes_per_s"] if sys.argv[5] else None
synced = float(sys.argv[6]) * 1e9 if sys.argv[6] else None
print(f"| {name} | {load['clients']} | {load['updates']} | {load['updates_per_s']:.0f} | "
      f"{load['update_bytes_per_s'] / 1e9:.2f} GB/s | {load['update_bytes_per_s'] / baseline:.2f} | "
      f"{load['refused']} refused, {load['errors']} errors | "
      f"{load['wall_s']:.1f} s | {server['peak_rss_bytes'] / 2**20:.0f} MiB | {server['cpu_time_s']:.1f} s | "
      f"{load['update_bytes'] / server['cpu_time_s'] / 1e9:.2f} GB | "
      + (lambda t: f"{t['mean_ms']:.0f} ms ({t['share_of_version_interval']:.0%}) |" if t else "- |")(
          server.get("transfers", {}).get("after_last_upload"))
      + (f" {raw / 1e9:.2f} GB/s, {load['update_bytes_per_s'] / raw:.2f} |" if raw else " - |")
      + (f" {synced / 1e9:.2f} GB/s, {load['update_bytes_per_s'] / synced:.2f} |" if synced else " - |"))
PY
  port=$((port + 1))
}

model() {  # model PARAMS FILE: a safetensors model of PARAMS zeros
  python3 bench/make_zero_model.py "$1" "$2"
}

: >"$work/rows"
baseline=$(python3 - <<'PY'
import os, socket, time
total, piece = 4 << 30, 1 << 20
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)
pid = os.fork()
if pid == 0:
    out = socket.create_connection(server.getsockname())
    data, sent = memoryview(bytes(piece)), 0
    while sent < total:
        sent += out.send(data)
    out.close()
    os._exit(0)
conn, _ = server.accept()
buf, got, start = memoryview(bytearray(piece)), 0, time.perf_counter()
while (n := conn.recv_into(buf)) > 0:
    got += n
seconds = time.perf_counter() - start
os.waitpid(pid, 0)
print(got / seconds)
PY
)
echo "== baseline: loopback TCP $(python3 -c "print(f'{$baseline / 1e9:.2f}')") GB/s" >&2
if [ "$what" = load ] || [ "$what" = all ]; then
  run load-1000-sync 1000 --clients-per-round 1000 --min-clients 1000 --rounds 3 --selection-wait-s 30
  run load-1000-async 1000 --mode async --buffer-size 100 --rounds 30
  run load-1000-async-fixed-windows 1000 --mode async --buffer-size 100 --rounds 30 --flow-control fixed
fi
model 1e6 "$work/model-1e6.safetensors"
model 1e7 "$work/model-1e7.safetensors"
if [ "$what" = endtoend ] || [ "$what" = all ]; then
  # synced MB: on the disk, its synced write rate at the update's size (the second baseline).
  synced() { if [ "$where" = disk ]; then bench/synced_write_rate.sh "$work" "$1" $((400 / $1)); fi; }
  for where in disk tmpfs; do
    DB_DIR=$work
    if [ $where = tmpfs ]; then
      [ -d /dev/shm ] || continue
      shm=$(mktemp -d -p /dev/shm)
      DB_DIR=$shm
    fi
    # About 2.4 GB of updates each: 60 rounds of 10 x 4 MB, 6 of 10 x 40 MB.
    RAW=$(build/bench/raw_rounds --clients 10 --mb 4 --rounds 60) SYNCED=$(synced 4) DB_DIR=$DB_DIR \
      run "sync-10-clients-1e6-db-on-$where" 10 --initial-model "$work/model-1e6.safetensors" \
      --clients-per-round 10 --min-clients 10 --rounds 60
    RAW=$(build/bench/raw_rounds --clients 10 --mb 40 --rounds 6) SYNCED=$(synced 40) DB_DIR=$DB_DIR \
      run "sync-10-clients-1e7-db-on-$where" 10 --initial-model "$work/model-1e7.safetensors" \
      --clients-per-round 10 --min-clients 10 --rounds 6
    # The same 4 MB rounds with a server optimizer (FedAdam: 16 bytes of moments per parameter,
    # committed with every version).
    RAW=$(build/bench/raw_rounds --clients 10 --mb 4 --rounds 60) SYNCED=$(synced 4) DB_DIR=$DB_DIR \
      run "sync-10-clients-1e6-fedadam-db-on-$where" 10 --initial-model "$work/model-1e6.safetensors" \
      --clients-per-round 10 --min-clients 10 --rounds 60 --strategy fedadam
  done
fi
if { [ "$what" = codecs ] || [ "$what" = all ]; } && [ -d /dev/shm ]; then
  [ -n "$shm" ] || shm=$(mktemp -d -p /dev/shm)  # the endtoend rows' folder when they ran
  for codec in f32 fp16 bf16 int8 topk:ratio=0.01 qsgd terngrad dct; do
    RAW=$(build/bench/raw_rounds --clients 10 --mb 4 --rounds 30) SYNCED="" DB_DIR=$shm \
      run "sync-10-clients-1e6-upload-${codec%%:*}-db-on-tmpfs" 10 --initial-model "$work/model-1e6.safetensors" \
      --clients-per-round 10 --min-clients 10 --rounds 30 --upload-codec "$codec"
  done
fi
if [ "$what" = throughput ] || [ "$what" = all ]; then
  # 100 clients x 40 MB is left out: one load process would hold some 16 GB of models, copies and
  # encoded updates (each client caches the model, trains a copy, encodes the delta).
  # Fields: clients, parameters, uploads at once, "only" for upload-only clients, then "sync"
  # (sync rounds) or "fixed" (--flow-control fixed: gRPC's 64 KB windows, for a LAN or one machine).
  for run_spec in "10 1e6" "100 1e6" "10 1e7" "10 1e7 2" "10 1e6 8 only" "100 1e6 8 only" "10 1e7 8 only" \
                  "10 1e7 8 only sync" "10 1e6 8 only fixed" "100 1e6 8 only fixed" "10 1e7 8 only fixed"; do
    read -r n p slots only variant <<<"$run_spec"
    slots=${slots:-8}
    name="ingest-$n-clients-$p-$slots-uploads"
    LOAD_FLAGS=""
    flow=()
    if [ -n "${only:-}" ]; then name="upload-only-$n-clients-$p"; LOAD_FLAGS="--upload-only"; fi
    if [ "${variant:-}" = fixed ]; then name="$name-fixed-windows"; flow=(--flow-control fixed); fi
    if [ "${variant:-}" = sync ]; then
      # Sync rounds of all N: every accepted update is stored (file and row) before it is
      # acknowledged, and each round waits for its last upload.
      run "$name-sync" "$n" --initial-model "$work/model-$p.safetensors" --clients-per-round "$n" \
        --min-clients "$n" --rounds 20 --max-concurrent-uploads "$slots"
      continue
    fi
    # Each federation uploads about 24 GB (600 versions of 10 x 4 MB, 60 of 100 x 4 MB or of
    # 10 x 40 MB), so that the warm-up weighs little: start-up, joins, and the server's first
    # dozen model buffers (one per upload in flight, the model, the next version), which are new,
    # and a page of memory touched for the first time costs about 3 ms per MB on the VM of
    # docs/benchmarks.md. With 60 versions of 10 x 4 MB the warm-up was a third of the run.
    rounds=$(python3 -c "print(round(24e9 / ($n * $p * 4)))")
    run "$name" "$n" --initial-model "$work/model-$p.safetensors" --mode async \
      --buffer-size "$n" --rounds "$rounds" --max-concurrent-uploads "$slots" "${flow[@]}"
  done
fi
python3 -c "print(f'Baseline: one loopback TCP stream, {$baseline / 1e9:.2f} GB/s.')"
echo
echo "| run | clients | updates | updates/s | update bytes/s | vs loopback TCP | refused / errors | wall time | server peak RSS | server CPU | updates per server CPU-second | after the last upload (share) | raw rounds of the same bytes, and the run's rate against it | the disk's synced write (dd), and the run's rate against it |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
cat "$work/rows"
