package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// warnLines returns the messages of serve's text log lines at WARN.
func warnLines(log string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^time=\S+ level=WARN msg="((?:[^"\\]|\\.)*)"`).FindAllStringSubmatch(log, -1) {
		out = append(out, strings.ReplaceAll(m[1], `\"`, `"`))
	}
	return out
}

// envoyproxy/ratelimit's variables, kept from an old Deployment, were
// ignored without a word: SHADOW_MODE=true enforced the limits, REDIS_URL
// left the memory store in use. Each set one is now a WARN naming what
// does its job, never its value; a Kubernetes service link
// (GRPC_PORT=tcp://…) is not taken for one.
func TestServeWarnsUpstreamEnv(t *testing.T) {
	for k, v := range map[string]string{
		"SHADOW_MODE":               "true",
		"REDIS_URL":                 "redis-secret-host:6379",
		"REDIS_AUTH":                "s3cret-redis-password",
		"REDIS_PERSECOND_URL":       "x:6380",
		"MEMCACHE_HOST_PORT":        "m:11211",
		"LOG_LEVEL":                 "debug",
		"USE_DOG_STATSD_MOGRIFIERS": "x",
		"GRPC_PORT":                 "tcp://10.0.0.1:8081", // a Service named grpc
		"DEBUG_PORT":                "6070",
		"REDIS_POOL_SIZE":           "", // empty: not set
	} {
		t.Setenv(k, v)
	}
	out, errb, stop := startServe(t, "--reload-interval", "0")
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	warns := strings.Join(warnLines(errb.String()), "\n")
	for _, want := range []string{
		"environment variable SHADOW_MODE is envoyproxy/ratelimit's and floodgate does not read it: use --shadow (FLOODGATE_SHADOW=true); without it the limits are enforced (docs/MIGRATING.md)",
		"environment variable REDIS_URL is envoyproxy/ratelimit's and floodgate does not read it: use --store URL (FLOODGATE_STORE): redis://host:port, redis-sentinel://master@host:port,…, redis-cluster://host:port,… or memcached://host:port; without it the store is memory://, in this process only (docs/MIGRATING.md)",
		"environment variable REDIS_AUTH is envoyproxy/ratelimit's and floodgate does not read it: the password and TLS go in --store's URL (FLOODGATE_STORE): redis://user:password@host:port, rediss://… for TLS (docs/MIGRATING.md)",
		"environment variable REDIS_PERSECOND_URL is envoyproxy/ratelimit's and floodgate does not read it: none: one store (--store, FLOODGATE_STORE) holds every limit (docs/MIGRATING.md)",
		"environment variable MEMCACHE_HOST_PORT is envoyproxy/ratelimit's and floodgate does not read it: use --store memcached://host:port,host:port (FLOODGATE_STORE) (docs/MIGRATING.md)",
		"environment variable LOG_LEVEL is envoyproxy/ratelimit's and floodgate does not read it: use --log-level debug|info|warn|error (FLOODGATE_LOG_LEVEL) (docs/MIGRATING.md)",
		"environment variable USE_DOG_STATSD_MOGRIFIERS is envoyproxy/ratelimit's and floodgate does not read it: none: Prometheus only, GET /metrics on --admin (docs/MIGRATING.md)",
		"environment variable DEBUG_PORT is envoyproxy/ratelimit's and floodgate does not read it: use --admin HOST:PORT (FLOODGATE_ADMIN; default 127.0.0.1:9090) (docs/MIGRATING.md)",
	} {
		if n := strings.Count(warns, want); n != 1 {
			t.Errorf("%d WARN %q, want 1; the WARNs:\n%s", n, want, warns)
		}
	}
	for _, not := range []string{"GRPC_PORT", "REDIS_POOL_SIZE", "s3cret-redis-password", "redis-secret-host", "tcp://10.0.0.1"} {
		if strings.Contains(errb.String(), not) || strings.Contains(out.String(), not) {
			t.Errorf("the output holds %q:\n%s%s", not, errb.String(), out.String())
		}
	}
	// Every variable of the table is known, and nothing else.
	for _, name := range []string{"RUNTIME_ROOT", "RUNTIME_WATCH_ROOT", "PORT", "GRPC_HOST", "GRPC_UDS", "GRPC_SERVER_USE_TLS", "GRPC_CLIENT_TLS_SAN",
		"GRPC_MAX_CONNECTION_AGE_GRACE", "BACKEND_TYPE", "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_TLS", "REDIS_TLS_CACERT", "REDIS_PERSECOND_TLS",
		"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "MEMCACHE_TLS_CLIENT_CERT", "USE_STATSD", "LIMIT_RESPONSE_HEADERS_ENABLED", "LOG_FORMAT",
		"CONFIG_GRPC_XDS_SERVER_URL", "TRACING_ENABLED", "USE_PROMETHEUS", "NEAR_LIMIT_RATIO", "MERGE_DOMAIN_CONFIG"} {
		if _, ok := upstreamInstead(name); !ok {
			t.Errorf("upstreamInstead(%q): not known", name)
		}
	}
	for _, name := range []string{"HOSTNAME", "REDIS_PORT", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "FLOODGATE_STORE", "RUNTIME", "LOG_LEVELS"} {
		if _, ok := upstreamInstead(name); ok {
			t.Errorf("upstreamInstead(%q): known, want not one of envoyproxy/ratelimit's", name)
		}
	}
}

// --instances, --on-store-error, --store-timeout and --start-degraded do
// nothing with the memory store (only a remote store is wrapped by
// store/resilient): serve said nothing.
func TestServeWarnsMemoryStoreFailureFlags(t *testing.T) {
	out, errb, stop := startServe(t, "--reload-interval", "0", "--instances", "3", "--on-store-error", "closed",
		"--store-timeout", "200ms", "--start-degraded")
	_ = out
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	warns := strings.Join(warnLines(errb.String()), "\n")
	for _, want := range []string{
		"--on-store-error closed does nothing with --store memory://: the failure policy answers when a remote store fails or times out, and the memory store is in this process",
		"--instances 3 does nothing with --store memory://: it divides each limit among the instances under --on-store-error local while a remote store is down; " +
			"with the memory store each instance counts on its own, so 3 instances together admit up to 3 times each limit (share a remote --store)",
		"--store-timeout 200ms does nothing with --store memory://: it bounds each call to a remote store, and the memory store answers in this process without a network call",
		"--start-degraded true does nothing with --store memory://: it lets serve start while a remote store cannot be reached, and the memory store is always there",
	} {
		if !strings.Contains(warns, want) {
			t.Errorf("no WARN %q; the WARNs:\n%s", want, warns)
		}
	}
	// Named as they were set; the defaults are no warning.
	t.Setenv("FLOODGATE_ON_STORE_ERROR", "open")
	_, errb, stop = startServe(t, "--reload-interval", "0", "--instances", "1")
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	warns = strings.Join(warnLines(errb.String()), "\n")
	if want := `FLOODGATE_ON_STORE_ERROR="open" does nothing with --store memory://`; !strings.Contains(warns, want) || strings.Contains(warns, "--instances") {
		t.Errorf("the WARNs:\n%s\nwant %q and none on --instances 1", warns, want)
	}
	if f := (serveFlags{store: "memory://", instances: 1, given: map[string]bool{"start-degraded": true}}); len(f.memoryWarnings()) != 0 {
		t.Errorf("memoryWarnings with --start-degraded=false: %q, want none", f.memoryWarnings())
	}
	if f := (serveFlags{store: "redis://127.0.0.1:1", instances: 3, startDegraded: true,
		given: map[string]bool{"on-store-error": true, "store-timeout": true, "start-degraded": true}}); len(f.memoryWarnings()) != 0 {
		t.Errorf("memoryWarnings with a Redis store: %q, want none", f.memoryWarnings())
	}
}

// A token on the command line is in ps for every user of the host: serve
// warns, pointing to the file and the variable; a token from either gets
// no such warning. The token is never in the log.
func TestServeWarnsTokenOnCommandLine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("from-file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const warn = "--admin-token is given on the command line, where any user of this host can read it (ps, /proc/<pid>/cmdline): give it by --admin-token-file FILE (a file only floodgate's user can read) or the environment variable FLOODGATE_ADMIN_TOKEN instead"
	const observeWarn = "--observe-token is given on the command line, where any user of this host can read it (ps, /proc/<pid>/cmdline): give it by --observe-token-file FILE (a file only floodgate's user can read) or the environment variable FLOODGATE_OBSERVE_TOKEN instead"
	for _, tc := range []struct {
		name  string
		args  []string
		env   string
		wants []string
	}{
		{"argv", []string{"--admin-token", "argv-token-x1", "--observe-token", "argv-token-x2"}, "", []string{warn, observeWarn}},
		{"environment", nil, "env-token-x3", nil},
		{"file", []string{"--admin-token-file", file}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FLOODGATE_ADMIN_TOKEN", tc.env)
			_, errb, stop := startServe(t, append([]string{"--reload-interval", "0"}, tc.args...)...)
			if code := stop(); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			var got []string
			for _, w := range warnLines(errb.String()) {
				if strings.Contains(w, "command line") {
					got = append(got, w)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.wants, "\n") {
				t.Errorf("WARNs on the command line's tokens:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.wants, "\n"))
			}
			if strings.Contains(errb.String(), "-token-x") {
				t.Errorf("a token is in the log:\n%s", errb.String())
			}
		})
	}
}

// Under --log-format json stdout carried a plain line, which broke a
// pipeline that reads stdout and stderr merged as JSON: serve now prints
// none, and the log's record has the addresses and the dashboard.
func TestServeJSONNoPlainBanner(t *testing.T) {
	out, errb, stop := startServe(t, "--reload-interval", "0", "--log-format", "json", "--admin", "localhost:0")
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if out.String() != "" {
		t.Errorf("stdout %q under --log-format json, want nothing", out.String())
	}
	var serving map[string]any
	for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a line that is not JSON: %q", line)
		}
		if rec["msg"] == "floodgate serving" {
			serving = rec
		}
	}
	admin, _ := serving["admin"].(string)
	if !regexp.MustCompile(`^localhost:[1-9]\d*$`).MatchString(admin) || serving["dashboard"] != "http://"+admin+"/dashboard" ||
		!regexp.MustCompile(`^127\.0\.0\.1:[1-9]\d*$`).MatchString(serving["http"].(string)) {
		t.Errorf("the serving record %v: want http 127.0.0.1:PORT, admin localhost:PORT as given, and its dashboard", serving)
	}
}

// The addresses are shown as given: --admin 0.0.0.0:14290 was shown as
// [::]:14290 (Go listens on both families for it), with the dashboard
// at http://[::]:14290/dashboard.
func TestServeShowsAddressesAsGiven(t *testing.T) {
	out, errb, stop := startServe(t, "--reload-interval", "0", "--admin", "localhost:0")
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	m := regexp.MustCompile(`admin (localhost:([1-9]\d*)) \(dashboard http://localhost:(\d+)/dashboard\)`).FindStringSubmatch(out.String())
	if m == nil || m[2] != m[3] {
		t.Errorf("stdout %q: want admin localhost:PORT (dashboard http://localhost:PORT/dashboard)", out.String())
	}
	for _, c := range []struct {
		given string
		bound net.Addr
		want  string
	}{
		{"0.0.0.0:14290", &net.TCPAddr{IP: net.IPv6unspecified, Port: 14290}, "0.0.0.0:14290"},
		{"0.0.0.0:0", &net.TCPAddr{IP: net.IPv6unspecified, Port: 40123}, "0.0.0.0:40123"},
		{"[::]:0", &net.TCPAddr{IP: net.IPv6unspecified, Port: 40123}, "[::]:40123"},
		{"localhost:0", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40123}, "localhost:40123"},
		{":8080", &net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "[::]:8080"}, // no host given: the listener's
	} {
		if got := shownAddr(c.given, addrListener{c.bound}); got != c.want {
			t.Errorf("shownAddr(%q, listening on %v) = %q, want %q", c.given, c.bound, got, c.want)
		}
	}
}

// addrListener is a net.Listener that only has an address, for shownAddr.
type addrListener struct{ addr net.Addr }

func (l addrListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (l addrListener) Close() error              { return nil }
func (l addrListener) Addr() net.Addr            { return l.addr }

// With the default --shutdown-delay 0, a SIGTERM left only "floodgate
// stopped" in the log: the signal, the drain and its bound are now said
// when the signal arrives, and the stop says how long the drain took.
func TestServeLogsSignalAndDrain(t *testing.T) {
	for _, c := range []struct {
		sig  syscall.Signal
		args []string
		want string
	}{
		{syscall.SIGTERM, nil, `level=INFO msg="terminated signal received: draining: the HTTP and gRPC listeners close and the requests in flight have up to 10s (--drain-timeout) to finish, then their connections are closed; the admin address closes last (a second SIGTERM or SIGINT ends the process at once)" shutdown_delay=0s drain_timeout=10s`},
		{syscall.SIGINT, []string{"--shutdown-delay", "50ms", "--drain-timeout", "2s"}, `level=INFO msg="interrupt signal received: reporting not ready while still serving for 50ms (--shutdown-delay), then draining: the HTTP and gRPC listeners close and the requests in flight have up to 2s (--drain-timeout) to finish, then their connections are closed; the admin address closes last (a second SIGTERM or SIGINT ends the process at once)" shutdown_delay=50ms drain_timeout=2s`},
	} {
		p := startBinary(t, nil, append([]string{"--reload-interval", "0"}, c.args...)...)
		if err := p.Stop(c.sig, 15*time.Second); err != nil {
			t.Fatalf("%v: %v\n%s", c.sig, err, p.Stderr())
		}
		log := p.Stderr()
		i, j := strings.Index(log, c.want), strings.Index(log, `msg="floodgate stopped" after=`)
		if i < 0 || j < i {
			t.Errorf("%v: the log lacks %q, then the stop with its duration:\n%s", c.sig, c.want, log)
		}
	}
}

// An unknown flag printed serve's 100 lines of usage after its "did you
// mean"; now the error and a line saying where the flags are.
func TestUnknownFlagNoUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--stor", "x"}, "floodgate serve: flag provided but not defined: -stor (did you mean --store?)\nRun 'floodgate serve -h' for the flags.\n"},
		{[]string{"serve", "--nope"}, "floodgate serve: flag provided but not defined: -nope\nRun 'floodgate serve -h' for the flags.\n"},
		{[]string{"bench", "-conn", "2"}, "floodgate bench: flag provided but not defined: -conn (did you mean --conns?)\nRun 'floodgate bench -h' for the flags.\n"},
		{[]string{"validate", "-vv", "x.yaml"}, "floodgate validate: flag provided but not defined: -vv (did you mean -v?)\nRun 'floodgate validate -h' for the flags.\n"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != 2 || errb.String() != c.want || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out.String(), errb.String(), c.want)
		}
	}
	// With -h among the arguments, the usage asked for follows.
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--nope", "-h"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage: floodgate serve") {
		t.Errorf("serve --nope -h: exit %d, stderr %q; want 2 and the usage", code, errb.String())
	}
}

// --http 8080 said "missing port in address" (the port was all it had):
// the error now says what to write, before anything is opened.
func TestServeListenAddrForm(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"serve", "--http", "8080"}, nil,
			"floodgate serve: --http 8080: missing port in address: for port 8080 write 127.0.0.1:8080 (this host only, as the defaults) or :8080 (every address)\n"},
		{[]string{"serve"}, map[string]string{"FLOODGATE_GRPC": "8081"},
			"floodgate serve: FLOODGATE_GRPC=\"8081\": missing port in address: for port 8081 write 127.0.0.1:8081 (this host only, as the defaults) or :8081 (every address)\n"},
		{[]string{"serve", "--admin", "localhost"}, nil,
			"floodgate serve: --admin localhost: missing port in address: want HOST:PORT, e.g. 127.0.0.1:8080 (this host only) or :8080 (every address)\n"},
		{[]string{"serve", "--admin", "::1"}, nil,
			"floodgate serve: --admin ::1: too many colons in address: an IPv6 address goes in brackets before the port, e.g. [::1]:8080\n"},
		// A store that would not open is not reached: the address is
		// checked first.
		{[]string{"serve", "--http", "8080", "--store", "redis://127.0.0.1:1"}, nil, "floodgate serve: --http 8080: missing port in address"},
		// An empty address listened on every address at a port the
		// kernel picked (net.Listen("tcp", "")): the HTTP APIs, gRPC or
		// the dashboard on the network for a user who meant "off".
		{[]string{"serve", "--http="}, nil,
			"floodgate serve: --http \"\": no address: want HOST:PORT, e.g. 127.0.0.1:8080 (this host only, the default); the listener cannot be turned off\n"},
		{[]string{"serve", "--grpc", ""}, nil,
			"floodgate serve: --grpc \"\": no address: want HOST:PORT, e.g. 127.0.0.1:8081 (this host only, the default); the listener cannot be turned off\n"},
		{[]string{"serve", "--admin=", "--store", "redis://127.0.0.1:1"}, nil,
			"floodgate serve: --admin \"\": no address: want HOST:PORT, e.g. 127.0.0.1:9090 (this host only, the default); the listener cannot be turned off\n"},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		var out, errb bytes.Buffer
		// Bounded: a serve that took a bad address would run until
		// cancelled, then exit 0.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if code := run(ctx, c.args, &out, &errb); code != 1 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q %v: exit %d, stderr %q; want exit 1 and %q", c.args, c.env, code, errb.String(), c.want)
		}
		cancel()
		for k := range c.env {
			t.Setenv(k, "")
		}
	}
}
