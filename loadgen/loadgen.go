package loadgen

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// Protocols a Config may name. GRPC, JSON and V1 ask a floodgate server's
// decision APIs; HTTP sends plain requests to a URL — a floodgate gateway,
// a service behind the middleware, anything that answers 429 when it
// refuses.
const (
	GRPC = "grpc"
	JSON = "json"
	V1   = "v1"
	HTTP = "http"
)

// MaxConcurrency bounds Config.Concurrency.
const MaxConcurrency = 10000

// Entry is one key/value of a descriptor; "{i}" in Value is replaced by the
// request's key index (0 to Keys-1).
type Entry struct{ Key, Value string }

// Config describes a run.
type Config struct {
	// Protocol is GRPC, JSON, V1 or HTTP (default GRPC).
	Protocol string
	// Addr is the server's host:port: the --grpc address for GRPC, the
	// --http address for JSON and V1. JSON and V1 also take a URL
	// (http:// or, with TLS set, https://); without a scheme they use
	// http://, or https:// when TLS is set. For HTTP it is the URL every
	// request asks for, path and query included ("{i}" in it is the key
	// index); host:port alone asks for "/".
	Addr string
	// TLS, when not nil, makes every connection TLS with this
	// configuration (its RootCAs nil: the system roots); nil is plaintext.
	TLS *tls.Config
	// Domain of every request (default "api").
	Domain string
	// Descriptors of every request (default one descriptor
	// generic_key=default).
	Descriptors [][]Entry
	// Keys is the number of distinct values "{i}" takes; request n uses
	// key n mod Keys (0: 1; negative is an error). More than 1 needs
	// "{i}" in a descriptor value (HTTP: in Addr or a Header value).
	Keys int
	// Hits is each request's cost, at most math.MaxUint32 (0: 1;
	// negative is an error).
	Hits int
	// Requests bounds the number of requests (0: no bound).
	Requests int64
	// Duration bounds the run's length (0: no bound).
	Duration time.Duration
	// Concurrency is the number of callers, at most MaxConcurrency (0:
	// 16; negative is an error).
	Concurrency int
	// Connections is the number of connections the callers share, at
	// most Concurrency (negative is an error). Caller w uses connection
	// w mod Connections: for GRPC one HTTP/2 connection that multiplexes
	// its callers' requests, for the others one HTTP/1.1 keep-alive
	// connection on which they take turns. 0 is min(Concurrency, 4) for
	// GRPC, Concurrency for the others (one connection a caller: fewer
	// would cap the requests in flight below Concurrency).
	Connections int
	// Timeout bounds each request (0: 5s; negative is an error).
	Timeout time.Duration
	// Progress, when not nil, receives a progress bar, redrawn about five
	// times a second.
	Progress io.Writer
	// DownAfter, when more than 0, ends the run early (StopServerDown)
	// once the server looks gone: no request has been answered for
	// DownAfter (an error status is an answer) and requests kept failing
	// to reach it (see ConnectionError). A restart shorter than DownAfter
	// by a second or more does not end the run: HTTP callers dial again
	// at their next request, gRPC connections retry at most a second
	// apart. Requests that time out neither end nor extend it (a server
	// that hangs is not gone). 0 never ends a run early; negative is an
	// error.
	DownAfter time.Duration

	// Method, Header, Body and RefusedStatus are for HTTP only; Domain,
	// Descriptors and Hits are not used by it.

	// Method of every request (default GET).
	Method string
	// Header is added to every request; "{i}" in a value is the key
	// index. A "Host" entry sets the request's Host.
	Header http.Header
	// Body of every request (nil: none).
	Body []byte
	// RefusedStatus lists the statuses counted as rejected (default
	// 429): a gateway that refuses with 503 needs {429, 503}. Other
	// statuses from 200 to 399 are admitted (redirects are not
	// followed); any other is an error.
	RefusedStatus []int
}

// Result is a run's outcome.
type Result struct {
	Config   Config
	Requests int64
	Admitted int64
	Rejected int64
	Errors   int64
	// Unmatched counts the answered requests that matched no rule: each
	// came back admitted with no limit on any descriptor (gRPC and /json:
	// OK statuses without current_limit that are not unlimited; /v1:
	// "matched": false; HTTP: no RateLimit-Policy or X-RateLimit-Limit
	// field). Unmatched == Admitted+Rejected means the run measured no
	// limit at all.
	Unmatched int64
	// Statuses counts the answers by HTTP status (nil for GRPC).
	Statuses map[int]int64
	// Dials is the number of connections the run opened, FailedDials the
	// attempts that could not connect (both 0 for GRPC, whose connections
	// are not counted). With HTTP/1.1 keep-alive Dials is
	// Config.Connections, plus one for every connection the server or a
	// request's timeout closed.
	Dials, FailedDials int64
	Elapsed            time.Duration
	Latency            Histogram
	// FirstErrors holds up to five distinct error messages.
	FirstErrors []string
	// Stop says which bound ended the run.
	Stop Stop
	// DownError is, when Stop is StopServerDown, the connection error of
	// the request that ended the run.
	DownError string
}

// Stop is what ended a run.
type Stop int

const (
	// StopCount: all Config.Requests requests were sent and answered or
	// failed.
	StopCount Stop = iota + 1
	// StopDuration: Config.Duration passed first; the requests then in
	// flight were waited for and counted.
	StopDuration
	// StopInterrupted: Run's context was done; the requests then in flight
	// were cancelled and are not counted.
	StopInterrupted
	// StopServerDown: the server looked gone (Config.DownAfter); the
	// requests then in flight were cancelled and are not counted.
	StopServerDown
)

// DecisionsPerSecond is the answered (admitted + rejected) requests per second.
func (r *Result) DecisionsPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Admitted+r.Rejected) / r.Elapsed.Seconds()
}

// defaults fills in the zero fields and rejects the values out of range
// (a negative is never taken for "the default").
func (c *Config) defaults() error {
	if c.Protocol == "" {
		c.Protocol = GRPC
	}
	switch c.Protocol {
	case GRPC, JSON, V1, HTTP:
	default:
		return fmt.Errorf("loadgen: unknown protocol %q (want grpc, json, v1 or http)", c.Protocol)
	}
	if err := c.httpDefaults(); err != nil {
		return err
	}
	if c.Addr == "" {
		return errors.New("loadgen: no server address")
	}
	if c.TLS != nil && strings.HasPrefix(strings.ToLower(c.Addr), "http://") {
		return fmt.Errorf("loadgen: address %s is plaintext http:// but TLS is set", c.Addr)
	}
	var errs []error
	negative := func(neg bool, name string, v any) {
		if neg {
			errs = append(errs, fmt.Errorf("loadgen: %s %v must not be negative", name, v))
		}
	}
	negative(c.Keys < 0, "keys", c.Keys)
	negative(c.Hits < 0, "hits", c.Hits)
	negative(c.Requests < 0, "requests", c.Requests)
	negative(c.Duration < 0, "duration", c.Duration)
	negative(c.Concurrency < 0, "concurrency", c.Concurrency)
	negative(c.Connections < 0, "connections", c.Connections)
	negative(c.Timeout < 0, "timeout", c.Timeout)
	negative(c.DownAfter < 0, "down-after", c.DownAfter)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if c.Domain == "" {
		c.Domain = "api"
	}
	if len(c.Descriptors) == 0 {
		c.Descriptors = [][]Entry{{{Key: "generic_key", Value: "default"}}}
	}
	if c.Keys == 0 {
		c.Keys = 1
	}
	if c.Hits == 0 {
		c.Hits = 1
	}
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.Connections == 0 {
		c.Connections = c.Concurrency
		if c.Protocol == GRPC {
			c.Connections = min(c.Concurrency, 4)
		}
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	if int64(c.Hits) > math.MaxUint32 {
		errs = append(errs, fmt.Errorf("loadgen: hits %d is over %d", c.Hits, uint32(math.MaxUint32)))
	}
	if c.Concurrency > MaxConcurrency {
		errs = append(errs, fmt.Errorf("loadgen: concurrency %d is over %d", c.Concurrency, MaxConcurrency))
	}
	if c.Connections > c.Concurrency {
		errs = append(errs, fmt.Errorf("loadgen: %d connections for %d callers: at most one a caller", c.Connections, c.Concurrency))
	}
	if c.Requests == 0 && c.Duration == 0 {
		errs = append(errs, errors.New("loadgen: set a request count, a duration or both: a run must be bounded"))
	}
	if c.Keys > 1 && !c.UsesIndex() {
		none := "no descriptor value has"
		if c.Protocol == HTTP {
			none = "neither the address nor a header value has"
		}
		errs = append(errs, fmt.Errorf("loadgen: %d keys but %s {i}: every request would use the same key", c.Keys, none))
	}
	return errors.Join(errs...)
}

// UsesIndex reports whether "{i}" is somewhere the key index replaces it:
// a descriptor value, or for HTTP the address or a header value. Keys over
// 1 without it would send every request with the same key.
func (c *Config) UsesIndex() bool {
	if c.Protocol == HTTP {
		if strings.Contains(c.Addr, "{i}") {
			return true
		}
		for _, vs := range c.Header {
			for _, v := range vs {
				if strings.Contains(v, "{i}") {
					return true
				}
			}
		}
		return false
	}
	for _, d := range c.Descriptors {
		for _, e := range d {
			if strings.Contains(e.Value, "{i}") {
				return true
			}
		}
	}
	return false
}

// httpDefaults checks the HTTP fields: set only for HTTP, a method that
// is a token, statuses that are refusals.
func (c *Config) httpDefaults() error {
	if c.Protocol != HTTP {
		if c.Method != "" || c.Header != nil || c.Body != nil || c.RefusedStatus != nil {
			return fmt.Errorf("loadgen: method, header, body and refused statuses are for the http protocol, not %s", c.Protocol)
		}
		return nil
	}
	if c.Method == "" {
		c.Method = http.MethodGet
	}
	if c.RefusedStatus == nil {
		c.RefusedStatus = []int{http.StatusTooManyRequests}
	}
	for _, s := range c.RefusedStatus {
		if s < 400 || s > 599 {
			return fmt.Errorf("loadgen: refused status %d: want 400 to 599", s)
		}
	}
	if _, err := http.NewRequest(c.Method, "http://x/", nil); err != nil {
		return fmt.Errorf("loadgen: method %q: %w", c.Method, err)
	}
	return nil
}

// ParseDescriptor parses "key=value,key2=value2" into entries. Every entry
// needs its '=' and a non-empty key; the value may be empty ("key=").
// The error names the entry at fault, not s: the caller says where s came
// from.
func ParseDescriptor(s string) ([]Entry, error) {
	const want = "(want key=value,key2=value2, each key non-empty)"
	var out []Entry
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("entry %q is not key=value %s", part, want)
		}
		k = strings.TrimSpace(k)
		if k == "" {
			return nil, fmt.Errorf("entry %q has an empty key %s", part, want)
		}
		out = append(out, Entry{Key: k, Value: v})
	}
	return out, nil
}

// answer is what one request's response said.
type answer struct {
	// status is the HTTP status (0 for gRPC).
	status   int
	admitted bool
	// unmatched: no rule matched any of the request's descriptors.
	unmatched bool
}

// caller sends one request for key index i and reports the answer.
type caller interface {
	call(ctx context.Context, i int) (answer, error)
	close()
}

// Run runs the load described by cfg.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	callers, err := dial(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range callers {
			c.close()
		}
	}()
	// Requests run on the caller's context, cancelled too when the server
	// is gone; the duration only stops new ones, so that a request in
	// flight at the end is counted, not failed.
	parent := ctx
	reqCtx, serverGone := context.WithCancel(ctx)
	defer serverGone()
	ctx = reqCtx
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	res := &Result{Config: cfg}
	var next, admitted, rejected, errs, unmatched atomic.Int64
	var mu sync.Mutex
	seen := map[string]bool{}
	statuses := map[int]int64{}
	hists := make([]Histogram, cfg.Concurrency)
	start := time.Now()
	down := downWatch{after: cfg.DownAfter, stop: serverGone}
	stopProgress := startProgress(ctx, cfg, start, &admitted, &rejected, &errs)
	var wg sync.WaitGroup
	for w := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := callers[w%len(callers)]
			h := &hists[w]
			for ctx.Err() == nil {
				n := next.Add(1) - 1
				if cfg.Requests > 0 && n >= cfg.Requests {
					return
				}
				rctx, cancel := context.WithTimeout(reqCtx, cfg.Timeout)
				t0 := time.Now()
				a, err := c.call(rctx, int(n%int64(cfg.Keys)))
				d := time.Since(t0)
				end := t0.Sub(start) + d // for down, without another clock read
				cancel()
				if err != nil && reqCtx.Err() != nil {
					// The caller stopped the run, or the server is gone:
					// the request is not counted, nor its status (an
					// answer whose body was cut off).
					return
				}
				if a.status != 0 {
					mu.Lock()
					statuses[a.status]++
					mu.Unlock()
				}
				if err != nil {
					connErr := ConnectionError(err)
					switch {
					case connErr:
						down.failed(end, err)
					case a.status != 0 || serverStatus(err):
						down.answered(end) // an error status is an answer
					}
					errs.Add(1)
					mu.Lock()
					if msg := err.Error(); !seen[msg] && len(seen) < 5 {
						seen[msg] = true
						res.FirstErrors = append(res.FirstErrors, msg)
					}
					mu.Unlock()
					if connErr {
						// A server that cannot be reached fails a call
						// in microseconds: pause, so that a caller does
						// not spin a core on failures while the server is
						// away (it is measured again within a pause of
						// coming back).
						pause := time.NewTimer(connErrorPause)
						select {
						case <-ctx.Done():
						case <-pause.C:
						}
						pause.Stop()
					}
					continue
				}
				down.answered(end)
				h.Record(d)
				if a.admitted {
					admitted.Add(1)
				} else {
					rejected.Add(1)
				}
				if a.unmatched {
					unmatched.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	stopProgress()
	for i := range hists {
		res.Latency.Merge(&hists[i])
	}
	res.Admitted, res.Rejected, res.Errors, res.Unmatched = admitted.Load(), rejected.Load(), errs.Load(), unmatched.Load()
	res.Requests = res.Admitted + res.Rejected + res.Errors
	switch {
	case cfg.Requests > 0 && res.Requests >= cfg.Requests:
		res.Stop = StopCount
	case parent.Err() != nil:
		// Requests in flight were cancelled and are not counted, so a
		// run interrupted at its last requests is one, not complete.
		res.Stop = StopInterrupted
	case down.tripped.Load():
		res.Stop, res.DownError = StopServerDown, *down.err.Load()
	default:
		res.Stop = StopDuration
	}
	if cfg.Protocol != GRPC {
		res.Statuses = statuses
		for _, c := range callers {
			res.Dials += c.(*httpCaller).dials.Load()
			res.FailedDials += c.(*httpCaller).failedDials.Load()
		}
	}
	return res, nil
}

// downWatch ends a run whose server is gone (Config.DownAfter): no answer
// for after, and a request that failed to reach the server at the end of
// it. Times are since the run's start.
type downWatch struct {
	after time.Duration
	stop  context.CancelFunc
	// lastAnswer is when a request was last answered, to within
	// answerGrain: written only when it moved on by more, so that the
	// callers answered at full speed share a cache line they mostly read.
	lastAnswer atomic.Int64
	tripped    atomic.Bool
	err        atomic.Pointer[string]
}

const answerGrain = int64(10 * time.Millisecond)

// connErrorPause is how long a caller waits after a request that failed to
// reach the server before it sends its next one.
const connErrorPause = 10 * time.Millisecond

// answered notes a request answered at the time end. lastAnswer only moves
// forward: a caller that read it before another wrote a later time must
// not write its earlier one over it, which would make the server look
// silent for longer than it was (and gone, DownAfter too early).
func (w *downWatch) answered(end time.Duration) {
	if w.after <= 0 {
		return
	}
	for last := w.lastAnswer.Load(); int64(end)-last > answerGrain; last = w.lastAnswer.Load() {
		if answeredHook != nil {
			answeredHook()
		}
		if w.lastAnswer.CompareAndSwap(last, int64(end)) {
			return
		}
	}
}

// answeredHook, when set (by tests), runs in downWatch.answered between
// its read of lastAnswer and its write, so that a test can order two
// callers' writes.
var answeredHook func()

// failed notes a request that failed to reach the server at the time end,
// and ends the run when nothing was answered for w.after before.
func (w *downWatch) failed(end time.Duration, err error) {
	if w.after <= 0 || int64(end)-w.lastAnswer.Load() < int64(w.after) {
		return
	}
	if w.tripped.CompareAndSwap(false, true) {
		msg := err.Error()
		w.err.Store(&msg)
		w.stop()
	}
}

// ConnectionError reports whether err, a request's error, says that the
// server could not be reached or dropped the connection: a refused, reset
// or failed dial, the connection closed before the answer (EOF), or a
// gRPC Unavailable raised by the client's transport (not one the server
// answered: floodgate answers Unavailable when its store fails). A
// timeout is not one: a slow server is not a gone one.
func ConnectionError(err error) bool {
	if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	if st, ok := status.FromError(err); ok {
		if st.Code() != codes.Unavailable {
			return false
		}
		msg := st.Message()
		for _, p := range grpcTransportErrors {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	if opErr, ok := errors.AsType[*net.OpError](err); ok && opErr.Op == "dial" {
		return true // refused, unreachable, a name that does not resolve, or no answer to the dial
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// serverStatus reports whether err is a gRPC status the server sent, an
// answer (ConnectionError has ruled out the transport's own): not one the
// client made for its deadline or cancellation.
func serverStatus(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() != codes.DeadlineExceeded && st.Code() != codes.Canceled
}

// grpcTransportErrors are the starts of the messages of the Unavailable
// errors grpc-go's client makes itself when it cannot reach the server or
// loses the connection.
var grpcTransportErrors = []string{
	"connection error:",
	"error reading from server",
	"transport is closing",
	"the connection is draining",
	"connection closed before server preface received",
	"last connection error:",
	"name resolver error:",
}

// Probe opens one TCP connection to cfg's server and closes it, within
// cfg.Timeout (default 5s), so that a run against an address where
// nothing listens can stop before it starts instead of failing every
// request at full speed. It sends nothing and does no TLS handshake: a
// certificate problem shows in the run's errors, where each request
// meets it. A Config that Run would refuse gets Run's error.
func Probe(ctx context.Context, cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	addr := cfg.Addr
	if cfg.Protocol != GRPC {
		u, err := url.Parse(cfg.httpAddr())
		if err != nil {
			return fmt.Errorf("loadgen: address %s: %w", cfg.Addr, err)
		}
		addr = u.Host
		if u.Port() == "" {
			port := "80"
			if u.Scheme == "https" {
				port = "443"
			}
			addr = net.JoinHostPort(u.Hostname(), port)
		}
	}
	d := net.Dialer{Timeout: cfg.Timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot reach %s: %w", addr, err)
	}
	return conn.Close()
}

// httpAddr is Addr with its scheme: http://, or https:// with TLS.
func (c *Config) httpAddr() string {
	if strings.Contains(c.Addr, "://") {
		return c.Addr
	}
	if c.TLS != nil {
		return "https://" + c.Addr
	}
	return "http://" + c.Addr
}

func dial(cfg Config) ([]caller, error) {
	var out []caller
	for range cfg.Connections {
		var c caller
		var err error
		switch cfg.Protocol {
		case GRPC:
			c, err = newGRPCCaller(cfg)
		default:
			c = newHTTPCaller(cfg)
		}
		if err != nil {
			for _, o := range out {
				o.close()
			}
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func value(v string, i int) string {
	if strings.Contains(v, "{i}") {
		return strings.ReplaceAll(v, "{i}", strconv.Itoa(i))
	}
	return v
}

type grpcCaller struct {
	conn *grpc.ClientConn
	rls  rlsv3.RateLimitServiceClient
	cfg  Config
}

func newGRPCCaller(cfg Config) (*grpcCaller, error) {
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	// Reconnect at most a second apart (grpc-go's default backoff grows to
	// two minutes), so that a server restarted is measured again within
	// a second of coming back, and DownAfter's promise holds.
	conn, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(creds), grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: cfg.Timeout,
	}))
	if err != nil {
		return nil, fmt.Errorf("loadgen: grpc %s: %w", cfg.Addr, err)
	}
	return &grpcCaller{conn: conn, rls: rlsv3.NewRateLimitServiceClient(conn), cfg: cfg}, nil
}

// EnvoyRequest builds the RateLimitRequest for key index i.
func (c Config) EnvoyRequest(i int) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: c.Domain, HitsAddend: uint32(max(c.Hits, 0))}
	for _, d := range c.Descriptors {
		rd := &commonrl.RateLimitDescriptor{}
		for _, e := range d {
			rd.Entries = append(rd.Entries, &commonrl.RateLimitDescriptor_Entry{Key: e.Key, Value: value(e.Value, i)})
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	return req
}

func (g *grpcCaller) call(ctx context.Context, i int) (answer, error) {
	resp, err := g.rls.ShouldRateLimit(ctx, g.cfg.EnvoyRequest(i))
	if err != nil {
		return answer{}, err
	}
	switch resp.OverallCode {
	case rlsv3.RateLimitResponse_OK:
		return answer{admitted: true, unmatched: envoyUnmatched(resp)}, nil
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return answer{}, nil
	}
	return answer{}, fmt.Errorf("overall code %v", resp.OverallCode)
}

// envoyUnmatched reports whether no descriptor of resp matched a rule:
// Envoy's answer for one is OK without current_limit, and an unlimited
// rule's is the same with limit_remaining at its maximum. A response
// without statuses says nothing either way.
func envoyUnmatched(resp *rlsv3.RateLimitResponse) bool {
	for _, s := range resp.Statuses {
		if s.Code != rlsv3.RateLimitResponse_OK || s.CurrentLimit != nil || s.LimitRemaining == math.MaxUint32 {
			return false
		}
	}
	return len(resp.Statuses) > 0
}

func (g *grpcCaller) close() { g.conn.Close() }

// httpCaller is one connection: a transport that holds at most one
// connection to the server at a time, shared by the callers given it.
// HTTP/1.1 carries one request at a time on it, so those callers take
// turns, as callers sharing a connection do.
type httpCaller struct {
	client *http.Client
	url    string
	cfg    Config
	// dials counts the connections opened (TCP connected, whatever the
	// TLS handshake did next), failedDials the dials that failed.
	dials, failedDials atomic.Int64
}

func newHTTPCaller(cfg Config) *httpCaller {
	h := &httpCaller{cfg: cfg}
	dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute, TLSClientConfig: cfg.TLS,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				h.failedDials.Add(1)
				return nil, err
			}
			h.dials.Add(1)
			return c, nil
		}}
	addr := cfg.httpAddr()
	h.client = &http.Client{Transport: tr}
	switch cfg.Protocol {
	case HTTP:
		if u, err := url.Parse(addr); err == nil && u.Path == "" && u.RawQuery == "" {
			addr += "/"
		}
		h.url = addr
		// A redirect is the answer, admitted: following it would send a
		// second request the counts do not show.
		h.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	case V1:
		h.url = strings.TrimSuffix(addr, "/") + "/v1/decide"
	default:
		h.url = strings.TrimSuffix(addr, "/") + "/json"
	}
	return h
}

type v1Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type v1Desc struct {
	Entries []v1Entry `json:"entries"`
}

type v1Req struct {
	Domain      string   `json:"domain"`
	Descriptors []v1Desc `json:"descriptors"`
	Hits        int      `json:"hits,omitempty"`
}

func (h *httpCaller) body(i int) ([]byte, error) {
	if h.cfg.Protocol == JSON {
		return protojson.Marshal(h.cfg.EnvoyRequest(i))
	}
	r := v1Req{Domain: h.cfg.Domain, Hits: h.cfg.Hits}
	for _, d := range h.cfg.Descriptors {
		var vd v1Desc
		for _, e := range d {
			vd.Entries = append(vd.Entries, v1Entry{e.Key, value(e.Value, i)})
		}
		r.Descriptors = append(r.Descriptors, vd)
	}
	return json.Marshal(r)
}

func (h *httpCaller) call(ctx context.Context, i int) (answer, error) {
	if h.cfg.Protocol == HTTP {
		return h.plain(ctx, i)
	}
	b, err := h.body(i)
	if err != nil {
		return answer{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(b))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		return answer{}, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return answer{status: resp.StatusCode, admitted: true, unmatched: h.unmatched(body)}, nil
	case http.StatusTooManyRequests:
		return answer{status: resp.StatusCode}, nil
	}
	return answer{status: resp.StatusCode}, statusError(resp.StatusCode, body)
}

// statusError is an unexpected status with the start of its body.
func statusError(status int, body []byte) error {
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return fmt.Errorf("HTTP %d: %s", status, msg)
}

// plain sends the HTTP protocol's request for key index i. The body is
// read to its end, so that the connection is used again.
func (h *httpCaller) plain(ctx context.Context, i int) (answer, error) {
	var body io.Reader
	if h.cfg.Body != nil {
		body = bytes.NewReader(h.cfg.Body)
	}
	req, err := http.NewRequestWithContext(ctx, h.cfg.Method, value(h.url, i), body)
	if err != nil {
		return answer{}, err
	}
	for k, vs := range h.cfg.Header {
		for _, v := range vs {
			if http.CanonicalHeaderKey(k) == "Host" {
				req.Host = value(v, i)
				continue
			}
			req.Header.Add(k, value(v, i))
		}
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	switch {
	case slices.Contains(h.cfg.RefusedStatus, resp.StatusCode):
	case resp.StatusCode >= 200 && resp.StatusCode < 400:
		a.admitted = true
		a.unmatched = resp.Header.Get("RateLimit-Policy") == "" && resp.Header.Get("X-RateLimit-Limit") == ""
	default:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return a, statusError(resp.StatusCode, b)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return answer{status: resp.StatusCode}, fmt.Errorf("HTTP %d, reading the body: %w", resp.StatusCode, err)
	}
	return a, nil
}

// unmatched reports whether an admitting body says that no descriptor
// matched a rule. A body it cannot read says nothing either way.
func (h *httpCaller) unmatched(body []byte) bool {
	if h.cfg.Protocol == JSON {
		var resp rlsv3.RateLimitResponse
		if protojson.Unmarshal(body, &resp) != nil {
			return false
		}
		return envoyUnmatched(&resp)
	}
	var resp struct {
		Statuses []struct {
			Matched *bool `json:"matched"`
		} `json:"statuses"`
	}
	if json.Unmarshal(body, &resp) != nil {
		return false
	}
	for _, s := range resp.Statuses {
		if s.Matched == nil || *s.Matched {
			return false
		}
	}
	return len(resp.Statuses) > 0
}

func (h *httpCaller) close() { h.client.CloseIdleConnections() }
