#!/usr/bin/env bash
# Runs the whole test suite against real servers:
#   1. installs redis-server, redis-tools, memcached and nutcracker from Debian if any binary is missing;
#   2. starts a standalone Redis, a Redis Cluster (3 masters + 3 replicas), a Sentinel set
#      and a Memcached on free 127.0.0.1 ports (internal/testserver/cmd/testservers) and
#      exports FLOODGATE_TEST_REDIS, _REDIS_CLUSTER, _REDIS_SENTINEL and _MEMCACHED;
#   3. go vet ./... and go test -race -count=1 -timeout 60m $TEST_ARGS ./...,
#      then the same in bench/ when bench/ is a module of its own;
#   4. stops every server it started, pass or fail (trap EXIT), and exits non-zero if
#      anything failed.
# TEST_ARGS: extra `go test` flags, e.g. TEST_ARGS='-run Redis -v'.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

setup_traps

ensure_test_deps
start_test_servers

read -r -a extra <<<"${TEST_ARGS:-}"

# A vet failure fails the run, but the tests still run so that one report shows everything.
status=0
_fg_log "go vet ./..."
run_cmd go vet ./... || {
	status=$?
	_fg_log "go vet FAILED (exit $status); running the tests anyway"
}

# The bench module first (it holds benchmarks, compiled and vetted here), so that
# the run closes on the main suite's results.
if [ -f bench/go.mod ]; then
	_fg_log "(cd bench && go test -race -count=1 -timeout 60m ${extra[*]} ./...)"
	run_cmd bash -c 'cd bench && exec go test -race -count=1 -timeout 60m "$@" ./...' bash "${extra[@]}" || {
		rc=$?
		[ "$status" -ne 0 ] || status=$rc
	}
fi

_fg_log "go test -race -count=1 -timeout 60m ${extra[*]} ./..."
run_cmd go test -race -count=1 -timeout 60m "${extra[@]}" ./... || status=$?

if [ "$status" -ne 0 ]; then
	_fg_log "tests FAILED (exit $status)"
else
	_fg_log "tests passed"
fi
exit "$status"
