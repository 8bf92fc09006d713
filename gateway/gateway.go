package gateway

import (
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
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
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
}

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
// http.DefaultTransport).
func WithTransport(rt http.RoundTripper) Option { return func(o *options) { o.transport = rt } }

// WithFlushInterval sets how often a response body is flushed to the client
// while it is copied (default 0: at the end, except streaming responses —
// text/event-stream or without a Content-Length — which are flushed after
// every write; negative: after every write).
func WithFlushInterval(d time.Duration) Option { return func(o *options) { o.flush = d } }

// WithErrorLog receives the errors the gateway answers for: upstream
// failures (502) and the middleware's (default: none).
func WithErrorLog(fn func(*http.Request, error)) Option { return func(o *options) { o.errLog = fn } }

// WithUser and WithTenant supply the user and tenant sources of routes
// whose section sets no user_header / tenant_header (default: none; such a
// route is then an error).
func WithUser(fn func(*http.Request) string) Option { return func(o *options) { o.user = fn } }

// WithTenant: see WithUser.
func WithTenant(fn func(*http.Request) string) Option { return func(o *options) { o.tenant = fn } }

// WithPreserveHost sends the client's Host header to the upstream instead
// of the upstream URL's host (default false, as nginx's proxy_pass).
func WithPreserveHost(on bool) Option { return func(o *options) { o.preserveHost = on } }

// Gateway is a rate limiting reverse proxy: see the package documentation.
// It is safe for concurrent use.
type Gateway struct {
	d        policy.Decider
	upstream *url.URL
	o        options
	proxy    *httputil.ReverseProxy
	cfgs     interface{ Config() *policy.Config }

	mu     sync.Mutex // serialises recompiling
	routes atomic.Pointer[routeTable]
}

// routeTable is the compiled routes of one configuration, most specific
// first.
type routeTable struct {
	cfg    *policy.Config
	routes []*route
}

type route struct {
	*routeSpec
	domain  string
	order   int
	limiter *middleware.Middleware // nil: unlimited
	proxies dimension.Proxies
}

type ctxKey struct{}

// New returns the gateway: requests matching a route of cfg's gateway
// sections are decided by d in the route's domain, as middleware does
// (header fields, 429 with a problem body, wait, degrade, shadow, shaper
// delays, concurrency slots held until the response is complete), and the
// admitted ones are proxied to upstream (an http or https URL; its path
// prefixes the request's). Requests matching no route are proxied
// unlimited.
//
// When d also has Config() *policy.Config (a *policy.Engine does), the
// routes follow its hot reloads; a reloaded configuration whose routes do
// not compile keeps the previous routes and is reported to the error log.
//
// Options and defaults: WithMiddleware (none), WithHeaders (all fields,
// standard names), WithTransport (a clone of http.DefaultTransport),
// WithFlushInterval(0), WithErrorLog (none), WithUser / WithTenant (none),
// WithPreserveHost(false).
//
// It fails when upstream is not an absolute http(s) URL, when cfg declares
// no route, or when a route cannot be built (a degrade fallback that is not
// registered, a user source with neither user_header nor WithUser).
func New(cfg *policy.Config, d policy.Decider, upstream string, opts ...Option) (http.Handler, error) {
	if cfg == nil || d == nil {
		return nil, errors.New("gateway: New needs a configuration and a Decider")
	}
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("gateway: upstream %q: %w", upstream, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("gateway: upstream %q: want an absolute http:// or https:// URL with a host and no user, query or fragment", upstream)
	}
	g := &Gateway{d: d, upstream: u}
	for _, f := range opts {
		if f != nil {
			f(&g.o)
		}
	}
	g.cfgs, _ = d.(interface{ Config() *policy.Config })
	t, err := g.compile(cfg)
	if err != nil {
		return nil, err
	}
	g.routes.Store(t)

	rt := g.o.transport
	if rt == nil {
		rt = http.DefaultTransport.(*http.Transport).Clone()
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

// compile builds the route table of cfg.
func (g *Gateway) compile(cfg *policy.Config) (*routeTable, error) {
	t := &routeTable{cfg: cfg}
	mwOpts := append(slices.Clip(g.o.mw), middleware.WithHeaders(g.o.hdr))
	if g.o.errLog != nil {
		mwOpts = append(mwOpts, middleware.WithErrorLog(g.o.errLog))
	}
	for _, dom := range cfg.Domains() {
		s, _ := dom.Sections[SectionName].(*Section)
		if s == nil {
			continue
		}
		for i, rs := range s.compiled {
			r := &route{routeSpec: rs, domain: dom.Name, order: len(t.routes)}
			if rs.spec != nil {
				var xo []dimension.Option
				if g.o.user != nil && rs.spec.UserHeader == "" {
					xo = append(xo, dimension.WithUser(g.o.user))
				}
				if g.o.tenant != nil && rs.spec.TenantHeader == "" {
					xo = append(xo, dimension.WithTenant(g.o.tenant))
				}
				x, err := dimension.NewExtractor(*rs.spec, xo...)
				if err != nil {
					return nil, fmt.Errorf("gateway: domain %s (%s) routes[%d] %q: %w", dom.Name, dom.Pos, i, rs.name, err)
				}
				m, err := middleware.New(g.d, dom.Name, x, mwOpts...)
				if err != nil {
					return nil, fmt.Errorf("gateway: domain %s routes[%d] %q: %w", dom.Name, i, rs.name, err)
				}
				r.limiter, r.proxies = m, x.Proxies()
			}
			t.routes = append(t.routes, r)
		}
	}
	if len(t.routes) == 0 {
		return nil, errors.New("gateway: the configuration declares no routes; add a gateway: section with routes to a domain")
	}
	slices.SortStableFunc(t.routes, func(a, b *route) int {
		if d := len(b.prefix) - len(a.prefix); d != 0 {
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
	nt, err := g.compile(cfg)
	if err != nil {
		// Keep limiting with the routes we have; remember the config so
		// that it is not recompiled on every request.
		g.log(r, fmt.Errorf("gateway: reloaded configuration: %w; keeping the previous routes", err))
		nt = &routeTable{cfg: cfg, routes: t.routes}
	}
	g.routes.Store(nt)
	return nt
}

// match returns the most specific route for r, or nil.
func (t *routeTable) match(r *http.Request) *route {
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(host, ".")
	var p string
	if r.URL != nil {
		p = r.URL.Path
	}
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	p = path.Clean(p)
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
		if len(rt.methods) > 0 && !slices.Contains(rt.methods, r.Method) {
			continue
		}
		if under(p, rt.prefix) {
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

// ServeHTTP limits r by its route and proxies it when admitted.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := g.table(r).match(r)
	if rt == nil || rt.limiter == nil {
		g.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, rt)))
		return
	}
	done, pass := rt.limiter.Check(w, r)
	if !pass {
		return
	}
	defer done()
	g.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, rt)))
}

// rewrite builds the upstream request: the upstream URL joined with the
// request's path, X-Forwarded-For carrying the chain only when the peer is
// a trusted proxy (a client's own header is not passed on as if true).
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(g.upstream)
	if g.o.preserveHost {
		pr.Out.Host = pr.In.Host
	}
	if rt, _ := pr.In.Context().Value(ctxKey{}).(*route); rt != nil && len(rt.proxies.Trusted) > 0 {
		if peer, ok := peerAddr(pr.In); ok && trusted(rt.proxies, peer) {
			if v := pr.In.Header["X-Forwarded-For"]; len(v) > 0 {
				pr.Out.Header["X-Forwarded-For"] = slices.Clone(v)
			}
		}
	}
	pr.SetXForwarded()
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

// modifyResponse keeps the gateway's single-valued fields authoritative:
// the upstream's X-RateLimit-Limit, -Remaining and -Reset are dropped when
// the gateway set its own. The IETF fields are lists, so the upstream's
// members are kept beside the gateway's (draft-ietf-httpapi-ratelimit-
// headers-10 lets a list span several field lines).
func (g *Gateway) modifyResponse(res *http.Response) error {
	if res.Request == nil { // a RoundTripper that does not set it
		return nil
	}
	rt, _ := res.Request.Context().Value(ctxKey{}).(*route)
	if rt == nil || rt.limiter == nil {
		return nil
	}
	set := g.o.hdr.Set
	if set == 0 {
		set = headers.Default
	}
	if set&headers.XRateLimit == 0 {
		return nil
	}
	n := g.o.hdr.Names
	for _, name := range []string{cmp.Or(n.Limit, "X-RateLimit-Limit"), cmp.Or(n.Remaining, "X-RateLimit-Remaining"), cmp.Or(n.Reset, "X-RateLimit-Reset")} {
		res.Header.Del(name)
	}
	return nil
}

// upstreamError answers a request the upstream did not: 502 (504 on a
// timeout) with a problem body saying what failed. A client that went away
// gets nothing.
func (g *Gateway) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
		return
	}
	g.log(r, fmt.Errorf("gateway: upstream %s: %w", g.upstream.Redacted(), err))
	status := http.StatusBadGateway
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		status = http.StatusGatewayTimeout
	}
	middleware.WriteProblem(w, middleware.Problem{
		Status:   status,
		Title:    http.StatusText(status),
		Detail:   fmt.Sprintf("the upstream %s did not answer %s %s: %v", g.upstream.Redacted(), r.Method, r.URL.Path, err),
		Instance: r.URL.Path, // the proxy only gets here with a URL
	})
}

func (g *Gateway) log(r *http.Request, err error) {
	if g.o.errLog != nil {
		g.o.errLog(r, err)
	}
}
