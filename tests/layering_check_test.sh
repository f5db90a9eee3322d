#!/usr/bin/env bash
# The layering check must fail on a tree that breaks a rule, naming the include, and pass on the
# repository (run as its own ctest test).
set -euo pipefail
check="$(dirname "$0")/../scripts/check_layering.sh"
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/core" "$tree/server/coordinator" "$tree/gossip/protocol"
echo '#include "server/rpc/federation_server.h"' > "$tree/core/bad.h"
echo '#include <grpcpp/grpcpp.h>' > "$tree/server/coordinator/worse.cpp"
echo '#include "compute/trainer.h"' > "$tree/gossip/protocol/node.cpp"
mkdir -p "$tree/edge" "$tree/newpart" "$tree/tests"
echo '#include "client/client_runtime.h"' > "$tree/edge/policy.cpp"
echo '#include "core/status.h"' > "$tree/newpart/thing.cpp"
echo '#include "server/rpc/federation_server.h"' > "$tree/tests/anything_test.cpp"
if out=$("$check" "$tree" 2>&1); then
  echo "FAIL: the check passed a tree that breaks the rules: $out"
  exit 1
fi
for expected in 'core/bad.h: includes "server/rpc/federation_server.h"' 'server/coordinator/worse.cpp: #include <grpcpp/grpcpp.h>' \
  'gossip/protocol/node.cpp: includes "compute/trainer.h": gossip/protocol may not depend on compute' \
  'edge/policy.cpp: includes "client/client_runtime.h": edge may not depend on client' \
  "newpart/thing.cpp: the part 'newpart' has no rule"; do
  if ! grep -qF "$expected" <<<"$out"; then
    echo "FAIL: the check did not name: $expected"
    echo "$out"
    exit 1
  fi
done
if grep -qF "tests/anything_test.cpp" <<<"$out"; then
  echo "FAIL: the check refused a test's include (tests may include every part): $out"
  exit 1
fi
echo "ok: the check refuses a tree that breaks the rules"
