#!/usr/bin/env bash
# Counts the functions of the module (outside complexity, limiter, budget
# and the example schema) that one request executes, and the files they are
# in: coverage of a request minus coverage of the setup alone.
#   internal/walk/walk.sh post|rest|ws [-v]
set -euo pipefail
cd "$(dirname "$0")/../.."
kind=${1:?post, rest or ws}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for k in setup "$kind"; do
  COSTGUARD_WALK=$k go test -count=1 -run '^TestWalk$' -coverpkg=github.com/costguard/costguard/... \
    -coverprofile="$tmp/$k.out" ./internal/walk >/dev/null
  go tool cover -func="$tmp/$k.out" |
    awk '$NF != "0.0%" && $1 != "total:" {print $1 " " $2}' |
    grep -vE 'costguard/(complexity|limiter|budget|graph|internal/wstest|internal/walk)/' | sort -u >"$tmp/$k.funcs"
done
comm -13 "$tmp/setup.funcs" "$tmp/$kind.funcs" >"$tmp/walk"
if [ "${2:-}" = -v ]; then cat "$tmp/walk"; fi
echo "$kind: $(wc -l <"$tmp/walk") functions in $(cut -d: -f1 "$tmp/walk" | sort -u | wc -l) files"
