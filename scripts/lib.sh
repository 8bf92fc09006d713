# shellcheck shell=bash
# Shared helpers for scripts/test.sh and scripts/with-servers.sh. Source it; do not run it.
#
#   ensure_test_deps      install redis-server, redis-cli, memcached and nutcracker from Debian if missing
#   start_test_servers    build and start internal/testserver/cmd/testservers, export FLOODGATE_TEST_*
#   stop_test_servers     stop everything start_test_servers started (idempotent; use in trap EXIT)
#   setup_traps           trap EXIT -> stop_test_servers; INT/TERM -> stop the running command, exit
#   run_cmd CMD...        run a command so that INT/TERM to the script stop it at once

FLOODGATE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

_fg_log() { printf '==> %s\n' "$*" >&2; }

# ensure_test_deps installs the Debian packages that provide the test servers' binaries,
# only when one of them is missing. Debian's maintainer scripts would start their own
# redis (6379), memcached (11211) and nutcracker (22121) services; we keep them from doing so with a
# temporary policy-rc.d (when the machine has none), and we never use those services anyway.
ensure_test_deps() {
	local missing=() b
	for b in redis-server redis-cli memcached nutcracker; do
		command -v "$b" >/dev/null 2>&1 || missing+=("$b")
	done
	if [ "${#missing[@]}" -eq 0 ]; then
		return 0
	fi
	_fg_log "missing ${missing[*]}: installing redis-server redis-tools memcached nutcracker with apt-get"
	local sudo=()
	if [ "$(id -u)" -ne 0 ]; then
		sudo=(sudo)
	fi
	local policy=/usr/sbin/policy-rc.d made_policy=""
	if [ ! -e "$policy" ]; then
		if printf '#!/bin/sh\n# temporary, written by floodgate scripts/lib.sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null &&
			"${sudo[@]}" chmod 0755 "$policy"; then
			made_policy=1
		fi
	fi
	local rc=0
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null || rc=$?
	if [ "$rc" -eq 0 ]; then
		"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends \
			redis-server redis-tools memcached nutcracker >/dev/null || rc=$?
	fi
	if [ -n "$made_policy" ]; then
		"${sudo[@]}" rm -f "$policy"
	fi
	if [ "$rc" -ne 0 ]; then
		_fg_log "apt-get failed (exit $rc)"
		return "$rc"
	fi
	for b in redis-server redis-cli memcached nutcracker; do
		if ! command -v "$b" >/dev/null 2>&1; then
			_fg_log "$b still missing after apt-get install"
			return 1
		fi
	done
}

_FG_SERVERS_PID=""
_FG_SERVERS_DIR=""

# start_test_servers builds and starts the testservers helper (standalone Redis, Redis Cluster
# with 3 masters + 3 replicas, Redis Sentinel set, Memcached), waits until they are all ready
# and exports the FLOODGATE_TEST_* variables into the calling shell. Call stop_test_servers
# (e.g. from trap EXIT) to stop them.
start_test_servers() {
	_FG_SERVERS_DIR="$(mktemp -d "${TMPDIR:-/tmp}/floodgate-servers.XXXXXX")"
	_fg_log "building testservers"
	(cd "$FLOODGATE_ROOT" && go build -o "$_FG_SERVERS_DIR/testservers" ./internal/testserver/cmd/testservers)
	_fg_log "starting test servers"
	"$_FG_SERVERS_DIR/testservers" \
		-env "$_FG_SERVERS_DIR/env.sh" \
		-pids "$_FG_SERVERS_DIR/pids" \
		</dev/null >"$_FG_SERVERS_DIR/testservers.log" 2>&1 &
	_FG_SERVERS_PID=$!
	# testservers writes env.sh (atomically) once every server is ready, or exits on failure.
	local waited=0
	while [ ! -s "$_FG_SERVERS_DIR/env.sh" ]; do
		if ! kill -0 "$_FG_SERVERS_PID" 2>/dev/null; then
			_fg_log "testservers failed to start:"
			cat "$_FG_SERVERS_DIR/testservers.log" >&2 || true
			_FG_SERVERS_PID=""
			return 1
		fi
		if [ "$waited" -ge 1200 ]; then # 120 s
			_fg_log "testservers not ready after 120s:"
			cat "$_FG_SERVERS_DIR/testservers.log" >&2 || true
			return 1
		fi
		sleep 0.1
		waited=$((waited + 1))
	done
	# shellcheck disable=SC1091
	. "$_FG_SERVERS_DIR/env.sh"
	# Temporary files of everything run from now on (private test servers' directories,
	# t.TempDir, go's work dirs) go under our directory, which stop_test_servers removes,
	# so even a test binary killed mid-run leaves nothing behind.
	mkdir -p "$_FG_SERVERS_DIR/tmp"
	export TMPDIR="$_FG_SERVERS_DIR/tmp"
	_fg_log "test servers ready (testservers pid $_FG_SERVERS_PID):"
	sed 's/^/    /' "$_FG_SERVERS_DIR/env.sh" >&2
	sed 's/^/    /' "$_FG_SERVERS_DIR/pids" >&2
}

# stop_test_servers stops the testservers helper (which stops every server it started) and,
# as a safety net, kills by PID any server process listed in its pids file that is still alive.
stop_test_servers() {
	local pid
	if [ -n "$_FG_SERVERS_PID" ]; then
		_fg_log "stopping test servers"
		kill -TERM "$_FG_SERVERS_PID" 2>/dev/null || true
		local i
		for i in $(seq 1 150); do # up to 15 s
			kill -0 "$_FG_SERVERS_PID" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$_FG_SERVERS_PID" 2>/dev/null; then
			kill -KILL "$_FG_SERVERS_PID" 2>/dev/null || true
		fi
		wait "$_FG_SERVERS_PID" 2>/dev/null || true
		_FG_SERVERS_PID=""
	fi
	if [ -n "$_FG_SERVERS_DIR" ]; then
		if [ -f "$_FG_SERVERS_DIR/pids" ]; then
			# Lines look like "redis 12345 127.0.0.1:40001".
			while read -r _ pid _; do
				case "$pid" in '' | *[!0-9]*) continue ;; esac
				# Only if that PID is still one of our servers (PIDs get reused).
				case "$(cat "/proc/$pid/comm" 2>/dev/null)" in
				redis-server | memcached)
					_fg_log "killing leftover server pid $pid"
					kill -KILL "$pid" 2>/dev/null || true
					;;
				esac
			done <"$_FG_SERVERS_DIR/pids"
		fi
		rm -rf "$_FG_SERVERS_DIR"
		_FG_SERVERS_DIR=""
	fi
}

_FG_CHILD=""

# _fg_kill_tree sends a signal to a process and all its descendants, by PID.
_fg_kill_tree() {
	local sig=$1 pid=$2 c
	for c in $(ps -o pid= --ppid "$pid" 2>/dev/null); do
		_fg_kill_tree "$sig" "$c"
	done
	kill "-$sig" "$pid" 2>/dev/null || true
}

# run_cmd runs a command and returns its status. It runs it in the background and waits,
# because bash delays its traps until a foreground command ends: this way INT/TERM sent to
# the script stop the command (and e.g. go test's test binaries) at once, then the EXIT
# trap stops the servers.
run_cmd() {
	local rc=0
	"$@" &
	_FG_CHILD=$!
	wait "$_FG_CHILD" || rc=$?
	_FG_CHILD=""
	return "$rc"
}

_fg_on_signal() {
	if [ -n "$_FG_CHILD" ]; then
		_fg_log "signal: stopping pid $_FG_CHILD and its children"
		_fg_kill_tree TERM "$_FG_CHILD"
		wait "$_FG_CHILD" 2>/dev/null || true
		_FG_CHILD=""
	fi
	exit "$1"
}

setup_traps() {
	trap stop_test_servers EXIT
	trap '_fg_on_signal 130' INT
	trap '_fg_on_signal 143' TERM
	trap '_fg_on_signal 129' HUP
}
