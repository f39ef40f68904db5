#!/bin/sh
# bench/keep-notes.sh NEW TARGET: replaces TARGET (a bench/*.md results file) with NEW, keeping
# the hand-written notes of TARGET: everything from its first line that starts with
# "## Notes" to the end. The benchmark scripts call it so a rerun refreshes the table without
# losing the sessions' notes below it.
set -eu
new=$1
target=$2
tmp=$(mktemp)
cat "$new" > "$tmp"
if [ -f "$target" ] && grep -q '^## Notes' "$target"; then
  echo >> "$tmp"
  sed -n '/^## Notes/,$p' "$target" >> "$tmp"
fi
mv "$tmp" "$target"
