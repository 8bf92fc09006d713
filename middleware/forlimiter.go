package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/policy"
)

// Key says what ForLimiter keys its Limiter by: a function of the request
// (KeyFunc), the client's address (ClientIPKey), or any one entry of
// package dimension (KeyOf). The zero Key is invalid: ForLimiter refuses
// it.
type Key struct {
	spec dimension.Spec
	opts []dimension.Option
	what string // for errors: "KeyFunc", "ClientIPKey", "KeyOf"
	err  error
}

// KeyFunc keys each request by fn's value, e.g. a user ID a session layer
// set, or an API key read from a header. A request for which fn returns
// "" has no key and passes untouched (see ForLimiter). A key longer than
// 1024 bytes is refused with 400: keys become store keys, whose size a
// client must not choose.
func KeyFunc(fn func(*http.Request) string) Key {
	if fn == nil {
		return Key{what: "KeyFunc", err: errors.New("nil function")}
	}
	return Key{what: "KeyFunc", spec: dimension.Spec{Descriptors: []dimension.DescriptorSpec{
		{Entries: []dimension.EntrySpec{{Source: "user"}}},
	}}, opts: []dimension.Option{dimension.WithUser(fn)}}
}

// ClientIPKey keys each request by its client's address, as the
// remote_address entry of package dimension reads it: the direct peer,
// or the address the X-Forwarded-For field gives when the peer is one of
// trustedProxies (CIDRs such as "10.0.0.0/8", or single addresses;
// dimension.Spec's TrustedProxies); an IPv4 address as is, an IPv6 one
// collapsed to its /64, so that a client cannot rotate through its
// addresses. None trusted (the default) keys by the peer: behind a proxy
// every request would then share the proxy's key. A request whose peer
// has no IP address (a Unix socket) is answered 500: the server is set
// up wrong, not the request. A bad proxy network fails ForLimiter. Other
// proxy headers (Forwarded, X-Real-IP) and prefix lengths: KeyOf with a
// dimension.Spec.
func ClientIPKey(trustedProxies ...string) Key {
	return Key{what: "ClientIPKey", spec: dimension.Spec{TrustedProxies: trustedProxies, Descriptors: []dimension.DescriptorSpec{
		{Entries: []dimension.EntrySpec{{Source: "remote_address"}}},
	}}}
}

// KeyOf keys each request by the value of the one entry of spec's one
// descriptor, read as a dimension.Extractor made with spec and opts reads
// it (its errors answered as New answers them: 400, or 500 for a request
// without a client address); a request for which it has no value passes
// untouched. ForLimiter refuses a spec with another number of descriptors
// or entries, or that NewExtractor refuses.
func KeyOf(spec dimension.Spec, opts ...dimension.Option) Key {
	return Key{what: "KeyOf", spec: spec, opts: opts}
}

// extractor compiles k.
func (k Key) extractor() (*dimension.Extractor, error) {
	if k.what == "" {
		return nil, errors.New("the zero Key: use KeyFunc, ClientIPKey or KeyOf")
	}
	if k.err != nil {
		return nil, fmt.Errorf("%s: %w", k.what, k.err)
	}
	if len(k.spec.Descriptors) != 1 || len(k.spec.Descriptors[0].Entries) != 1 {
		return nil, fmt.Errorf("%s: the Spec has %d descriptors, want one of one entry (the key)", k.what, len(k.spec.Descriptors))
	}
	x, err := dimension.NewExtractor(k.spec, k.opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k.what, err)
	}
	return x, nil
}

// WithClock sets the clock ForLimiter's middleware reads for the length
// of a calendar window (a month, a year) in RateLimit-Policy's w, as
// policy.WithClock does for an Engine's: the period the key's stored reset
// ends, or with nothing stored the one holding this clock's time. Default time.Now. No other
// value reads it: decisions use the store's clock. New's middleware does
// not read it (its Engine has its own).
func WithClock(now func() time.Time) Option { return func(m *options) { m.clock = now } }

// ForLimiter returns a Middleware that limits each request by one
// decision of lim, on the request's key (key), with no rules file: lim's
// name is the policy's name in the header fields, its quota and window
// those of its parameters, stated as a policy.Engine states a rule with
// the same parameters (a token bucket's and GCRA's window is the time its
// burst takes to refill, not the period: burst 10 at 60 a minute is
// q=10;w=10). Its Handler and Check are New's, and ginlimit.New takes it.
//
//	lim, err := limiter.New(st, "per-ip", algo.Params{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Minute})
//	limit, err := middleware.ForLimiter(lim, middleware.ClientIPKey("10.0.0.0/8"))
//	http.Handle("/", limit.Handler(mux))
//
// A request without a key (KeyFunc's function returns "") passes
// untouched, with no store call and no header field, as a request
// without descriptors passes New's: a key function decides who is
// limited, e.g. signed-in users only; a catch-all belongs in a key
// function of its own ("anonymous"), not in a default that would put
// every keyless request in one budget without a word. A request whose
// key cannot be read is answered 400 (a key over 1024 bytes) or 500 (no
// client address for ClientIPKey).
//
// An admitted request gets the header fields and goes on; one a Shaper or
// Smooth limit delays is held that long first (within WithMaxWait and its
// deadline, else refused 503 and its units given back, as New's, also when
// its context is cancelled during the hold); one on
// a Concurrency limit holds its slot until the handler returns, its lease
// renewed every third of the limit's LeaseTTL meanwhile (as New's; a
// failed renewal is logged and does not cut the request).
// A refused request gets the fields and the same answer as a refusal by
// New's rules: 429 (or WithRefuseStatus's 503) with Retry-After in whole
// seconds, rounded up, and a problem body naming lim's policy; RESOURCE_EXHAUSTED to a gRPC call.
// A store error is answered as New's Decider errors are: 503, or passed
// with WithFailOpen; a negative cost from WithCost, 500 (see WithCost).
//
// The options are New's where they apply: WithHeaders, WithCost (0 means
// 1), WithCostUnit, WithRefuseStatus, WithFailOpen, WithErrorLog,
// WithMaxWait, and WithClock; WithDescriptorCheck has nothing to check.
// WithFallback and WithPriority are refused
// (a Limiter has no degrade strategy nor priority classes); a Limiter
// never waits for its turn (rules' wait strategy): use lim.Wait for that.
func ForLimiter(lim *limiter.Limiter, key Key, opts ...Option) (*Middleware, error) {
	if lim == nil || lim.Limit() == nil {
		return nil, errors.New("middleware: ForLimiter: nil Limiter, or not made by limiter.New")
	}
	x, err := key.extractor()
	if err != nil {
		return nil, fmt.Errorf("middleware: ForLimiter(%q): %w", lim.Name(), err)
	}
	var o options
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	switch {
	case len(o.fallbacks) > 0:
		return nil, fmt.Errorf("middleware: ForLimiter(%q): WithFallback: a Limiter has no degrade strategy to serve a fallback", lim.Name())
	case o.priority != nil:
		return nil, fmt.Errorf("middleware: ForLimiter(%q): WithPriority: a Limiter has no priority classes", lim.Name())
	}
	m, err := New(limiterDecider{}, lim.Name(), x, opts...)
	if err != nil {
		return nil, err
	}
	m.lim = lim
	if m.o.clock == nil {
		m.o.clock = time.Now
	}
	switch lim.Limit().Algorithm() {
	case algo.Concurrency, algo.Shaper, algo.SmoothBursty, algo.SmoothWarmup:
		// A slot to release, or a delay whose failed hold gives the
		// units back: a Reservation can do both.
		m.reserve = true
	}
	return m, nil
}

// limiterDecider stands in for the Decider of a ForLimiter middleware,
// which decides on its Limiter (checkLimiter) and never calls it.
type limiterDecider struct{}

var errLimiterDecider = errors.New("middleware: a ForLimiter middleware decides on its Limiter")

func (limiterDecider) Decide(context.Context, policy.Request) (policy.Response, error) {
	return policy.Response{}, errLimiterDecider
}

func (limiterDecider) Peek(context.Context, policy.Request) (policy.Response, error) {
	return policy.Response{}, errLimiterDecider
}

// checkLimiter is CheckAdmitted for a ForLimiter middleware, once the
// request's key and cost (WithCost's, not negative; 0 means 1) are known:
// one decision on m.lim, answered with New's
// fields writer, hold and refusal. The decision's status goes in st, which
// the caller keeps until it returns.
func (m *Middleware) checkLimiter(w http.ResponseWriter, r *http.Request, key string, cost int64, st *[1]policy.Status, admitted func(policy.Response)) (func(), bool) {
	if cost == 0 {
		cost = 1 // as the Engine reads Hits 0
	}
	ctx := r.Context()
	var d algo.Decision
	var res *limiter.Reservation
	var err error
	if m.reserve {
		res, err = m.lim.Reserve(ctx, key, cost)
		d = res.Decision()
	} else {
		d, err = m.lim.AllowN(ctx, key, cost)
	}
	if err != nil {
		return m.decideFailed(w, r, err)
	}
	st[0] = policy.RuleStatus(m.lim.Name(), m.lim.Limit(), d, m.o.clock)
	resp := policy.Response{Code: st[0].Code, Statuses: st[:], Strategy: policy.StrategyReject}
	if !d.Allowed {
		m.writeFields(w.Header(), resp.Statuses)
		reject(w, r, resp, headers.FromStatuses(resp.Statuses), m.o.refuseStatus)
		return nop, false
	}
	resp.Strategy, resp.Delay = "", d.Delay
	if d.Delay > 0 && !m.holdCall(ctx, r, d.Delay) {
		m.cancel(r, res)
		m.turnAfterDeadline(w, r, resp)
		return nop, false
	}
	m.writeFields(w.Header(), resp.Statuses)
	if admitted != nil {
		admitted(resp)
	}
	if m.lim.Limit().Algorithm() == algo.Concurrency {
		// The slot is renewed while the handler runs, as New's are.
		h := &heldSlots{m: m, r: r, res: res}
		h.start()
		return h.done, true
	}
	return nop, true
}

// cancel gives back what res took (a Concurrency slot, or units whose
// request does not go on), even when r's client is gone.
func (m *Middleware) cancel(r *http.Request, res *limiter.Reservation) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	if err := res.Cancel(ctx); err != nil {
		m.log(r, fmt.Errorf("middleware: giving back what a request took on limiter %q: %w", m.lim.Name(), err))
	}
}
