#!/usr/bin/env bash
# plexus merge against numpy (docs/benchmarks.md, "Merging files"): FedAvg of N safetensors files
# of P float32 parameters each (default 20 files of 1e6), written once by this script, merged by
# `plexus merge --strategy fedavg` (the full build, start-up included) and by a numpy program that
# reads the same files (np.fromfile past the header), averages them in memory and writes the result
# as safetensors, as a Python user would without a framework. Both are timed as whole processes
# (wall time, best of five, alternating); numpy's time without its interpreter's start-up and
# imports is shown too. Checks that both results agree. About a minute.
# usage: bench/compare_merge.sh [FILES] [PARAMS]
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
files=${1:-20}
params=${2:-1000000}
scripts/build.sh build full >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/numpy_merge.py" <<'PY'
import json, os, struct, sys, time
t0 = time.perf_counter()
import numpy as np
synced, out, paths = sys.argv[1] == "synced", sys.argv[2], sys.argv[3:]
t1 = time.perf_counter()
acc = None
for path in paths:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        values = np.fromfile(f, dtype=np.float32)
    acc = values.astype(np.float64) if acc is None else acc + values
mean = (acc / len(paths)).astype(np.float32)
name = next(k for k in header if k != "__metadata__")
head = json.dumps({name: {"dtype": "F32", "shape": [int(mean.size)], "data_offsets": [0, mean.nbytes]}}).encode()
head += b" " * (-len(head) % 8)
# synced: as plexus writes its output (a temporary file, synced, renamed over, directory synced)
with open(out + ".tmp" if synced else out, "wb") as f:
    f.write(struct.pack("<Q", len(head)) + head)
    mean.tofile(f)
    if synced:
        f.flush()
        os.fsync(f.fileno())
if synced:
    os.rename(out + ".tmp", out)
    d = os.open(os.path.dirname(os.path.abspath(out)), os.O_RDONLY)
    os.fsync(d)
    os.close(d)
print(f"{time.perf_counter() - t1:.4f}", file=sys.stderr)
PY
/usr/bin/python3 - "$work" "$files" "$params" <<'PY'
import json, struct, sys
import numpy as np
work, files, params = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(7)
for i in range(files):
    values = rng.standard_normal(params, dtype=np.float32)
    head = json.dumps({"w": {"dtype": "F32", "shape": [params], "data_offsets": [0, values.nbytes]}}).encode()
    head += b" " * (-len(head) % 8)
    with open(f"{work}/in{i:03d}.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        values.tofile(f)
PY
inputs=("$work"/in*.safetensors)
best_plexus="" best_numpy="" best_numpy_work="" best_numpy_synced=""
now() { date +%s.%N; }
min() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b < a) ? b : a }'; }
for _ in 1 2 3 4 5; do
  t=$(now)
  build/apps/plexus/plexus merge --strategy fedavg --out "$work/plexus.safetensors" "${inputs[@]}" >/dev/null 2>&1
  best_plexus=$(min "$best_plexus" "$(awk -v a="$t" -v b="$(now)" 'BEGIN { print b - a }')")
  t=$(now)
  work_s=$(/usr/bin/python3 "$work/numpy_merge.py" plain "$work/numpy.safetensors" "${inputs[@]}" 2>&1 >/dev/null)
  best_numpy=$(min "$best_numpy" "$(awk -v a="$t" -v b="$(now)" 'BEGIN { print b - a }')")
  best_numpy_work=$(min "$best_numpy_work" "$work_s")
  work_s=$(/usr/bin/python3 "$work/numpy_merge.py" synced "$work/numpy.safetensors" "${inputs[@]}" 2>&1 >/dev/null)
  best_numpy_synced=$(min "$best_numpy_synced" "$work_s")
done
/usr/bin/python3 - "$work/plexus.safetensors" "$work/numpy.safetensors" <<'PY'
import json, struct, sys
import numpy as np
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        f.read(n)
        return np.fromfile(f, dtype=np.float32)
a, b = load(sys.argv[1]), load(sys.argv[2])
diff = float(np.max(np.abs(a.astype(np.float64) - b)))
if a.shape != b.shape or diff > 1e-6:
    sys.exit(f"compare_merge: the two merges differ (max |difference| {diff})")
PY
mb=$(awk -v f="$files" -v p="$params" 'BEGIN { printf "%.0f", f * p * 4 / 1e6 }')
echo "| merge of $files files of $params parameters ($mb MB) | wall time, best of 5 | input GB/s | plexus vs this |"
echo "| --- | ---: | ---: | ---: |"
row() { awk -v n="$1" -v s="$2" -v mb="$mb" -v p="$best_plexus" \
  'BEGIN { printf "| %s | %.3f s | %.2f | %.2f |\n", n, s, mb / 1000 / s, s / p }'; }
row "plexus merge --strategy fedavg (process)" "$best_plexus"
row "numpy (process: interpreter, import, read, average, write)" "$best_numpy"
row "numpy (read, average, write only)" "$best_numpy_work"
row "numpy (read, average, write synced as plexus writes)" "$best_numpy_synced"
