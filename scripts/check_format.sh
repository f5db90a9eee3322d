#!/usr/bin/env bash
# Checks that every C++ file git tracks is formatted as .clang-format says (clang-format from
# Debian, installed by scripts/setup.sh); prints the first differences and exits 1 otherwise.
# `scripts/check_format.sh --fix` formats them instead.
set -euo pipefail
source "$(dirname "$0")/script_args.sh"
script_help "$@"
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format is missing (scripts/setup.sh installs it)" >&2; exit 1; }
# Every C++ file git tracks or would (new files not yet added, build folders ignored): a list of
# folders would miss the next new one. Fuzz inputs are data.
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.h' '*.cpp' '*.cc' ':!:fuzz/corpus/*' \
  ':!:fuzz/regressions/*' | sort)
if [ ${#files[@]} -eq 0 ]; then echo "check_format: git lists no C++ file here (not a clone of the repository?)" >&2; exit 1; fi
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
