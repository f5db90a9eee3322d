# Argument handling shared by the scripts of scripts/ and bench/ (sourced, not run): every script
# answers --help with its header comment and refuses arguments it does not take, instead of
# starting a long job or passing them on to cmake.
#   source "$(dirname "$0")/../scripts/script_args.sh"
#   script_help "$@"          # -h/--help anywhere: print the header comment, exit 0
#   script_no_args "$@"       # the script takes no arguments
#   script_no_options "$@"    # the script takes positional arguments only

script_help() {
  local a
  for a in "$@"; do
    case "$a" in
      -h|--help)
        # The comment block after the shebang line, without its leading '# '.
        awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"
        exit 0 ;;
    esac
  done
}

script_no_args() {
  if [ $# -gt 0 ]; then
    echo "$(basename "$0"): takes no arguments (got '$*'); see $0 --help" >&2
    exit 2
  fi
}

script_no_options() {
  local a
  for a in "$@"; do
    case "$a" in
      -*) echo "$(basename "$0"): unknown option '$a'; see $0 --help" >&2; exit 2 ;;
    esac
  done
}
