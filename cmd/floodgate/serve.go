package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	exampleconfig "github.com/floodgate/floodgate/examples/config"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/internal/fileread"
	"github.com/floodgate/floodgate/internal/names"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
	"github.com/floodgate/floodgate/store/storeurl"
	"google.golang.org/grpc/credentials"
)

func init() {
	commands["serve"] = command{"run the rate limit server (gRPC, HTTP, admin)", runServe}
}

// exampleConfig is the configuration serve loads when --config is not given
// and it exists (the repository's example, for `go run ./cmd/floodgate serve`).
const exampleConfig = "examples/config"

// serveFlags are serve's flags; each can also be set by the environment
// variable FLOODGATE_<NAME> (upper case, '-' as '_'). A flag on the command
// line wins over the environment.
type serveFlags struct {
	config, store, httpAddr, grpcAddr, adminAddr, adminToken, upstream, onStoreError string
	apiAddr, observeToken                                                            string
	adminTokenFile, observeTokenFile, logFormat                                      string
	shutdownDelay, grpcMaxConnAge, grpcMaxConnAgeGrace, grpcMaxConnIdle              time.Duration
	tlsCert, tlsKey, tlsClientCA, tlsClientSAN, tlsListeners                         string
	instances, maxEnvoyDescriptors, maxConns                                         int
	leaseSlice                                                                       int64
	storeTimeout, drainTimeout, reloadInterval, leaseTTL, upstreamTimeout            time.Duration
	clientTimeout                                                                    time.Duration
	shadow, preserveHost, envoyHeaders, startDegraded, grpcReflection                bool
	logLevel                                                                         string
	regions                                                                          regionFlags
	// env holds, by flag name, the flags set from the environment, so that
	// an error names the variable the operator set rather than a flag
	// they never typed.
	env map[string]envValue
	// envWarnings name the FLOODGATE_* variables that set no flag, and
	// the envoyproxy/ratelimit variables set (which serve does not read),
	// for serve to log once its logger exists.
	envWarnings []string
	// given holds the flags set on the command line or by their
	// FLOODGATE_<NAME> variable (filled by applyEnv).
	given map[string]bool
}

// envValue is a flag's value as FLOODGATE_<NAME> gave it.
type envValue struct{ name, value string }

// flag names where the flag's value came from: --name, or its variable.
func (f *serveFlags) flag(name string) string {
	if e, ok := f.env[name]; ok {
		return e.name
	}
	return "--" + name
}

// origin is a flag and its value as an error names them: `--name value`,
// or `FLOODGATE_NAME="value"` as written in the environment, when the
// value came from there. The URL flags' passwords are hidden; the other
// values are shown as given (a path may hold an '@', floodgate@prod/…).
func (f *serveFlags) origin(name string, value any) string {
	shown := func(v string) string {
		if urlFlags[name] {
			return store.RedactURL(v)
		}
		if name == "region-peers" {
			return redactPeers(v)
		}
		return v
	}
	if e, ok := f.env[name]; ok {
		return fmt.Sprintf("%s=%q", e.name, shown(e.value))
	}
	if v, ok := value.(string); ok {
		value = shown(v)
	}
	return fmt.Sprintf("--%s %v", name, value)
}

// urlFlags are serve's flags whose value is a URL that may carry a
// password (user:pass@), which origin hides.
var urlFlags = map[string]bool{"store": true, "upstream": true}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", "", "configuration: a YAML file or a directory of them (default: ./"+exampleConfig+" if present, else a built-in example)")
	// The memory store's eviction as memory.WithMaxKeys states it: a full
	// shard drops an expired key or the one closest to expiry (whose loss
	// admits the fewest extra units), not the oldest.
	fs.StringVar(&f.store, "store", "memory://", fmt.Sprintf("store URL: memory:// (at most %d keys: a full shard evicts the key whose state expires soonest; memory://?max_keys=N sets the cap, 0 none), redis://host:port[/db], rediss://..., redis-cluster://h:p,h:p, redis-sentinel://master@h:p,h:p, memcached://h:p[,h:p], memcacheds://h:p[,h:p] (TLS)", memory.DefaultMaxKeys))
	fs.StringVar(&f.httpAddr, "http", "127.0.0.1:8080", "HTTP address: POST /json (Envoy's JSON API), the native /v1/ API and GET /healthcheck; with --upstream, the proxy only (every path goes to the upstream; the APIs move to --api), in HTTP/1.1 and HTTP/2 (h2c with prior knowledge, so gRPC clients too; h2 by ALPN over TLS)")
	fs.StringVar(&f.apiAddr, "api", "", "with --upstream: the address of the decision APIs (/json, /v1/, /healthcheck), apart from the public proxy (default: not served; keep it private)")
	fs.StringVar(&f.grpcAddr, "grpc", "127.0.0.1:8081", "gRPC address: envoy.service.ratelimit.v3.RateLimitService and grpc.health.v1")
	fs.StringVar(&f.adminAddr, "admin", "127.0.0.1:9090", "admin address: /metrics, /healthz, /readyz, /dashboard, /admin/api/")
	fs.StringVar(&f.adminToken, "admin-token", "", "require Authorization: Bearer <token> on the admin API (and, without --observe-token, on POST /v1/observe)")
	fs.StringVar(&f.adminTokenFile, "admin-token-file", "", "read --admin-token from this file (a mounted Secret; surrounding whitespace is dropped), at start and on SIGHUP")
	fs.StringVar(&f.observeTokenFile, "observe-token-file", "", "read --observe-token from this file (a mounted Secret; surrounding whitespace is dropped), at start and on SIGHUP")
	fs.StringVar(&f.observeToken, "observe-token", "", "require Authorization: Bearer <token> on POST /v1/observe, which steers the adaptive limits (default: --admin-token; with neither, /v1/observe answers loopback peers only)")
	fs.StringVar(&f.upstream, "upstream", "", "gateway mode: proxy every request of --http to this URL, rate limited by the configuration's routes: http://host:port (HTTP/1.1), https://host:port (TLS: HTTP/2 or HTTP/1.1 by ALPN; a private CA by SSL_CERT_FILE) or h2c://host:port (HTTP/2 without TLS, e.g. a gRPC backend; no websockets)")
	fs.DurationVar(&f.upstreamTimeout, "upstream-timeout", gateway.DefaultUpstreamTimeout, "with --upstream: how long the upstream may keep a request waiting without progress — to the response header (504 after it), then between reads of the body (cut off after it); a flowing stream is never cut, websockets are not bounded; 0: no bound")
	fs.DurationVar(&f.clientTimeout, "client-timeout", gateway.DefaultClientTimeout, "with --upstream: how long a client may keep a request without progress — each write of the response (a client that stops reading: the response is aborted, its slot released) and each read of its body (408); websockets: each write to the client, not idleness; 0: no bound")
	fs.BoolVar(&f.preserveHost, "preserve-host", false, "with --upstream: send the client's Host to the upstream instead of the upstream URL's host; routes with a host: need it (without it they are refused, as a client could skip them by sending another Host)")
	fs.StringVar(&f.onStoreError, "on-store-error", "open", "when a remote store fails or times out: open (admit), closed (refuse), local (decide in memory on limit ÷ --instances) or unavailable (answer no decision: gRPC UNAVAILABLE, so that Envoy's failure_mode_deny decides, and HTTP 503)")
	fs.IntVar(&f.maxConns, "max-connections", 0, "the most connections each of --http, --grpc and --api holds open at once; while one is full, new connections wait in the listen backlog until one closes (the admin address is not bounded); 0: no bound")
	fs.IntVar(&f.instances, "instances", 1, "expected number of server instances sharing the store; --on-store-error local divides each limit by it")
	fs.BoolVar(&f.startDegraded, "start-degraded", false, "start even when the remote store cannot be reached (refused, timed out, name not resolved): --on-store-error answers (unavailable: the decisions fail) and /readyz says not ready until a background retry opens it; a bad URL, a replica or refused credentials still stop the start")
	fs.Int64Var(&f.leaseSlice, "lease-slice", 0, "remote stores: take this many units of a key at a time and admit from them in process (0: off; see store/lease for the bounded error)")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", lease.DefaultTTL, "how long a leased slice is used before its unused units go back to the store")
	fs.DurationVar(&f.storeTimeout, "store-timeout", resilient.DefaultTimeout, "deadline of each remote store call before --on-store-error applies, at least 1ms")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", server.DefaultDrainTimeout, "how long requests in flight may finish after SIGTERM/SIGINT before their connections are closed")
	fs.DurationVar(&f.shutdownDelay, "shutdown-delay", 0, "on SIGTERM/SIGINT, first report not ready (/readyz 503, gRPC health NOT_SERVING) while still serving for this long, so that load balancers stop routing here, then drain (0: drain at once)")
	fs.DurationVar(&f.grpcMaxConnAge, "grpc-max-connection-age", 0, "close each gRPC connection after about this long (GOAWAY; clients reconnect, spreading over new instances after a scale-out); 0: no limit")
	fs.DurationVar(&f.grpcMaxConnAgeGrace, "grpc-max-connection-age-grace", 0, "with --grpc-max-connection-age: how long calls in flight on an aged connection may finish before it is closed; 0: no bound")
	fs.DurationVar(&f.grpcMaxConnIdle, "grpc-max-connection-idle", server.DefaultGRPCMaxConnectionIdle, "close a gRPC connection that has carried no call for this long (GOAWAY; the client reconnects for its next call); 0: no limit")
	fs.DurationVar(&f.reloadInterval, "reload-interval", policy.DefaultWatchInterval, "how often the configuration is checked for changes (hot reload), at least 100ms; 0 disables")
	fs.BoolVar(&f.shadow, "shadow", false, "global shadow mode: decide and report, never refuse")
	fs.IntVar(&f.maxEnvoyDescriptors, "max-envoy-descriptors", server.DefaultEnvoyDescriptors, "descriptors one gRPC ShouldRateLimit or /json request may carry; more is INVALID_ARGUMENT / 400 without a store call (a proxy sends one per rate_limits action; thousands from a caller would time the store out and open its breakers for everyone); -1: no bound")
	fs.BoolVar(&f.grpcReflection, "grpc-reflection", true, "offer the gRPC server reflection service on --grpc, so that grpcurl needs no .proto files (false: the services are not listed to callers)")
	fs.BoolVar(&f.envoyHeaders, "envoy-headers", false, "add the rate limit header fields (RateLimit-Policy, RateLimit, X-RateLimit-*, Retry-After) to the Envoy APIs' answers: gRPC response_headers_to_add, which Envoy passes to clients, and /json's (off: none, as envoyproxy/ratelimit's default; /v1 always has them)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "serve TLS with this certificate chain (PEM file; with --tls-key); reread on SIGHUP and every --reload-interval")
	fs.StringVar(&f.tlsKey, "tls-key", "", "the private key of --tls-cert (PEM file)")
	fs.StringVar(&f.tlsClientCA, "tls-client-ca", "", "mTLS: require client certificates signed by a CA of this PEM file on the TLS listeners")
	fs.StringVar(&f.tlsClientSAN, "tls-client-san", "", "with --tls-client-ca: also require this DNS name in the client certificate's SAN")
	fs.StringVar(&f.tlsListeners, "tls-listeners", "", "with --tls-cert: the listeners that speak TLS, a comma-separated list of grpc, http, api, admin (default grpc,http,api)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format on stderr: text (key=value) or json (one object a line)")
	f.regions.register(fs)
}

// applyEnv sets every flag not given on the command line from
// FLOODGATE_<NAME> when that variable is set, and records which in f.env;
// the variables of environ that name no flag go to f.envWarnings.
func (f *serveFlags) applyEnv(fs *flag.FlagSet, getenv func(string) string, environ []string) error {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	f.given = given
	var errs []error
	fs.VisitAll(func(fl *flag.Flag) {
		if given[fl.Name] {
			return
		}
		env := "FLOODGATE_" + strings.ToUpper(strings.ReplaceAll(fl.Name, "-", "_"))
		if v := getenv(env); v != "" {
			if err := fl.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %s", env, v, wantForm(fl, err)))
				return
			}
			if f.env == nil {
				f.env = map[string]envValue{}
			}
			f.env[fl.Name] = envValue{env, v}
			given[fl.Name] = true
		}
	})
	f.envWarnings = append(unknownEnv(fs, environ), upstreamEnv(environ)...)
	return errors.Join(errs...)
}

// unknownEnv names each FLOODGATE_<NAME> variable of environ (KEY=value
// pairs) that is no flag of fs, with the nearest flag when one is close (a
// typo such as FLOODGATE_ON_STORE_EROR would otherwise leave the default in
// force without a word). FLOODGATE_TEST_* are the test suite's.
func unknownEnv(fs *flag.FlagSet, environ []string) []string {
	var known []string
	fs.VisitAll(func(fl *flag.Flag) { known = append(known, fl.Name) })
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		name, ok := strings.CutPrefix(k, "FLOODGATE_")
		if !ok || strings.HasPrefix(k, "FLOODGATE_TEST_") {
			continue
		}
		flagName := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		if fs.Lookup(flagName) != nil {
			continue
		}
		msg := fmt.Sprintf("environment variable %s is not a setting of floodgate serve and is ignored", k)
		if s := names.Closest(flagName, known); s != "" {
			msg += fmt.Sprintf(" (did you mean %s, --%s?)", "FLOODGATE_"+strings.ToUpper(strings.ReplaceAll(s, "-", "_")), s)
		}
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}

// readTokens sets --admin-token and --observe-token from their -file flags
// (a mounted Secret: the file's content without surrounding whitespace)
// and checks every token however it was given. A token must be usable as
// a bearer token: the server compares it with the Authorization field
// after HTTP has trimmed the field, so a token with surrounding whitespace
// could never match, nor could one that holds whitespace or a control
// character; such a token, an empty file or a token given both ways is an
// error naming the flag or file, never the token. A token file that every
// user may read is returned as a warning, and so is a token given on the
// command line, which ps shows to every user.
func (f *serveFlags) readTokens() (warnings []string, err error) {
	var errs []error
	for _, t := range []struct {
		name string
		file string
		tok  *string
	}{{"admin-token", f.adminTokenFile, &f.adminToken}, {"observe-token", f.observeTokenFile, &f.observeToken}} {
		if t.file == "" {
			if *t.tok == "" && f.given[t.name] {
				// --admin-token "$TOKEN" with TOKEN unset: the operator
				// asked for a token and would get none, while a token of
				// spaces is refused below. (An empty FLOODGATE_* variable
				// sets no flag.)
				errs = append(errs, fmt.Errorf("%s: the token is empty (an unset shell variable, as in %[1]s \"$TOKEN\"?): give a token, or leave the flag out for none", f.flag(t.name)))
				continue
			}
			if *t.tok == "" {
				continue
			}
			tok, why := bearerToken(*t.tok)
			if why != "" {
				errs = append(errs, fmt.Errorf("%s: %s", f.flag(t.name), why))
				continue
			}
			*t.tok = tok
			if _, fromEnv := f.env[t.name]; !fromEnv {
				env := "FLOODGATE_" + strings.ToUpper(strings.ReplaceAll(t.name, "-", "_"))
				warnings = append(warnings, fmt.Sprintf("--%s is given on the command line, where any user of this host can read it (ps, /proc/<pid>/cmdline): give it by --%[1]s-file FILE (a file only floodgate's user can read) or the environment variable %s instead", t.name, env))
			}
			continue
		}
		if *t.tok != "" {
			errs = append(errs, fmt.Errorf("%s and %s are both set: give the token one way", f.flag(t.name), f.flag(t.name+"-file")))
			continue
		}
		tok, err := f.readTokenFile(t.name, t.file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		*t.tok = tok
		// Others, not the group: a pod's fsGroup, which a non-root
		// container needs to read a root-owned Secret, makes the kubelet
		// give the file 0440, and a WARN nobody can silence is noise.
		if fi, err := os.Stat(t.file); err == nil && fi.Mode().Perm()&0o007 != 0 {
			warnings = append(warnings, fmt.Sprintf("%s: other users have access to the token file (mode %04o): make it 0400, 0440 or 0600 (in Kubernetes, the Secret volume's defaultMode: 0400)",
				f.origin(t.name+"-file", t.file), fi.Mode().Perm()))
		}
	}
	return warnings, errors.Join(errs...)
}

// readTokenFile reads the token of --name-file from file, checked as a
// bearer token; an error names the flag and the file, never the token.
func (f *serveFlags) readTokenFile(name, file string) (string, error) {
	b, err := fileread.Read(file, 64<<10)
	if err != nil {
		return "", fmt.Errorf("%s: %w", f.origin(name+"-file", file), err)
	}
	tok, why := bearerToken(string(b))
	if strings.TrimSpace(string(b)) == "" {
		why = "the file holds no token"
	}
	if why != "" {
		return "", fmt.Errorf("%s: %s", f.origin(name+"-file", file), why)
	}
	return tok, nil
}

// rereadTokens reads the token files again (SIGHUP) and gives their tokens
// to srv: a rotated Secret takes effect without a restart. A file that
// cannot be read or holds no usable token leaves every token as it was,
// with a WARN naming the file.
func (f *serveFlags) rereadTokens(srv *server.Server, log *slog.Logger) {
	if f.adminTokenFile == "" && f.observeTokenFile == "" {
		return
	}
	var admin, observe string
	var errs []error
	if f.adminTokenFile != "" {
		tok, err := f.readTokenFile("admin-token", f.adminTokenFile)
		admin, errs = tok, append(errs, err)
	}
	if f.observeTokenFile != "" {
		tok, err := f.readTokenFile("observe-token", f.observeTokenFile)
		observe, errs = tok, append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		log.Warn("SIGHUP: token files not reread, the tokens in force stay: " + err.Error())
		return
	}
	srv.RotateTokens(admin, observe)
	log.Info("SIGHUP: token files reread", "admin_token_file", f.adminTokenFile, "observe_token_file", f.observeTokenFile)
}

// bearerToken is s without surrounding whitespace, and why that cannot be
// a bearer token ("" when it can).
func bearerToken(s string) (tok, why string) {
	tok = strings.TrimSpace(s)
	if tok == "" {
		return "", "the token is empty or only whitespace"
	}
	if i := strings.IndexFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return "", fmt.Sprintf("the token holds whitespace or a control character (byte %d after trimming), which a bearer token cannot hold (RFC 6750)", i+1)
	}
	return tok, ""
}

// wantForm says what a flag's value must look like, for a value its Set
// refused (the flag package only says "parse error").
func wantForm(f *flag.Flag, err error) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err.Error()
	}
	switch g.Get().(type) {
	case time.Duration:
		return "want a duration such as 500ms, 5s or 1m30s (the unit is required)"
	case bool:
		return "want true or false (also 1, 0, t, f)"
	case int, int64:
		return "want an integer, e.g. " + f.DefValue
	case uint, uint64:
		return "want a non-negative integer, e.g. " + f.DefValue
	case float64:
		return "want a number, e.g. " + f.DefValue
	}
	return err.Error()
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f serveFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: floodgate serve [flags]\n\nRuns the rate limit server until SIGTERM or SIGINT, then drains and exits 0.\nSIGHUP reloads the configuration (and the TLS and token files) at once.\nEvery flag can also be set as FLOODGATE_<NAME>, e.g. FLOODGATE_STORE=redis://127.0.0.1:6379.\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, 0, stdout, stderr); !ok {
		return code
	}
	if err := f.applyEnv(fs, os.Getenv, os.Environ()); err != nil {
		fmt.Fprintln(stderr, "floodgate serve:", err)
		return 2
	}
	if err := serve(ctx, f, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "floodgate serve:", err)
		return 1
	}
	return 0
}

// Lower bounds of serve's durations.
const (
	// minStoreTimeout: below it every remote store call times out, the
	// breaker opens and the failure policy answers everything (with the
	// default open policy, rate limiting is silently off).
	minStoreTimeout = time.Millisecond
	// minReloadInterval: below it the watcher rereads and hashes the
	// configuration in a loop that keeps a core busy.
	minReloadInterval = 100 * time.Millisecond
)

// warnReplicas warns when a Redis store opened with wait_replicas has
// fewer replicas acknowledging writes than it waits for: every admission
// would fail, answered by --on-store-error, until they are attached. (A
// store --start-degraded has not opened yet is not asked.) A stop asked
// for (ctx done) cuts the question short, without a warning.
func warnReplicas(ctx context.Context, st store.Store, f serveFlags, log *slog.Logger) {
	rs, ok, _ := store.Under[*redis.Store](st)
	if !ok {
		return
	}
	// Longer than a decision's WAIT: a replica that has just attached
	// acknowledges within it, as it will for the decisions.
	_, wt := f.waitReplicas()
	wt = max(wt, time.Second)
	qctx, cancel := context.WithTimeout(ctx, wt+time.Second)
	defer cancel()
	acked, want, err := rs.Replicas(qctx, wt)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		log.Warn(fmt.Sprintf("%s has wait_replicas=%d, and asking how many replicas acknowledge writes failed: %v", f.flag("store"), want, err))
	case acked < want:
		log.Warn(fmt.Sprintf("%s has wait_replicas=%d but %d replicas acknowledged a write within %v: every admission fails, answered by %s, until %d are attached and in sync",
			f.flag("store"), want, acked, wt, f.flag("on-store-error"), want))
	}
}

// warnEviction warns when the Redis store's maxmemory-policy evicts keys:
// an evicted counter is a fresh budget. A server that refuses CONFIG
// (managed Redis, an ACL without +config|get) is not judged, nor is one
// whose answer a stop (ctx done) cut short.
func warnEviction(ctx context.Context, st store.Store, f serveFlags, log *slog.Logger) {
	rs, ok, whole := store.Under[*redis.Store](st)
	if !ok && !whole {
		// Under --start-degraded, a store still being opened: looked at
		// once it has opened.
		go func() {
			if waitOpened(ctx, st) {
				warnEviction(ctx, st, f, log)
			}
		}()
		return
	}
	if !ok {
		return
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	p, err := rs.EvictionPolicy(qctx)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		log.Debug("cannot read the Redis maxmemory-policy; eviction check skipped", "err", err)
	case !redis.EvictionSafe(p):
		log.Warn(fmt.Sprintf("%s: the Redis maxmemory-policy is %s, which evicts rate limit counters under memory pressure: an evicted counter is a fresh budget (over-admission); use noeviction (docs/STORES.md)",
			f.flag("store"), p))
	}
}

// memoryStore reports whether the store URL u is the memory store's.
func memoryStore(u string) bool { return strings.HasPrefix(strings.ToLower(u), "memory:") }

// memoryWarnings returns a warning for each flag of a remote store's
// failure handling set with the memory store, where it does nothing
// (openStore wraps only a remote store in store/resilient): the memory
// store is in this process and has no outage for --on-store-error to
// answer, no call for --store-timeout to bound, nothing for
// --start-degraded to wait for, and --instances only sets the share of
// each limit that --on-store-error local decides on while a remote store
// is down.
func (f *serveFlags) memoryWarnings() []string {
	if !memoryStore(f.store) {
		return nil
	}
	st := f.origin("store", storeurl.Redact(f.store))
	var out []string
	if f.given["on-store-error"] {
		out = append(out, fmt.Sprintf("%s does nothing with %s: the failure policy answers when a remote store fails or times out, and the memory store is in this process",
			f.origin("on-store-error", f.onStoreError), st))
	}
	if f.given["store-timeout"] {
		out = append(out, fmt.Sprintf("%s does nothing with %s: it bounds each call to a remote store, and the memory store answers in this process without a network call",
			f.origin("store-timeout", f.storeTimeout), st))
	}
	if f.given["start-degraded"] && f.startDegraded {
		out = append(out, fmt.Sprintf("%s does nothing with %s: it lets serve start while a remote store cannot be reached, and the memory store is always there",
			f.origin("start-degraded", f.startDegraded), st))
	}
	if f.instances > 1 {
		out = append(out, fmt.Sprintf("%s does nothing with %s: it divides each limit among the instances under --on-store-error local while a remote store is down; "+
			"with the memory store each instance counts on its own, so %d instances together admit up to %[3]d times each limit (share a remote --store)",
			f.origin("instances", f.instances), st, f.instances))
	}
	return out
}

// leaseWarnings returns a warning when --lease-ttl is set without
// --lease-slice: leases are off, so it sets nothing. A WARN rather than an
// error (as --upstream-timeout without --upstream is): a fleet's
// environment may keep FLOODGATE_LEASE_TTL while an instance turns leases
// off with --lease-slice 0.
func (f *serveFlags) leaseWarnings() []string {
	if !f.given["lease-ttl"] || f.leaseSlice != 0 {
		return nil
	}
	return []string{fmt.Sprintf("%s does nothing without %s: leases are off; %[2]s N (at least 2, remote stores) turns them on",
		f.origin("lease-ttl", f.leaseTTL), f.flag("lease-slice"))}
}

// waitReplicas returns the wait_replicas and wait_timeout of a Redis
// --store URL; 0 when it has none or is not a Redis URL (a bad URL is
// reported when the store opens).
func (f *serveFlags) waitReplicas() (int, time.Duration) {
	ep, err := redis.ParseURL(f.store)
	if err != nil {
		return 0, 0
	}
	return ep.WaitReplicas, ep.WaitTimeout
}

// check returns every numeric flag out of range, each as "--flag value:
// what it must be" (or FLOODGATE_FLAG="value": ...), one a line.
func (f *serveFlags) check() error {
	var errs []error
	bad := func(failed bool, name string, value any, want string) {
		if failed {
			errs = append(errs, fmt.Errorf("%s: %s", f.origin(name, value), want))
		}
	}
	bad(f.instances < 1, "instances", f.instances, "must be >= 1")
	bad(f.maxConns < 0, "max-connections", f.maxConns, "must be >= 0 (0: no bound)")
	bad(f.leaseSlice < 0 || f.leaseSlice == 1, "lease-slice", f.leaseSlice, "must be 0 (off) or at least 2")
	bad(f.leaseTTL <= 0, "lease-ttl", f.leaseTTL, "must be > 0")
	bad(f.storeTimeout < minStoreTimeout, "store-timeout", f.storeTimeout, "must be at least "+minStoreTimeout.String())
	bad(f.drainTimeout <= 0, "drain-timeout", f.drainTimeout, "must be > 0")
	bad(f.maxEnvoyDescriptors == 0 || f.maxEnvoyDescriptors < -1, "max-envoy-descriptors", f.maxEnvoyDescriptors, "must be at least 1, or -1 for no bound")
	bad(f.upstreamTimeout < 0, "upstream-timeout", f.upstreamTimeout, "must be >= 0 (0: no bound)")
	bad(f.clientTimeout < 0, "client-timeout", f.clientTimeout, "must be >= 0 (0: no bound)")
	bad(f.apiAddr != "" && f.upstream == "", "api", f.apiAddr, "only with --upstream (without it the decision APIs are on --http)")
	// The gateway's own flags do nothing without it: say so rather than
	// start a server that ignores them.
	bad(f.given["upstream-timeout"] && f.upstream == "", "upstream-timeout", f.upstreamTimeout, "only with --upstream (it bounds the gateway's waits on the upstream)")
	bad(f.given["client-timeout"] && f.upstream == "", "client-timeout", f.clientTimeout, "only with --upstream (it bounds the gateway's waits on its clients)")
	bad(f.given["preserve-host"] && f.upstream == "", "preserve-host", f.preserveHost, "only with --upstream (it is the Host the gateway sends upstream)")
	// host:port, as Envoy's clusters write an upstream, failed in
	// gateway.New with url.Parse's words ("first path segment in URL
	// cannot contain colon") for an IP address.
	if f.upstream != "" && !strings.Contains(f.upstream, "://") {
		hostPort := f.upstream
		if strings.Contains(hostPort, "/") {
			hostPort = "host:port"
		}
		// user:password@host:port: the suggestion shows the host alone,
		// as the value above is shown redacted (an upstream takes no
		// user in any case).
		if at := strings.LastIndexByte(hostPort, '@'); at >= 0 {
			hostPort = hostPort[at+1:]
		}
		if hostPort == "" {
			hostPort = "host:port"
		}
		errs = append(errs, fmt.Errorf("%s: not a URL: want http://%s (HTTP/1.1), https://%[2]s (TLS) or h2c://%[2]s (HTTP/2 without TLS)",
			f.origin("upstream", f.upstream), hostPort))
	}
	if f.upstream != "" && upstreamIsSelf(f.upstream, f.httpAddr) {
		errs = append(errs, fmt.Errorf("%s: is this server's own %s: every request would be proxied back to the gateway, again and again, until the client gave up; give the address of the service behind it",
			f.origin("upstream", f.upstream), f.origin("http", f.httpAddr)))
	}
	bad(f.reloadInterval < 0 || f.reloadInterval > 0 && f.reloadInterval < minReloadInterval, "reload-interval", f.reloadInterval,
		"must be 0 (no reloading) or at least "+minReloadInterval.String())
	bad(f.shutdownDelay < 0, "shutdown-delay", f.shutdownDelay, "must be >= 0 (0: drain at once)")
	bad(f.grpcMaxConnAge < 0, "grpc-max-connection-age", f.grpcMaxConnAge, "must be >= 0 (0: no limit)")
	bad(f.grpcMaxConnAgeGrace < 0, "grpc-max-connection-age-grace", f.grpcMaxConnAgeGrace, "must be >= 0 (0: no bound)")
	bad(f.grpcMaxConnAgeGrace > 0 && f.grpcMaxConnAge == 0, "grpc-max-connection-age-grace", f.grpcMaxConnAgeGrace, "only with --grpc-max-connection-age")
	bad(f.grpcMaxConnIdle < 0, "grpc-max-connection-idle", f.grpcMaxConnIdle, "must be >= 0 (0: no limit)")
	if wr, wt := f.waitReplicas(); wr > 0 {
		// Cut short by the store timeout, an unacknowledged write would
		// be reported as a store that does not answer.
		// Lowering wait_timeout is offered only when one fits: below
		// WaitLate plus WAIT's 1ms none does (the default 50ms
		// --store-timeout), and "or lower wait_timeout" sent the
		// operator to a URL change that could not help.
		need := redis.WaitBound(wt)
		lower := ""
		if fits := (f.storeTimeout - redis.WaitLate).Truncate(time.Millisecond); fits >= time.Millisecond {
			lower = fmt.Sprintf("; or lower wait_timeout to at most %v", fits)
		}
		bad(f.storeTimeout < need, "store-timeout", f.storeTimeout, fmt.Sprintf(
			"must be at least %v with wait_replicas in %s (its wait_timeout %v, and up to %v more for Redis to answer a WAIT that timed out)%s",
			need, f.flag("store"), need-redis.WaitLate, redis.WaitLate, lower))
	}
	// An empty --http, --grpc or --admin is no way to turn a listener off:
	// net.Listen("tcp", "") listens on every address, at a port the
	// kernel picks, which would put the decision APIs or the dashboard on
	// the network (an empty --api is its default: not served).
	for _, a := range []struct{ name, addr, example string }{
		{"http", f.httpAddr, "127.0.0.1:8080"}, {"grpc", f.grpcAddr, "127.0.0.1:8081"}, {"admin", f.adminAddr, "127.0.0.1:9090"},
	} {
		if a.addr == "" {
			errs = append(errs, fmt.Errorf("%s: no address: want HOST:PORT, e.g. %s (this host only, the default); the listener cannot be turned off",
				f.origin(a.name, `""`), a.example))
		}
	}
	for _, a := range []struct{ name, addr string }{{"http", f.httpAddr}, {"grpc", f.grpcAddr}, {"admin", f.adminAddr}, {"api", f.apiAddr}} {
		if why := listenAddrProblem(a.addr); why != "" {
			errs = append(errs, fmt.Errorf("%s: %s", f.origin(a.name, a.addr), why))
		}
	}
	errs = append(errs, f.checkTLS()...)
	errs = append(errs, f.checkRegion()...)
	return errors.Join(errs...)
}

func serve(ctx context.Context, f serveFlags, stdout, stderr io.Writer) error {
	// SIGHUP, operators' "reload", reloads the configuration (and the TLS
	// files); uncaught, it would end the process without a drain.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("%s: want debug, info, warn or error", f.origin("log-level", strconv.Quote(f.logLevel)))
	}
	var handler slog.Handler
	switch f.logFormat {
	case "text":
		handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	case "json":
		handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	default:
		return fmt.Errorf("%s: want text or json", f.origin("log-format", strconv.Quote(f.logFormat)))
	}
	log := slog.New(handler)
	// A stop asked for while starting (ctx done: SIGTERM or SIGINT) ends
	// the start at the next step, and the store's open at once: one INFO
	// line says so, the defers close what was opened, and serve returns
	// nil (exit 0), as after a drain. The error of a step the stop cut
	// short would blame the store (or the configuration) for a stop the
	// operator asked for.
	var startStopAt time.Time
	stopped := func(step string) bool {
		if ctx.Err() == nil {
			return false
		}
		startStopAt = time.Now()
		log.Info(startStopMessage(context.Cause(ctx)), "during", step)
		return true
	}
	defer func() { // the last defer to run: after every close
		if !startStopAt.IsZero() {
			log.Info("floodgate stopped", "after", time.Since(startStopAt).Round(time.Millisecond).String())
		}
	}()
	for _, w := range f.envWarnings {
		log.Warn(w)
	}
	tokenWarnings, err := f.readTokens()
	if err != nil {
		return err
	}
	for _, w := range tokenWarnings {
		log.Warn(w)
	}
	policyOnErr, err := resilient.ParsePolicy(f.onStoreError)
	if err != nil {
		return fmt.Errorf("%s: %w", f.flag("on-store-error"), err)
	}
	if err := f.check(); err != nil {
		return err
	}
	for _, w := range append(f.memoryWarnings(), f.leaseWarnings()...) {
		log.Warn(w)
	}

	// One watcher answers both the polls (none with --reload-interval 0)
	// and SIGHUP, from one baseline: the content of the first load, which
	// the watcher makes, so that a write landing after it is loaded.
	var watcher *policy.Watcher
	var apply func(*policy.Config, error) // set before the watcher runs
	cfg, cfgPath, err := f.loadConfig(func(path string) (*policy.Config, error) {
		var err error
		if watcher, err = policy.NewWatcher(path, f.reloadInterval, func(c *policy.Config, err error) { apply(c, err) }); err != nil {
			return nil, err
		}
		return watcher.Load()
	})
	if stopped("loading the configuration") {
		return nil
	}
	if err != nil {
		return err
	}
	// What envoyproxy/ratelimit loads loads here, with warnings for what
	// it ignores (a field in the wrong place): said at every load, as
	// floodgate validate says them.
	for _, w := range cfg.Warnings() {
		log.Warn("configuration: " + w.String())
	}
	if f.upstream == "" {
		if doms := gatewayDomains(cfg); len(doms) > 0 {
			log.Warn("the configuration's gateway routes are ignored without --upstream: set --upstream URL to proxy and limit them",
				"domains", strings.Join(doms, ","))
		}
	}
	// The TLS files before the store: a wrong file fails the start at once.
	stls, err := loadTLS(&f)
	if stopped("loading the TLS files") {
		return nil
	}
	if err != nil {
		return err
	}
	tlsOn, _ := parseTLSListeners(f.tlsListeners) // checked by f.check
	m := metrics.New()
	m.ConfigLoaded()

	// The store's breaker openings and errors are logged, then through the
	// server's events once it exists.
	storeLog := server.NewStoreLog(log)
	st, err := openUntil(ctx, func() (store.Store, error) {
		return openStore(f, policyOnErr, storeLog.Hooks(m.StoreHooks()), log)
	})
	if err == nil {
		defer closeStore(st)
	}
	if stopped("opening the store") {
		return nil
	}
	if err != nil {
		return err
	}
	if _, ok, _ := store.Under[*resilient.Store](st); ok {
		m.StoreSeries(policyOnErr) // at 0 from the start, for alerts on increase()
	}
	warnReplicas(ctx, st, f, log)
	warnEviction(ctx, st, f, log)
	for _, w := range memcachedItemWarnings(st, cfg, f.flag("store")) {
		log.Warn(w)
	}
	for _, w := range regionSliceWarnings(st, cfg, f) {
		log.Warn(w)
	}
	if stopped("checking the store") {
		return nil
	}

	engine, err := policy.NewEngine(cfg, st, policy.WithShadowMode(f.shadow), policy.WithLogger(log))
	if err != nil {
		return err
	}
	opts := []server.Option{server.WithMetrics(m), server.WithLogger(log), server.WithAdminToken(f.adminToken), server.WithObserveToken(f.observeToken),
		server.WithShutdownDelay(f.shutdownDelay), server.WithGRPCMaxConnectionAge(f.grpcMaxConnAge, f.grpcMaxConnAgeGrace),
		server.WithGRPCMaxConnectionIdle(f.grpcMaxConnIdle),
		server.WithConfigPath(cfgPath), server.WithDrainTimeout(f.drainTimeout), server.WithEnvoyHeaders(f.envoyHeaders), server.WithGRPCReflection(f.grpcReflection),
		server.WithStoreLog(storeLog), server.WithInstances(f.instances),
		server.WithLimits(server.Limits{EnvoyDescriptors: f.maxEnvoyDescriptors})}
	bi, _ := debug.ReadBuildInfo() // nil when the binary has none
	opts = append(opts, server.WithVersion(versionString(version, bi)))
	if stls != nil && tlsOn["grpc"] {
		opts = append(opts, server.WithGRPCCredentials(credentials.NewTLS(stls.config("h2"))))
	}
	var gw *gateway.Gateway
	if f.upstream != "" {
		gw, err = gatewayHandler(cfg, engine, f, log, m)
		if ps, ok := errors.AsType[policy.Problems](err); ok {
			return fmt.Errorf("%s: the gateway routes cannot be built:\n%w", f.origin("config", cfgPath), ps)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", f.origin("upstream", f.upstream), err)
		}
		opts = append(opts, server.WithGateway(gw), server.WithGatewayClientTimeout(f.clientTimeout))
		// Routes no rule limits pass unlimited: floodgate validate warns
		// of them, and so does the server that runs them.
		if ws, _ := gateway.Check(cfg, gateway.WithPreserveHost(f.preserveHost)); len(ws) > 0 {
			for _, w := range ws {
				log.Warn("configuration: " + w.String())
			}
		}
	}
	srv, err := server.New(engine, st, opts...)
	if err != nil {
		return err
	}
	ls, err := f.listen()
	if stopped("listening") {
		closeListeners(ls)
		return nil
	}
	if err != nil {
		return err
	}
	// Counted (and bounded) under TLS: net/http and gRPC look for the
	// *tls.Conn the TLS listener accepts.
	ls = srv.LimitConns(ls, f.maxConns)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var tlsHup chan os.Signal
	if stls != nil {
		stls.wrap(&ls, tlsOn)
		// SIGHUP rereads the TLS files at once; the reload ticker, within
		// --reload-interval (cert-manager and kubelet rewrite them in place).
		tlsHup = make(chan os.Signal, 1)
		go stls.watch(ctx, f.reloadInterval, tlsHup, srv)
	}
	// POST /v1/observe is served (on --http, or --api in gateway mode) to
	// loopback peers without a token.
	observeOpen := f.observeToken == "" && f.adminToken == "" && (f.upstream == "" || f.apiAddr != "")
	apply = func(c *policy.Config, err error) {
		prev := engine.Config()
		// In gateway mode the rules and the routes reload together, all
		// or nothing: the gateway builds the new routes before the engine
		// takes the new rules.
		if err == nil && gw != nil {
			err = gw.SetConfig(c, engine.SetConfig)
		} else if err == nil {
			err = engine.SetConfig(c)
		}
		m.ConfigReloaded(err == nil)
		srv.ConfigReloaded(err)
		if err != nil {
			srv.Warn("reload", "configuration not reloaded, the previous one stays in force: "+err.Error())
			return
		}
		srv.Event("reload", fmt.Sprintf("configuration reloaded: %s, %s", count(len(c.Domains()), "domain"), count(len(c.Rules()), "rule")))
		for _, w := range c.Warnings() {
			srv.Warn("reload", "configuration: "+w.String())
		}
		for _, w := range memcachedItemWarnings(st, c, f.flag("store")) {
			srv.Warn("reload", w)
		}
		for _, w := range regionSliceWarnings(st, c, f) {
			srv.Warn("reload", w)
		}
		if added := newAdaptiveRules(prev, c); len(added) > 0 && observeOpen {
			srv.Warn("reload", observeOpenWarning+" (rules "+strings.Join(added, ", ")+")")
		}
	}
	if watcher != nil {
		go watcher.Run(ctx)
	}
	go onHangup(ctx, hup, watcher, cfgPath, tlsHup, func() { f.rereadTokens(srv, log) }, log)
	go runAdaptive(ctx, engine, func(ch policy.ScaleChange) {
		m.RateFactor(ch.Domain, ch.Rule, ch.New)
		srv.Event("adaptive", ch.String())
	})
	go warnItemSizeOnOpen(ctx, st, engine.Config, f.flag("store"), func(msg string) { srv.Warn("store", msg) })
	if ms, ok, _ := store.Under[*memory.Store](st); ok {
		// Evictions of live keys are fresh budgets: said at WARN, at most
		// once a minute.
		go watchEvictions(ctx, ms.Stats, &evictionWatch{store: f.flag("store")}, func(msg string) { srv.Warn("store", msg) })
	}
	src := cfgPath
	if src == "" {
		src = "built-in example"
	}
	// Settle readiness and gRPC health before saying so: a caller that
	// starts on the line below must find them SERVING (Serve checks the
	// store again every second).
	srv.CheckStore(ctx)
	if stopped("checking the store") {
		closeListeners(ls)
		return nil
	}
	// The addresses as the operator gave them, with the ports bound.
	httpAddr, grpcAddr, adminAddr := shownAddr(f.httpAddr, ls.HTTP), shownAddr(f.grpcAddr, ls.GRPC), shownAddr(f.adminAddr, ls.Admin)
	dashboard := "http://"
	if stls != nil && tlsOn["admin"] {
		dashboard = "https://"
	}
	dashboard += adminAddr + "/dashboard"
	attrs := []any{"http", httpAddr, "grpc", grpcAddr, "admin", adminAddr, "dashboard", dashboard,
		"store", storeurl.Redact(f.store), "config", src, "domains", len(cfg.Domains()), "rules", len(cfg.Rules()),
		"on_store_error", policyOnErr.String()}
	if f.maxConns > 0 {
		attrs = append(attrs, "max_connections", f.maxConns)
	}
	if stls != nil {
		attrs = append(attrs, "tls", tlsNames(tlsOn, f.apiAddr != ""), "tls_client_ca", f.tlsClientCA != "", "tls_certificate", stls.cur.Load().describe())
	}
	apis := httpAddr
	if f.upstream != "" {
		// Gateway mode: --http is the proxy only; the decision APIs are on
		// --api or nowhere.
		apis = "off (set --api ADDR to serve them)"
		if ls.API != nil {
			apis = shownAddr(f.apiAddr, ls.API)
		}
		attrs = append(attrs, "upstream", store.RedactURL(f.upstream), "upstream_timeout", f.upstreamTimeout.String(),
			"client_timeout", f.clientTimeout.String(), "preserve_host", f.preserveHost, "decision_apis", apis)
	}
	if f.config == "" {
		log.Warn("no --config: enforcing the example configuration, whose rules are examples (set --config to your own rules)", "config", src)
	}
	if wr, _ := f.waitReplicas(); wr > 0 && policyOnErr == resilient.FailOpen {
		log.Warn(fmt.Sprintf("%s has wait_replicas but %s is open: a decision whose writes the replicas did not acknowledge is admitted all the same (set %[2]s closed, local or unavailable)",
			f.flag("store"), f.flag("on-store-error")))
	}
	if f.regions.region != "" && policyOnErr == resilient.FailOpen {
		log.Warn(fmt.Sprintf("%s with %s open: while this region's own store fails, its decisions are all admitted, beyond the limit the regions share (set %[2]s closed, local or unavailable for a bound that holds then too)",
			f.flag("region"), f.flag("on-store-error")))
	}
	if f.adminToken == "" && !loopbackAddr(ls.Admin.Addr().String()) {
		log.Warn(adminOpenWarning,
			"admin", adminAddr)
	}
	if rules := newAdaptiveRules(nil, cfg); len(rules) > 0 && observeOpen {
		log.Warn(observeOpenWarning, "rules", strings.Join(rules, ","))
	}
	if f.regions.region != "" {
		attrs = append(attrs, "region", f.regions.region)
	}
	log.Info("floodgate serving", attrs...)
	// The line for a person at a terminal. Under --log-format json the
	// record above says the same: a plain line on stdout would break a
	// pipeline that reads stdout and stderr merged as JSON.
	switch {
	case f.logFormat == "json":
	case f.upstream != "":
		fmt.Fprintf(stdout, "floodgate serving: gateway http %s -> %s, decision APIs %s, grpc %s, admin %s (dashboard %s)%s%s\n",
			httpAddr, store.RedactURL(f.upstream), apis, grpcAddr, adminAddr, dashboard, tlsNote(stls, tlsOn, f.apiAddr != ""), f.regions.note())
	default:
		fmt.Fprintf(stdout, "floodgate serving: http %s, grpc %s, admin %s (dashboard %s)%s%s\n",
			httpAddr, grpcAddr, adminAddr, dashboard, tlsNote(stls, tlsOn, f.apiAddr != ""), f.regions.note())
	}
	// The stop's start: with the default --shutdown-delay 0 nothing else
	// is logged between the signal and "floodgate stopped" (unless the
	// drain times out).
	// The server stops on serveCtx, cancelled once that line is logged:
	// on ctx itself, its "draining: n request(s) in flight" raced the
	// line that says why and what follows, and was often logged first.
	var stopAt time.Time
	noted := make(chan struct{})
	serveCtx, stopServing := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopServing(nil)
	unnote := context.AfterFunc(ctx, func() {
		defer close(noted)
		stopAt = time.Now()
		log.Info(stopMessage(context.Cause(ctx), f), "shutdown_delay", f.shutdownDelay.String(), "drain_timeout", f.drainTimeout.String())
		stopServing(context.Cause(ctx))
	})
	err = srv.Serve(serveCtx, ls)
	if unnote() {
		log.Info("floodgate stopped")
		return err
	}
	<-noted
	log.Info("floodgate stopped", "after", time.Since(stopAt).Round(time.Millisecond).String())
	return err
}

// stopWhy says why serve stops, from its context's cause: the signal, or
// "stop requested" for a context cancelled otherwise; and, after a
// signal, that a second one ends the process at once.
func stopWhy(cause error) (why, again string) {
	if cause != nil && strings.HasSuffix(cause.Error(), " signal received") {
		// os/signal.NotifyContext's cause, e.g. "terminated signal
		// received"; main then gives the signals their default action.
		return cause.Error(), " (a second SIGTERM or SIGINT ends the process at once)"
	}
	return "stop requested", ""
}

// stopMessage is serve's INFO line when its context is done once it
// serves: why (stopWhy) and what follows, with the flags that bound it.
func stopMessage(cause error, f serveFlags) string {
	why, again := stopWhy(cause)
	var next string
	if f.shutdownDelay > 0 {
		next = fmt.Sprintf("reporting not ready while still serving for %v (%s), then draining", f.shutdownDelay, f.flag("shutdown-delay"))
	} else {
		next = "draining"
	}
	return fmt.Sprintf("%s: %s: the HTTP and gRPC listeners close and the requests in flight have up to %v (%s) to finish, then their connections are closed; the admin address closes last%s",
		why, next, f.drainTimeout, f.flag("drain-timeout"), again)
}

// startStopMessage is serve's INFO line when its context is done before
// it serves: why (stopWhy) and what follows. No request was taken, so
// there is nothing to drain.
func startStopMessage(cause error) string {
	why, again := stopWhy(cause)
	return why + " while starting: stopping before serving; what was opened (the store, the listeners) is closed, no request was taken" + again
}

// openUntil runs open (the store's: storeurl.Open takes no context, and a
// store that does not answer holds it for its client's timeout on each
// round trip) until ctx is done. Then it returns ctx's cause at once and
// leaves open to finish in the background, closing the store if it
// opens; the store is the caller's only when openUntil returns it.
func openUntil(ctx context.Context, open func() (store.Store, error)) (store.Store, error) {
	type opened struct {
		st  store.Store
		err error
	}
	// Unbuffered: a result is either taken by openUntil or, once it has
	// returned, closed here; never both, never neither.
	done := make(chan opened)
	go func() {
		st, err := open()
		select {
		case done <- opened{st, err}:
		case <-ctx.Done():
			if err == nil {
				_ = st.Close()
			}
		}
	}()
	select {
	case o := <-done:
		return o.st, o.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// closeStore closes st on serve's way out. A store --start-degraded has
// not opened yet (storeurl's Retrying) is closed without waiting for the
// attempt to open it in progress, which its Close waits for: against a
// store that does not answer, that is the client's timeout (4 x
// --store-timeout, at least 1 s), and the process, done with its drain
// or its start, would wait for it. The attempt ends on its own within
// that timeout and closes the store if it opens (as an open openUntil
// stopped waiting for does); the process may exit first.
func closeStore(st store.Store) {
	if r, ok, _ := store.Under[*storeurl.Retrying](st); ok && r.Unwrap() == nil {
		go st.Close()
		return
	}
	_ = st.Close()
}

// closeListeners closes the listeners of ls that were opened, for a start
// that stops before serving (Serve closes them otherwise).
func closeListeners(ls server.Listeners) {
	for _, l := range []net.Listener{ls.HTTP, ls.GRPC, ls.Admin, ls.API} {
		if l != nil {
			l.Close()
		}
	}
}

// shownAddr is the address of the listener l as the operator gave it
// (given, HOST:PORT): its host as written, so that 0.0.0.0 is not shown
// as [::] (Go listens on both families for it) nor localhost as
// 127.0.0.1, with the port bound (a port 0 shows the one picked). An
// address given without a host (:8080) shows the listener's own.
func shownAddr(given string, l net.Listener) string {
	bound := l.Addr().String()
	host, _, err := net.SplitHostPort(given)
	if err != nil || host == "" {
		return bound
	}
	_, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	return net.JoinHostPort(host, port)
}

// loadConfig loads --config, or the example configuration, through load
// (serve's watcher, so that what it loads is its baseline), or the built-in
// one. It returns the path to watch ("" for the built-in configuration).
func (f *serveFlags) loadConfig(load func(path string) (*policy.Config, error)) (*policy.Config, string, error) {
	path := f.config
	if path == "" {
		if _, err := os.Stat(exampleConfig); err == nil {
			path = exampleConfig
		} else {
			cfg, err := policy.LoadFS(exampleconfig.FS, "built-in examples/config/")
			return cfg, "", err
		}
	}
	cfg, err := load(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s:\n%w", f.origin("config", path), err)
	}
	return cfg, path, nil
}

// openStore opens the store URL; a remote store is wrapped with the
// timeout, breaker, failure policy and over-limit cache, observed by hooks,
// and with local leases when --lease-slice is set. With --start-degraded, a
// remote store that cannot be reached yet is opened in the background
// (storeurl.OpenRetrying, logging to log) while the failure policy answers.
func openStore(f serveFlags, p resilient.Policy, hooks resilient.Hooks, log *slog.Logger) (store.Store, error) {
	open := storeurl.Open
	if f.startDegraded {
		open = storeurl.OpenRetrying
	}
	st, err := open(f.store, storeurl.WithTimeout(max(time.Second, 4*f.storeTimeout)), storeurl.WithLogger(log))
	if err != nil {
		// The flag, its value and what is wrong, each once.
		if ue, ok := errors.AsType[*storeurl.URLError](err); ok {
			return nil, fmt.Errorf("%s: %s", f.origin("store", ue.URL), ue.Reason)
		}
		if !f.startDegraded && storeurl.Transient(err) {
			// Down or unreachable, which may pass: say how to start all
			// the same.
			answers := "answers"
			if p == resilient.FailUnavailable {
				answers = "fails the decisions (gRPC UNAVAILABLE, HTTP 503)"
			}
			return nil, fmt.Errorf("%s: %w; to start while the store cannot be reached, set --start-degraded (FLOODGATE_START_DEGRADED=true): %s %s and /readyz says not ready until a background retry opens it",
				f.flag("store"), err, f.origin("on-store-error", f.onStoreError), answers)
		}
		return nil, fmt.Errorf("%s: %w", f.flag("store"), err)
	}
	if memoryStore(f.store) {
		if f.leaseSlice > 0 {
			_ = st.Close()
			return nil, fmt.Errorf("%s: leases are for remote stores; %s decides in process already",
				f.origin("lease-slice", f.leaseSlice), f.origin("store", storeurl.Redact(f.store)))
		}
		return st, nil
	}
	if f.leaseSlice > 0 {
		// Leases go right above the store, under the failure policy: a
		// fail-open answer must not become units the lease holds and
		// later gives back to a store that never charged them.
		ls, err := lease.New(st, lease.WithSlice(f.leaseSlice), lease.WithTTL(f.leaseTTL))
		if err != nil {
			_ = st.Close()
			return nil, fmt.Errorf("%s %s: %w", f.origin("lease-slice", f.leaseSlice), f.origin("lease-ttl", f.leaseTTL), err)
		}
		st = ls
	}
	timeout := f.storeTimeout
	if f.regions.region != "" {
		// This region's store, then the peers when its share refuses:
		// the failure policy answers only for this region's store (the
		// region store limits on its share while the peers fail).
		if st, err = openRegion(f, st, log); err != nil {
			return nil, err
		}
		timeout += f.regions.timeout
	}
	return resilient.New(st, resilient.WithTimeout(timeout), resilient.WithPolicy(p),
		resilient.WithInstances(f.instances), resilient.WithHooks(hooks))
}

// listen opens the --http, --grpc, --admin and (when set) --api addresses,
// as server.Listen does, but names a failing address by where it came from
// (server.Listen knows only the flags).
func (f *serveFlags) listen() (server.Listeners, error) {
	var ls server.Listeners
	addrs := []struct {
		name, addr string
		l          *net.Listener
	}{{"http", f.httpAddr, &ls.HTTP}, {"grpc", f.grpcAddr, &ls.GRPC}, {"admin", f.adminAddr, &ls.Admin}}
	if f.apiAddr != "" {
		addrs = append(addrs, struct {
			name, addr string
			l          *net.Listener
		}{"api", f.apiAddr, &ls.API})
	}
	// Two of floodgate's own addresses on one port: said as such, before
	// the second listen would report only "address already in use", as
	// if another process held it.
	for i, a := range addrs {
		for _, b := range addrs[:i] {
			if sameListenAddr(a.addr, b.addr) {
				return server.Listeners{}, fmt.Errorf("%s: clashes with %s: both listen on that port; give each listener an address of its own",
					f.origin(a.name, a.addr), f.origin(b.name, b.addr))
			}
		}
	}
	for i, a := range addrs {
		l, err := net.Listen("tcp", a.addr)
		if err != nil {
			for _, opened := range addrs[:i] {
				(*opened.l).Close()
			}
			return server.Listeners{}, fmt.Errorf("%s: %w", f.origin(a.name, a.addr), err)
		}
		*a.l = l
	}
	return ls, nil
}

// listenAddrProblem says what is wrong with the listening address addr
// when it is not HOST:PORT, with the form to write instead: net.Listen
// would say only "missing port in address" for --http 8080. It returns ""
// for a good address and for "" (the unset --api).
func listenAddrProblem(addr string) string {
	if addr == "" {
		return ""
	}
	_, _, err := net.SplitHostPort(addr)
	if err == nil {
		return ""
	}
	why := err.Error()
	if ae, ok := errors.AsType[*net.AddrError](err); ok {
		why = ae.Err
	}
	if _, perr := strconv.ParseUint(addr, 10, 16); perr == nil {
		return fmt.Sprintf("%s: for port %s write 127.0.0.1:%[2]s (this host only, as the defaults) or :%[2]s (every address)", why, addr)
	}
	if ip, perr := netip.ParseAddr(addr); perr == nil && ip.Is6() {
		return fmt.Sprintf("%s: an IPv6 address goes in brackets before the port, e.g. [%s]:8080", why, addr)
	}
	return why + ": want HOST:PORT, e.g. 127.0.0.1:8080 (this host only) or :8080 (every address)"
}

// sameListenAddr reports whether the listening addresses a and b (host:port)
// take the same port on a common address: the same port (not 0, which
// picks a free one) and the same host, or one of them every address ("",
// 0.0.0.0, ::). Host names are compared as written, not resolved.
func sameListenAddr(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	every := func(h string) bool {
		ip, err := netip.ParseAddr(h)
		return h == "" || err == nil && ip.IsUnspecified()
	}
	if every(ha) || every(hb) {
		return true
	}
	ia, errA := netip.ParseAddr(ha)
	ib, errB := netip.ParseAddr(hb)
	if errA == nil && errB == nil {
		return ia.Unmap() == ib.Unmap()
	}
	return strings.EqualFold(ha, hb)
}

// upstreamIsSelf reports whether the --upstream URL upstream reaches
// listen, the --http address: the same port, and a host that is the
// listening IP (or, written as localhost, 127.0.0.1 or ::1); for a
// listener on every address, localhost or a loopback, unspecified or
// interface IP of this host; for a listener named by a host name, that
// name (or 127.0.0.1 or ::1 for localhost). Other names are not resolved. The gateway would proxy each request
// to itself, each hop a new request, until the client gave up.
func upstreamIsSelf(upstream, listen string) bool {
	u, err := url.Parse(upstream)
	if err != nil || u.Hostname() == "" {
		return false
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if strings.EqualFold(u.Scheme, "https") {
			port = "443"
		}
	}
	lhost, lport, err := net.SplitHostPort(listen)
	if err != nil || lport != port || lport == "0" {
		return false
	}
	host := u.Hostname()
	localhost := strings.EqualFold(host, "localhost")
	uip, err := netip.ParseAddr(host)
	uip = uip.Unmap()
	lip, lerr := netip.ParseAddr(lhost)
	lip = lip.Unmap()
	switch {
	case lhost == "" || lerr == nil && lip.IsUnspecified():
		if localhost || err == nil && (uip.IsLoopback() || uip.IsUnspecified()) {
			return true
		}
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if p, perr := netip.ParsePrefix(a.String()); perr == nil && err == nil && p.Addr().Unmap() == uip {
				return true
			}
		}
		return false
	case lerr == nil:
		return err == nil && uip == lip || localhost && isLocalhostIP(lip)
	default:
		return strings.EqualFold(host, lhost) || strings.EqualFold(lhost, "localhost") && err == nil && isLocalhostIP(uip)
	}
}

// isLocalhostIP reports whether ip is one that localhost names: 127.0.0.1
// or ::1.
func isLocalhostIP(ip netip.Addr) bool {
	return ip == netip.IPv6Loopback() || ip == netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

// loopbackAddr reports whether the listening address addr (host:port) is
// a loopback one; 0.0.0.0 and :: listen on every address, so they are not.
func loopbackAddr(addr string) bool {
	ap, err := netip.ParseAddrPort(addr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// adminOpenWarning is serve's WARN when --admin is not on the loopback and
// no admin token is set.
const adminOpenWarning = "the admin address is not a loopback address and no --admin-token is set: /metrics, /healthz, /readyz and /dashboard " +
	"are open to the network; the admin API (reset, overrides, scales, observe) answers loopback peers only and 403 to every other: " +
	"set --admin-token to use it from another host"

// observeOpenWarning is serve's WARN when the configuration has adaptive
// rules and no token guards POST /v1/observe: the loopback exemption lets
// in whatever a proxy on the same host forwards.
const observeOpenWarning = "adaptive rules are configured and neither --observe-token nor --admin-token is set: " +
	"POST /v1/observe takes samples from any loopback peer, including a sidecar or proxy on this host (Envoy, Istio, nginx) " +
	"that forwards external callers, and samples can push these rules' limits down to their minimum: set --observe-token"

// newAdaptiveRules names, as domain/rule, the rules of next with an
// adaptive block that prev (nil: none) has no adaptive rule of that name
// for.
func newAdaptiveRules(prev, next *policy.Config) []string {
	had := map[[2]string]bool{}
	if prev != nil {
		for _, r := range prev.Rules() {
			if r.Adaptive != nil {
				had[[2]string{r.Domain, r.Name}] = true
			}
		}
	}
	var names []string
	for _, r := range next.Rules() {
		if r.Adaptive != nil && !had[[2]string{r.Domain, r.Name}] {
			names = append(names, r.Domain+"/"+r.Name)
		}
	}
	return names
}

// gatewayDomains names the domains of cfg that declare a gateway: section.
func gatewayDomains(cfg *policy.Config) []string {
	var names []string
	for _, d := range cfg.Domains() {
		if d.Sections[gateway.SectionName] != nil {
			names = append(names, d.Name)
		}
	}
	return names
}

// gatewayHandler builds the reverse proxy of gateway mode (package gateway:
// routes from the configuration's gateway: sections). Upstream failures and
// requests it could not decide are logged, at WARN; those the store failed
// (store.ErrUnavailable) at DEBUG without the store key, as the store log
// reports them. It registers no user or tenant
// function and no fallback, which is what floodgate validate checks the
// routes against (gateway.Check with WithPreserveHost as --preserve-host).
func gatewayHandler(cfg *policy.Config, engine *policy.Engine, f serveFlags, log *slog.Logger, m *metrics.Metrics) (*gateway.Gateway, error) {
	return gateway.New(cfg, engine, f.upstream, gateway.WithUpstreamTimeout(f.upstreamTimeout), gateway.WithClientTimeout(f.clientTimeout),
		gateway.WithUpstreamErrors(m.GatewayUpstreamErrors()), gateway.WithResponses(m.GatewayResponses()),
		gateway.WithAdaptiveSamples(true), // the proxied requests feed the routes' adaptive rules
		gateway.WithPreserveHost(f.preserveHost), gateway.WithErrorLog(func(r *http.Request, err error) {
			level, shown := slog.LevelWarn, any(err)
			if errors.Is(err, store.ErrUnavailable) {
				// A decision the store failed (--on-store-error
				// unavailable, 503), or a release or refund it did not
				// do: the store log's WARN lines report the outage once
				// a minute per cause; a line per request would flood
				// the log during it, each with the store key, which
				// holds descriptor values (a client's address, an API
				// key).
				level, shown = slog.LevelDebug, "rate limiting failed: "+store.Failure(err)
			}
			if r == nil {
				log.Log(context.Background(), level, "gateway", "err", shown)
				return
			}
			log.Log(r.Context(), level, "gateway", "method", r.Method, "path", r.URL.Path, "err", shown)
		}))
}

// onHangup answers each SIGHUP from hup until ctx is done: the watcher of
// the configuration at path reloads it at once (nil for the built-in
// example: nothing to reload), the TLS files are reread (a signal passed
// to tlsHup, when TLS is on) and so are the token files (tokens).
func onHangup(ctx context.Context, hup <-chan os.Signal, w *policy.Watcher, path string, tlsHup chan<- os.Signal, tokens func(), log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-hup:
			if w == nil {
				log.Info("SIGHUP: the built-in example configuration has no file to reload")
			} else {
				log.Info("SIGHUP: reloading the configuration", "config", path)
				w.Reload()
			}
			if tlsHup != nil {
				select {
				case tlsHup <- sig:
				default: // a reread is pending already
				}
			}
			tokens()
		}
	}
}

// runAdaptive steps the engine's adaptive controllers until ctx is done,
// ticking at the shortest interval of the rules in force (read again after
// every tick, so that a reload's intervals apply from the next one); each
// controller steps at its own interval (Engine.StepAdaptive).
func runAdaptive(ctx context.Context, engine *policy.Engine, report func(policy.ScaleChange)) {
	period := engine.AdaptiveTick()
	t := time.NewTicker(period)
	defer t.Stop()
	tick := make(chan time.Time)
	go engine.RunAdaptive(ctx, tick, report)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			select {
			case tick <- now:
			case <-ctx.Done():
				return
			}
			if p := engine.AdaptiveTick(); p != period {
				period = p
				t.Reset(p)
			}
		}
	}
}
