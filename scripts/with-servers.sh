#!/usr/bin/env bash
# Usage: scripts/with-servers.sh COMMAND [ARG...]
# Installs the test servers' packages if missing, starts the shared test servers (see
# scripts/lib.sh), runs COMMAND with the FLOODGATE_TEST_* variables exported, stops the
# servers whatever happens, and exits with COMMAND's status.
set -euo pipefail

if [ "$#" -eq 0 ]; then
	echo "usage: $0 COMMAND [ARG...]" >&2
	exit 2
fi
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

setup_traps

ensure_test_deps
start_test_servers

status=0
run_cmd "$@" || status=$?
exit "$status"
