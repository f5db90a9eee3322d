#!/usr/bin/env bash
# Prints the footprint of `plexus` per architecture and profile (docs/edge.md): the stripped
# binary's size (and that of LibTorch's module, libplexus_torch.so, which the binary loads only
# when a command first needs LibTorch), the size of the shared-library closure of both (every
# library they need, recursively, resolved in the architecture's library directories; real file
# sizes), the start-up (`plexus --help`, best of five, wall time: the module is not loaded) and
# the client's peak RSS during one MLP round (one sync round, 20 local steps of 32 examples,
# against this machine's full-build server; a foreign-architecture client runs under qemu, and
# its RSS and start-up include the emulator's). Measures the builds that exist: build/ (x86-64,
# full), build-edge/ (x86-64, edge with LibTorch), build-edge-lite/ (x86-64, edge without
# LibTorch: cmake -DPLEXUS_PROFILE=edge -DPLEXUS_EDGE_TORCH=OFF), build-aarch64/ and
# build-riscv64/ (edge without LibTorch; scripts/cross-build.sh). Needs build/ for the server.
# usage: scripts/footprint.sh
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"
cd "$(dirname "$0")/.."
if [ ! -x build/apps/plexus/plexus ]; then
  echo "footprint.sh: needs the full build in build/ (scripts/build.sh) for the server" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 - "$work" <<'PY'
import os, re, shutil, socket, subprocess, sys, time

work = sys.argv[1]
rv_root = os.path.abspath("build-riscv64-sysroot/root")
# (architecture, profile, build dir, strip, emulator command, library root, multiarch triple)
builds = [
    ("x86-64", "full (LibTorch)", "build", "strip", [], "/", "x86_64-linux-gnu"),
    ("x86-64", "edge (LibTorch)", "build-edge", "strip", [], "/", "x86_64-linux-gnu"),
    ("x86-64", "edge (no LibTorch)", "build-edge-lite", "strip", [], "/", "x86_64-linux-gnu"),
    ("aarch64", "edge (no LibTorch)", "build-aarch64", "aarch64-linux-gnu-strip", ["qemu-aarch64-static"], "/",
     "aarch64-linux-gnu"),
    ("riscv64", "edge (no LibTorch)", "build-riscv64", "riscv64-linux-gnu-strip",
     ["qemu-riscv64-static", "-L", rv_root], rv_root, "riscv64-linux-gnu"),
]

def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)

def closure(binaries, root, triple):
    dirs = [os.path.join(root, d) for d in
            (f"lib/{triple}", f"usr/lib/{triple}", f"usr/lib/{triple}/openblas-pthread", "lib", "usr/lib")]
    seen, todo, missing = {}, [n for b in binaries for n in needed(b)], []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        for d in dirs:
            p = os.path.join(d, name)
            if os.path.exists(p):
                seen[name] = os.path.realpath(p)
                todo.extend(needed(seen[name]))
                break
        else:
            seen[name] = None
            missing.append(name)
    files = {p for p in seen.values() if p}
    return len(files), sum(os.path.getsize(p) for p in files), missing

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def client_peak_rss(binary, emulator):  # emulator: [] or the command that runs a foreign binary
    port = free_port()
    db = os.path.join(work, f"fp-{port}.db")
    server = subprocess.Popen(["build/apps/plexus/plexus", "server", "--listen", f"127.0.0.1:{port}", "--db", db,
                               "--rounds", "1", "--clients-per-round", "1", "--min-clients", "1", "--model", "mlp",
                               "--local-steps", "20", "--batch-size", "32", "--no-eval", "--linger-s", "30"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cmd = ([shutil.which(emulator[0])] + emulator[1:] if emulator else []) + [binary, "client", "--server", f"127.0.0.1:{port}",
           "--trainer", "portable", "--partition", "iid", "--num-partitions", "20", "--partition-index", "0",
           "--give-up-s", "120"]
    client = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(client.pid, 0)
    server.wait(timeout=120)
    if status != 0:
        return None
    return usage.ru_maxrss * 1024

def startup_ms(binary, emulator):  # best of five `plexus --help`, wall time
    cmd = ([shutil.which(emulator[0])] + emulator[1:] if emulator else []) + [binary, "--help"]
    best = None
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        ms = (time.perf_counter() - start) * 1000
        best = ms if best is None else min(best, ms)
    return best

print("| architecture | profile | stripped binary (+ LibTorch's module) | shared-library closure "
      "| start-up, plexus --help | client peak RSS, one MLP round |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for arch, profile, d, strip, emulator, root, triple in builds:
    binary = os.path.join(d, "apps/plexus/plexus")
    if not os.path.exists(binary):
        print(f"| {arch} | {profile} | not built ({d}/) | | | |")
        continue
    stripped = os.path.join(work, f"plexus-{arch}-{d}")
    subprocess.run([strip, "-o", stripped, binary], check=True)
    size_text = f"{os.path.getsize(stripped) / 1e6:.1f} MB"
    parts = [binary]
    module = os.path.join(d, "lib/libplexus_torch.so")  # loaded when a command first needs LibTorch
    if os.path.exists(module):
        stripped_module = stripped + "-torch.so"
        subprocess.run([strip, "-o", stripped_module, module], check=True)
        size_text += f" + {os.path.getsize(stripped_module) / 1e6:.1f} MB"
        parts.append(module)
    n, size, missing = closure(parts, root, triple)
    rss = client_peak_rss(binary, emulator)
    rss_text = "failed" if rss is None else f"{rss / 2**20:.0f} MiB" + (" (under qemu)" if emulator else "")
    miss = f", {len(missing)} not found" if missing else ""
    start = startup_ms(binary, emulator)
    print(f"| {arch} | {profile} | {size_text} | {n} libraries, "
          f"{size / 1e6:.0f} MB{miss} | {start:.0f} ms{' (under qemu)' if emulator else ''} | {rss_text} |")
PY
