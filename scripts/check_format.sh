#!/usr/bin/env bash
# Checks that every C++ file of the tree is formatted as .clang-format says (clang-format from
# Debian, installed by scripts/setup.sh); prints the first differences and exits 1 otherwise.
# `scripts/check_format.sh --fix` formats them instead.
set -euo pipefail
source "$(dirname "$0")/script_args.sh"
script_help "$@"
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format is missing (scripts/setup.sh installs it)" >&2; exit 1; }
mapfile -t files < <(find core aggregators compression crdt edge gossip sqlite server compute client simulations apps proto tests bench fuzz \
  \( -name '*.h' -o -name '*.cpp' \) -not -path 'fuzz/corpus/*' -not -path 'fuzz/regressions/*' | sort)
case "${1:-}" in
  --fix) clang-format -i "${files[@]}"; echo "check_format: formatted ${#files[@]} files"; exit 0 ;;
  "") ;;
  *) echo "check_format: unknown argument '$1'; see $0 --help" >&2; exit 2 ;;
esac
if ! clang-format --dry-run -Werror "${files[@]}" 2>/tmp/plexus_format_$$.log; then
  head -40 /tmp/plexus_format_$$.log
  rm -f /tmp/plexus_format_$$.log
  echo "check_format: files differ from .clang-format; run scripts/check_format.sh --fix" >&2
  exit 1
fi
rm -f /tmp/plexus_format_$$.log
echo "check_format: ${#files[@]} files formatted as .clang-format says"
