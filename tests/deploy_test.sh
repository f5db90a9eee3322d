#!/usr/bin/env bash
# The deployment files of deploy/ as an operator would use them: the systemd unit passes
# `systemd-analyze verify` (with ExecStart pointing at the built binary), the example config is
# accepted by `plexus server --dry-run` (with certificates from `plexus certs` in place of the
# /etc/plexus/tls files), the page its Documentation= names is installed, and the Kubernetes
# manifests parse as YAML with the objects expected.
# usage: tests/deploy_test.sh PLEXUS_BINARY
set -euo pipefail
plexus=$1
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. The unit, with the binary where the unit expects /usr/local/bin/plexus.
sed "s|/usr/local/bin/plexus|$plexus|" "$root/deploy/plexus-server.service" > "$tmp/plexus-server.service"
if ! out=$(systemd-analyze verify "$tmp/plexus-server.service" 2>&1); then
  echo "FAIL: systemd-analyze verify refused the unit:"; echo "$out"; exit 1
fi
# verify also reports problems without failing on some systemd versions: none may name our unit.
if grep -i "plexus-server.service" <<<"$out" | grep -vi "Documentation"; then
  echo "FAIL: systemd-analyze verify reported problems with the unit"; exit 1
fi
# A unit that is wrong must fail the same check (the check can fail).
sed 's/^Restart=on-failure/Restart=sometimes/' "$tmp/plexus-server.service" > "$tmp/broken.service"
if systemd-analyze verify "$tmp/broken.service" >"$tmp/broken.out" 2>&1 && ! grep -qi "restart" "$tmp/broken.out"; then
  echo "FAIL: systemd-analyze verify accepted Restart=sometimes"; exit 1
fi

# The page the unit's Documentation= names is installed there (by `cmake --install`, under a
# prefix in place of /usr/local).
build=$(cd "$(dirname "$plexus")/../.." && pwd)
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
doc=$(sed -n 's|^Documentation=file:///usr/local/||p' "$root/deploy/plexus-server.service")
[ -n "$doc" ] && [ -f "$tmp/prefix/$doc" ] || { echo "FAIL: Documentation= names $doc, not installed"; exit 1; }
# The installed binaries carry no debug information: it is kept in files of their own
# (cmake/SplitDebugInfo.cmake), installed only with the `debug` component, under bin/.debug/ and
# lib/plexus/.debug/, whose names and CRCs the binaries' .gnu_debuglink sections record.
if grep -Eq '^CMAKE_BUILD_TYPE:[A-Z]+=(RelWithDebInfo|Debug)$' "$build/CMakeCache.txt"; then
  installed=("$tmp/prefix/bin/plexus")
  [ -f "$build/lib/libplexus_torch.so" ] && installed+=("$tmp/prefix/lib/plexus/libplexus_torch.so")
  [ -z "$(find "$tmp/prefix" -name '*.debug')" ] || { echo "FAIL: a plain install installed debug files"; exit 1; }
  cmake --install "$build" --prefix "$tmp/prefix" --component debug >/dev/null
  python3 - "${installed[@]}" <<'PY'
import os, subprocess, sys, zlib

def sections(path):  # name -> (file offset, size), from readelf's section table
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True, check=True).stdout
    table = {}
    for line in out.splitlines():
        fields = line.split("]", 1)[1].split() if line.lstrip().startswith("[") and "]" in line else []
        if len(fields) >= 5 and fields[0].startswith("."):
            table[fields[0]] = (int(fields[3], 16), int(fields[4], 16))
    return table

def section_bytes(path, name):
    offset, size = sections(path)[name]
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)

for binary in sys.argv[1:]:
    have = sections(binary)
    assert not any(s.startswith(".debug_") for s in have), f"{binary} still has {sorted(have)}"
    assert ".symtab" in have, f"{binary} lost its symbol table"
    link = section_bytes(binary, ".gnu_debuglink")
    name = link.split(b"\0", 1)[0].decode()
    crc = int.from_bytes(link[-4:], "little")
    debug = os.path.join(os.path.dirname(binary), ".debug", name)
    assert name == os.path.basename(binary) + ".debug" and os.path.isfile(debug), f"{binary}: no {debug}"
    with open(debug, "rb") as f:
        assert zlib.crc32(f.read()) == crc, f"{debug}: CRC differs from {binary}'s debug link"
    assert ".debug_info" in sections(debug), f"{debug} has no DWARF"
    assert section_bytes(debug, ".note.gnu.build-id") == section_bytes(binary, ".note.gnu.build-id")
PY
  if command -v gdb >/dev/null; then
    gdb -batch -ex 'info line main' "$tmp/prefix/bin/plexus" 2>&1 | grep -q 'Line [0-9]* of ".*main.cpp"' \
      || { echo "FAIL: gdb found no line for main in the installed plexus"; exit 1; }
  fi
fi
# The installed plexus loads LibTorch's module from beside it (PREFIX/lib/plexus), not from the
# build tree, the first time a command trains (compute/torch_module.h).
if [ -f "$build/lib/libplexus_torch.so" ]; then
  LD_DEBUG=files "$tmp/prefix/bin/plexus" sim --rounds 1 --clients 2 --clients-per-round 2 --local-steps 1 \
    --train-subset 200 --test-subset 100 >"$tmp/installed.out" 2>&1 || { cat "$tmp/installed.out"; echo "FAIL: installed plexus sim"; exit 1; }
  grep -q "file=$tmp/prefix/lib/plexus/libplexus_torch.so" "$tmp/installed.out" \
    || { echo "FAIL: the installed plexus did not load $tmp/prefix/lib/plexus/libplexus_torch.so"; exit 1; }
fi

# 2. The example config, with TLS files that exist.
"$plexus" certs init --dir "$tmp/certs" >/dev/null
"$plexus" certs issue --dir "$tmp/certs" --server localhost >/dev/null
out=$("$plexus" server --config "$root/deploy/server.toml" --dry-run --db "$tmp/fed.db" \
  --tls-cert "$tmp/certs/localhost.crt" --tls-key "$tmp/certs/localhost.key" --tls-ca "$tmp/certs/ca.crt")
grep -q "settings valid: sync mode, fedavg, listen 0.0.0.0:50051 with TLS" <<<"$out" || { echo "FAIL: $out"; exit 1; }
[ ! -e "$tmp/fed.db" ] || { echo "FAIL: --dry-run created the database"; exit 1; }
# Without the certificates the config cannot start (the paths of /etc/plexus/tls do not exist here).
if "$plexus" server --config "$root/deploy/server.toml" --dry-run --db "$tmp/fed.db" >/dev/null 2>&1; then
  echo "FAIL: the config was accepted with missing TLS files"; exit 1
fi

# The edge's example config, with its certificates both ways.
"$plexus" certs issue --dir "$tmp/certs" --client edge >/dev/null
out=$("$plexus" server --config "$root/deploy/edge.toml" --dry-run --db "$tmp/edge.db" \
  --tls-cert "$tmp/certs/localhost.crt" --tls-key "$tmp/certs/localhost.key" --tls-ca "$tmp/certs/ca.crt" \
  --upstream-tls-ca "$tmp/certs/ca.crt" --upstream-tls-cert "$tmp/certs/edge.crt" --upstream-tls-key "$tmp/certs/edge.key")
grep -q "settings valid: sync mode, fedavg_exact, listen 0.0.0.0:50051 with TLS, database $tmp/edge.db, edge aggregator under plexus-server:50051 with TLS" <<<"$out" \
  || { echo "FAIL (edge.toml): $out"; exit 1; }

# 3. The manifests.
python3 - "$root/deploy/kubernetes/plexus-server.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = sorted(d["kind"] for d in docs)
assert kinds == ["Service", "StatefulSet"], kinds
sts = next(d for d in docs if d["kind"] == "StatefulSet")
assert sts["spec"]["replicas"] == 1
c = sts["spec"]["template"]["spec"]["containers"][0]
mounts = {m["mountPath"] for m in c["volumeMounts"]}
assert "/var/lib/plexus" in mounts and "/etc/plexus/tls" in mounts, mounts
assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "state"
assert {p["containerPort"] for p in c["ports"]} == {50051, 9464}
PY
# The edges: a headless Service and a StatefulSet whose pods name their id and their fallback
# from their ordinal (the start script run here with `plexus` printing its arguments).
python3 - "$root/deploy/kubernetes/plexus-edges.yaml" "$tmp" <<'PY'
import os, subprocess, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
svc = next(d for d in docs if d["kind"] == "Service")
assert svc["spec"]["clusterIP"] == "None", "the edges' Service must be headless"
sts = next(d for d in docs if d["kind"] == "StatefulSet")
assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
c = sts["spec"]["template"]["spec"]["containers"][0]
env = {e["name"]: e.get("value") for e in c["env"]}
assert int(env["EDGES"]) == sts["spec"]["replicas"], (env, sts["spec"]["replicas"])
fake = os.path.join(sys.argv[2], "fakebin")
os.makedirs(fake, exist_ok=True)
with open(os.path.join(fake, "plexus"), "w") as f:
    f.write("#!/bin/sh\necho \"$@\"\n")
os.chmod(os.path.join(fake, "plexus"), 0o755)
out = subprocess.run(c["command"] + c["args"], env={"PATH": fake + ":/usr/bin:/bin", "POD_NAME": "plexus-edge-3",
                     "EDGES": env["EDGES"]}, capture_output=True, text=True, check=True).stdout
assert "--upstream-client-id plexus-edge-3" in out and "--fallback plexus-edge-0.plexus-edge:50051" in out, out
PY
echo "ok: the unit verifies, the configs are accepted, the manifests parse"
