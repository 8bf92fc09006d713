#!/usr/bin/env bash
# Runs every Fuzz* target found under ./... for FUZZTIME (default 20s) each.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FUZZTIME="${FUZZTIME:-20s}"

status=0
found=0
for pkg in $(go list -e ./...); do
	# `go test -list` prints matching test names, then "ok <pkg> ..." (or nothing useful on
	# build failure, which we report).
	if ! out="$(go test -run '^$' -list '^Fuzz' "$pkg" 2>&1)"; then
		echo "$out" >&2
		status=1
		continue
	fi
	for target in $(printf '%s\n' "$out" | grep -E '^Fuzz[A-Za-z0-9_]*$' || true); do
		found=$((found + 1))
		echo "==> $pkg $target ($FUZZTIME)"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" || status=1
	done
done
echo "==> $found fuzz target(s) run"
exit "$status"
