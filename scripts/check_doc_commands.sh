#!/usr/bin/env bash
# Keeps the docs honest: every `plexus ...` command shown in README.md and docs/*.md (in code
# blocks, with continuation lines joined, and in inline code) must name a real command, and each
# of its --flags must appear in that command's --help; a default stated beside a flag ("`--flag`
# (300 by default)", "(default 1)", "(10)") must be one --help shows for it. Prints what has
# drifted; exits 1 if any.
# usage: scripts/check_doc_commands.sh [PLEXUS_BINARY]   (default build/apps/plexus/plexus;
#        DOC_FILES="a.md b.md" checks those files instead)
set -euo pipefail
source "$(dirname "$0")/script_args.sh"
script_help "$@"
script_no_options "$@"
cd "$(dirname "$0")/.."
plexus=$(realpath "${1:-build/apps/plexus/plexus}")
[ -x "$plexus" ] || { echo "check_doc_commands: no plexus binary at $plexus (build first)" >&2; exit 1; }
helps=$(mktemp -d)
trap 'rm -rf "$helps"' EXIT

# Every command: code-block lines (continuations joined) and inline code spans.
commands() {
  for md in ${DOC_FILES:-README.md docs/*.md}; do
    awk -v file="$md" '
      { line = $0 }
      joined != "" { line = joined " " line; joined = "" }
      /\\$/ { sub(/\\$/, "", line); joined = line; next }
      {
        if (line ~ /^[[:space:]]*(build\/apps\/plexus\/)?plexus [a-z]/) { print file "\t" line }
        rest = line
        while (match(rest, /`(build\/apps\/plexus\/)?plexus [a-z][^`]*`/)) {
          print file "\t" substr(rest, RSTART + 1, RLENGTH - 2)
          rest = substr(rest, RSTART + RLENGTH)
        }
      }' "$md"
  done
}

problems=0
checked=0
while IFS=$'\t' read -r file cmd; do
  cmd=${cmd%%#*}  # a trailing shell comment
  read -ra words <<<"$cmd"
  i=0
  while [ $i -lt ${#words[@]} ] && [[ ${words[$i]} != plexus && ${words[$i]} != */plexus ]]; do i=$((i + 1)); done
  sub=${words[$((i + 1))]:-}
  [[ -z $sub || $sub == -* || $sub == ... ]] && continue
  path=("$sub")
  next=${words[$((i + 2))]:-}
  if [[ $sub == certs || $sub == tokens ]] && [[ -n $next && $next != -* && $next != ... ]]; then path+=("$next"); fi
  key=$(IFS=_; echo "${path[*]}")
  if [ ! -f "$helps/$key" ]; then
    # An unknown command still gets plexus's own help: it must be the command's usage.
    if ! "$plexus" "${path[@]}" --help >"$helps/$key" 2>&1 || ! grep -q "^Usage: plexus ${path[*]} " "$helps/$key"; then
      echo "$file: \`plexus ${path[*]}\` is not a command of plexus (from: $cmd)"
      problems=$((problems + 1))
      : >"$helps/$key.bad"
    fi
  fi
  [ -f "$helps/$key.bad" ] && continue
  checked=$((checked + 1))
  for w in "${words[@]}"; do
    [[ $w == --* ]] || continue
    flag=${w%%=*}
    flag=${flag%%[\`,.;:)]*}
    [[ $flag == -- || $flag == --help ]] && continue
    if ! grep -qE -- "(^|[[:space:],])${flag}([[:space:]=,]|$)" "$helps/$key"; then
      echo "$file: \`plexus ${path[*]}\` has no flag $flag (from: $cmd)"
      problems=$((problems + 1))
    fi
  done
done < <(commands)

# Defaults the docs state beside a flag, "`--flag` (300 by default)", "`--flag F` (default 1)",
# "`--flag` (10)", must be a default some command's --help shows for that flag.
for sub in server client sim peer status export merge plot privacy "tokens issue" "certs init" "certs issue"; do
  read -ra path <<<"$sub"
  "$plexus" "${path[@]}" --help >"$helps/defaults_${sub// /_}" 2>&1 || true
done
defaults=$(python3 - "$helps" ${DOC_FILES:-README.md docs/*.md} <<'PY'
import glob, re, sys
helps, docs = sys.argv[1], sys.argv[2:]
shown = {}  # flag -> defaults any command shows
line_re = re.compile(r"^\s+(?:-\w,)?(--[a-z0-9-]+)(?: (\S+(?: in \[[^\]]*\]\S*)?))?")
for path in glob.glob(f"{helps}/defaults_*"):
    for line in open(path):
        m = line_re.match(line)
        if m:
            t = m.group(2) or ""
            shown.setdefault(m.group(1), set()).add(t.split("=", 1)[1] if "=" in t else None)
said = re.compile(r"`(--[a-z0-9-]+)[^`]*` \((?:default `?([^`),;\s]+)`?|`?([^`),;\s]+)`? by default|([0-9][0-9.e-]*)[),])")
count = 0
for doc in docs:
    for n, line in enumerate(open(doc), 1):
        for m in said.finditer(line):
            flag, value = m.group(1), m.group(2) or m.group(3) or m.group(4)
            if flag not in shown:
                continue
            if value in ("off", "none") and shown[flag] & {None, "0", "none"}:  # no default, or 0: off
                count += 1
                continue
            count += 1
            if value not in shown[flag]:
                have = ", ".join(sorted(v for v in shown[flag] if v)) or "no default"
                print(f"{doc}:{n}: says {flag} defaults to {value}; --help shows {have}")
print(f"#checked {count}")
PY
)
default_problems=$(grep -vc '^#checked' <<<"$defaults" || true)
grep -v '^#checked' <<<"$defaults" || true
problems=$((problems + default_problems))
defaults_checked=$(grep '^#checked' <<<"$defaults" | cut -d' ' -f2)

if [ "$problems" -gt 0 ]; then
  echo "check_doc_commands: $problems problem(s) in $checked commands shown in the docs" >&2
  exit 1
fi
echo "check_doc_commands: the $checked plexus commands shown in README.md and docs/ use real commands and flags;" \
  "the $defaults_checked defaults stated beside a flag are the ones --help shows"
