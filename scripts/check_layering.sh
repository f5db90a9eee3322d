#!/usr/bin/env bash
# The dependency rules of docs/architecture.md, checked on the source tree: each part may include
# only the parts below it, and the plain-C++ parts none of LibTorch, gRPC, SQLite, libuv or MPI.
# Prints every include that breaks a rule and exits 1 if there is one.
# usage: scripts/check_layering.sh [ROOT]   (default: the repository)
set -euo pipefail
source "$(dirname "$0")/script_args.sh"
script_help "$@"
script_no_options "$@"
root=${1:-"$(dirname "$0")/.."}
cd "$root"

# part -> the parts its files may include ("" quoted includes of generated protobuf code are
# named plexus/v1/... and count as the part `proto`).
declare -A allowed=(
  [core]="core"
  [privacy]="core privacy"
  [aggregators]="core privacy aggregators"
  [crdt]="core aggregators crdt"
  [crdt/store]="core aggregators crdt crdt/store sqlite"
  [sqlite]="core sqlite"
  [server/store]="core server/store"
  [server/store/sqlite]="core server/store server/store/sqlite sqlite"
  [server/coordinator]="core privacy aggregators server/store server/coordinator"
  [compute]="core compute"
  [client]="core privacy aggregators compute compression client proto"
  [server/rpc]="core aggregators server/store server/coordinator compression server/rpc proto"
  [gossip/protocol]="core aggregators crdt compression gossip/protocol"
  [gossip/membership]="core gossip/protocol gossip/membership"
  [gossip/node]="core aggregators crdt compression gossip/protocol gossip/membership gossip/node sqlite proto"
  [compression]="core aggregators compression"
  [edge]="core edge"
  [simulations]="core privacy aggregators crdt server/store server/coordinator compute gossip/protocol gossip/membership compression client simulations"
)
# Parts that stay plain C++: no heavy dependency at all.
plain="core privacy aggregators crdt server/store server/coordinator gossip/protocol gossip/membership compression edge"
heavy='^#include <(torch/|ATen/|grpc|grpcpp/|sqlite3\.h|uv\.h|mpi\.h)'

# Sets `part` to the part of a source file or included path (bash only: this runs per include).
part_of() {
  local path=$1
  case "$path" in
    plexus/v1/*|proto/*) part=proto ;;
    crdt/store/*) part=crdt/store ;;
    server/store/sqlite_*) part=server/store/sqlite ;;
    server/*/*) local rest=${path#server/}; part="server/${rest%%/*}" ;;
    gossip/*/*) local rest=${path#gossip/}; part="gossip/${rest%%/*}" ;;
    */*) part=${path%%/*} ;;
    *) part="" ;;
  esac
}

# Folders at the top of the graph, which may include every part: the program, the Python
# package's binding, tests, benchmarks, fuzz targets, and the protobuf helpers beside the
# generated code.
unruled="apps python tests bench fuzz proto"

# Every C++ file: those git tracks or would in a clone (ignored build folders left out), else every file
# under ROOT (a tree made by a test).
source_files() {
  if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ]; then
    git ls-files --cached --others --exclude-standard -- '*.h' '*.cpp' '*.cc' | sort
  else
    find . \( -name '*.h' -o -name '*.cpp' -o -name '*.cc' \) -not -path './build*' | sed 's|^\./||' | sort
  fi
}

violations=0
while IFS= read -r file; do
  part_of "$file"
  from=$part
  if [ -z "${allowed[$from]+x}" ]; then
    # A new folder needs a rule before its files can include anything: none is checked unseen.
    if [[ " $unruled " != *" ${file%%/*} "* ]]; then
      echo "$file: the part '${from:-$file}' has no rule in scripts/check_layering.sh (say which parts it may include, as docs/architecture.md does)"
      violations=$((violations + 1))
    fi
    continue
  fi
  while IFS= read -r line; do
    inc=${line#\#include \"}
    inc=${inc%%\"*}
    part_of "$inc"
    # An include resolves to sqlite_store.h etc. as server/store for a file elsewhere.
    [ "$part" = server/store/sqlite ] && [ "$from" != server/store/sqlite ] && part=server/store
    [ -z "$part" ] && continue
    if [[ " ${allowed[$from]} " != *" $part "* ]]; then
      echo "$file: includes \"$inc\": $from may not depend on $part (docs/architecture.md)"
      violations=$((violations + 1))
    fi
  done < <(grep -E '^#include "' "$file" || true)
  if [[ " $plain " == *" $from "* ]] && grep -qE "$heavy" "$file"; then
    echo "$file: $(grep -E "$heavy" "$file" | head -1): $from stays free of LibTorch, gRPC, SQLite, libuv and MPI"
    violations=$((violations + 1))
  fi
done < <(source_files)

if [ "$violations" -gt 0 ]; then
  echo "check_layering: $violations include(s) break the dependency rules" >&2
  exit 1
fi
echo "check_layering: every include follows the dependency rules"
