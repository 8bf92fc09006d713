package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store"
)

// Waiter is a Decider that can hold a request for the wait strategy itself,
// in a bounded queue (policy.Engine.DecideWait). The middleware uses it when
// the Decider has it, else it retries after the advised delay.
type Waiter interface {
	DecideWait(ctx context.Context, req policy.Request) (policy.Response, error)
}

// Releaser gives back the concurrency slots an admitted response holds
// (policy.Engine.Release). Without it, slots are only freed when their lease
// expires.
type Releaser interface {
	Release(ctx context.Context, resp policy.Response) error
}

// Refunder gives back what an admitted response charged — its units and
// its concurrency slots (policy.Engine.Refund) — for a request that does
// not go on: the middleware refunds a request whose hold for a shaper's
// delay fails (its client gave up, or its deadline comes first). Without
// it, only the slots are given back (Releaser) and the units stay spent.
type Refunder interface {
	Refund(ctx context.Context, resp policy.Response) error
}

// Renewer extends the leases of the concurrency slots an admitted response
// holds (policy.Engine.Renew). With it, the middleware renews them every
// third of their lease TTL while the request is in flight, so that a
// request that outlives the TTL (a long stream, a slow handler) keeps its
// slots; without it, they expire at the TTL even while it runs.
type Renewer interface {
	Renew(ctx context.Context, resp policy.Response) error
}

// Option configures a Middleware; see New for the defaults.
type Option func(*options)

type options struct {
	headers   headers.Options
	fallbacks map[string]http.Handler
	cost      func(*http.Request) int64
	costUnit  string
	priority  func(*http.Request) string
	failOpen  bool
	errLog    func(*http.Request, error)
	maxWait   time.Duration
	// refuseStatus: WithRefuseStatus; 0 is 429.
	refuseStatus int
	// noDescCheck: WithDescriptorCheck(false); the zero value checks.
	noDescCheck bool
	// clock: WithClock, read by ForLimiter's middleware only.
	clock func() time.Time
}

// WithHeaders chooses which header fields are written and under which
// names (default: every field under its standard name; see package
// headers). New refuses names a response cannot carry (headers.Options.Check):
// one that is not a token, which net/http would drop without a word, or
// two names of one field.
func WithHeaders(o headers.Options) Option { return func(m *options) { m.headers = o } }

// WithFallback registers the handler that serves requests a rule with
// strategy degrade and fallback: name refuses. A refused request whose
// fallback is not registered is rejected (429, or WithRefuseStatus's 503)
// and reported to the error log; New refuses such a rule when its Decider
// has a configuration to check. A gRPC call (IsGRPC) is rejected too, RESOURCE_EXHAUSTED: h's
// answer would not be a gRPC response, which its client cannot read.
// Default: none.
func WithFallback(name string, h http.Handler) Option {
	return func(m *options) {
		if m.fallbacks == nil {
			m.fallbacks = map[string]http.Handler{}
		}
		m.fallbacks[name] = h
	}
}

// WithCost sets each request's cost (policy.Request.Hits), e.g. from its
// size; 0 means 1. Default: every request costs 1. A cost in another unit
// than requests (bytes) wants WithCostUnit too, or the RateLimit-Policy
// field states the limits in requests. fn is called only for a request
// that has descriptors (New) or a key (ForLimiter).
//
// A negative cost is the server's mistake, not the client's: the request
// is answered 500 (INTERNAL to a gRPC call), neither admitted nor failed
// open (WithFailOpen), nothing charged, and WithErrorLog gets an error
// naming WithCost and the value. Beware r.ContentLength: it is -1 when
// the body's length is unknown (a chunked HTTP/1.1 body, an HTTP/2 or
// gRPC request without content-length), so a cost of r.ContentLength
// answers every such request 500. max(r.ContentLength, 0) lets such a
// body pass for a cost of 1 (0 means 1), whatever its size; to charge
// it, cap the body and charge the cap:
//
//	const maxBody = 1 << 20 // the handler reads at most this (http.MaxBytesReader)
//	middleware.WithCost(func(r *http.Request) int64 {
//		if r.ContentLength < 0 {
//			return maxBody // length unknown: charged as the most it can be
//		}
//		return r.ContentLength
//	})
//
// or refuse a body of unknown length (411 Length Required) before the
// middleware, or read the cost from a header that a trusted proxy sets
// (not one the client sets: it would write 0).
func WithCost(fn func(*http.Request) int64) Option { return func(m *options) { m.cost = fn } }

// WithCostUnit names the unit of WithCost's costs:
// headers.ContentBytes ("content-bytes") when they count bytes of
// content. RateLimit-Policy then states qu="content-bytes" on every limit
// counted in them (draft-ietf-httpapi-ratelimit-headers-10 §3.1.2), so
// that a client reads q and r in bytes; a concurrency limit keeps
// qu="concurrent-requests". It sets headers.Options.CostUnit over
// WithHeaders'. Default headers.Requests (or ""): no qu, the draft's
// default unit. New refuses any other unit, and content-bytes without
// WithCost (every request would cost 1 byte).
func WithCostUnit(unit string) Option { return func(m *options) { m.costUnit = unit } }

// WithRefuseStatus sets the status of a refusal by the limits (Reject's):
// http.StatusTooManyRequests (429, the default), the client over its
// quota, with a problem body of the draft's quota-exceeded type; or
// http.StatusServiceUnavailable (503, nginx's limit_req_status default),
// the server shedding load, with a temporary-reduced-capacity body
// (draft-ietf-httpapi-ratelimit-headers-10 §5.2). The header fields,
// Retry-After and the violated policies are the same either way, and a
// gRPC call gets the same answer whatever the status (Reject's:
// RESOURCE_EXHAUSTED). New refuses any other status.
func WithRefuseStatus(status int) Option { return func(m *options) { m.refuseStatus = status } }

// WithPriority sets each request's priority class (policy.Request.Priority),
// e.g. from its authenticated plan. Default: "" (the rules decide).
func WithPriority(fn func(*http.Request) string) Option {
	return func(m *options) { m.priority = fn }
}

// WithFailOpen lets requests pass, without header fields, when the Decider
// fails (the store is unreachable). Default false: they get 503. A
// policy.Engine over a store/resilient store applies its own failure
// policy before this one is reached, except FailUnavailable, which leaves
// the error for this option to decide.
func WithFailOpen(on bool) Option { return func(m *options) { m.failOpen = on } }

// WithErrorLog receives every error the middleware answers for: a request
// the extractor could not map, a negative cost from WithCost, a Decider
// error, a missing fallback, a
// failed release, refund or lease renewal (a failed renewal does not cut
// the request; it is retried at the next renewal). A Decider error is
// logged also when WithFailOpen lets the request pass. Default: none.
func WithErrorLog(fn func(*http.Request, error)) Option { return func(m *options) { m.errLog = fn } }

// WithMaxWait bounds how long a request may be held by the wait strategy
// and by the delay of an admission (a shaper's, a smooth limit's), on top
// of the rules' max_wait and the request context's deadline. Default 0: no
// bound of its own; New refuses a negative d. A Decider that is not
// a Waiter is retried after each advised delay until then, or for at most
// 30 s when neither this nor the context sets a bound.
func WithMaxWait(d time.Duration) Option { return func(m *options) { m.maxWait = d } }

// WithDescriptorCheck(false) lets New accept an Extractor with descriptors
// that no rule of the domain can limit (see New), e.g. one Extractor shared
// by middlewares of several domains, each limiting some of its
// descriptors; the gateway passes it and warns of such route descriptors
// itself. Default true: such a descriptor fails New.
func WithDescriptorCheck(on bool) Option { return func(m *options) { m.noDescCheck = !on } }

// Middleware limits HTTP requests by one domain of the rules. It is
// immutable and safe for concurrent use.
type Middleware struct {
	d        policy.Decider
	domain   string
	x        *dimension.Extractor
	o        options
	waiter   Waiter
	releaser Releaser
	refunder Refunder
	renewer  Renewer
	into     intoDecider
	pool     sync.Pool // *scratch
	fields   *headers.Writer
	keys     [nKeys]string // the fields' canonical names (fieldKeys)
	// lim, for a middleware of ForLimiter, decides instead of d (which
	// is then a stand-in), on the value of x's one entry; reserve: it
	// decides with Reserve (a Concurrency slot to release, a delay whose
	// failed hold gives the units back), else with AllowN.
	lim     *limiter.Limiter
	reserve bool
	// unrenewable logs once that lim's store cannot renew leases.
	unrenewable sync.Once
	// turns are the requests a shaper delayed, held in turn (holdTurn).
	turns turnQueues
}

// scratch holds one request's descriptor and status buffers between
// requests.
type scratch struct {
	dims     []dimension.Descriptor
	descs    []policy.Descriptor
	entries  []policy.Entry
	statuses policy.StatusBuffer
	// limStatus is the status of ForLimiter's decision: kept here, it
	// costs no allocation per request.
	limStatus [1]policy.Status
}

// intoDecider is a Decider that can place a response's statuses in a
// buffer the caller keeps (policy.Engine.DecideInto): the middleware's
// scratch, which saves an allocation per request.
type intoDecider interface {
	DecideInto(ctx context.Context, req policy.Request, buf *policy.StatusBuffer) (policy.Response, error)
}

// defaultFallbackWait bounds the retry loop for a Decider that cannot wait
// itself when nothing else bounds it.
const defaultFallbackWait = 30 * time.Second

// New returns a Middleware deciding with d in domain, mapping requests to
// descriptors with x. Options and their defaults:
//
//   - WithHeaders(headers.Options{}): every field, standard names
//   - WithFallback: none registered
//   - WithCost: 1 per request
//   - WithCostUnit(headers.Requests): the limits are stated in requests
//   - WithRefuseStatus(429): refusals are 429, quota-exceeded
//   - WithPriority: none
//   - WithFailOpen(false): a Decider error is a 503
//   - WithErrorLog: none
//   - WithMaxWait(0): the rules' max_wait and the request's deadline
//   - WithDescriptorCheck(true): a descriptor no rule can limit is an error
//   - WithClock: not read (ForLimiter's only)
//
// When d is a *policy.Engine (anything with Config() *policy.Config), New
// checks its configuration as it is now (a later SetConfig is checked only
// when CheckConfig is registered with the Engine's AddConfigCheck), each
// check an error that names what is wrong:
//
//   - the domain is in it (else every request would pass unlimited);
//   - every descriptor of x can be limited by some rule of the domain
//     (Limited): its keys, in order, lead down the domain's descriptor tree
//     to a rule, one of the values of an entry whose values are known
//     (a generic_key's or match entry's Value, a path's Routes, with its
//     Default) matching the rule's value. Any
//     descriptor that cannot is an error, not only when all of them cannot:
//     the library has nowhere to warn, and such a descriptor is dead
//     configuration, almost surely a misspelt key ("remote_adress") or a
//     header's name where the rules say "api_key". The error names the
//     descriptor (its index in the Spec and its keys in order), the domain
//     and the keys the domain's rules start with. WithDescriptorCheck(false)
//     skips this check;
//   - every degrade rule of the domain has its fallback registered
//     (a *MissingFallbackError).
//
// A Decider without Config is not checked.
func New(d policy.Decider, domain string, x *dimension.Extractor, opts ...Option) (*Middleware, error) {
	if d == nil {
		return nil, errors.New("middleware: New: nil Decider")
	}
	if domain == "" {
		return nil, errors.New("middleware: New: empty domain")
	}
	if x == nil {
		return nil, errors.New("middleware: New: nil Extractor")
	}
	m := &Middleware{d: d, domain: domain, x: x}
	for _, f := range opts {
		if f != nil {
			f(&m.o)
		}
	}
	if m.o.maxWait < 0 {
		return nil, fmt.Errorf("middleware: WithMaxWait(%v): must not be negative", m.o.maxWait)
	}
	for name, h := range m.o.fallbacks {
		if h == nil {
			return nil, fmt.Errorf("middleware: WithFallback(%q): nil handler", name)
		}
	}
	switch m.o.refuseStatus {
	case 0:
		m.o.refuseStatus = http.StatusTooManyRequests
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
	default:
		return nil, fmt.Errorf("middleware: WithRefuseStatus(%d): a refusal is 429 (quota exceeded) or 503 (reduced capacity)", m.o.refuseStatus)
	}
	if err := m.o.headers.Check(); err != nil {
		return nil, fmt.Errorf("middleware: WithHeaders: %w", err)
	}
	if m.o.costUnit != "" {
		m.o.headers.CostUnit = m.o.costUnit
	}
	switch u := m.o.headers.CostUnit; u {
	case "", headers.Requests:
	case headers.ContentBytes:
		if m.o.cost == nil {
			return nil, fmt.Errorf("middleware: cost unit %q without WithCost: every request would cost 1 byte", u)
		}
	default:
		return nil, fmt.Errorf("middleware: cost unit %q: want %q or %q (the draft's quota units a cost can be counted in)", u, headers.Requests, headers.ContentBytes)
	}
	m.waiter, _ = d.(Waiter)
	m.releaser, _ = d.(Releaser)
	m.refunder, _ = d.(Refunder)
	m.renewer, _ = d.(Renewer)
	m.into, _ = d.(intoDecider)
	if c, ok := d.(interface{ Config() *policy.Config }); ok {
		if err := m.CheckConfig(c.Config()); err != nil {
			return nil, err
		}
	}
	m.pool.New = func() any { return new(scratch) }
	m.fields = headers.NewWriter(m.o.headers)
	m.keys = fieldKeys(&m.o)
	return m, nil
}

// CheckConfig runs New's checks of a configuration against this
// middleware — its domain is in cfg, each of its descriptors can be limited
// by a rule (unless WithDescriptorCheck(false)), each degrade rule's
// fallback is registered — and returns the first failure. New checks only
// the configuration in force when it runs; to have a later reload refused
// rather than lift this middleware's limits silently, register this method
// with the Engine:
//
//	remove := engine.AddConfigCheck(mw.CheckConfig)
//
// and call remove when the middleware is retired (a check left registered
// keeps refusing configurations without its domain).
//
// A middleware of ForLimiter has no rules to check: it accepts any cfg.
// A nil m or a zero Middleware{} (not made by New or ForLimiter) is an
// error, saying so.
func (m *Middleware) CheckConfig(cfg *policy.Config) error {
	switch {
	case m == nil:
		return errors.New("middleware: CheckConfig on a nil *Middleware (check the error of New or ForLimiter)")
	case m.x == nil:
		return errors.New(errZero)
	}
	if m.lim != nil {
		return nil
	}
	if err := checkDomain(cfg, m.domain); err != nil {
		return err
	}
	if !m.o.noDescCheck {
		if err := checkDescriptors(cfg, m.domain, m.x.DescriptorSpecs()); err != nil {
			return err
		}
	}
	return CheckFallbacks(cfg, m.domain, m.o.fallbacks)
}

// checkDomain reports a domain that the Decider's configuration does not
// have: a middleware for it would let every request through unlimited,
// silently (a misspelt domain, or a configuration that failed to load).
func checkDomain(cfg *policy.Config, domain string) error {
	if cfg.Domain(domain) != nil {
		return nil
	}
	var names []string
	if cfg != nil {
		for _, d := range cfg.Domains() {
			names = append(names, strconv.Quote(d.Name))
		}
	}
	has := "it has no domains"
	if len(names) > 0 {
		has = "it has " + strings.Join(names, ", ")
	}
	return fmt.Errorf("middleware: domain %q is not in the configuration (%s): every request would pass unlimited", domain, has)
}

// CheckFallbacks reports the degrade rules of domain in cfg whose fallback
// is not in fallbacks, each with where it was written.
func CheckFallbacks(cfg *policy.Config, domain string, fallbacks map[string]http.Handler) error {
	dom := cfg.Domain(domain)
	if dom == nil {
		return nil
	}
	var missing []*policy.Rule
	for _, r := range dom.Rules() {
		if r.Strategy != policy.StrategyDegrade {
			continue
		}
		if _, ok := fallbacks[r.Fallback]; !ok {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		return &MissingFallbackError{Rules: missing}
	}
	return nil
}

// MissingFallbackError is the error of CheckFallbacks (and New): the
// degrade rules whose fallback is not registered, for a caller that
// reports each at its rule (the gateway does).
type MissingFallbackError struct {
	Rules []*policy.Rule
}

// Error names each rule and the fallback it wants, joined by "; ".
func (e *MissingFallbackError) Error() string {
	var b strings.Builder
	b.WriteString("middleware: ")
	for i, r := range e.Rules {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: rule %q degrades to fallback %q, which is not registered (WithFallback)", r.Pos, r.Name, r.Fallback)
	}
	return b.String()
}

// Handler wraps next: requests within their limits reach it with the
// header fields set; the others are answered as their rule's strategy says.
// Its shape fits net/http, chi's Use and most routers. A nil m, a zero
// Middleware{} (not made by New or ForLimiter: it has no Decider, domain
// nor Extractor, and limiting nothing without a word would be worse) or a
// nil next is a programming error that Handler reports at once, as
// net/http's Handle does a nil handler: it panics naming which, rather
// than the first request with a nil dereference.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	m.mustBeMade("Handler")
	if next == nil {
		panic("middleware: Handler: nil next handler")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done, pass := m.Check(w, r)
		if !pass {
			return
		}
		defer done()
		next.ServeHTTP(w, r)
	})
}

// errZero is what a zero Middleware{} answers, whichever method was
// called on it (the stack names the call).
const errZero = "middleware: a zero Middleware{}, not made by New or ForLimiter, limits nothing: make it with one of them"

// mustBeMade panics, saying what to do, when m is nil (an unchecked
// error of New or ForLimiter; the message names the method where) or a
// zero Middleware{}: every middleware New returns, ForLimiter's
// included, has an Extractor.
func (m *Middleware) mustBeMade(where string) {
	switch {
	case m == nil:
		panic("middleware: " + where + " on a nil *Middleware (check the error of New or ForLimiter)")
	case m.x == nil:
		panic(errZero)
	}
}

func nop() {}

// cancelled reports whether ctx ended other than by its deadline: its
// client went away, or a handler around the middleware cancelled it.
func cancelled(ctx context.Context) bool {
	err := ctx.Err()
	return err != nil && !errors.Is(err, context.DeadlineExceeded)
}

// detach copies statuses, which may live in a scratch buffer, for a
// response kept after Check returns.
func detach(st []policy.Status) []policy.Status {
	st = slices.Clone(st)
	for i := range st {
		st[i].Limits = slices.Clone(st[i].Limits)
	}
	return st
}

// turnMissed returns a copy of st stating the limits that delayed the
// request (a shaper's, a smooth algorithm's) as refusing it until its
// turn: the answer when the turn comes after the request's deadline or
// WithMaxWait. The request is refused and its units given back, so the
// response carries the rate limit fields like any refusal, with t (and
// X-RateLimit-Reset) the wait, not the later time the queue drains, so
// that Retry-After does not point earlier than t (draft -10 §6).
func turnMissed(st []policy.Status) []policy.Status {
	st = detach(st)
	for i := range st {
		s := &st[i]
		delayed := false
		for j := range s.Limits {
			if d := &s.Limits[j].Decision; d.Delay > 0 && !s.Limits[j].Shadow {
				d.Allowed, d.RetryAfter, delayed = false, d.Delay, true
			}
		}
		// The status's own decision is one of its limits' (the
		// tightest): refusing only when a limit that counts delayed the
		// request, or when it has no limits; a shadow rule's delay, which
		// was never held, refuses nothing.
		if d := &s.Decision; d.Delay > 0 && (delayed || len(s.Limits) == 0 && !s.Shadow) {
			d.Allowed, d.RetryAfter, delayed = false, d.Delay, true
		}
		if delayed {
			s.Code = policy.CodeOverLimit
		}
	}
	return st
}

// pathOf is r's path for problem bodies ("" for a request without a URL,
// which net/http never makes but a caller might).
func pathOf(r *http.Request) string {
	if r.URL == nil {
		return ""
	}
	return r.URL.EscapedPath() // a URI reference (RFC 9457), e.g. /x%20y
}

// Check decides r. When the request may proceed it sets the header fields
// on w and returns pass true and a done func to call once the request is
// complete (it releases concurrency slots; it is never nil). Until done is
// called, the slots the request holds are renewed every third of their
// lease TTL when the Decider is a Renewer: a timer per request that holds
// slots, none for the others. Otherwise it returns pass false, having
// written the whole response — the refusal (429, or WithRefuseStatus's
// 503), the fallback's answer, 400, 500 or 503. A request whose context
// is cancelled while it is held (by the wait strategy or a delay) is
// refused as one whose deadline passed then: the wait strategy's refusal,
// or a delay's 503 (see New's doc), what it charged given back. A nil m
// or a zero Middleware{} panics, naming the mistake, as Handler does (at
// the first request: Check has no earlier moment).
func (m *Middleware) Check(w http.ResponseWriter, r *http.Request) (done func(), pass bool) {
	m.mustBeMade("Check")
	return m.check(w, r, nil)
}

// CheckAdmitted is Check, and, when admitted is not nil and the request
// passes on a decision (not on an empty descriptor list, nor by
// WithFailOpen), calls admitted with the response before Check returns:
// its Statuses name the rules that decided the request. They may live in
// a buffer reused by the next request: admitted must not keep them. The
// gateway feeds its adaptive rules' samples from it. A nil m or a zero
// Middleware{} panics as Check's.
func (m *Middleware) CheckAdmitted(w http.ResponseWriter, r *http.Request, admitted func(policy.Response)) (done func(), pass bool) {
	m.mustBeMade("CheckAdmitted")
	return m.check(w, r, admitted)
}

// check is CheckAdmitted for a Middleware made by New or ForLimiter.
func (m *Middleware) check(w http.ResponseWriter, r *http.Request, admitted func(policy.Response)) (done func(), pass bool) {
	sc := m.pool.Get().(*scratch)
	defer m.pool.Put(sc)
	dims, err := m.x.Descriptors(r, sc.dims)
	sc.dims = dims
	if err != nil {
		return m.unmapped(w, r, err)
	}
	if len(dims) == 0 {
		return nop, true
	}
	var cost int64 // 0: the Decider's default, 1
	if m.o.cost != nil {
		if cost = m.o.cost(r); cost < 0 {
			return m.negativeCost(w, r, cost)
		}
	}
	if m.lim != nil {
		return m.checkLimiter(w, r, dims[0].Entries[0].Value, cost, &sc.limStatus, admitted)
	}
	req := policy.Request{Domain: m.domain, Descriptors: sc.convert(dims), Hits: cost}
	if m.o.priority != nil {
		req.Priority = m.o.priority(r)
	}
	ctx := r.Context()
	var resp policy.Response
	if m.into != nil {
		// resp.Statuses live in sc until Check returns.
		resp, err = m.into.DecideInto(ctx, req, &sc.statuses)
	} else {
		resp, err = m.d.Decide(ctx, req)
	}
	if err != nil {
		return m.decideFailed(w, r, err)
	}
	if resp.Code != policy.CodeOK && resp.Strategy == policy.StrategyWait {
		wctx, cancel := grpcDeadline(ctx, r)
		resp, err = m.wait(wctx, req, resp)
		cancel()
		if err != nil {
			if cancelled(ctx) && errors.Is(err, context.Canceled) {
				// The client is gone, or a handler around this one
				// cancelled the request: it is refused as one whose
				// deadline passed in the queue, so that a connection
				// still open gets a refusal and the access log says
				// so, rather than an empty 200. The Waiter gave back
				// what it had charged.
				if err != ctx.Err() {
					m.log(r, fmt.Errorf("middleware: a request cancelled while it waited: %w", err))
				}
			} else if !errors.Is(err, context.DeadlineExceeded) {
				return m.decideFailed(w, r, err)
			}
			if resp.Code == policy.CodeUnknown && len(resp.Statuses) > 0 {
				// Admitted from the queue with a Delay (a shaper's, a
				// smooth limit's) and its context ended during the
				// Waiter's hold for it: UNKNOWN, what it charged given
				// back (policy.Engine.DecideWait). Its statuses are an
				// admission's; it is answered as a delay's failed hold.
				m.turnAfterDeadline(w, r, resp)
				return nop, false
			}
			resp.Code, resp.Strategy = policy.CodeOverLimit, policy.StrategyReject
		}
	}
	if resp.Code == policy.CodeOK {
		if resp.Delay > 0 && !m.holdTurn(ctx, r, req, resp) {
			m.refund(r, resp) // in sc's lifetime: resp may live in it
			m.turnAfterDeadline(w, r, resp)
			return nop, false
		}
		m.writeFields(w.Header(), resp.Statuses)
		if admitted != nil {
			admitted(resp)
		}
		if (m.releaser != nil || m.renewer != nil) && resp.Holds() {
			// A copy, so that resp itself stays on the stack when nothing
			// is held (the common case).
			h := &heldSlots{m: m, r: r, resp: resp}
			h.resp.Statuses = detach(resp.Statuses)
			h.start()
			return h.done, true
		}
		return nop, true
	}
	m.writeFields(w.Header(), resp.Statuses)
	if resp.Strategy == policy.StrategyDegrade && !IsGRPC(r) {
		if fb := m.o.fallbacks[resp.Fallback]; fb != nil {
			fb.ServeHTTP(w, r)
			return nop, false
		}
		m.log(r, fmt.Errorf("middleware: fallback %q is not registered; rejecting", resp.Fallback))
	}
	reject(w, r, resp, headers.FromStatuses(resp.Statuses), m.o.refuseStatus)
	return nop, false
}

// unmapped answers a request the extractor (or a Key) could not map: 400
// with a problem body saying which entry, or 500 when it has no client
// address (the server is set up wrong, not the request).
func (m *Middleware) unmapped(w http.ResponseWriter, r *http.Request, err error) (func(), bool) {
	var de *dimension.Error
	if m.lim != nil && errors.As(err, &de) {
		// The Key's entry is no descriptor its caller wrote.
		err = fmt.Errorf("middleware: the key of limiter %q: %w", m.lim.Name(), de.Err)
	}
	m.log(r, err)
	status := http.StatusBadRequest
	if errors.Is(err, dimension.ErrNoClientIP) {
		status = http.StatusInternalServerError
	}
	WriteProblemFor(w, r, Problem{Status: status, Detail: err.Error(), Instance: pathOf(r)})
	return nop, false
}

// negativeCost answers a request WithCost's function gave a negative
// cost, for New's and ForLimiter's middlewares alike: 500, the server set
// up wrong, never failed open nor admitted at a guessed cost (0 would
// charge 1: a body of any size for one byte), nor 400, which would blame a
// client whose request is valid (a chunked body has no ContentLength).
func (m *Middleware) negativeCost(w http.ResponseWriter, r *http.Request, cost int64) (func(), bool) {
	m.log(r, fmt.Errorf("middleware: WithCost returned %d for %s %s: a cost must not be negative (r.ContentLength is -1 when the body's length is unknown, e.g. chunked: see WithCost); answered 500", cost, r.Method, pathOf(r)))
	WriteProblemFor(w, r, Problem{Status: http.StatusInternalServerError, Instance: pathOf(r),
		Detail: fmt.Sprintf("the rate limiter cannot decide this request: the server gave it a negative cost (%d)", cost)})
	return nop, false
}

// turnAfterDeadline answers an admitted request whose hold for resp's
// Delay failed, its units given back already: 503 with the fields of the
// delaying limits stated as refusing until its turn (turnMissed), and
// the body of a 503 refusal (refuse's: temporary-reduced-capacity, the
// delaying limits as violated-policies, the wait as retry-after), its
// detail saying that the wait passes the request's deadline or
// WithMaxWait, or that the request was cancelled during the hold (its
// client gone, or a handler around this one cancelled it: a connection
// still open must not get net/http's empty 200 for a request that never
// reached the handler, and a gone client's write costs nothing). A gRPC
// client hears a limit's refusal, RESOURCE_EXHAUSTED with the wait as its
// pushback (UNAVAILABLE, 503's code, is retried at once). New's and ForLimiter's middlewares both answer here.
func (m *Middleware) turnAfterDeadline(w http.ResponseWriter, r *http.Request, resp policy.Response) {
	st := turnMissed(resp.Statuses)
	m.writeFields(w.Header(), st)
	why := "the queue's wait passes the request's deadline"
	switch {
	case m.o.maxWait > 0 && resp.Delay > m.o.maxWait:
		why = "the queue's wait passes the longest this server holds a request"
	case cancelled(r.Context()):
		why = "the request was cancelled while it waited for its turn"
	}
	turned := policy.Response{Code: policy.CodeOverLimit, Statuses: st, Strategy: policy.StrategyReject}
	refuse(w, r, turned, headers.FromStatuses(st), http.StatusServiceUnavailable, why)
}

// Reject writes the 429 answer for a refused response: Retry-After is
// expected on w already (headers.Write); the body is a quota-exceeded
// problem naming the violated policies. ps are the response's policies
// (headers.FromStatuses). A gRPC call gets RESOURCE_EXHAUSTED with the
// problem's detail instead (WriteProblemFor), and grpc-retry-pushback-ms:
// the wait in milliseconds, rounded up, or -1 (do not retry) when the
// request can never pass; none for a concurrency limit, which promises
// no time. A Middleware with WithRefuseStatus(503) answers its refusals
// as Reject does, with 503 and a temporary-reduced-capacity body.
func Reject(w http.ResponseWriter, r *http.Request, resp policy.Response, ps []headers.Policy) {
	reject(w, r, resp, ps, http.StatusTooManyRequests)
}

// reject is Reject with status 429 or 503: the problem's type and title
// are the draft's for that status (§5.1 quota-exceeded, §5.2
// temporary-reduced-capacity), and its detail says the same. A gRPC call
// gets Reject's answer whatever status says: RESOURCE_EXHAUSTED, which
// is gRPC's code for a quota (UNAVAILABLE, 503's, is retried at once).
func reject(w http.ResponseWriter, r *http.Request, resp policy.Response, ps []headers.Policy, status int) {
	refuse(w, r, resp, ps, status, "")
}

// refuse writes every refusal's problem (reject's and
// turnAfterDeadline's), with why, when not empty, saying why in place of
// the status's wording, to HTTP and gRPC clients alike.
func refuse(w http.ResponseWriter, r *http.Request, resp policy.Response, ps []headers.Policy, status int, why string) {
	p := Problem{
		Type:             TypeQuotaExceeded,
		Title:            titleQuotaExceeded,
		Status:           http.StatusTooManyRequests,
		Instance:         pathOf(r),
		ViolatedPolicies: Violated(resp),
	}
	over := "rate limit exceeded"
	grpc := IsGRPC(r)
	if status == http.StatusServiceUnavailable && !grpc {
		p.Type, p.Title, p.Status = TypeTemporaryReducedCapacity, titleReducedCapacity, status
		over = "over the server's capacity"
	}
	if why != "" {
		over = why
	}
	if wait, ok := headers.RetryAfterOf(ps); ok {
		s := headers.Seconds(wait)
		p.RetryAfter = &s
		p.Detail = fmt.Sprintf("%s; retry in %d s", over, s)
		if grpc {
			setPushback(w.Header(), wait)
		}
	} else if never(ps) {
		p.Detail = over + "; this request can never pass this limit"
		if grpc {
			w.Header().Set(grpcPushback, "-1")
		}
	} else if slotsRefused(ps) {
		// A concurrency limit refused: no time can be promised.
		p.Detail = "too many requests in flight; retry when one of them completes"
	} else {
		// No limit refused alone: the store refused the request as a
		// whole (the policy Engine's unexplained refusal), naming no
		// time. Nothing says requests in flight held it.
		p.Detail = over
	}
	if len(p.ViolatedPolicies) > 0 {
		p.Detail = strings.Join(p.ViolatedPolicies, ", ") + ": " + p.Detail
	}
	WriteProblemFor(w, r, p)
}

// slotsRefused reports whether a concurrency limit of ps refused the
// request (RetryAfterOf names no time then).
func slotsRefused(ps []headers.Policy) bool {
	for _, p := range ps {
		if !p.Allowed && !p.Shadow && !p.Borrowed && p.QuotaUnit == headers.ConcurrentRequests {
			return true
		}
	}
	return false
}

// never reports whether a refusing policy can never admit the request.
func never(ps []headers.Policy) bool {
	for _, p := range ps {
		if !p.Allowed && p.RetryAfter == algo.Never {
			return true
		}
	}
	return false
}

// Violated returns the names of the limits that refused resp, as the
// RateLimit fields identify them (headers.PolicyName), sorted, without
// duplicates: the refusing limits of each over-limit descriptor
// (shadow ones excluded), else the descriptor's rule.
func Violated(resp policy.Response) []string {
	var names []string
	for _, s := range resp.Statuses {
		if s.Code != policy.CodeOverLimit {
			continue
		}
		n := len(names)
		for _, l := range s.Limits {
			if !l.Decision.Allowed && !l.Shadow {
				names = append(names, headers.PolicyName(l.Name))
			}
		}
		if len(names) == n && s.Rule != "" {
			names = append(names, headers.PolicyName(s.Rule))
		}
	}
	sort.Strings(names)
	out := names[:0]
	for i, n := range names {
		if i == 0 || n != names[i-1] {
			out = append(out, n)
		}
	}
	return out
}

func (m *Middleware) decideFailed(w http.ResponseWriter, r *http.Request, err error) (func(), bool) {
	m.log(r, err)
	if errors.Is(err, policy.ErrBadRequest) || errors.Is(err, store.ErrBadRequest) {
		// The request the middleware built from r is wrong (a cost or
		// priority function's value): a bug to fix, which failing open
		// would hide. Its message is about the request, not the store.
		WriteProblemFor(w, r, Problem{Status: http.StatusInternalServerError, Instance: pathOf(r),
			Detail: "the rate limiter cannot decide this request: " + err.Error()})
		return nop, false
	}
	if m.o.failOpen {
		return nop, true
	}
	// The client learns what kind of failure it was, not the store's
	// addresses or messages (WithErrorLog gets those).
	WriteProblemFor(w, r, Problem{Status: http.StatusServiceUnavailable, Instance: pathOf(r),
		Detail: "the rate limiter could not decide: " + store.Failure(err)})
	return nop, false
}

// wait holds a request refused with the wait strategy until it is admitted
// or its wait is over; the returned response is the last decision.
func (m *Middleware) wait(ctx context.Context, req policy.Request, resp policy.Response) (policy.Response, error) {
	if m.o.maxWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.o.maxWait)
		defer cancel()
	}
	if m.waiter != nil {
		// A refused Decide charged nothing, so deciding again is safe.
		return m.waiter.DecideWait(ctx, req)
	}
	limit := m.o.maxWait
	if _, ok := ctx.Deadline(); !ok && limit == 0 {
		limit = defaultFallbackWait
	}
	var spent time.Duration
	for resp.Code != policy.CodeOK && resp.Strategy == policy.StrategyWait {
		d := max(resp.Delay, time.Millisecond)
		if limit > 0 && spent+d > limit {
			break
		}
		if !m.hold(ctx, d) {
			return resp, ctx.Err()
		}
		spent += d
		next, err := m.d.Decide(ctx, req)
		if err != nil {
			return resp, err
		}
		resp = next
	}
	if resp.Code != policy.CodeOK {
		resp.Strategy, resp.Delay = policy.StrategyReject, 0
	}
	return resp, nil
}

// holdCall is hold for r, within its gRPC client's deadline (grpcDeadline).
func (m *Middleware) holdCall(ctx context.Context, r *http.Request, d time.Duration) bool {
	ctx, cancel := grpcDeadline(ctx, r)
	defer cancel()
	return m.hold(ctx, d)
}

// hold waits d, or less when ctx ends first (then it returns false).
func (m *Middleware) hold(ctx context.Context, d time.Duration) bool {
	if !m.mayHold(ctx, d) {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// mayHold reports whether a request may be held d: within WithMaxWait
// and ctx's deadline.
func (m *Middleware) mayHold(ctx context.Context, d time.Duration) bool {
	if m.o.maxWait > 0 && d > m.o.maxWait {
		return false
	}
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) >= d
}

func (m *Middleware) release(r *http.Request, resp policy.Response) {
	if m.releaser == nil || !resp.Holds() {
		return
	}
	// The request's context may be cancelled by now (the client hung up);
	// the slot must come back anyway.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	if err := m.releaser.Release(ctx, resp); err != nil {
		m.log(r, fmt.Errorf("middleware: releasing concurrency slots: %w", err))
	}
}

// refund gives back what an admitted request that does not go on charged:
// everything with a Refunder, else its concurrency slots.
func (m *Middleware) refund(r *http.Request, resp policy.Response) {
	if m.refunder == nil {
		m.release(r, resp)
		return
	}
	// As for release: the client may be gone, and the units must come
	// back anyway.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	if err := m.refunder.Refund(ctx, resp); err != nil {
		m.log(r, fmt.Errorf("middleware: giving back what a request that did not go on charged: %w", err))
	}
}

// heldSlots is an admitted request that holds concurrency slots: a timer
// renews their leases while it is in flight, and done stops it and
// releases them. The slots are resp's (New's), or res's when res is set
// (ForLimiter's).
type heldSlots struct {
	m     *Middleware
	r     *http.Request
	resp  policy.Response
	res   *limiter.Reservation
	every time.Duration

	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

// minRenewEvery bounds how often a request's slots are renewed, whatever
// their lease TTL.
const minRenewEvery = time.Millisecond

// start arms the renewal timer, when the Decider can renew.
func (h *heldSlots) start() {
	switch {
	case h.res != nil:
		h.every = max(h.m.lim.Limit().Window(0)/3, minRenewEvery) // the lease TTL
	case h.m.renewer == nil:
		return
	default:
		h.every = max(h.resp.LeaseTTL()/3, minRenewEvery)
	}
	h.mu.Lock()
	h.t = time.AfterFunc(h.every, h.renew)
	h.mu.Unlock()
}

// renew runs on the timer: it renews the leases and rearms the timer
// unless the request has completed. A renewal that fails is logged and
// tried again at the next tick: the slots may expire meanwhile, but the
// request goes on. A renewal that races with done's release finds the
// lease released and revives nothing.
func (h *heldSlots) renew() {
	// The request's context may be cancelled (the client hung up) while
	// the handler still runs: its slots are still in use.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.r.Context()), min(h.every, 5*time.Second))
	var err error
	if h.res != nil {
		err = h.res.Renew(ctx)
	} else {
		err = h.m.renewer.Renew(ctx, h.resp)
	}
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	if errors.Is(err, errors.ErrUnsupported) {
		// A limiter's store that cannot renew: nothing to retry; said
		// once, as it holds for every request.
		h.m.unrenewable.Do(func() {
			h.m.log(h.r, fmt.Errorf("middleware: concurrency slots are not renewed, so a request longer than the lease loses its slot: %w", err))
		})
		return
	}
	if err != nil {
		h.m.log(h.r, fmt.Errorf("middleware: renewing the leases of concurrency slots: %w", err))
	}
	h.t.Reset(h.every)
}

// done stops the renewals and releases the slots.
func (h *heldSlots) done() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.stopped = true
	if h.t != nil {
		h.t.Stop()
	}
	h.mu.Unlock()
	if h.res != nil {
		h.m.cancel(h.r, h.res)
		return
	}
	h.m.release(h.r, h.resp)
}

func (m *Middleware) log(r *http.Request, err error) {
	if m.o.errLog != nil {
		m.o.errLog(r, err)
	}
}

// convert copies the extractor's descriptors into policy descriptors, in
// buffers kept between requests.
func (sc *scratch) convert(dims []dimension.Descriptor) []policy.Descriptor {
	n := 0
	for _, d := range dims {
		n += len(d.Entries)
	}
	if cap(sc.entries) < n {
		sc.entries = make([]policy.Entry, 0, n)
	}
	sc.entries, sc.descs = sc.entries[:0], sc.descs[:0]
	for _, d := range dims {
		start := len(sc.entries)
		for _, e := range d.Entries {
			sc.entries = append(sc.entries, policy.Entry{Key: e.Key, Value: e.Value})
		}
		sc.descs = append(sc.descs, policy.Descriptor{Entries: sc.entries[start:len(sc.entries):len(sc.entries)]})
	}
	return sc.descs
}
