package gateway

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store"
)

// Option configures a Gateway; see New for the defaults.
type Option func(*options)

type options struct {
	mw           []middleware.Option
	hdr          headers.Options
	transport    http.RoundTripper
	flush        time.Duration
	errLog       func(*http.Request, error)
	user, tenant func(*http.Request) string
	preserveHost bool
	timeout      time.Duration
	timeoutSet   bool
	client       time.Duration
	clientSet    bool
	upstreamErrs func(reason string)
	responses    func(route string, status int, upstream bool)
	noSamples    bool // WithAdaptiveSamples(false)
}

// DefaultUpstreamTimeout is WithUpstreamTimeout's default, nginx's
// proxy_read_timeout.
const DefaultUpstreamTimeout = 60 * time.Second

// DefaultClientTimeout is WithClientTimeout's default, nginx's
// send_timeout and client_body_timeout.
const DefaultClientTimeout = 60 * time.Second

// unreadBodyTimeout bounds, without a client timeout, how long a request
// body left unread (a refused request's) is read for after the handler,
// before the answer is written: nginx's lingering_timeout.
const unreadBodyTimeout = 5 * time.Second

// errUpstreamTimeout cancels a request the upstream kept waiting.
var errUpstreamTimeout = errors.New("gateway: upstream timeout")

// errClientTimeout is the error of a read from a client that sent nothing
// of its request body for the client timeout.
var errClientTimeout = errors.New("gateway: client timeout")

// clientBodyError is a read of the request body that failed through its
// client, other than by the client timeout: a malformed chunked body, one
// shorter than its Content-Length (io.ErrUnexpectedEOF), one over a limit
// an outer handler set (*http.MaxBytesError), a connection reset or closed.
// The request is the client's failure, not the upstream's, whatever error
// the transport then reports.
type clientBodyError struct{ err error }

func (e *clientBodyError) Error() string {
	return "gateway: reading the request body from the client: " + e.err.Error()
}

func (e *clientBodyError) Unwrap() error { return e.err }

// WithMiddleware passes options to the middleware that decides each route's
// requests (middleware.WithFallback, WithFailOpen, WithMaxWait, ...).
// Header options belong in WithHeaders, which also applies them to the
// upstream's fields.
func WithMiddleware(opts ...middleware.Option) Option {
	return func(o *options) { o.mw = append(o.mw, opts...) }
}

// WithHeaders chooses the rate limit header fields and their names (default:
// all, standard names), as middleware.WithHeaders does.
func WithHeaders(h headers.Options) Option { return func(o *options) { o.hdr = h } }

// WithTransport sets the RoundTripper to the upstream (default: a clone of
// http.DefaultTransport with DisableCompression, so that the upstream gets
// the client's Accept-Encoding, or none, and its response is passed on as
// it was encoded, and keeping up to UpstreamIdleConns idle connections to
// the upstream instead of its 2; for an h2c:// upstream, with Protocols
// set to UnencryptedHTTP2 alone).
//
// An *http.Transport with a TLSClientConfig of its own (a private CA)
// offers HTTP/1.1 alone unless ForceAttemptHTTP2 is set (or Protocols
// includes HTTP2): an upstream that speaks only h2 then fails every
// request. For an h2c:// upstream, an *http.Transport must have Protocols
// UnencryptedHTTP2 without HTTP1 (with HTTP1 it sends HTTP/1.1 to an
// http:// URL), or New refuses it; another RoundTripper gets http:// URLs
// and must speak HTTP/2 to them itself.
func WithTransport(rt http.RoundTripper) Option { return func(o *options) { o.transport = rt } }

// UpstreamIdleConns is how many idle keep-alive connections the default
// transport keeps to the upstream, for reuse by the next requests.
const UpstreamIdleConns = 256

// WithFlushInterval sets how often a response body is flushed to the client
// while it is copied (default 0: at the end, except streaming responses —
// text/event-stream or without a Content-Length — which are flushed after
// every write; negative: after every write).
func WithFlushInterval(d time.Duration) Option { return func(o *options) { o.flush = d } }

// WithErrorLog receives the errors the gateway answers for: upstream
// failures (502, 504, and failures after the response header, which cut
// the response off: each cause at most once per UpstreamLogInterval,
// with the route), clients that time out, request bodies that could not
// be read from the client (the client's failure, answered 400 or 413:
// each cause of each route at most once per UpstreamLogInterval), and
// the middleware's errors
// (default: none).
func WithErrorLog(fn func(*http.Request, error)) Option { return func(o *options) { o.errLog = fn } }

// WithUser and WithTenant supply the user and tenant sources of routes
// whose section sets no user_header / tenant_header (default: none; such a
// route is then an error).
func WithUser(fn func(*http.Request) string) Option { return func(o *options) { o.user = fn } }

// WithTenant: see WithUser.
func WithTenant(fn func(*http.Request) string) Option { return func(o *options) { o.tenant = fn } }

// WithPreserveHost sends the client's Host header to the upstream instead
// of the upstream URL's host (default false, as nginx's proxy_pass). Routes
// with a host need it: without it the upstream serves a path the same
// whatever Host the client sent, so a client could skip a host route's
// limits by sending another Host, and New refuses them.
func WithPreserveHost(on bool) Option { return func(o *options) { o.preserveHost = on } }

// WithClientTimeout bounds how long the gateway waits on the client
// without progress (default DefaultClientTimeout, 60 s; 0 or negative: no
// bound), as nginx's send_timeout and client_body_timeout: each write of
// the response to the client (a client that stops reading) and each read
// of its request body (a client that stops sending). A write that makes no
// progress for that long aborts the response (the connection is closed); a
// body read that gets nothing for that long ends the request with 408.
// Either way the request ends and its concurrency slots are released. A
// client that keeps reading or sending, however slowly, is not cut. A
// body left unread by a refused request (or an upstream that timed out)
// is read and dropped, as net/http does before the answer, for at most d
// (5 s when d is 0 or negative), the connection then closed. After
// a protocol upgrade (websockets) it bounds each write to the client too,
// but not idleness: a websocket on which nothing is sent stays open.
// Served over HTTP/2, each stream's writes are bounded, but a client that
// stops reading the whole connection blocks the stream resets too: set
// the server's HTTP2.WriteByteTimeout to d as well (floodgate serve does,
// server.WithGatewayClientTimeout).
func WithClientTimeout(d time.Duration) Option {
	return func(o *options) { o.client, o.clientSet = d, true }
}

// WithUpstreamTimeout bounds how long the gateway waits on the upstream
// without progress (default DefaultUpstreamTimeout, 60 s; 0 or negative:
// no bound), as nginx's proxy_read_timeout: from the time the request is
// sent to the response header — stopped while the gateway waits on the
// client for a piece of the request body, restarted after each piece
// passed on — and then each read of the response body. A request
// that times out before the header gets 504 with a problem body; a body
// that stalls longer is cut off (the connection closed, as nginx does).
// A response or upload that keeps flowing is never cut, however long it
// lasts; an idle stream (server-sent events with nothing to send) is, so
// send keep-alive comments more often than this. After a protocol upgrade
// (101, websockets) the upstream is not bounded (WithClientTimeout still
// bounds writes to the client).
func WithUpstreamTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout, o.timeoutSet = d, true }
}

// Gateway is a rate limiting reverse proxy: see the package documentation.
// It is safe for concurrent use.
type Gateway struct {
	d policy.Decider
	// upstream is the URL requests are sent to: an h2c:// upstream's with
	// the scheme http, which the transport speaks HTTP/2 to (h2c).
	upstream *url.URL
	shown    string // the upstream URL as given, for the log
	h2c      bool
	o        options
	proxy    *httputil.ReverseProxy
	cfgs     interface{ Config() *policy.Config }

	// obs feeds the adaptive rules' samples (the Decider's Observe); nil
	// with WithAdaptiveSamples(false) or a Decider without it.
	obs observer

	mu     sync.Mutex // serialises recompiling
	routes atomic.Pointer[routeTable]
	upLog  upstreamLog
	// bodyLog rate-limits the lines about request bodies that failed
	// through their clients, apart from the upstreams' causes.
	bodyLog upstreamLog
	// xNames are the X-RateLimit-Limit, -Remaining and -Reset fields'
	// names (WithHeaders), canonical.
	xNames [3]string
	// exposed are the fields browser code may read of the gateway's
	// answers under a cors block (Access-Control-Expose-Headers).
	exposed []string
}

// routeTable is the compiled routes of one configuration, most specific
// first.
type routeTable struct {
	cfg    *policy.Config
	routes []*route
	// proxies serve requests that match no route: the union of every
	// section's trusted proxies, with their header when they agree.
	proxies dimension.Proxies
	// cors are the sections' cors blocks, which a request that matches
	// no route is answered under (an origin any of them allows).
	cors []*corsPolicy
}

type route struct {
	*routeSpec
	domain  string
	order   int
	limiter *middleware.Middleware // nil: unlimited
	// reads are the header fields, canonical, that the route's
	// descriptors read (header:, api_key.header, user_header,
	// tenant_header); readsAny is set when a WithUser or WithTenant
	// function, which may read any field, keys it. asForwarded looks at
	// those fields alone: a request is copied only when one the route
	// reads is not as the upstream will get it.
	reads    []string
	readsAny bool
	// adaptive names the rules of the route's domain with an adaptive
	// block, when the gateway feeds samples: nil costs a request nothing.
	adaptive []string
}

type ctxKey struct{}

// reqState is what the proxy's hooks need of a request: its route (nil:
// none matched), the proxies trusted for it, and the upstream timer.
type reqState struct {
	rt      *route
	proxies dimension.Proxies
	timer   *time.Timer // nil: no timeout
	d       time.Duration
	// header is set when the response header is in; timerMu orders it
	// with the request body's restarts of the timer, so that none
	// restarts it after the header stopped it.
	header  atomic.Bool
	timerMu sync.Mutex
	// bodyTimedOut is set when the client sent nothing of its body for
	// the client timeout; bodyEOF when the body was read to its end; done
	// when ServeHTTP has returned (a read of the body the transport makes
	// later is not bounded: the server has closed the body).
	bodyTimedOut, bodyEOF, done atomic.Bool
	// bodyErr is the first failed read of the body through its client
	// (nil: none), set before the read returns: the transport's error,
	// which comes after it, is then the client's.
	bodyErr atomic.Pointer[clientBodyError]
	// cors is the CORS answer to the request, nil when no cors block
	// applies to it.
	cors *corsAnswer
	// fields are the header fields of the response set before it is
	// proxied (an admitted request's rate limit fields), nil when none.
	fields []field
	// release gives back the concurrency slots the request holds (the
	// middleware's done, which does it once however often it is
	// called); nil when it holds none. A protocol upgrade calls it when
	// the upstream's side ends (upgradedBody).
	release func()
	samples
}

// New returns the gateway: requests matching a route of cfg's gateway
// sections are decided by d in the route's domain, as middleware does
// (header fields, 429 with a problem body, wait, degrade, shadow, shaper
// delays, concurrency slots held, their leases renewed, until the response
// is complete), and the
// admitted ones are proxied to upstream, whose path prefixes the
// request's: an http:// URL (HTTP/1.1), https:// (TLS; HTTP/2 or HTTP/1.1
// as the upstream offers by ALPN, HTTP/2 preferred; a protocol upgrade
// such as a websocket over HTTP/1.1) or h2c:// (HTTP/2 without TLS, with
// prior knowledge: h2c://host:port, for a gRPC backend or a service that
// speaks only h2c; a protocol upgrade, which HTTP/2 does not have, gets
// 502 without reaching it). Requests matching no route are proxied
// unlimited.
//
// When d also has Config() *policy.Config (a *policy.Engine does), the
// routes follow its hot reloads; a reloaded configuration whose routes do
// not compile keeps the previous routes and is reported to the error log.
//
// Options and defaults: WithMiddleware (none), WithHeaders (all fields,
// standard names), WithTransport (a clone of http.DefaultTransport),
// WithFlushInterval(0), WithErrorLog (none), WithUser / WithTenant (none),
// WithPreserveHost(false), WithUpstreamTimeout(DefaultUpstreamTimeout),
// WithClientTimeout(DefaultClientTimeout), WithAdaptiveSamples(true): the
// proxied requests feed the adaptive rules that decided them.
//
// It fails when upstream is not an absolute http, https or h2c URL (an
// h2c URL without a port, any URL with port 0), when
// an h2c upstream is given a WithTransport *http.Transport that does not
// speak HTTP/2 with prior knowledge, when cfg declares no route, or when a route cannot be built (a degrade fallback that is not
// registered, a user source with neither user_header nor WithUser, a host
// without WithPreserveHost(true)); the latter are policy.Problems at the
// line of the field at fault (see Check).
func New(cfg *policy.Config, d policy.Decider, upstream string, opts ...Option) (*Gateway, error) {
	if cfg == nil || d == nil {
		return nil, errors.New("gateway: New needs a configuration and a Decider")
	}
	shown := store.RedactURL(upstream) // errors never show a password
	u, err := url.Parse(upstream)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // *url.Error repeats the whole URL
		}
		return nil, fmt.Errorf("gateway: upstream %q: %w", shown, err)
	}
	h2c := u.Scheme == "h2c"
	switch {
	case h2c && (u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != ""):
		return nil, fmt.Errorf("gateway: upstream %q: want h2c://host:port (HTTP/2 without TLS), with an optional path and no user, query or fragment", shown)
	case h2c && u.Port() == "":
		// Refused rather than taken as 80: h2c has no well-known port,
		// and an h2c upstream on 80 is rarely meant.
		return nil, fmt.Errorf("gateway: upstream %q: no port: h2c has no default port; want h2c://host:port (HTTP/2 without TLS)", shown)
	case (u.Scheme != "http" && u.Scheme != "https" && !h2c) || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		err := fmt.Errorf("gateway: upstream %q: want an absolute http://, https:// or h2c:// URL with a host and no user, query or fragment", shown)
		if u.Scheme == "h2" || u.Scheme == "http2" || u.Scheme == "grpc" {
			err = fmt.Errorf("%w; HTTP/2 is https:// (over TLS, chosen by ALPN) or h2c:// (without TLS)", err)
		}
		return nil, err
	case u.Port() == "0":
		// Port 0 is for listening: a connection to it is refused.
		return nil, fmt.Errorf("gateway: upstream %q: port 0 cannot be connected to; want the upstream's port", shown)
	}
	g := &Gateway{d: d, upstream: u, shown: shown, h2c: h2c}
	if h2c {
		// The transport speaks h2c to an http:// URL when its only
		// protocol is UnencryptedHTTP2.
		sent := *u
		sent.Scheme = "http"
		g.upstream = &sent
	}
	for _, f := range opts {
		if f != nil {
			f(&g.o)
		}
	}
	if t, ok := g.o.transport.(*http.Transport); ok && h2c && (t.Protocols == nil || !t.Protocols.UnencryptedHTTP2() || t.Protocols.HTTP1()) {
		return nil, fmt.Errorf("gateway: upstream %q: the WithTransport transport does not speak HTTP/2 without TLS: set its Protocols to UnencryptedHTTP2 alone (with HTTP1 among them it sends HTTP/1.1 to the upstream)", shown)
	}
	if !g.o.timeoutSet {
		g.o.timeout = DefaultUpstreamTimeout
	}
	n := g.o.hdr.Names
	for i, name := range []string{cmp.Or(n.Limit, "X-RateLimit-Limit"), cmp.Or(n.Remaining, "X-RateLimit-Remaining"), cmp.Or(n.Reset, "X-RateLimit-Reset")} {
		g.xNames[i] = http.CanonicalHeaderKey(name)
	}
	g.exposed = exposed(g.o.hdr)
	if !g.o.clientSet {
		g.o.client = DefaultClientTimeout
	}
	g.cfgs, _ = d.(interface{ Config() *policy.Config })
	if !g.o.noSamples {
		g.obs, _ = d.(observer)
	}
	t, err := g.compile(cfg, d)
	if err != nil {
		return nil, err
	}
	g.routes.Store(t)

	rt := g.o.transport
	if rt == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// The transport would otherwise ask for gzip on its own when the
		// client did not, and decompress it.
		t.DisableCompression = true
		// http.DefaultTransport keeps 2 idle connections per host: under
		// concurrent load most requests to the one upstream would open a
		// connection of their own (769 for 1000 requests from 50
		// clients). Keep as many as a busy gateway has requests in flight.
		t.MaxIdleConns = UpstreamIdleConns
		t.MaxIdleConnsPerHost = UpstreamIdleConns
		if h2c {
			// HTTP/2 with prior knowledge: HTTP/1.1 left out, or the
			// transport would send it to the http:// URL.
			t.Protocols = new(http.Protocols)
			t.Protocols.SetUnencryptedHTTP2(true)
		}
		rt = t
	}
	g.proxy = &httputil.ReverseProxy{
		Rewrite:        g.rewrite,
		Transport:      rt,
		FlushInterval:  g.o.flush,
		ErrorHandler:   g.upstreamError,
		ModifyResponse: g.modifyResponse,
		ErrorLog:       log.New(io.Discard, "", 0),
	}
	return g, nil
}

// compile builds the route table of cfg, deciding with d. A route that
// does not build is a policy.Problem at the line of the field at fault.
func (g *Gateway) compile(cfg *policy.Config, d policy.Decider) (*routeTable, error) {
	t := &routeTable{cfg: cfg}
	// A route descriptor no rule limits is Check's warning, not an error.
	mwOpts := append(slices.Clip(g.o.mw), middleware.WithHeaders(g.o.hdr), middleware.WithDescriptorCheck(false))
	if g.o.errLog != nil {
		mwOpts = append(mwOpts, middleware.WithErrorLog(g.o.errLog))
	}
	var probs policy.Problems
	headers := map[dimension.ProxyHeader]bool{}
	// The section refuses two routes of its own that match the same
	// requests; here, two of different domains: the later would never
	// apply, its requests limited by the other domain's rules.
	type placed struct {
		domain string
		index  int
	}
	seen := map[string]placed{}
	for _, dom := range cfg.Domains() {
		s, _ := dom.Sections[SectionName].(*Section)
		if s == nil {
			continue
		}
		t.proxies.Trusted = append(t.proxies.Trusted, s.proxies.Trusted...)
		if s.cors != nil {
			t.cors = append(t.cors, s.cors)
		}
		if len(s.proxies.Trusted) > 0 {
			headers[s.proxies.Header] = true
		}
		for i, rs := range s.compiled {
			key := rs.matchKey()
			if first, dup := seen[key]; dup && first.domain != dom.Name {
				line := rs.line("")
				if line == 0 {
					line = dom.Pos.Line
				}
				probs = append(probs, policy.Problem{File: dom.Pos.File, Line: line, Message: fmt.Sprintf(
					"gateway: routes[%d]: matches the same requests as routes[%d] of domain %s (host, path_prefix and methods; a trailing / of the prefix and a HEAD beside GET change nothing), which comes first, so this route of domain %s would never apply",
					i, first.index, first.domain, dom.Name)})
				continue
			} else if !dup {
				seen[key] = placed{dom.Name, i}
			}
			r := &route{routeSpec: rs, domain: dom.Name, order: len(t.routes)}
			if rs.host != "" && !g.o.preserveHost {
				probs = append(probs, hostProblem(dom, rs, i))
				continue
			}
			if rs.spec != nil {
				// The upstream is another program, which may read a
				// repeated query parameter or header otherwise than the
				// descriptor's first value (PHP takes the last): such a
				// request gets 400 rather than be limited as one client
				// and served as another.
				xo := []dimension.Option{dimension.WithRejectAmbiguous(true)}
				if g.o.user != nil && rs.spec.UserHeader == "" {
					xo = append(xo, dimension.WithUser(g.o.user))
				}
				if g.o.tenant != nil && rs.spec.TenantHeader == "" {
					xo = append(xo, dimension.WithTenant(g.o.tenant))
				}
				x, err := dimension.NewExtractor(*rs.spec, xo...)
				if err != nil {
					probs = append(probs, routeProblems(dom, rs, i, err)...)
					continue
				}
				m, err := middleware.New(d, dom.Name, x, append(slices.Clip(mwOpts), middleware.WithRefuseStatus(rs.refuseStatus))...)
				if err != nil {
					probs = append(probs, middlewareProblems(dom, rs, i, err)...)
					continue
				}
				r.limiter = m
				r.reads, r.readsAny = fieldsRead(rs.spec, g.o.user != nil && rs.spec.UserHeader == "", g.o.tenant != nil && rs.spec.TenantHeader == "")
				if g.obs != nil {
					r.adaptive = adaptiveRules(dom)
				}
			}
			t.routes = append(t.routes, r)
		}
	}
	if len(probs) > 0 {
		slices.SortStableFunc(probs, func(a, b policy.Problem) int {
			return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
		})
		return nil, slices.CompactFunc(probs, func(a, b policy.Problem) bool { return a == b })
	}
	if len(t.routes) == 0 {
		return nil, errors.New("gateway: the configuration declares no routes; add a gateway: section with routes to a domain")
	}
	if len(headers) == 1 {
		for h := range headers {
			t.proxies.Header = h
		}
	}
	slices.SortStableFunc(t.routes, func(a, b *route) int {
		// "/api/" covers what "/api" does (see under): its "/" makes it
		// no more specific.
		if d := len(strings.TrimSuffix(b.prefix, "/")) - len(strings.TrimSuffix(a.prefix, "/")); d != 0 {
			return d
		}
		if d := hostRank(a) - hostRank(b); d != 0 {
			return d
		}
		if d := methodRank(a) - methodRank(b); d != 0 {
			return d
		}
		return a.order - b.order
	})
	return t, nil
}

// routeProblems places an extractor error at the field it names, or each
// of the problems it joins at theirs.
func routeProblems(dom *policy.Domain, rs *routeSpec, i int, err error) policy.Problems {
	ses := specErrs(err)
	if len(ses) == 0 {
		ses = []*dimension.SpecError{{Msg: err.Error()}}
	}
	var ps policy.Problems
	for _, se := range ses {
		p := policy.Problem{File: dom.Pos.File, Line: dom.Pos.Line}
		if l := rs.line(se.Field); l > 0 {
			p.Line = l
		}
		at := fmt.Sprintf("gateway: routes[%d]", i)
		if se.Field != "" {
			at += "." + se.Field
		}
		p.Message = fmt.Sprintf("%s: %s (route %q of domain %s)", at, se.Msg, rs.name, dom.Name)
		ps = append(ps, p)
	}
	return ps
}

// hostProblem refuses a route with a host when the upstream does not get
// the client's Host: routes are picked by the Host the client sends, so a
// client sending another one would skip the route while the upstream,
// which sees the upstream URL's host either way, serves it the same path.
func hostProblem(dom *policy.Domain, rs *routeSpec, i int) policy.Problem {
	line := rs.line("host")
	if line == 0 {
		line = dom.Pos.Line
	}
	return policy.Problem{File: dom.Pos.File, Line: line, Message: fmt.Sprintf(
		"gateway: routes[%d].host: a route with a host needs the client's Host passed to the upstream (floodgate serve --preserve-host, gateway.WithPreserveHost(true)): without it the upstream serves the path whatever Host a client sends, so a client sending another Host would skip this route's limits (route %q of domain %s)",
		i, rs.name, dom.Name)}
}

// middlewareProblems places a middleware error: a degrade rule without a
// registered fallback at the rule, anything else at the route.
func middlewareProblems(dom *policy.Domain, rs *routeSpec, i int, err error) []policy.Problem {
	var probs []policy.Problem
	if mf, ok := errors.AsType[*middleware.MissingFallbackError](err); ok {
		for _, r := range mf.Rules {
			probs = append(probs, policy.Problem{File: r.Pos.File, Line: r.Pos.Line, Message: fmt.Sprintf(
				"rule %q: strategy degrade needs the fallback %q, which the gateway does not have (floodgate serve registers none: use reject, wait or shadow; a program embedding the gateway registers it with gateway.WithMiddleware(middleware.WithFallback(...)))",
				r.Name, r.Fallback)})
		}
	}
	if len(probs) > 0 {
		return probs
	}
	line := rs.line("")
	if line == 0 {
		line = dom.Pos.Line
	}
	return []policy.Problem{{File: dom.Pos.File, Line: line, Message: fmt.Sprintf("gateway: routes[%d] %q of domain %s: %v", i, rs.name, dom.Name, err)}}
}

// checkOnly is a Decider that reports cfg as its configuration, so that a
// configuration's routes are built and checked against it before anything
// decides with it. It decides nothing.
type checkOnly struct{ cfg *policy.Config }

func (c checkOnly) Decide(context.Context, policy.Request) (policy.Response, error) {
	return policy.Response{}, errors.New("gateway: a check does not decide")
}

func (c checkOnly) Peek(ctx context.Context, req policy.Request) (policy.Response, error) {
	return c.Decide(ctx, req)
}

func (c checkOnly) Config() *policy.Config { return c.cfg }

// Check builds cfg's routes as New would with opts, and returns as err what
// keeps them from building, as policy.Problems at the line of the field at fault
// (a user or tenant source with neither user_header/tenant_header nor
// WithUser/WithTenant, a degrade rule whose fallback is not registered
// through WithMiddleware, a host without WithPreserveHost(true)) — nil
// when they build. A configuration without
// gateway sections has no problems. warnings are legal but likely
// mistakes: a route descriptor that no rule of its domain limits, so that
// the route's requests pass unlimited; a route keyed on a hop-by-hop
// header field (Connection, Keep-Alive, TE, Trailer, Transfer-Encoding,
// Upgrade, Proxy-Authorization, ...), which the proxies on the way drop,
// the gateway too.
func Check(cfg *policy.Config, opts ...Option) (warnings policy.Problems, err error) {
	if cfg == nil {
		return nil, errors.New("gateway: Check: nil configuration")
	}
	g := &Gateway{}
	for _, f := range opts {
		if f != nil {
			f(&g.o)
		}
	}
	found := false
	for _, dom := range cfg.Domains() {
		s, _ := dom.Sections[SectionName].(*Section)
		if s == nil {
			continue
		}
		found = true
		if s.proxies.TrustsEveryPeer() {
			warnings = append(warnings, policy.Problem{File: dom.Pos.File, Line: dom.Pos.Line, Message: fmt.Sprintf(
				"gateway: trusted_proxies of domain %s holds every address, so every peer is trusted and any client picks the address it is limited by with %s; list only your proxies' networks",
				dom.Name, s.proxies.Header)})
		}
		for i, rs := range s.compiled {
			if rs.spec == nil {
				continue
			}
			for j, ds := range rs.spec.Descriptors {
				if !middleware.Limited(dom, ds.Entries) {
					line := rs.line(fmt.Sprintf("descriptors[%d]", j))
					if line == 0 {
						line = dom.Pos.Line
					}
					warnings = append(warnings, policy.Problem{File: dom.Pos.File, Line: line, Message: fmt.Sprintf(
						"gateway: routes[%d].descriptors[%d]: no rule of domain %s has the keys %s, so this descriptor limits nothing (route %q)",
						i, j, dom.Name, keysOf(ds.Entries), rs.name)})
				}
				for k, e := range ds.Entries {
					name, field := headerOf(rs.spec, e)
					if !slices.Contains(hopByHop, http.CanonicalHeaderKey(name)) {
						continue
					}
					at := fmt.Sprintf("descriptors[%d].entries[%d]", j, k)
					line := rs.line(at + ".source")
					if line == 0 {
						line = dom.Pos.Line
					}
					if field != "" {
						name += " (" + field + ")"
					}
					warnings = append(warnings, policy.Problem{File: dom.Pos.File, Line: line, Message: fmt.Sprintf(
						"gateway: routes[%d].%s: route %q is keyed on %s, a hop-by-hop field (RFC 9110 §7.6.1): every proxy on the way drops it, the gateway too, so the upstream never gets it and a proxy in front may have removed it before the gateway reads it",
						i, at, rs.name, name)})
				}
			}
		}
	}
	if !found {
		return warnings, nil
	}
	_, err = g.compile(cfg, checkOnly{cfg})
	return warnings, err
}

// hopByHop are the fields, canonical, that belong to one connection (RFC
// 9110 §7.6.1): ReverseProxy drops them from the request it sends, as
// every proxy does (and the gateway drops HTTP2-Settings, h2c's). Those a
// request's Connection names are hop-by-hop too, but are the client's to
// choose: asForwarded reads them as absent.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Http2-Settings"}

// headerOf is the header field an entry of spec reads, as written, and the
// section's field that names it when the entry does not ("user_header"),
// "" when it reads none.
func headerOf(spec *dimension.Spec, e dimension.EntrySpec) (name, field string) {
	if kind, name, ok := strings.Cut(e.Source, ":"); ok && kind == "header" {
		return name, ""
	}
	switch e.Source {
	case "api_key":
		return spec.APIKey.Header, "api_key.header"
	case "user":
		return spec.UserHeader, "user_header"
	case "tenant":
		return spec.TenantHeader, "tenant_header"
	}
	return "", ""
}

// keysOf is a descriptor's keys in order, as Check's warning shows them.
func keysOf(es []dimension.EntrySpec) string {
	keys := make([]string, len(es))
	for i, e := range es {
		keys[i] = e.DescriptorKey()
	}
	return "[" + strings.Join(keys, ", ") + "]"
}

// SetConfig installs cfg all or nothing: it builds cfg's routes first and,
// when they do not build, returns why (policy.Problems) and changes
// nothing; otherwise it calls install(cfg) — the Engine's SetConfig — and,
// when that succeeds, switches to the new routes. floodgate serve's hot
// reload goes through it, so the rules and the routes in force always come
// from the same configuration. (A Decider whose configuration changes
// otherwise is followed on the next request, keeping the previous routes,
// with an error logged once, when the new ones do not build.)
func (g *Gateway) SetConfig(cfg *policy.Config, install func(*policy.Config) error) error {
	if cfg == nil || install == nil {
		return errors.New("gateway: SetConfig needs a configuration and an install function")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := g.compile(cfg, checkOnly{cfg}); err != nil {
		return err
	}
	if err := install(cfg); err != nil {
		return err
	}
	t, err := g.compile(cfg, g.d)
	if err != nil { // only if the Decider changed its configuration meanwhile
		g.log(nil, fmt.Errorf("gateway: configuration installed: %w; keeping the previous routes", err))
		old := g.routes.Load()
		t = &routeTable{cfg: cfg, routes: old.routes, proxies: old.proxies, cors: old.cors}
	}
	g.routes.Store(t)
	return nil
}

func hostRank(r *route) int {
	switch {
	case r.host == "":
		return 2
	case r.wildcard:
		return 1
	}
	return 0
}

func methodRank(r *route) int {
	if len(r.methods) == 0 {
		return 1
	}
	return 0
}

// table returns the routes of the configuration in force.
func (g *Gateway) table(r *http.Request) *routeTable {
	t := g.routes.Load()
	if g.cfgs == nil {
		return t
	}
	cfg := g.cfgs.Config()
	if cfg == nil || cfg == t.cfg {
		return t
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if t = g.routes.Load(); t.cfg == cfg {
		return t
	}
	nt, err := g.compile(cfg, g.d)
	if err != nil {
		// Keep limiting with the routes we have; remember the config so
		// that it is not recompiled on every request.
		g.log(r, fmt.Errorf("gateway: reloaded configuration: %w; keeping the previous routes", err))
		nt = &routeTable{cfg: cfg, routes: t.routes, proxies: t.proxies, cors: t.cors}
	}
	g.routes.Store(nt)
	return nt
}

// match returns the most specific route for r, or nil.
func (t *routeTable) match(r *http.Request) *route {
	host := dimension.CanonicalHost(r.Host)
	var p string
	if r.URL != nil {
		p = r.URL.Path
	}
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	p = path.Clean(p)
	// Methods are case-sensitive (RFC 9110), but an upstream may serve a
	// "get" as a GET: it is limited as one rather than let through.
	method := r.Method
	if strings.ContainsFunc(method, func(c rune) bool { return 'a' <= c && c <= 'z' }) {
		method = strings.ToUpper(method)
	}
	for _, rt := range t.routes {
		switch {
		case rt.host == "":
		case rt.wildcard:
			if !strings.HasSuffix(host, rt.host) || len(host) == len(rt.host) {
				continue
			}
		case host != rt.host:
			continue
		}
		if len(rt.methods) > 0 && !slices.Contains(rt.methods, method) {
			continue
		}
		if rt.foldCase && underFold(p, rt.prefix) || !rt.foldCase && under(p, rt.prefix) {
			return rt
		}
	}
	return nil
}

// under reports whether p falls under prefix as dimension's routes define
// it: "/api" covers "/api" and "/api/x", not "/apix".
func under(p, prefix string) bool {
	m := strings.TrimSuffix(prefix, "/")
	return m == "" || p == m || len(p) > len(m) && p[len(m)] == '/' && strings.HasPrefix(p, m)
}

// underFold is under, ASCII case-insensitively.
func underFold(p, prefix string) bool {
	m := strings.TrimSuffix(prefix, "/")
	return m == "" || len(p) >= len(m) && strings.EqualFold(p[:len(m)], m) && (len(p) == len(m) || p[len(m)] == '/')
}

// ServeHTTP limits r by its route and proxies it when admitted. The path
// is matched decoded and cleaned, and proxied as received when it is
// canonically escaped (see rewrite); a target holding "#" gets 400.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := g.table(r)
	rt := t.match(r)
	st := &reqState{rt: rt, proxies: t.proxies}
	defer st.done.Store(true)
	corsPolicies := t.cors
	if rt != nil {
		st.proxies = rt.proxies
		corsPolicies = nil
		if rt.cors != nil {
			corsPolicies = []*corsPolicy{rt.cors}
		}
	}
	st.cors = corsFor(r, corsPolicies)
	var cw *clientWriter
	var rc *http.ResponseController
	// A preflight from an allowed origin is the browser asking, not the
	// client calling: it passes unlimited unless the block says otherwise,
	// or the route lists OPTIONS among its methods (it asks for them to be
	// limited).
	limited := rt != nil && rt.limiter != nil &&
		!(rt.cors != nil && !rt.cors.preflights && st.cors.allowOrigin != "" && preflight(r) &&
			!slices.Contains(rt.methods, http.MethodOptions))
	if g.o.client > 0 || g.o.responses != nil || limited || st.cors != nil {
		cw = &clientWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: g.o.client, st: st, g: g, req: r}
		if cw.d > 0 {
			// A deadline left by an earlier request of the connection
			// must not cut this one's first write.
			_ = cw.rc.SetWriteDeadline(time.Time{})
		}
		w, rc = cw, cw.rc
	}
	if g.o.responses != nil {
		defer func() {
			name := ""
			if rt != nil {
				name = rt.name
			}
			g.o.responses(name, cw.statusCode(), st.header.Load())
		}()
	}
	hasBody := r.Body != nil && r.Body != http.NoBody
	if hasBody {
		if rc == nil {
			rc = http.NewResponseController(w)
		}
		// The body is replaced on a copy of the request: the server's
		// keeps its own, which net/http looks at after the handler. An
		// Expect: 100-continue body never asked for is then skipped
		// (the connection closed); hidden behind clientBody, it was read
		// for a body that the client, waiting on 100 Continue, never
		// sent, and the answer never left.
		r = r.WithContext(r.Context())
		r.Body = &clientBody{ReadCloser: r.Body, rc: rc, d: g.o.client, st: st} // as http.MaxBytesReader is used
	}
	if hasBody || cw != nil && cw.d > 0 {
		defer func() {
			// Any other body left unread (a refused request, an upstream
			// that timed out before reading it) is read by net/http, up
			// to 256 KB, before the answer is written, with no deadline
			// of its own: a client that declared a body and sent none
			// held the connection, and its goroutine, as long as it
			// liked. That read ends by the client timeout, or
			// unreadBodyTimeout without one (a body timed out already has
			// a deadline in the past); the server clears the deadline
			// before it reads the next request.
			end := time.Now()
			if hasBody && !st.bodyEOF.Load() && !st.bodyTimedOut.Load() {
				end = end.Add(cmp.Or(max(g.o.client, 0), unreadBodyTimeout))
				_ = rc.SetReadDeadline(end)
			}
			if cw != nil && cw.d > 0 {
				// The last write, which the server makes after the
				// handler and that read, gets a fresh deadline.
				_ = rc.SetWriteDeadline(end.Add(g.o.client))
			}
		}()
	}
	if r.RequestURI == "*" && r.Method != http.MethodOptions {
		// "*" names the server, for OPTIONS only (RFC 9112 §3.2.4); nginx
		// answers any other method 400 too.
		middleware.WriteProblemFor(w, r, middleware.Problem{
			Status: http.StatusBadRequest,
			Title:  http.StatusText(http.StatusBadRequest),
			Detail: "the request target * is for OPTIONS only",
		})
		return
	}
	if strings.IndexByte(r.RequestURI, '#') >= 0 {
		// A fragment is never part of a request target (RFC 9112 §3.2):
		// the route was matched on a path holding "#x", while an upstream
		// that parses the target as a URL cuts it there ("/admin#x" is
		// "/admin" to Node's new URL()), and likewise a query.
		middleware.WriteProblemFor(w, r, middleware.Problem{
			Status: http.StatusBadRequest,
			Title:  http.StatusText(http.StatusBadRequest),
			Detail: "a request target has no fragment (#)",
		})
		return
	}
	if up := upgradeType(r.Header); g.h2c && up != "" && !strings.EqualFold(up, "h2c") {
		// HTTP/2 has no Upgrade (RFC 9113 §8.6): the transport would
		// refuse the request, and without the field the upstream would
		// answer as to a plain request, which a websocket client cannot
		// use. Answered before the limits: it could never pass.
		g.noUpgrade(r, rt, up)
		middleware.WriteProblemFor(w, r, middleware.Problem{
			Status:   http.StatusBadGateway,
			Title:    http.StatusText(http.StatusBadGateway),
			Detail:   "the upstream speaks HTTP/2 only (h2c), which has no protocol upgrade: a websocket cannot be proxied to it",
			Instance: r.URL.EscapedPath(),
		})
		return
	}
	if limited {
		var admitted func(policy.Response)
		if len(rt.adaptive) > 0 {
			admitted = st.decided
		}
		done, pass := rt.limiter.CheckAdmitted(w, asForwarded(r, rt), admitted)
		if !pass {
			return
		}
		defer done()
		st.release = done
		if h := w.Header(); len(h) > 0 {
			st.fields = make([]field, 0, len(h))
			for k, v := range h {
				// Clipped: an append to a field put back copies it.
				st.fields = append(st.fields, field{k, slices.Clip(v)})
			}
		}
	}
	ctx := context.WithValue(r.Context(), ctxKey{}, st)
	if g.o.timeout > 0 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		st.d = g.o.timeout
		st.timer = time.AfterFunc(g.o.timeout, func() { cancel(errUpstreamTimeout) })
		defer st.timer.Stop()
	}
	// Deferred: a body the upstream cuts short after the header makes
	// ReverseProxy abort the response with panic(http.ErrAbortHandler),
	// and that failure is a sample too.
	defer func() {
		if st.fed != 0 || st.more != nil {
			g.feed(st)
		}
	}()
	g.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// field is a header field: its canonical name and its values.
type field struct {
	name   string
	values []string
}

// asForwarded is r as the upstream will get it in the header fields the
// route rt reads: without the fields its Connection field names, which
// are hop-by-hop (RFC 9110 §7.6.1) and which ReverseProxy drops, and,
// from a peer rt does not trust as a proxy, with the forwarding fields
// rewrite sends, whatever the client wrote or left out: X-Real-IP and
// X-Forwarded-For the peer, X-Forwarded-Host and -Proto the gateway's
// own, Forwarded the gateway's node when it is the configured header,
// the other address fields (clientAddrHeaders) absent. Keyed on such a
// field (header:X-API-Key named in Connection, header:True-Client-IP,
// header:X-Real-IP left out), a client would be limited by a value of
// its choice, or not at all, while the upstream saw another. Connection's
// "upgrade" and "keep-alive" tokens are left (Upgrade goes on for a
// protocol upgrade, Keep-Alive is dropped anyway), and so, from a
// trusted proxy, are the fields rewrite passes on from its request
// (X-Forwarded-For, -Host and -Proto; Forwarded when it is the
// configured header). For a route keyed by a WithUser or WithTenant
// function, which may read any field, the fields the request holds are
// so treated, and one it left out is filled in only when the route's
// descriptors name it. r itself, without allocating, when every field
// the route reads is as the upstream gets it.
func asForwarded(r *http.Request, rt *route) *http.Request {
	if len(rt.reads) == 0 && !rt.readsAny {
		return r
	}
	read := func(k string) bool { return rt.readsAny || slices.Contains(rt.reads, k) }
	var h http.Header
	set := func(k, v string) { // v "": absent
		if h == nil {
			h = r.Header.Clone()
			if h == nil {
				h = http.Header{}
			}
		}
		if v == "" {
			delete(h, k)
		} else {
			h[k] = []string{v}
		}
	}
	peer, ok := peerAddr(r)
	trustedPeer := ok && trusted(rt.proxies, peer)
	for _, v := range r.Header["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			tok = strings.TrimSpace(tok)
			if tok == "" || strings.EqualFold(tok, "upgrade") || strings.EqualFold(tok, "keep-alive") {
				continue
			}
			// Each token against the fields the route reads, not
			// against every field of the request: tokens times fields
			// of a header near net/http's 1 MB limit held a core for
			// minutes.
			if rt.readsAny {
				if k := http.CanonicalHeaderKey(tok); r.Header[k] != nil && !(trustedPeer && passedOn(k, rt.proxies)) {
					set(k, "")
				}
				continue
			}
			for _, k := range rt.reads {
				if strings.EqualFold(k, tok) && r.Header[k] != nil && !(trustedPeer && passedOn(k, rt.proxies)) {
					set(k, "")
				}
			}
		}
	}
	if !trustedPeer {
		proto := "http"
		if r.TLS != nil {
			proto = "https"
		}
		for _, k := range forwardingHeaders {
			if !read(k) {
				continue
			}
			cur := r.Header
			if h != nil {
				cur = h
			}
			v := cur[k]
			// A field left out is filled in only for a route that names
			// it: for one keyed by a WithUser or WithTenant function,
			// whatever it reads, every request would be copied.
			if len(v) == 0 && !slices.Contains(rt.reads, k) {
				continue
			}
			want := ""
			switch k {
			case "X-Real-Ip", "X-Forwarded-For":
				if ok {
					want = peer.String()
				}
			case "X-Forwarded-Host":
				want = r.Host
			case "X-Forwarded-Proto":
				want = proto
			case "Forwarded":
				if ok && rt.proxies.Header == dimension.Forwarded {
					want = "for=" + forwardedNode(peer) + ";host=" + strconv.Quote(r.Host) + ";proto=" + proto
				}
			}
			if len(v) == 0 && want == "" || len(v) == 1 && v[0] == want {
				continue
			}
			set(k, want)
		}
	}
	if h == nil {
		return r
	}
	r2 := *r
	r2.Header = h
	return &r2
}

// passedOn reports whether rewrite passes the field k (canonical) on from
// a trusted proxy's request even when its Connection field names it.
func passedOn(k string, px dimension.Proxies) bool {
	switch k {
	case "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
		return true
	case "Forwarded":
		return px.Header == dimension.Forwarded
	}
	return false
}

// fieldsRead are the header fields, canonical, that spec's descriptors
// read, and whether a function option may read any (all): userFn and tenantFn
// say that the user and tenant sources are WithUser's and WithTenant's.
func fieldsRead(spec *dimension.Spec, userFn, tenantFn bool) (names []string, all bool) {
	add := func(n string) {
		if n = http.CanonicalHeaderKey(n); n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, d := range spec.Descriptors {
		for _, e := range d.Entries {
			kind, name, hasName := strings.Cut(e.Source, ":")
			switch {
			case hasName && kind == "header":
				add(name)
			case e.Source == "api_key":
				add(spec.APIKey.Header)
			case e.Source == "user" && userFn, e.Source == "tenant" && tenantFn:
				all = true
			case e.Source == "user":
				add(spec.UserHeader)
			case e.Source == "tenant":
				add(spec.TenantHeader)
			}
		}
	}
	return names, all
}

// forwardingHeaders are the fields, canonical, that rewrite sets, drops
// or replaces on a request from a peer the gateway does not trust.
var forwardingHeaders = func() []string {
	hs := []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}
	for _, h := range clientAddrHeaders {
		hs = append(hs, http.CanonicalHeaderKey(h))
	}
	return hs
}()

// clientWriter is the response to the client: each write must make
// progress within d (nginx's send_timeout), else it fails and the
// response is aborted.
type clientWriter struct {
	http.ResponseWriter
	rc     *http.ResponseController
	d      time.Duration
	st     *reqState
	g      *Gateway
	req    *http.Request
	logged atomic.Bool
	status int // the response's status, once written (101 for an upgrade)
	// refill is set by an informational response (100 Continue, 103
	// Early Hints) the upstream sends, and done by the next Header: it
	// puts st.fields back, as ReverseProxy clears the header once it
	// has passed a 1xx on, and the final response then lacked them.
	// ReverseProxy orders the transport's goroutine that passes a 1xx on
	// with its own.
	refill bool
}

// Header is the response's header, with the gateway's fields put back
// after an informational response cleared it.
func (w *clientWriter) Header() http.Header {
	h := w.ResponseWriter.Header()
	if w.refill {
		w.refill = false
		for _, f := range w.st.fields {
			h[f.name] = f.values
		}
	}
	return h
}

// deadline bounds the next write by the client timeout, when there is one
// (d is 0 when the writer only records the status, for WithResponses).
func (w *clientWriter) deadline() {
	if w.d > 0 {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
	}
}

// statusCode is the status the client was sent: the one written, 200 when
// the handler wrote none (net/http's), or 101 for an upgrade.
func (w *clientWriter) statusCode() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// stalled logs, once, a write that failed on the deadline.
func (w *clientWriter) stalled(err error) {
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && !w.logged.Swap(true) {
		w.g.log(w.req, fmt.Errorf("gateway: the client took nothing of the response for %v (client timeout); response aborted: %w", w.d, err))
	}
}

func (w *clientWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.own()
		w.status = code
	}
	w.deadline() // a 1xx goes out at once
	w.ResponseWriter.WriteHeader(code)
	if code < 200 && code != http.StatusSwitchingProtocols && w.st.fields != nil {
		w.refill = true
	}
}

func (w *clientWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.own()
		w.status = http.StatusOK
	}
	w.deadline()
	n, err := w.ResponseWriter.Write(p)
	w.stalled(err)
	return n, err
}

// own sets the CORS fields on the response, before its header is written,
// when it is the gateway's own: the upstream's header is not in
// (modifyResponse sets st.header first), and a cors block applies.
func (w *clientWriter) own() {
	if w.st.cors != nil && !w.st.header.Load() {
		w.g.ownCORS(w.ResponseWriter.Header(), w.st.cors)
	}
}

// FlushError flushes what is buffered, within the deadline; ReverseProxy
// flushes streaming responses through it (http.ResponseController).
func (w *clientWriter) FlushError() error {
	w.deadline()
	err := w.rc.Flush()
	w.stalled(err)
	return err
}

// Hijack hands over the connection of a protocol upgrade with each of its
// writes bounded as the response's are, and its reads not at all: an idle
// websocket stays open, one whose client stops reading what the upstream
// sends is closed.
func (w *clientWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := w.rc.Hijack()
	if err != nil {
		return nil, nil, err
	}
	if w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	if w.d <= 0 {
		return conn, brw, nil
	}
	_ = conn.SetDeadline(time.Now().Add(w.d)) // for the 101, written through brw
	_ = conn.SetReadDeadline(time.Time{})
	return &clientConn{Conn: conn, w: w}, brw, nil
}

func (w *clientWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// clientConn is an upgraded connection whose writes must make progress
// within the client timeout.
type clientConn struct {
	net.Conn
	w *clientWriter
}

func (c *clientConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.w.d))
	n, err := c.Conn.Write(p)
	c.w.stalled(err)
	return n, err
}

// CloseWrite passes the upstream's end of stream on (ReverseProxy uses it
// when the connection has it).
func (c *clientConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// clientBody is the request body: it notes its end, and each read must
// get something within d, when d > 0 (nginx's client_body_timeout), else
// the request ends with 408. A timer,
// not a standing read deadline, bounds each read: it marks the request
// before the read fails (the failure cancels the request's context, which
// the error handler must not take for a client that went away), and the
// connection keeps no deadline that would cut the server's background
// read during a long response, or the connection's next request.
type clientBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	d     time.Duration
	st    *reqState
	timer *time.Timer
}

func (b *clientBody) Read(p []byte) (int, error) {
	timed := b.d > 0 && !b.st.done.Load()
	if timed && b.timer == nil {
		b.timer = time.AfterFunc(b.d, b.expire)
	} else if timed {
		b.timer.Reset(b.d)
	}
	n, err := b.ReadCloser.Read(p)
	if timed {
		b.timer.Stop()
	}
	if err == io.EOF {
		b.st.bodyEOF.Store(true)
	}
	if err != nil && b.st.bodyTimedOut.Load() {
		return n, fmt.Errorf("%w: nothing of the request body for %v: %w", errClientTimeout, b.d, err)
	}
	if err != nil && err != io.EOF && !errors.Is(err, http.ErrBodyReadAfterClose) {
		// The client's side failed (a read after the transport closed
		// the body, when the upstream failed, is not the client's).
		e := &clientBodyError{err: err}
		if !b.st.bodyErr.CompareAndSwap(nil, e) {
			e = b.st.bodyErr.Load()
		}
		return n, e
	}
	return n, err
}

// expire ends a read that waited d: the read fails on a deadline in the
// past.
func (b *clientBody) expire() {
	b.st.bodyTimedOut.Store(true)
	_ = b.rc.SetReadDeadline(time.Unix(1, 0))
}

func stateOf(r *http.Request) *reqState {
	st, _ := r.Context().Value(ctxKey{}).(*reqState)
	return st
}

// rewrite builds the upstream request: the upstream URL joined with the
// request's path (as received when it is canonically escaped), its
// trailers, and the forwarding headers carrying the chain the gateway trusts, the same on every path (routed or not): a
// trusted proxy's X-Forwarded-For (and Forwarded, when that is the
// configured header) kept with the peer appended; an untrusted peer's
// replaced by the peer alone (a client's own header is not passed on as
// if a proxy had written it). A trusted proxy's X-Forwarded-Host and
// X-Forwarded-Proto are kept too; anyone else's are the gateway's.
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(g.upstream)
	if pr.In.RequestURI == "*" { // OPTIONS * (ServeHTTP refuses the other methods): the server's, not a path's
		pr.Out.URL.Opaque = "*"
	}
	// Any other path goes as url.URL writes it: as received when every
	// byte is one Go's url escaping leaves as is in a path (unreserved,
	// sub-delims, ":", "@", "/", "%" of an escape), re-encoded otherwise
	// ("\" as %5C, "|" as %7C, a "%2F" then as "/"). Those bytes are not
	// passed raw because upstreams disagree on them with the route match:
	// a WHATWG URL parser (Node, Deno, Bun) reads "\" as "/" and resolves
	// "/x/..\admin" to "/admin", which the gateway matched under "/x".
	// A path starting with "//" goes with one leading "/": a WHATWG parser
	// reads "//admin" as the host "admin" and the path "/", where the
	// gateway matched "/admin".
	if u := pr.Out.URL; strings.HasPrefix(u.Path, "//") {
		u.Path = "/" + strings.TrimLeft(u.Path, "/")
		if u.RawPath != "" {
			u.RawPath = "/" + strings.TrimLeft(u.RawPath, "/")
		}
	}

	// The server fills the inbound request's trailer map when the body
	// has been read to its end, and the transport writes the outbound
	// one's after the body: sharing the map passes the values on
	// (ReverseProxy's copy is made before they arrive).
	if pr.In.Trailer != nil {
		pr.Out.Trailer = pr.In.Trailer
	}
	if g.o.preserveHost {
		pr.Out.Host = pr.In.Host
	}
	// A client's offer to switch to h2c (curl --http2 on an http:// URL)
	// was made to the gateway, which declines it. Passed on, an upstream
	// that takes it would switch the connection to HTTP/2, spliced
	// through as a websocket is, and every request the client then sent
	// on it would reach the upstream unlimited. The request goes as a
	// plain one. The offer's HTTP2-Settings field belongs to the
	// connection too (RFC 7540 §3.2.1), but ReverseProxy drops it only
	// when Connection names it: a client that leaves it out of Connection
	// would hand it on to an upstream that looks for the field and not
	// for its name in Connection. (x/net's h2c handler wants the name in
	// Connection, which ReverseProxy sends as "Upgrade" alone, so it
	// never took the offer through the gateway.)
	if strings.EqualFold(upgradeType(pr.Out.Header), "h2c") {
		pr.Out.Header.Del("Upgrade")
		pr.Out.Header.Del("Connection")
	}
	pr.Out.Header.Del("Http2-Settings")
	st := stateOf(pr.In)
	var px dimension.Proxies
	if st != nil {
		px = st.proxies
	}
	peer, ok := peerAddr(pr.In)
	trustedPeer := ok && trusted(px, peer)
	if trustedPeer {
		if v := pr.In.Header["X-Forwarded-For"]; len(v) > 0 {
			pr.Out.Header["X-Forwarded-For"] = slices.Clone(v)
		}
	}
	pr.SetXForwarded()
	if trustedPeer {
		// A trusted proxy in front (a TLS load balancer) knows the scheme
		// and host the client used; the gateway only sees its own hop.
		for _, h := range []string{"X-Forwarded-Host", "X-Forwarded-Proto"} {
			if v := pr.In.Header[h]; len(v) > 0 {
				pr.Out.Header[h] = slices.Clone(v)
			}
		}
	} else {
		// A client's own claims about its address are not passed on as
		// if a proxy the gateway trusts had written them, whatever
		// header the section reads: X-Real-IP becomes the peer (as
		// nginx's proxy_set_header X-Real-IP $remote_addr), the others
		// are dropped.
		for _, h := range clientAddrHeaders {
			pr.Out.Header.Del(h)
		}
		if ok {
			pr.Out.Header.Set("X-Real-IP", peer.String())
		}
	}
	if px.Header == dimension.Forwarded {
		var chain []string
		if trustedPeer {
			chain = slices.Clone(pr.In.Header["Forwarded"])
		}
		if ok {
			proto := "http"
			if pr.In.TLS != nil {
				proto = "https"
			}
			chain = append(chain, "for="+forwardedNode(peer)+";host="+strconv.Quote(pr.In.Host)+";proto="+proto)
		}
		if len(chain) > 0 {
			pr.Out.Header.Set("Forwarded", strings.Join(chain, ", "))
		}
	}
	if st != nil && st.timer != nil && pr.Out.Body != nil && pr.Out.Body != http.NoBody {
		pr.Out.Body = &progressBody{ReadCloser: pr.Out.Body, st: st}
	}
	if st != nil && (st.fed != 0 || st.more != nil) {
		st.sent = time.Now()
	}
}

// upgradeType is the protocol a request asks to switch to ("websocket"),
// "" when none: its Upgrade field when Connection lists upgrade, as
// ReverseProxy reads it.
func upgradeType(h http.Header) string {
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}

// clientAddrHeaders are the fields that claim a client's address, dropped
// from a peer the gateway does not trust. ReverseProxy drops the
// X-Forwarded-* fields and Forwarded before rewrite: SetXForwarded sets the
// former, rewrite rebuilds Forwarded when it is the configured header.
var clientAddrHeaders = []string{"X-Real-IP", "True-Client-IP", "X-Client-IP",
	"X-Cluster-Client-IP", "CF-Connecting-IP", "Fastly-Client-IP", "X-Original-Forwarded-For"}

// forwardedNode is RFC 7239's node for an address: IPv6 quoted in
// brackets.
func forwardedNode(a netip.Addr) string {
	if a.Is6() {
		return `"[` + a.String() + `]"`
	}
	return a.String()
}

// progressBody is the request body sent upstream: the upstream timer is
// stopped while a read waits on the client (a slow client is the client
// timeout's business, not the upstream's) and restarted after each piece,
// until the response header is in: nginx's proxy_read_timeout starts once
// the request is sent.
type progressBody struct {
	io.ReadCloser
	st *reqState
}

func (b *progressBody) Read(p []byte) (int, error) {
	if b.st.header.Load() {
		return b.ReadCloser.Read(p)
	}
	b.st.timer.Stop()
	n, err := b.ReadCloser.Read(p)
	b.st.timerMu.Lock()
	if !b.st.header.Load() {
		b.st.timer.Reset(b.st.d)
	}
	b.st.timerMu.Unlock()
	return n, err
}

// upstreamBody is the response body. With an upstream timeout, the timer
// runs only while a read waits on the upstream, not while the client is
// slow to take what was read. A read that fails, other than at the end of
// the body, because the client went away or because the client's request
// body failed (the transport then closes the upstream connection), is an
// upstream failure after the header: reported once (the response is then
// cut off).
type upstreamBody struct {
	io.ReadCloser
	st     *reqState
	g      *Gateway
	req    *http.Request
	failed bool
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.st.timer != nil {
		b.st.timer.Reset(b.st.d)
	}
	n, err := b.ReadCloser.Read(p)
	if b.st.timer != nil {
		b.st.timer.Stop()
	}
	if err != nil && err != io.EOF && !b.failed {
		b.failed = true
		ctx := b.req.Context()
		switch {
		case context.Cause(ctx) == errUpstreamTimeout:
			b.st.failedUpstream()
			b.g.upstreamFailed(b.req, ReasonTimeout, fmt.Errorf("the response body stalled for longer than %v (--upstream-timeout); closing the connection", b.st.d))
		case ctx.Err() != nil: // the client went away, or the server is stopping
		case b.st.clientBodyErr(err) != nil:
			// The client's body failed while the response came: the
			// transport closed the upstream connection on it.
			b.st.clientFault()
			b.g.clientBodyFailed(b.req, b.st, b.st.clientBodyErr(err))
		default:
			b.st.failedUpstream()
			b.g.upstreamFailed(b.req, reasonOf(err, false), fmt.Errorf("the response body failed after the header; closing the connection: %w", err))
		}
	}
	return n, err
}

// upgradedBody is the upstream's side of a protocol upgrade (a
// websocket): its end releases the request's concurrency slots. The
// proxied connection is over when either side closes, but ReverseProxy
// passes the upstream's end on to the client as a half-close and waits
// for the client to close its side too: a client that kept it open held
// the key's slot as long as it liked. (The client's end needs nothing:
// the upstream's side has no CloseWrite, so ReverseProxy returns at
// once.) It has no CloseWrite either, as the transport's body it wraps.
type upgradedBody struct {
	io.ReadWriteCloser
	release func()
}

func (b *upgradedBody) Read(p []byte) (int, error) {
	n, err := b.ReadWriteCloser.Read(p)
	if err != nil {
		b.release()
	}
	return n, err
}

func peerAddr(r *http.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap().WithZone(""), true
}

func trusted(p dimension.Proxies, a netip.Addr) bool {
	for _, pfx := range p.Trusted {
		if pfx.Contains(a) {
			return true
		}
	}
	return false
}

// modifyResponse stops the upstream timer at the header (a websocket's is
// never bounded, a body's reads are), wraps the body to report its
// failures (upstreamBody), and keeps the gateway's single-valued
// fields authoritative: the upstream's X-RateLimit-Limit, -Remaining and
// -Reset are dropped when the gateway set its own. The IETF fields are
// lists, so the upstream's members are kept beside the gateway's
// (draft-ietf-httpapi-ratelimit-headers-10 lets a list span several field
// lines).
func (g *Gateway) modifyResponse(res *http.Response) error {
	if res.Request == nil { // a RoundTripper that does not set it
		return nil
	}
	st := stateOf(res.Request)
	if st == nil {
		return nil
	}
	if st.timer != nil {
		st.timerMu.Lock()
		st.header.Store(true)
		st.timer.Stop()
		st.timerMu.Unlock()
	} else {
		st.header.Store(true) // WithResponses: the upstream answered
	}
	st.answered(res)
	g.upstreamCORS(res.Header, st.cors)
	if res.StatusCode != http.StatusSwitchingProtocols && res.Body != nil && res.Body != http.NoBody {
		res.Body = &upstreamBody{ReadCloser: res.Body, st: st, g: g, req: res.Request}
	}
	if rwc, ok := res.Body.(io.ReadWriteCloser); ok && res.StatusCode == http.StatusSwitchingProtocols && st.release != nil {
		res.Body = &upgradedBody{ReadWriteCloser: rwc, release: st.release}
	}
	if st.rt == nil || st.rt.limiter == nil {
		return nil
	}
	set := g.o.hdr.Set
	if set == 0 {
		set = headers.Default
	}
	if set&headers.XRateLimit == 0 {
		return nil
	}
	// Only the gateway's own replace them, all three: the upstream's
	// Reset beside the gateway's Limit would describe two limits as one.
	if slices.ContainsFunc(st.fields, func(f field) bool { return slices.Contains(g.xNames[:], f.name) }) {
		for _, name := range g.xNames {
			delete(res.Header, name)
		}
	}
	return nil
}

// upstreamError answers a request the upstream did not: 502, or 504 when
// it timed out, with a problem body saying so without naming the upstream
// or the error (they are internal: the error log has them, at most once per
// cause per UpstreamLogInterval). A client that went away gets nothing; one
// that sent its body too slowly, 408; one whose body could not be read
// (malformed, cut short, reset), 400, or 413 over an outer handler's limit
// (http.MaxBytesHandler).
func (g *Gateway) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if st := stateOf(r); st != nil && st.bodyTimedOut.Load() || errors.Is(err, errClientTimeout) {
		// The client is at fault, not the upstream: the read of its body
		// may have cancelled the request before the error came back, and
		// what came back (a cancelled request, the transport's write to
		// the upstream) is a consequence, not the cause.
		st.clientFault()
		g.log(r, fmt.Errorf("%w: nothing of the request body for %v", errClientTimeout, g.o.client))
		middleware.WriteProblemFor(w, r, middleware.Problem{
			Status:   http.StatusRequestTimeout,
			Title:    http.StatusText(http.StatusRequestTimeout),
			Detail:   "the request body did not arrive in time",
			Instance: r.URL.EscapedPath(),
		})
		return
	}
	st := stateOf(r)
	if be := st.clientBodyErr(err); be != nil {
		// The read of the client's body failed, not the upstream: what
		// the transport returned (its write of the body, a cancelled
		// request) follows from it. It is answered even when the
		// request's context is done: a failed read of the connection, a
		// half-close after a short body included, cancels it, and such a
		// client still reads the answer.
		st.clientFault()
		g.clientBodyFailed(r, st, be)
		status, detail := http.StatusBadRequest, "the request body was malformed or cut short"
		if mbe := (*http.MaxBytesError)(nil); errors.As(be, &mbe) {
			status, detail = http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is larger than %d bytes", mbe.Limit)
		}
		middleware.WriteProblemFor(w, r, middleware.Problem{
			Status:   status,
			Title:    http.StatusText(status),
			Detail:   detail,
			Instance: r.URL.EscapedPath(),
		})
		return
	}
	timedOut := context.Cause(r.Context()) == errUpstreamTimeout
	if !timedOut && r.Context().Err() != nil && errors.Is(err, context.Canceled) {
		st.clientFault() // the client went away: no sample
		return
	}
	st.failedUpstream()
	status, detail := http.StatusBadGateway, "the upstream could not be reached"
	var ne net.Error
	if timedOut || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		status, detail = http.StatusGatewayTimeout, "the upstream did not answer in time"
		if timedOut {
			err = fmt.Errorf("no answer within %v (--upstream-timeout): %w", g.o.timeout, err)
		}
	}
	reason := reasonOf(err, timedOut)
	switch {
	case reason == ReasonConnect || reason == ReasonTimeout:
	case g.h2c && (strings.Contains(err.Error(), "HTTP/1.1") || strings.Contains(err.Error(), "could not be established")):
		// An HTTP/1.1 server answers the HTTP/2 preface with an error
		// and closes. Go's HTTP/2 client reads the answer as a frame
		// too large, "note that the frame header looked like an
		// HTTP/1.1 header", or, when the connection was closed before
		// the request got a stream, says only that it "could not be
		// established".
		err = fmt.Errorf("%w (no HTTP/2 connection: an h2c:// upstream must speak HTTP/2 without TLS, with prior knowledge; one that speaks only HTTP/1.1 answers in HTTP/1.1 and closes: give it as http://)", err)
	case g.upstream.Scheme == "https" && upgradeType(r.Header) != "":
		err = fmt.Errorf("%w (a protocol upgrade such as a websocket goes to an https:// upstream over HTTP/1.1, which an upstream that speaks only HTTP/2 refuses)", err)
	}
	g.upstreamFailed(r, reason, err)
	middleware.WriteProblemFor(w, r, middleware.Problem{
		Status:   status,
		Title:    http.StatusText(status),
		Detail:   detail,
		Instance: r.URL.EscapedPath(), // a URI reference (RFC 9457): "/x%20y", not "/x y"
	})
}

// clientBodyErr is the failed read of the client's body behind the
// request's failure, nil when the body did not fail.
func (st *reqState) clientBodyErr(err error) *clientBodyError {
	if st != nil {
		if be := st.bodyErr.Load(); be != nil {
			return be
		}
	}
	var be *clientBodyError
	if errors.As(err, &be) {
		return be
	}
	return nil
}

// clientBodyFailed logs a request whose body failed through its client as
// the client's (not counted as an upstream failure), at most once per
// cause per route per UpstreamLogInterval: a client sending broken bodies
// makes no line per request.
func (g *Gateway) clientBodyFailed(r *http.Request, st *reqState, be *clientBodyError) {
	if g.o.errLog == nil {
		return
	}
	route := "a request no route matches"
	if st != nil && st.rt != nil {
		route = fmt.Sprintf("route %q", st.rt.name)
	}
	ok, skipped := g.bodyLog.pass(route + "|" + causeVaries.ReplaceAllString(be.err.Error(), "#"))
	if !ok {
		return
	}
	err := fmt.Errorf("gateway: %s: the client's request body could not be read (the client's fault, not an upstream failure): %w", route, be.err)
	if skipped > 0 {
		err = fmt.Errorf("%w (%d more like it since the last report)", err, skipped)
	}
	g.log(r, err)
}

func (g *Gateway) log(r *http.Request, err error) {
	if g.o.errLog != nil {
		g.o.errLog(r, err)
	}
}
