package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/term"
	"github.com/floodgate/floodgate/loadgen"
)

func init() {
	commands["bench"] = command{"load-test a running server (gRPC, /json, /v1, or plain HTTP through a gateway)", runBench}
}

// benchUsage heads bench's help. Its examples match rules of the example
// configuration (examples/config, what `make run` serves) and of
// examples/gateway, so that they show limiting, not "no rule matched".
const benchUsage = `usage: floodgate bench [flags]

Sends rate limit requests to a running floodgate server, or plain HTTP requests to a URL
(-p http: a gateway, a service behind the middleware), and reports admitted and rejected
counts, errors, requests/s and a latency histogram.

Examples against floodgate serve with its example configuration (make run):

  # 100 client addresses at the per-ip rule, 20 a second with bursts of 40 each
  floodgate bench -p grpc -n 100000 -c 64 -D 'remote_address=10.0.0.{i}' -keys 100
  # logins from 10 addresses, 5 a minute each: 50 of the 1000 admitted
  floodgate bench -p json -n 1000 -D 'login=x,remote_address=203.0.113.{i}' -keys 10

and against the gateway of examples/gateway
(floodgate serve --config examples/gateway --upstream http://127.0.0.1:9000):

  # 40 requests at once from one address: the /search shaper's burst, then 429
  floodgate bench -p http -addr http://127.0.0.1:8080/search -n 40 -c 40 -conns 40

A run sends -n requests, or runs for -d, or both: the first reached ends it, and the
report says which. It first opens one connection to -addr, and exits 1 at once, having
sent nothing, when it cannot. A server that goes away during the run ends it early
(-down-after, 5s by default). The report goes to stdout, the progress bar to stderr.

Exit status: 0 when every request was answered (admitted or rejected); 1 when any
request failed (the report lists the first errors), when -addr cannot be reached, when
the server went away during the run (-down-after), or when the safety bound of -n
without -d ended the run; 2 for a mistake in the flags; 130 when interrupted (Ctrl-C,
SIGTERM), after the report of what was done by then.

flags:
`

// descriptorFlags collects repeated -D flags as written; checkBench parses
// them, so that a bad one is reported with the other flags' problems.
type descriptorFlags []string

func (d *descriptorFlags) String() string { return "" }

func (d *descriptorFlags) Set(s string) error {
	*d = append(*d, s)
	return nil
}

// headerFlags collects repeated -H flags as written ("Name: value");
// checkBench parses them.
type headerFlags []string

func (h *headerFlags) String() string { return "" }

func (h *headerFlags) Set(s string) error {
	*h = append(*h, s)
	return nil
}

// httpFlags are bench's flags for -p http, as written.
type httpFlags struct {
	method, body, refused string
	headers               headerFlags
}

// runBench is `floodgate bench`: flags to loadgen.Config, the report on
// stdout, the progress bar on stderr.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c loadgen.Config
	var descs descriptorFlags
	var quiet bool
	var progress string
	var tf benchTLSFlags
	var hf httpFlags
	fs.StringVar(&c.Protocol, "p", loadgen.GRPC, "protocol: grpc (ShouldRateLimit), json (POST /json), v1 (POST /v1/decide), or http (plain requests to the URL of -addr, e.g. through floodgate serve --upstream)")
	fs.StringVar(&c.Addr, "addr", "", "server address, host:port (default 127.0.0.1:8081 for grpc, 127.0.0.1:8080 for json, v1 and http); json and v1 also take the server's http:// or https:// URL, to which /json or /v1/decide is added (a URL ending in it is taken without it), https:// implying -tls; http takes the URL to request, path and query included, {i} in it being the key index")
	fs.StringVar(&c.Domain, "domain", "api", "rate limit domain")
	fs.Var(&descs, "D", "a descriptor as key=value,key2=value2; repeat for several; {i} in a value is the key index (default generic_key=default)")
	fs.IntVar(&c.Keys, "keys", 1, "number of distinct values {i} takes, at least 1")
	fs.IntVar(&c.Hits, "hits", 1, "cost of each request, at least 1")
	fs.Int64Var(&c.Requests, "n", 0, "stop after this many requests (0: no count bound); without -d the run sends them all, bounded only by a safety time bound of "+benchSafetyBound.String()+" (bench exits 1 if that ends it)")
	fs.DurationVar(&c.Duration, "d", 0, "stop after this long; the first of -n and -d to be reached ends the run, and the report says which (default: 10s without -n, "+benchSafetyBound.String()+" with it; 0: no time bound)")
	fs.IntVar(&c.Concurrency, "c", 16, "concurrent callers, 1 to 10000")
	fs.IntVar(&c.Connections, "conns", 0, "connections the callers share, at most -c; caller k uses connection k mod -conns: with grpc an HTTP/2 connection carrying its callers' requests at once, with json, v1 and http a keep-alive HTTP/1.1 connection they take turns on (0: min(c, 4) for grpc, c for json, v1 and http)")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Second, "timeout of each request, more than 0")
	fs.DurationVar(&c.DownAfter, "down-after", 5*time.Second, "stop early, with the report so far and exit 1, when the server looks gone: no request answered for this long while requests kept failing to reach it (connection refused or reset, closed before the answer, gRPC unavailable); a restart shorter than this by a second or more does not stop it (gRPC reconnects within a second), nor do requests that time out; 0: never stop early")
	fs.StringVar(&hf.method, "method", "GET", "with -p http: the request method")
	fs.Var(&hf.headers, "H", "with -p http: a request header as 'Name: value'; repeat for several; {i} in a value is the key index")
	fs.StringVar(&hf.body, "body", "", "with -p http: the request body")
	fs.StringVar(&hf.refused, "refused-status", "429", "with -p http: the statuses counted as rejected, comma-separated (e.g. 429,503 for a gateway that refuses with 503); 2xx and 3xx are admitted, any other status is an error")
	fs.BoolVar(&quiet, "q", false, "no progress bar (-progress never)")
	fs.StringVar(&progress, "progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), always, never")
	fs.BoolVar(&tf.on, "tls", false, "connect with TLS, verifying the server's certificate (against the system roots unless -tls-ca)")
	fs.StringVar(&tf.ca, "tls-ca", "", "with -tls: trust the CAs of this PEM file instead of the system roots (a self-signed certificate is its own CA)")
	fs.StringVar(&tf.cert, "tls-cert", "", "with -tls: present this client certificate chain (PEM) for mTLS, with -tls-key")
	fs.StringVar(&tf.key, "tls-key", "", "with -tls: the client certificate's private key (PEM)")
	fs.StringVar(&tf.serverName, "tls-server-name", "", "with -tls: the name sent by SNI and expected in the server's certificate (default: the host of -addr)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), benchUsage)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, 0, stdout, stderr); !ok {
		return code
	}
	c.Protocol = strings.ToLower(c.Protocol)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	safety := false
	if !set["d"] {
		// -n alone means that many requests, as with ab and hey: a time
		// bound is kept only for safety, and said when it ends the run.
		c.Duration = 10 * time.Second
		if c.Requests > 0 {
			c.Duration, safety = benchSafetyBound, true
		}
	}
	addr, addrErr := endpointBase(c.Protocol, c.Addr)
	c.Addr = addr
	var err error
	c.Descriptors, err = checkBench(c, descs)
	err = errors.Join(addrErr, err)
	err = errors.Join(err, hf.apply(&c, set))
	err = errors.Join(err, checkKeys(c), checkProgress(progress, quiet, set), tf.check(c))
	if err != nil {
		fmt.Fprintln(stderr, "floodgate bench:", err)
		return 2
	}
	if c.TLS, err = tf.config(c.Addr); err != nil {
		fmt.Fprintln(stderr, "floodgate bench:", err)
		return 2
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8080"
		if c.Protocol == loadgen.GRPC {
			c.Addr = "127.0.0.1:8081"
		}
	}
	if progress == "always" || progress == "auto" && !quiet && term.IsTerminal(stderr) {
		c.Progress = stderr
	}
	if err := loadgen.Probe(ctx, c); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "floodgate bench: interrupted before the run")
			return benchInterrupted
		}
		fmt.Fprintf(stderr, "floodgate bench: %v (-addr %s, -p %s): nothing was sent\n", err, c.Addr, c.Protocol)
		return 1
	}
	res, err := loadgen.Run(ctx, c)
	if err != nil {
		fmt.Fprintln(stderr, "floodgate bench:", err)
		return 2
	}
	res.Print(stdout)
	return benchExit(res, safety, stderr)
}

// benchSafetyBound is the time bound of a run given -n and no -d.
var benchSafetyBound = 10 * time.Minute

// benchInterrupted is bench's exit code when interrupted (SIGINT or
// SIGTERM), as a shell's for a command stopped by Ctrl-C.
const benchInterrupted = 130

// benchExit is the exit code of a run that has printed its report, with
// the reason on stderr when it is not 0: 130 interrupted, 1 when the
// server went away (-down-after), when any request failed or when the
// safety bound cut -n short, else 0.
func benchExit(res *loadgen.Result, safety bool, stderr io.Writer) int {
	c := res.Config
	if res.Stop == loadgen.StopInterrupted {
		fmt.Fprintf(stderr, "floodgate bench: interrupted after %.2fs: the report covers the %d request(s) done by then\n", res.Elapsed.Seconds(), res.Requests)
		return benchInterrupted
	}
	if res.Stop == loadgen.StopServerDown {
		fmt.Fprintf(stderr, "floodgate bench: stopped early after %.2fs: the server looks gone (no answer for %s, requests failing to reach it: %s); the report covers the %d request(s) done by then, %d of them failed\n",
			res.Elapsed.Seconds(), c.DownAfter, res.DownError, res.Requests, res.Errors)
		return 1
	}
	code := 0
	if res.Errors > 0 {
		fmt.Fprintf(stderr, "floodgate bench: %d of %d requests failed (%.1f%%; errors in the report)\n", res.Errors, res.Requests, 100*float64(res.Errors)/float64(res.Requests))
		if res.Admitted+res.Rejected == 0 && c.TLS != nil && certificateError(res.FirstErrors) {
			fmt.Fprintln(stderr, "floodgate bench: no request answered: the server's certificate was not verified (see the errors above); -tls-ca FILE trusts a private CA, -tls-server-name NAME checks another name")
		}
		if res.Admitted+res.Rejected == 0 && c.TLS != nil && clientCertRequired(res.FirstErrors) {
			fmt.Fprintln(stderr, "floodgate bench: no request answered: "+clientCertHint(c.TLS))
		}
		if res.Admitted+res.Rejected == 0 {
			if hint := wrongAddrHint(c, res.FirstErrors); hint != "" {
				fmt.Fprintln(stderr, "floodgate bench: no request answered: "+hint)
			}
		}
		code = 1
	}
	if safety && res.Stop == loadgen.StopDuration {
		fmt.Fprintf(stderr, "floodgate bench: stopped by the safety time bound of %s after %d of the %d requests of -n; give -d for a longer run\n", c.Duration, res.Requests, c.Requests)
		code = 1
	}
	return code
}

// checkProgress checks -progress, and that -q does not contradict it.
func checkProgress(progress string, quiet bool, set map[string]bool) error {
	switch progress {
	case "auto", "always", "never":
	default:
		return fmt.Errorf("-progress %s: want auto, always or never", shown(progress))
	}
	if quiet && set["progress"] && progress != "never" {
		return fmt.Errorf("-q with -progress %s: -q is -progress never; give one of them", progress)
	}
	return nil
}

// apply checks the -p http flags and sets them on c; with another -p they
// are errors, as the decision APIs' flags are with -p http. Each error is
// one of checkBench's lines.
func (hf *httpFlags) apply(c *loadgen.Config, set map[string]bool) error {
	var errs []error
	only := func(p string, flags ...string) {
		for _, f := range flags {
			if set[f] {
				errs = append(errs, fmt.Errorf("-%s: only with %s (not -p %s)", f, p, c.Protocol))
			}
		}
	}
	if c.Protocol != loadgen.HTTP {
		only("-p http", "method", "H", "body", "refused-status")
		return errors.Join(errs...)
	}
	only("-p grpc, json or v1", "domain", "D", "hits")
	c.Descriptors = nil
	if hf.method == "" || strings.ContainsAny(hf.method, " \t\r\n:/") {
		errs = append(errs, fmt.Errorf("-method %s: want a method name such as GET or POST", shown(hf.method)))
	}
	c.Method = hf.method
	for _, h := range hf.headers {
		name, v, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") || strings.ContainsAny(v, "\r\n") {
			errs = append(errs, fmt.Errorf("-H %s: want 'Name: value'", shown(h)))
			continue
		}
		if c.Header == nil {
			c.Header = http.Header{}
		}
		c.Header.Add(name, strings.TrimSpace(v))
	}
	if set["body"] {
		c.Body = []byte(hf.body)
	}
	for _, part := range strings.Split(hf.refused, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 400 || n > 599 {
			errs = append(errs, fmt.Errorf("-refused-status %s: want statuses from 400 to 599, comma-separated (e.g. 429,503)", shown(hf.refused)))
			c.RefusedStatus = nil
			break
		}
		c.RefusedStatus = append(c.RefusedStatus, n)
	}
	if a := strings.ToLower(c.Addr); strings.Contains(a, "://") && !strings.HasPrefix(a, "http://") && !strings.HasPrefix(a, "https://") {
		errs = append(errs, fmt.Errorf("-addr %s: -p http takes an http:// or https:// URL (or host:port)", shown(c.Addr)))
	} else if _, err := url.Parse(c.Addr); err != nil && strings.Contains(c.Addr, "://") {
		errs = append(errs, fmt.Errorf("-addr %s: %v", shown(c.Addr), errors.Unwrap(err)))
	}
	return errors.Join(errs...)
}

// checkBench returns the descriptors of the -D flags, or every flag out of
// range, each as "-flag value: what it must be", one a line. Loadgen takes
// a zero as its default; bench's flags have their defaults already, so a
// zero or a negative given is a mistake, except where the flag's help says
// what 0 means (-n, -d, -conns).
func checkBench(c loadgen.Config, descs []string) ([][]loadgen.Entry, error) {
	var errs []error
	bad := func(failed bool, flag string, value any, want string) {
		if failed {
			errs = append(errs, fmt.Errorf("%s %v: %s", flag, value, want))
		}
	}
	switch c.Protocol {
	case loadgen.GRPC, loadgen.JSON, loadgen.V1, loadgen.HTTP:
	default:
		errs = append(errs, fmt.Errorf("-p %s: want grpc, json, v1 or http", c.Protocol))
	}
	bad(c.Domain == "", "-domain", `""`, "must not be empty")
	var entries [][]loadgen.Entry
	for _, d := range descs {
		e, err := loadgen.ParseDescriptor(d)
		if err != nil {
			errs = append(errs, fmt.Errorf("-D %s: %w", shown(d), err))
			continue
		}
		entries = append(entries, e)
	}
	bad(c.Keys < 1, "-keys", c.Keys, "must be >= 1")
	bad(c.Hits < 1 || c.Hits > math.MaxUint32, "-hits", c.Hits, fmt.Sprintf("must be 1 to %d", uint32(math.MaxUint32)))
	bad(c.Requests < 0, "-n", c.Requests, "must be >= 0 (0: no count bound)")
	bad(c.Duration < 0, "-d", c.Duration, "must be >= 0 (0: no time bound)")
	if c.Requests == 0 && c.Duration == 0 {
		errs = append(errs, errors.New("-n 0 -d 0: set -n, -d or both, a run must be bounded"))
	}
	bad(c.Concurrency < 1 || c.Concurrency > loadgen.MaxConcurrency, "-c", c.Concurrency, fmt.Sprintf("must be 1 to %d", loadgen.MaxConcurrency))
	upTo, defaultConns := "-c", "min(c, 4)"
	if c.Protocol != loadgen.GRPC {
		defaultConns = "c"
	}
	if c.Concurrency >= 1 {
		upTo = fmt.Sprintf("%d (-c)", c.Concurrency)
	}
	bad(c.Connections < 0 || c.Concurrency >= 1 && c.Connections > c.Concurrency, "-conns", c.Connections,
		"must be 0 (default: "+defaultConns+") or 1 to "+upTo)
	bad(c.Timeout <= 0, "-timeout", c.Timeout, "must be > 0")
	bad(c.DownAfter < 0, "-down-after", c.DownAfter, "must be >= 0 (0: never stop early)")
	return entries, errors.Join(errs...)
}

// endpointBase returns the -addr URL of -p json or v1 without the
// endpoint's path when it ends in it: bench appends /json or /v1/decide to
// the URL it is given, so -addr http://127.0.0.1:8080/json, the URL a user
// has just posted to with curl, sent every request to /json/json (404). A
// URL that ends in the other protocol's endpoint is an error; host:port,
// a bare URL or one with another path (a prefix behind a proxy) is
// returned as given.
func endpointBase(protocol, addr string) (string, error) {
	endpoints := map[string]string{loadgen.JSON: "/json", loadgen.V1: "/v1/decide"}
	own, ok := endpoints[protocol]
	if !ok || !strings.Contains(addr, "://") {
		return addr, nil
	}
	u, err := url.Parse(addr)
	if err != nil || u.RawQuery != "" || u.Fragment != "" {
		return addr, nil
	}
	path := strings.TrimSuffix(u.Path, "/")
	if base, found := strings.CutSuffix(path, own); found {
		u.Path, u.RawPath = base, ""
		return u.String(), nil
	}
	for p, other := range endpoints {
		if p != protocol && strings.HasSuffix(path, other) {
			u.Path, u.RawPath = strings.TrimSuffix(path, other), ""
			return addr, fmt.Errorf("-addr %s: ends in %s, the endpoint of -p %s; -p %s posts to %s%s: give the server's URL without the path (%s), or -p %[3]s for that endpoint",
				shown(addr), other, p, protocol, u.String(), own, u.String())
		}
	}
	return addr, nil
}

// checkKeys refuses -keys over 1 when no value it would vary has {i}:
// every request would use one key while the report said N key(s).
func checkKeys(c loadgen.Config) error {
	switch {
	case c.Keys <= 1 || c.UsesIndex():
		return nil
	case c.Protocol == loadgen.HTTP:
		return fmt.Errorf("-keys %d: neither -addr nor any -H value has {i}, so every request would be the same; put {i} in the URL (e.g. -addr 'http://127.0.0.1:8080/search?user={i}') or in a -H value, or drop -keys", c.Keys)
	}
	return fmt.Errorf("-keys %d: no -D value has {i}, so every request would use the same key; put {i} in a -D value (e.g. -D 'remote_address=10.0.0.{i}') or drop -keys", c.Keys)
}

// benchTLSFlags are bench's client TLS flags. There is no flag to skip
// verification: a self-signed server certificate is trusted by giving it
// to -tls-ca, and a certificate for another name by -tls-server-name.
type benchTLSFlags struct {
	on                        bool
	ca, cert, key, serverName string
}

// enabled reports whether the run uses TLS: -tls, or an https:// -addr.
func (f *benchTLSFlags) enabled(addr string) bool {
	return f.on || strings.HasPrefix(strings.ToLower(addr), "https://")
}

// check returns what is wrong with the TLS flags' combination with each
// other and with -p and -addr, as checkBench's lines; the files are read
// by config.
func (f *benchTLSFlags) check(c loadgen.Config) error {
	var errs []error
	lower := strings.ToLower(c.Addr)
	if c.Protocol == loadgen.GRPC && strings.Contains(c.Addr, "://") && !strings.HasPrefix(lower, "https://") {
		// Most often serve's --http URL, with -p grpc the default:
		// "for TLS, add -tls" sent the user to the wrong flag.
		errs = append(errs, fmt.Errorf("-addr %s: -p grpc (the default) takes host:port, serve's --grpc address (127.0.0.1:8081 by default); a URL is for -p json or v1 (serve's --http address) or -p http", shown(c.Addr)))
	} else if c.Protocol == loadgen.GRPC && strings.Contains(c.Addr, "://") {
		errs = append(errs, fmt.Errorf("-addr %s: -p grpc takes host:port (for TLS, add -tls)", shown(c.Addr)))
	} else if f.on && strings.HasPrefix(lower, "http://") {
		errs = append(errs, fmt.Errorf("-addr %s: plaintext http:// with -tls (use https:// or host:port)", shown(c.Addr)))
	}
	if !f.enabled(c.Addr) {
		for _, o := range []struct{ flag, v string }{{"-tls-ca", f.ca}, {"-tls-cert", f.cert}, {"-tls-key", f.key}, {"-tls-server-name", f.serverName}} {
			if o.v != "" {
				errs = append(errs, fmt.Errorf("%s %s: only with -tls (or an https:// -addr)", o.flag, shown(o.v)))
			}
		}
		return errors.Join(errs...)
	}
	if f.cert != "" && f.key == "" {
		errs = append(errs, fmt.Errorf("-tls-cert %s: needs -tls-key too (the client certificate's private key, PEM)", shown(f.cert)))
	}
	if f.key != "" && f.cert == "" {
		errs = append(errs, fmt.Errorf("-tls-key %s: needs -tls-cert too (the client certificate chain, PEM)", shown(f.key)))
	}
	return errors.Join(errs...)
}

// config returns the client tls.Config of the flags, reading their files
// (nil without TLS); an error names the flag and the file.
func (f *benchTLSFlags) config(addr string) (*tls.Config, error) {
	if !f.enabled(addr) {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.serverName}
	if f.ca != "" {
		var err error
		if cfg.RootCAs, _, err = readCAFile("-tls-ca "+f.ca, f.ca); err != nil {
			return nil, err
		}
	}
	if f.cert != "" {
		for _, o := range []struct{ flag, file string }{{"-tls-cert", f.cert}, {"-tls-key", f.key}} {
			if _, err := os.Stat(o.file); err != nil {
				return nil, fmt.Errorf("%s %s: %w", o.flag, o.file, err)
			}
		}
		cert, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert %s, -tls-key %s: %w", f.cert, f.key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// certificateError reports whether one of msgs is a failed verification
// of the server's certificate.
func certificateError(msgs []string) bool {
	for _, m := range msgs {
		if strings.Contains(m, "x509: ") || strings.Contains(m, "tls: failed to verify certificate") {
			return true
		}
	}
	return false
}

// clientCertRequired reports whether one of msgs is the server's refusal
// of a handshake without a client certificate (serve --tls-client-ca).
func clientCertRequired(msgs []string) bool {
	return slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, "tls: certificate required") })
}

// clientCertHint says why a server that requires a client certificate got
// none from cfg: no -tls-cert, or one that no CA the server named in its
// request signed, which a Go client does not send (so the server's alert
// is "certificate required", not a rejected certificate).
func clientCertHint(cfg *tls.Config) string {
	if len(cfg.Certificates) == 0 {
		return "the server requires a client certificate (serve --tls-client-ca): give -tls-cert FILE and -tls-key FILE, a certificate signed by a CA of its --tls-client-ca"
	}
	return "the server requires a client certificate signed by a CA of its --tls-client-ca, and the one of -tls-cert is not (it is sent only to a server that accepts its issuer)"
}

// wrongAddrHint says which mistake a run of c with no request answered,
// whose first errors are msgs, made, or "": the address of another of
// serve's listeners, or plaintext against a TLS one. The errors alone
// ("error reading server preface: EOF", "malformed HTTP response
// \x00\x00...") name neither, so the server is asked when they cannot
// tell.
func wrongAddrHint(c loadgen.Config, msgs []string) string {
	has := func(s string) bool {
		return slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, s) })
	}
	switch {
	case c.Protocol == loadgen.GRPC && has("looked like an HTTP/1.1 header"):
		return "an HTTP/1.1 server answered the gRPC calls: -p grpc takes serve's --grpc address (127.0.0.1:8081 by default); -p json or v1 take its --http address"
	case c.Protocol == loadgen.GRPC && c.TLS == nil && speaksTLS(c.Addr):
		return "the server speaks TLS (serve --tls-cert) and closed every plaintext connection: add -tls (with -tls-ca FILE for a private CA)"
	case (c.Protocol == loadgen.JSON || c.Protocol == loadgen.V1) && c.TLS == nil && sendsHTTP2Settings(c.Addr):
		return "the server does not speak HTTP/1.1 (it opens with HTTP/2 frames, as serve's --grpc address does): -p " + c.Protocol +
			" takes serve's --http address (127.0.0.1:8080 by default); -p grpc takes its --grpc address"
	}
	return ""
}

// speaksTLS reports whether the server at addr (host:port) completes a
// TLS handshake, or fails it only on its certificate. A gRPC client in
// plaintext sees the server close the connection ("error reading server
// preface: EOF", or a reset, by timing), which names no cause.
func speaksTLS(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{ServerName: host, NextProtos: []string{"h2"}}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		conn.Close()
		return true
	}
	_, unverified := errors.AsType[*tls.CertificateVerificationError](err)
	return unverified
}

// sendsHTTP2Settings reports whether the server at addr (host:port, or an
// http:// URL) opens a connection with an HTTP/2 SETTINGS frame before the
// client says anything, as a gRPC server does. An HTTP/1.1 client's errors
// against one depend on timing ("malformed HTTP response \x00\x00...", or
// the connection reset before that was read), so it is asked directly.
func sendsHTTP2Settings(addr string) bool {
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		addr = u.Host
	}
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(time.Second))
	var frame [9]byte // a frame header: length (3 bytes), type, flags, stream (4)
	_, err = io.ReadFull(conn, frame[:])
	return err == nil && frame[3] == 0x4 && frame[5]|frame[6]|frame[7]|frame[8] == 0
}

// shown is a flag value as an error shows it: quoted when it is empty or
// holds spaces, which would be lost otherwise.
func shown(v string) string {
	if v == "" || strings.ContainsAny(v, " \t") {
		return strconv.Quote(v)
	}
	return v
}
