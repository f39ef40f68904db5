#!/bin/sh
# Refreshes a bench/*.md results file, keeping its hand-written notes: everything from its first
# line that starts with "## Notes" to the end.
#   bench/keep-notes.sh NEW TARGET                  replaces TARGET with the file NEW, plus the notes
#   bench/keep-notes.sh --run TARGET PROGRAM ARG…   runs PROGRAM ARG… FILE (a temporary FILE for the
#                                                   report), then replaces TARGET with FILE, plus the notes
set -eu
if [ "$1" = --run ]; then
  target=$2
  shift 2
  report=$(mktemp)
  "$@" "$report"
  # A partial run (LOG_BENCH_ONLY, say) may write no report: the results file stays as it was.
  if [ -s "$report" ]; then
    "$0" "$report" "$target"
  else
    echo "bench/keep-notes.sh: $1 wrote no report; $target is unchanged" >&2
  fi
  rm -f "$report"
  exit 0
fi
new=$1
target=$2
tmp=$(mktemp)
cat "$new" > "$tmp"
if [ -f "$target" ] && grep -q '^## Notes' "$target"; then
  echo >> "$tmp"
  sed -n '/^## Notes/,$p' "$target" >> "$tmp"
fi
mv "$tmp" "$target"
