#!/usr/bin/env bash
# The docs check must fail on a page showing a flag or a command plexus does not have.
set -euo pipefail
check="$(dirname "$0")/../scripts/check_doc_commands.sh"
page=$(mktemp --suffix=.md)
trap 'rm -f "$page"' EXIT
printf 'Run `plexus sim --roundz 3` or\n\n```sh\nplexus serve --listen x \\\n    --db y\n```\n' >"$page"
if out=$(DOC_FILES="$page" "$check" "$1" 2>&1); then
  echo "FAIL: the check passed a page with a wrong flag and a wrong command: $out"
  exit 1
fi
for expected in 'has no flag --roundz' '`plexus serve` is not a command'; do
  grep -qF -- "$expected" <<<"$out" || { echo "FAIL: not reported: $expected"; echo "$out"; exit 1; }
done
echo "ok: the docs check refuses a wrong flag and a wrong command"
