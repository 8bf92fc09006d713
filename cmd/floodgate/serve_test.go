package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestServeBadFlags(t *testing.T) {
	for _, r := range []struct {
		args []string
		env  map[string]string
		code int
		want string
	}{
		{[]string{"serve", "--store", "postgres://db"}, nil, 1, `unknown scheme "postgres"`},
		{[]string{"serve", "--store", "redis://h:99999"}, nil, 1, "floodgate serve: --store redis://h:99999: address \"h:99999\": port must be 1-65535, got \"99999\"\n"},
		{[]string{"serve", "--store", "memcached://h:99999"}, nil, 1, "floodgate serve: --store memcached://h:99999: server \"h:99999\": port must be 1-65535, got \"99999\"\n"},
		{[]string{"serve", "--store", "redis://u:s3cret@h:1/x"}, nil, 1, "floodgate serve: --store redis://u:xxxxx@h:1/x: database must be a non-negative integer in decimal digits (no sign), got \"x\"\n"},
		{[]string{"serve", "--store", "redis-sentinel://h:26379"}, nil, 1, "floodgate serve: --store redis-sentinel://h:26379: missing master name"},
		{[]string{"serve", "--on-store-error", "sometimes"}, nil, 1, `unknown failure policy "sometimes" (want open, closed, local or unavailable)`},
		{[]string{"serve"}, map[string]string{"FLOODGATE_ON_STORE_ERROR": "deny"}, 1, `FLOODGATE_ON_STORE_ERROR: resilient: invalid option: unknown failure policy "deny" (want open, closed, local or unavailable)`},
		{[]string{"serve", "--instances", "0"}, nil, 1, "floodgate serve: --instances 0: must be >= 1\n"},
		{[]string{"serve", "--lease-slice", "1"}, nil, 1, "floodgate serve: --lease-slice 1: must be 0 (off) or at least 2\n"},
		{[]string{"serve", "--lease-ttl", "0s"}, nil, 1, "floodgate serve: --lease-ttl 0s: must be > 0\n"},
		{[]string{"serve", "--store-timeout", "-1s"}, nil, 1, "floodgate serve: --store-timeout -1s: must be at least 1ms\n"},
		{[]string{"serve", "--store", "redis://127.0.0.1:1", "--store-timeout", "1ns"}, nil, 1, "floodgate serve: --store-timeout 1ns: must be at least 1ms\n"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_STORE_TIMEOUT": "999us"}, 1, "floodgate serve: FLOODGATE_STORE_TIMEOUT=\"999us\": must be at least 1ms\n"},
		{[]string{"serve", "--drain-timeout", "0s"}, nil, 1, "floodgate serve: --drain-timeout 0s: must be > 0\n"},
		{[]string{"serve", "--max-envoy-descriptors", "0"}, nil, 1, "floodgate serve: --max-envoy-descriptors 0: must be at least 1, or -1 for no bound\n"},
		{[]string{"serve", "--client-timeout", "-1s"}, nil, 1, "floodgate serve: --client-timeout -1s: must be >= 0 (0: no bound)\n"},
		// The gateway's flags without --upstream would be ignored
		// without a word: refused, as --api is.
		{[]string{"serve", "--upstream-timeout", "5s"}, nil, 1, "floodgate serve: --upstream-timeout 5s: only with --upstream (it bounds the gateway's waits on the upstream)\n"},
		{[]string{"serve", "--client-timeout", "0"}, nil, 1, "floodgate serve: --client-timeout 0s: only with --upstream (it bounds the gateway's waits on its clients)\n"},
		{[]string{"serve", "--preserve-host"}, nil, 1, "floodgate serve: --preserve-host true: only with --upstream (it is the Host the gateway sends upstream)\n"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_UPSTREAM_TIMEOUT": "1m"}, 1, "floodgate serve: FLOODGATE_UPSTREAM_TIMEOUT=\"1m\": only with --upstream (it bounds the gateway's waits on the upstream)\n"},
		{[]string{"serve", "--reload-interval", "-5s"}, nil, 1, "floodgate serve: --reload-interval -5s: must be 0 (no reloading) or at least 100ms\n"},
		{[]string{"serve", "--reload-interval", "1ns"}, nil, 1, "floodgate serve: --reload-interval 1ns: must be 0 (no reloading) or at least 100ms\n"},
		{[]string{"serve", "--reload-interval", "99ms"}, nil, 1, "floodgate serve: --reload-interval 99ms: must be 0 (no reloading) or at least 100ms\n"},
		{[]string{"serve", "--store-timeout", "-1s", "--drain-timeout", "-2s", "--instances", "-1"}, nil, 1,
			"floodgate serve: --instances -1: must be >= 1\n--store-timeout -1s: must be at least 1ms\n--drain-timeout -2s: must be > 0\n"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_DRAIN_TIMEOUT": "-3s"}, 1, "floodgate serve: FLOODGATE_DRAIN_TIMEOUT=\"-3s\": must be > 0\n"},
		{[]string{"serve", "--store", "redis://127.0.0.1:1?wait_replicas=1"}, nil, 1,
			"floodgate serve: --store-timeout 50ms: must be at least 150ms with wait_replicas in --store (its wait_timeout 50ms, and up to 100ms more for Redis to answer a WAIT that timed out)\n"},
		// No wait_timeout fits under 100ms: lowering it is not offered.
		{[]string{"serve", "--store", "redis://127.0.0.1:1?wait_replicas=1&wait_timeout=1ms", "--store-timeout", "100ms"}, nil, 1,
			"floodgate serve: --store-timeout 100ms: must be at least 101ms with wait_replicas in --store (its wait_timeout 1ms, and up to 100ms more for Redis to answer a WAIT that timed out)\n"},
		{[]string{"serve", "--store", "redis-cluster://127.0.0.1:1?wait_replicas=2&wait_timeout=1s"}, map[string]string{"FLOODGATE_STORE_TIMEOUT": "1s"}, 1,
			"floodgate serve: FLOODGATE_STORE_TIMEOUT=\"1s\": must be at least 1.1s with wait_replicas in --store (its wait_timeout 1s, and up to 100ms more for Redis to answer a WAIT that timed out); or lower wait_timeout to at most 900ms\n"},
		// The store named as it was given; wait_timeout rounded up to the
		// whole milliseconds WAIT takes.
		{[]string{"serve", "--store-timeout", "150ms"}, map[string]string{"FLOODGATE_STORE": "rediss://127.0.0.1:1?wait_replicas=1&wait_timeout=50100us"}, 1,
			"floodgate serve: --store-timeout 150ms: must be at least 151ms with wait_replicas in FLOODGATE_STORE (its wait_timeout 51ms, and up to 100ms more for Redis to answer a WAIT that timed out); or lower wait_timeout to at most 50ms\n"},
		{[]string{"serve", "--store", "redis-sentinel://m@127.0.0.1:1?wait_replicas=1"}, nil, 1, "floodgate serve: --store-timeout 50ms: must be at least 150ms"},
		// A bad URL is reported as such, not hidden by the check.
		{[]string{"serve", "--store", "redis://127.0.0.1:99999?wait_replicas=1"}, nil, 1,
			"floodgate serve: --store redis://127.0.0.1:99999?wait_replicas=1: address \"127.0.0.1:99999\": port must be 1-65535, got \"99999\"\n"},
		{[]string{"serve", "--upstream", "h2c://127.0.0.1", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, nil, 1,
			"floodgate serve: --upstream h2c://127.0.0.1: gateway: upstream \"h2c://127.0.0.1\": no port: h2c has no default port; want h2c://host:port (HTTP/2 without TLS)\n"},
		{[]string{"serve", "--grpc-max-connection-idle", "-1s"}, nil, 1, "floodgate serve: --grpc-max-connection-idle -1s: must be >= 0 (0: no limit)\n"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_GRPC_MAX_CONNECTION_IDLE": "-5m"}, 1, "floodgate serve: FLOODGATE_GRPC_MAX_CONNECTION_IDLE=\"-5m\": must be >= 0 (0: no limit)\n"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_GRPC_MAX_CONNECTION_IDLE": "5"}, 2, `FLOODGATE_GRPC_MAX_CONNECTION_IDLE="5": want a duration such as 500ms, 5s or 1m30s (the unit is required)`},
		{[]string{"serve", "--lease-slice", "10"}, nil, 1, "--lease-slice 10: leases are for remote stores; --store memory:// decides in process already"},
		{[]string{"serve", "--config", "/no/such/config.yaml"}, nil, 1, "/no/such/config.yaml"},
		{[]string{"serve", "--upstream", "ftp://admin:s3cret@127.0.0.1:1/", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, nil, 1,
			"floodgate serve: --upstream ftp://admin:xxxxx@127.0.0.1:1/: gateway: upstream \"ftp://admin:xxxxx@127.0.0.1:1/\": want an absolute http://, https:// or h2c:// URL with a host and no user, query or fragment\n"},
		{[]string{"serve", "extra"}, nil, 2, `unexpected argument "extra"`},
		{[]string{"serve", "--colour"}, nil, 2, "flag provided but not defined"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_ON_STORE_ERROR": "never"}, 1, `floodgate serve: FLOODGATE_ON_STORE_ERROR: resilient: invalid option: unknown failure policy "never"`},
		{[]string{"serve"}, map[string]string{"FLOODGATE_INSTANCES": "many"}, 2, `FLOODGATE_INSTANCES="many": want an integer, e.g. 1`},
		{[]string{"serve"}, map[string]string{"FLOODGATE_DRAIN_TIMEOUT": "x"}, 2, `FLOODGATE_DRAIN_TIMEOUT="x": want a duration such as 500ms, 5s or 1m30s`},
		{[]string{"serve"}, map[string]string{"FLOODGATE_STORE_TIMEOUT": "100"}, 2, `FLOODGATE_STORE_TIMEOUT="100": want a duration such as 500ms, 5s or 1m30s (the unit is required)`},
		{[]string{"serve"}, map[string]string{"FLOODGATE_SHADOW": "yes"}, 2, `FLOODGATE_SHADOW="yes": want true or false`},
		// A value from the environment is named by its variable in every
		// error, one from the command line by its flag.
		{[]string{"serve"}, map[string]string{"FLOODGATE_STORE": "bogus://"}, 1, `floodgate serve: FLOODGATE_STORE="bogus://": unknown scheme "bogus"`},
		{[]string{"serve"}, map[string]string{"FLOODGATE_STORE": "redis://u:s3cret@h:1/x"}, 1,
			"floodgate serve: FLOODGATE_STORE=\"redis://u:xxxxx@h:1/x\": database must be a non-negative integer in decimal digits (no sign), got \"x\"\n"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_INSTANCES": "0"}, 1, "floodgate serve: FLOODGATE_INSTANCES=\"0\": must be >= 1\n"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_LEASE_SLICE": "1"}, 1, "floodgate serve: FLOODGATE_LEASE_SLICE=\"1\": must be 0 (off) or at least 2\n"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_LEASE_TTL": "0s"}, 1, "floodgate serve: FLOODGATE_LEASE_TTL=\"0s\": must be > 0\n"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_RELOAD_INTERVAL": "1ms"}, 1, "floodgate serve: FLOODGATE_RELOAD_INTERVAL=\"1ms\": must be 0 (no reloading) or at least 100ms\n"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_LOG_LEVEL": "loud"}, 1, "floodgate serve: FLOODGATE_LOG_LEVEL=\"loud\": want debug, info, warn or error\n"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_CONFIG": "/no/such/config.yaml"}, 1, "floodgate serve: FLOODGATE_CONFIG=\"/no/such/config.yaml\":\n/no/such/config.yaml: cannot read"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_UPSTREAM": "ftp://x"}, 1, `floodgate serve: FLOODGATE_UPSTREAM="ftp://x": gateway: upstream "ftp://x": want an absolute http://, https:// or h2c:// URL`},
		{[]string{"serve"}, map[string]string{"FLOODGATE_LEASE_SLICE": "10"}, 1,
			"floodgate serve: FLOODGATE_LEASE_SLICE=\"10\": leases are for remote stores; --store memory:// decides in process already\n"},
		{[]string{"serve", "--lease-slice", "10"}, map[string]string{"FLOODGATE_STORE": "memory://"}, 1,
			"floodgate serve: --lease-slice 10: leases are for remote stores; FLOODGATE_STORE=\"memory://\" decides in process already\n"},
		{[]string{"serve", "--store-timeout", "-1s"}, map[string]string{"FLOODGATE_DRAIN_TIMEOUT": "-2s"}, 1,
			"floodgate serve: --store-timeout -1s: must be at least 1ms\nFLOODGATE_DRAIN_TIMEOUT=\"-2s\": must be > 0\n"},
		{[]string{"serve", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, map[string]string{"FLOODGATE_HTTP": "127.0.0.1:99999"}, 1,
			"floodgate serve: FLOODGATE_HTTP=\"127.0.0.1:99999\": listen tcp: address 99999: invalid port\n"},
		{[]string{"serve", "--http", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, map[string]string{"FLOODGATE_GRPC": "127.0.0.1:99999"}, 1,
			"floodgate serve: FLOODGATE_GRPC=\"127.0.0.1:99999\": listen tcp: address 99999: invalid port\n"},
		{[]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, map[string]string{"FLOODGATE_ADMIN": "127.0.0.1:99999"}, 1,
			"floodgate serve: FLOODGATE_ADMIN=\"127.0.0.1:99999\": listen tcp: address 99999: invalid port\n"},
		{[]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:99999"}, nil, 1,
			"floodgate serve: --admin 127.0.0.1:99999: listen tcp: address 99999: invalid port\n"},
	} {
		for k, v := range r.env {
			t.Setenv(k, v)
		}
		var out, errb bytes.Buffer
		code := run(context.Background(), r.args, &out, &errb)
		if code != r.code || !strings.Contains(errb.String(), r.want) {
			t.Errorf("%v %v: exit %d, stderr %q; want exit %d saying %q", r.args, r.env, code, errb.String(), r.code, r.want)
		}
		for k := range r.env {
			t.Setenv(k, "")
		}
	}
}

func TestApplyEnv(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var f serveFlags
	f.register(fs)
	if err := fs.Parse([]string{"--http", "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"FLOODGATE_HTTP": "127.0.0.1:2", "FLOODGATE_STORE": "memcached://m:1", "FLOODGATE_ADMIN_TOKEN": "tok",
		"FLOODGATE_STORE_TIMEOUT": "75ms"}
	if err := f.applyEnv(fs, func(k string) string { return env[k] }, nil); err != nil {
		t.Fatal(err)
	}
	if f.httpAddr != "127.0.0.1:1" || f.store != "memcached://m:1" || f.adminToken != "tok" || f.storeTimeout != 75*time.Millisecond {
		t.Fatalf("flags after the environment: %+v (the command line must win, the environment fill the rest)", f)
	}
	for name, want := range map[string]string{"http": "--http 127.0.0.1:1", "store": `FLOODGATE_STORE="memcached://m:1"`,
		"store-timeout": `FLOODGATE_STORE_TIMEOUT="75ms"`, "grpc": "--grpc 127.0.0.1:8081"} {
		var value any
		fs.VisitAll(func(fl *flag.Flag) {
			if fl.Name == name {
				value = fl.Value
			}
		})
		if got := f.origin(name, value); got != want {
			t.Errorf("origin(%q) = %q, want %q", name, got, want)
		}
	}
}

// startServe runs serve with args (and the listeners on free ports) until
// it logs that it serves. stop cancels it and returns its exit code.
func startServe(t *testing.T, args ...string) (out, errb *lockedBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errb = new(lockedBuffer), new(lockedBuffer)
	done := make(chan int, 1)
	args = append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, args...)
	go func() { done <- run(ctx, args, out, errb) }()
	deadline := time.Now().Add(10 * time.Second)
	// The log's line comes first, the addresses on stdout just after it:
	// wait for both (a test reading the addresses at once failed under load).
	// Under --log-format json there is no line on stdout: the log's
	// record is all.
	for !strings.Contains(errb.String(), "floodgate serving") ||
		!strings.Contains(out.String(), "floodgate serving:") && !strings.Contains(errb.String(), `"msg":"floodgate serving"`) {
		select {
		case code := <-done:
			cancel()
			t.Fatalf("serve exited %d before serving: %s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("not serving after 10s: %s", errb.String())
		}
		time.Sleep(10 * time.Millisecond) // waiting for the server to start, not for math
	}
	return out, errb, func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(15 * time.Second):
			t.Fatal("serve did not stop within 15s of the cancel")
			return -1
		}
	}
}

// TestServeStopsOnCancel: serve with the defaults (memory store, built-in or
// example config) on free ports, then a cancelled context: exit 0.
func TestServeStopsOnCancel(t *testing.T) {
	_, errb, stop := startServe(t)
	if code := stop(); code != 0 {
		t.Fatalf("exit %d after cancel: %s", code, errb.String())
	}
	// The warnings: the rules are the example's, and its adaptive rule
	// takes samples from loopback peers without a token.
	// Not counted: a WARN for an envoyproxy/ratelimit variable the machine
	// running the test happens to export (LOG_LEVEL, PORT, …).
	if n, m, o := strings.Count(errb.String(), "level=WARN")-strings.Count(errb.String(), "is envoyproxy/ratelimit's and floodgate does not read it"), strings.Count(errb.String(), `level=WARN msg="no --config: enforcing the example configuration`),
		strings.Count(errb.String(), `level=WARN msg="adaptive rules are configured and neither --observe-token nor --admin-token is set`); n != 2 || m != 1 || o != 1 {
		t.Errorf("the example configuration served with the defaults: want two WARNs, saying it is the example and that /v1/observe is open to loopback peers: %s", errb.String())
	}
}

// gatewayConfigDir returns a configuration folder with one domain, edge,
// that has a gateway: section (a route on /ping).
func gatewayConfigDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cfg := "domain: edge\ngateway:\n  routes:\n    - path_prefix: /ping\n      descriptors: [{entries: [{source: remote_address}]}]\n" +
		"descriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A gateway: section without --upstream is ignored, and serve says so.
func TestServeWarnsGatewayWithoutUpstream(t *testing.T) {
	dir := gatewayConfigDir(t)
	_, errb, stop := startServe(t, "--config", dir, "--reload-interval", "0")
	if code := stop(); code != 0 {
		t.Fatalf("exit %d after cancel: %s", code, errb.String())
	}
	want := `level=WARN msg="the configuration's gateway routes are ignored without --upstream: set --upstream URL to proxy and limit them" domains=edge`
	if !strings.Contains(errb.String(), want) {
		t.Errorf("stderr %q lacks %q", errb.String(), want)
	}
}

// floodgate bench with its defaults against floodgate serve with its
// defaults sends a descriptor no rule matches: the report says so.
func TestBenchDefaultsSayNoRuleMatched(t *testing.T) {
	out, errb, stop := startServe(t, "--reload-interval", "0")
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("serve exit %d after cancel: %s", code, errb.String())
		}
	}()
	m := regexp.MustCompile(`http (\S+), grpc (\S+),`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no addresses in serve's stdout %q", out.String())
	}
	for _, c := range []struct{ proto, addr string }{{"grpc", m[2]}, {"json", m[1]}, {"v1", m[1]}} {
		var bout, berr bytes.Buffer
		if code := run(context.Background(), []string{"bench", "-q", "-n", "20", "-p", c.proto, "-addr", c.addr}, &bout, &berr); code != 0 {
			t.Fatalf("bench -p %s: exit %d: %s", c.proto, code, berr.String())
		}
		want := `note: no rule matched the descriptors sent; every request was admitted without a limit (domain "api", descriptor generic_key=default)` + "\n"
		if !strings.Contains(bout.String(), want) {
			t.Errorf("bench -p %s report lacks %q:\n%s", c.proto, want, bout.String())
		}
	}
}

// lockedBuffer is a bytes.Buffer safe to read while the server writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A configuration that fails to reload is logged at WARN, so that
// --log-level warn would show it; the previous one stays in force.
func TestServeWarnsFailedReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	good := "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
	if err := os.WriteFile(file, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errb, stop := startServe(t, "--config", dir, "--reload-interval", "100ms")
	defer stop()
	// The watcher's baseline is the content when it starts, which may be
	// after a first write: each attempt writes a different invalid file.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; !strings.Contains(errb.String(), "configuration not reloaded"); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no reload failure logged within 10s: %s", errb.String())
		}
		if err := os.WriteFile(file, []byte(fmt.Sprintf("%s    burst: -1 # %d\n", good, i)), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // two polls of 100 ms find the file alike: a change is loaded once it stays
	}
	if !strings.Contains(errb.String(), "level=WARN msg=\"configuration not reloaded") {
		t.Fatalf("the reload failure is not a WARN line: %s", errb.String())
	}
}

// A request still in flight when --drain-timeout passes is cut off: serve
// says so at WARN and still exits 0, as a SIGTERM drain does.
func TestServeDrainTimeoutCutsOffAndExitsZero(t *testing.T) {
	out, errb, stop := startServe(t, "--drain-timeout", "300ms", "--reload-interval", "0")
	m := regexp.MustCompile(`http (\S+),`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no HTTP address in serve's stdout %q", out.String())
	}
	conn, err := net.Dial("tcp", m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	// The 100 Continue says the handler is reading the body: the request
	// is in flight when the drain starts.
	io.WriteString(conn, "POST /v1/decide HTTP/1.1\r\nHost: floodgate\r\nContent-Type: application/json\r\n"+
		"Expect: 100-continue\r\nContent-Length: 100\r\n\r\n")
	br := bufio.NewReader(conn)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("want 100 Continue, got %q, %v", line, err)
	}
	io.WriteString(conn, "{")
	if code := stop(); code != 0 {
		t.Fatalf("exit %d after a drain that timed out: %s", code, errb.String())
	}
	want := `level=WARN msg="drain timed out after 300ms: closed the connections of 1 HTTP API request(s) still in flight" event=drain`
	if !strings.Contains(errb.String(), want) {
		t.Errorf("stderr %q lacks %q", errb.String(), want)
	}
	if _, err := io.ReadAll(br); err != nil {
		t.Errorf("the cut-off connection: %v; want it closed", err)
	}
}

// In gateway mode the startup line says where requests go.
func TestServeLogsUpstream(t *testing.T) {
	dir := gatewayConfigDir(t)
	_, errb, stop := startServe(t, "--config", dir, "--reload-interval", "0", "--upstream", "http://127.0.0.1:1/")
	if code := stop(); code != 0 {
		t.Fatalf("exit %d after cancel: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "upstream=http://127.0.0.1:1/") {
		t.Errorf("startup log %q: want the upstream", errb.String())
	}
}

// --envoy-headers (or FLOODGATE_ENVOY_HEADERS) puts the rate limit header
// fields in the Envoy APIs' answers; without it /json carries none, as
// envoyproxy/ratelimit by default, while /v1 always does.
func TestServeEnvoyHeaders(t *testing.T) {
	body := `{"domain":"api","descriptors":[{"entries":[{"key":"remote_address","value":"203.0.113.7"}]}]}`
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want bool
	}{
		{"default", nil, "", false},
		{"flag", []string{"--envoy-headers"}, "", true},
		{"environment", nil, "true", true},
		{"flag false over the environment", []string{"--envoy-headers=false"}, "true", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FLOODGATE_ENVOY_HEADERS", tc.env)
			out, errb, stop := startServe(t, append([]string{"--reload-interval", "0"}, tc.args...)...)
			defer func() {
				if code := stop(); code != 0 {
					t.Errorf("serve exit %d after cancel: %s", code, errb.String())
				}
			}()
			m := regexp.MustCompile(`http (\S+),`).FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("no address in serve's stdout %q", out.String())
			}
			for _, path := range []string{"/json", "/v1/decide"} {
				resp, err := http.Post("http://"+m[1]+path, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := tc.want || path == "/v1/decide"
				if got := resp.Header.Get("RateLimit-Policy") != ""; resp.StatusCode != 200 || got != want {
					t.Errorf("POST %s: %d, RateLimit-Policy %q, want it: %v (%s)", path, resp.StatusCode, resp.Header.Get("RateLimit-Policy"), want, b)
				}
				if path == "/json" && strings.Contains(string(b), "responseHeadersToAdd") != tc.want {
					t.Errorf("POST /json: body %s, want responseHeadersToAdd: %v", b, tc.want)
				}
			}
		})
	}
}

// A configuration envoyproxy/ratelimit loads with a field it ignores (name
// on a descriptor) loads with a warning at file:line: serve logs it at
// start and again at every successful reload, as floodgate validate says
// it.
func TestServeLogsConfigWarnings(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	cfg := "domain: api\ndescriptors:\n  - key: k\n    name: per-k\n    rate_limit: {unit: second, requests_per_unit: %d}\n"
	if err := os.WriteFile(file, fmt.Appendf(nil, cfg, 10), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errb, stop := startServe(t, "--config", dir, "--reload-interval", "100ms")
	defer stop()
	want := fmt.Sprintf(`level=WARN msg="configuration: %s:4: field \"name\" is ignored in descriptor`, file)
	if n := strings.Count(errb.String(), want); n != 1 {
		t.Fatalf("%d warnings %q at start, want 1:\n%s", n, want, errb.String())
	}
	// The watcher's baseline is the content when it starts, which may be
	// after a first write: each attempt writes a different valid file.
	deadline := time.Now().Add(10 * time.Second)
	for i := 11; !strings.Contains(errb.String(), "configuration reloaded"); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no reload within 10s: %s", errb.String())
		}
		if err := os.WriteFile(file, fmt.Appendf(nil, cfg, i), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // two polls of 100 ms find the file alike: a change is loaded once it stays
	}
	deadline = time.Now().Add(5 * time.Second)
	for !strings.Contains(errb.String(), want) || strings.Count(errb.String(), want) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the reload did not log the warning again:\n%s", errb.String())
		}
		time.Sleep(10 * time.Millisecond) // the reload's lines follow its event
	}
	if !regexp.MustCompile(`level=WARN msg="configuration: [^\n]*:4: field \\"name\\" is ignored in descriptor[^\n]*event=reload`).MatchString(errb.String()) {
		t.Errorf("the reload's warning is not a reload event:\n%s", errb.String())
	}
}
