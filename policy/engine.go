package policy

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/causelog"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// Errors of the Engine, for errors.Is.
var (
	// ErrBadRequest is wrapped by Decide's errors for a request that cannot
	// be decided: no domain, no descriptors, a negative cost, a
	// per-descriptor limit without a unit. (A descriptor with no entries
	// is not one: no rule matches it, and its status is OK.)
	ErrBadRequest = errors.New("policy: bad request")
	// ErrUnknownRule is wrapped by the override and scaling methods when
	// the domain or rule does not exist.
	ErrUnknownRule = errors.New("policy: unknown rule")
)

// DefaultKeyPrefix prefixes every store key the Engine builds.
const DefaultKeyPrefix = "fg:"

// Option configures an Engine; see NewEngine for the defaults.
type Option func(*options)

type options struct {
	prefix string
	shadow bool
	clock  func() time.Time
	log    *slog.Logger
}

// WithKeyPrefix sets the prefix of every store key (default
// DefaultKeyPrefix), to share one store between several deployments.
func WithKeyPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// KeyPrefix returns the prefix of every store key the Engine builds (see
// WithKeyPrefix).
func (e *Engine) KeyPrefix() string { return e.o.prefix }

// WithShadowMode puts every rule in shadow mode (default false): decisions
// are made and reported, nothing is ever refused. It is Envoy ratelimit's
// global shadow mode, for a first deployment.
func WithShadowMode(on bool) Option { return func(o *options) { o.shadow = on } }

// WithClock sets the clock the Engine reads for waiting and for the length
// of a calendar month or year in responses (default time.Now): the period
// whose end is the key's stored reset, or with nothing stored yet the one
// holding this clock's time. Decisions themselves use the store's clock.
func WithClock(clock func() time.Time) Option { return func(o *options) { o.clock = clock } }

// WithLogger sets where the Engine reports a shadow rule's count that the
// store failed for a reason that is no outage (a Redis user whose ACL does
// not cover the rule's keys: NOPERM; a state over memcached's item size):
// WARN, once per rule and cause per ShadowLogInterval, the next line
// saying how many were left out. The request is decided without that
// count all the same (a dry run never fails a request), so without the
// line the rule would report nothing, for good, unseen. An outage
// (store.ErrUnavailable), which the store's failure policy and its log
// tell of, and a request the caller ended are not reported. Default:
// nothing is logged.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// ShadowLogInterval is how often the Engine's logger (WithLogger) repeats
// a line about a shadow rule's count failing on the store for the same
// rule and cause.
const ShadowLogInterval = time.Minute

// Engine decides requests against a Config through a store.Store. It is safe
// for concurrent use. The configuration, runtime overrides and adaptive
// scales are compiled into one immutable snapshot that Decide reads once, so
// a request never sees half of a change; SetConfig, Reload, Watch,
// SetOverride and SetRateScale swap the snapshot atomically.
type Engine struct {
	st store.Store
	o  options
	// aliasKeys: st is the memory store, which never keeps a key string
	// beyond a call, so the plan's keys may alias its buffer (see
	// appendKey) instead of being allocated one by one.
	aliasKeys bool

	snap atomic.Pointer[snapshot]

	mu        sync.Mutex // serialises writers of the snapshot
	cfg       *Config
	version   uint64
	overrides map[ruleRef]Override
	scales    map[ruleRef]RateScale
	adaptive  adaptiveRules
	checks    []*configCheck

	adaptiveSet atomic.Pointer[adaptiveSet]
	queues      queues
	turns       Turns // DecideWait's held requests (hold)

	shadowMu  sync.Mutex // guards shadowLog
	shadowLog causelog.Limiter
}

// snapshot is what one decision reads: the config and every rule's
// effective limits.
type snapshot struct {
	cfg     *Config
	limits  []ruleLimits // by Rule.index
	version uint64
	// reqRules are the request-level limits compiled for this snapshot
	// (they hold its rules): reqLimitKey → *reqRule.
	reqRules  sync.Map
	reqRulesN atomic.Int64
}

// NewEngine returns an Engine deciding cfg's rules in st. A nil cfg is an
// empty configuration (every request is OK, no rule matching). Options and
// their defaults:
//
//   - WithKeyPrefix(DefaultKeyPrefix) ("fg:")
//   - WithShadowMode(false)
//   - WithClock(time.Now)
//   - WithLogger(nil): nothing logged
//
// The Engine does not own st: closing it is the caller's business.
func NewEngine(cfg *Config, st store.Store, opts ...Option) (*Engine, error) {
	if st == nil {
		return nil, errors.New("policy: NewEngine: nil store")
	}
	o := options{prefix: DefaultKeyPrefix, clock: time.Now}
	for _, f := range opts {
		f(&o)
	}
	if o.clock == nil {
		o.clock = time.Now
	}
	if cfg == nil {
		cfg = &Config{domains: map[string]*Domain{}}
	}
	e := &Engine{st: st, o: o, overrides: map[ruleRef]Override{}, scales: map[ruleRef]RateScale{},
		shadowLog: causelog.Limiter{Interval: ShadowLogInterval, Max: maxShadowCauses}}
	_, e.aliasKeys = st.(*memory.Store)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.swapLocked(cfg); err != nil {
		return nil, err
	}
	return e, nil
}

// Config returns the configuration in force.
func (e *Engine) Config() *Config { return e.snap.Load().cfg }

// Version counts the snapshots installed: it grows by one with every
// SetConfig, override and scale change.
func (e *Engine) Version() uint64 { return e.snap.Load().version }

// SetConfig installs cfg, keeping the runtime overrides and scales of the
// rules that still exist. Requests in flight finish on the old snapshot.
// The checks added by AddConfigCheck run first; any error keeps the
// configuration in force.
func (e *Engine) SetConfig(cfg *Config) error {
	if cfg == nil {
		return errors.New("policy: SetConfig: nil config")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for _, c := range e.checks {
		if err := c.f(cfg); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("policy: configuration not installed, the one in force stays: %w", errors.Join(errs...))
	}
	return e.swapLocked(cfg)
}

// configCheck is one AddConfigCheck registration; its address is its
// identity, so the same function registered twice is removed once per
// remove.
type configCheck struct{ f func(*Config) error }

// AddConfigCheck registers check, which SetConfig — and so Reload, Watch
// and a gateway's reload — runs on every configuration before installing
// it. An error from any check keeps the configuration in force and is
// returned (joined with the others', under "configuration not
// installed"); the configuration in force is not checked again. Checks
// run in the order they were added, with the Engine's writers held off:
// a check must not call the Engine's setters. remove unregisters the
// check; calling it again does nothing.
//
// A middleware.Middleware's CheckConfig is such a check: registered, a
// reload that drops its domain, leaves its descriptors no rule, or adds a
// degrade rule whose fallback it lacks is refused instead of lifting its
// limits silently.
func (e *Engine) AddConfigCheck(check func(*Config) error) (remove func()) {
	if check == nil {
		return func() {}
	}
	c := &configCheck{f: check}
	e.mu.Lock()
	e.checks = append(e.checks, c)
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if i := slices.Index(e.checks, c); i >= 0 {
			e.checks = slices.Delete(e.checks, i, i+1)
		}
	}
}

// swapLocked compiles cfg with the overrides and scales into a snapshot
// and installs it. e.mu is held.
func (e *Engine) swapLocked(cfg *Config) error {
	e.syncAdaptiveLocked(cfg)
	s := &snapshot{cfg: cfg, limits: make([]ruleLimits, len(cfg.rules)), version: e.version + 1}
	for _, r := range cfg.rules {
		if r.limit == nil {
			continue
		}
		d := cfg.Domain(r.Domain)
		rl, err := e.compileLocked(cfg, r)
		if err != nil {
			// An override set for an earlier config may not fit this
			// one (say, a new ceil below it): the configured limit, which
			// compiled at load, applies instead. SetOverride,
			// SetRateScale and RemoveOverride refuse such a combination
			// for the config in force.
			if rl, err = deriveLimits(d, r, r.Params); err != nil {
				return fmt.Errorf("policy: rule %s/%s: %w", r.Domain, r.Name, err)
			}
		}
		s.limits[r.index] = rl
	}
	e.cfg = cfg
	e.version = s.version
	e.snap.Store(s)
	return nil
}

// Request-level limits (Envoy's RateLimitDescriptor.limit) are compiled
// once per snapshot and distinct (rule, requests_per_unit, unit), and kept
// up to this many per snapshot; past it they are compiled per request.
const maxReqLimits = 4096

type reqLimitKey struct {
	base *Rule // the configured rule the descriptor matched; nil for none
	rpu  int64
	unit time.Duration
	cal  algo.Calendar
}

// reqRule is a request-level limit compiled: the rule that applies in the
// matched rule's place, and its limits.
type reqRule struct {
	rule   Rule
	limits ruleLimits
}

// requestRule returns the rule a descriptor's own limit lo makes of base,
// the configured rule its entries match (nil when none does). The limit
// replaces base's limit: base's place in a hierarchy (its parent, so the
// limits above are still taken), its strategy, priority class and reserves
// stay; its ceil does not (the request states its whole limit, beyond which
// it does not borrow), nor its name, so it is neither replaced nor replaces
// (as envoyproxy/ratelimit's per-descriptor limits, which have no name),
// nor its shadow mode (shadow_mode, quota_mode, strategy: shadow): the
// request's limit is enforced, as upstream's is. The Engine's own shadow
// mode (WithShadowMode) still applies. Its counter is its own: keyed by every entry
// of the descriptor and the request's limit, apart from the configured
// rule's. Without a configured rule it stands alone, as it does upstream.
func (e *Engine) requestRule(snap *snapshot, dom *Domain, base *Rule, lo *LimitOverride) (*reqRule, error) {
	if lo.RequestsPerUnit < 0 {
		return nil, fmt.Errorf("%w: descriptor limit requests_per_unit %d is negative", ErrBadRequest, lo.RequestsPerUnit)
	}
	switch {
	case lo.Calendar != algo.CalendarNone && lo.Unit != 0:
		return nil, fmt.Errorf("%w: descriptor limit has both a calendar period (%v) and a unit (%v)", ErrBadRequest, lo.Calendar, lo.Unit)
	case lo.Calendar == algo.CalendarNone && lo.Unit <= 0:
		return nil, fmt.Errorf("%w: descriptor limit needs a positive unit, got %v", ErrBadRequest, lo.Unit)
	}
	k := reqLimitKey{base, lo.RequestsPerUnit, lo.Unit, lo.Calendar}
	if rr, ok := snap.reqRules.Load(k); ok {
		return rr.(*reqRule), nil
	}
	rr := &reqRule{rule: Rule{Domain: dom.Name, Strategy: StrategyReject}}
	r := &rr.rule
	if base != nil {
		*r = *base
		r.Node, r.metricKey, r.named, r.Replaces = nil, "", false, nil
		r.Unlimited, r.Deny, r.Ceil, r.Adaptive = false, false, 0, nil
		// Enforced, as envoyproxy/ratelimit builds a request's limit
		// ("when limit override is provided by envoy config, we don't
		// want to enable shadow_mode"): neither the descriptor's
		// shadow_mode or quota_mode nor strategy: shadow carries over.
		r.Shadow = false
		if r.Strategy == StrategyShadow {
			r.Strategy = StrategyReject
		}
	}
	r.index, r.Lendable, r.limit = -1, 1, nil
	if lo.RequestsPerUnit == 0 {
		// Nothing to compile; the window stays known for the status
		// (rulePeriod).
		r.Deny = true
		r.Params = algo.Params{Period: lo.Unit, Calendar: lo.Calendar}
	} else {
		r.Params = algo.Params{Algorithm: algo.FixedWindow, Limit: lo.RequestsPerUnit, Period: lo.Unit, Calendar: lo.Calendar}
		rl, err := deriveLimits(dom, r, r.Params)
		if err != nil && len(r.Reserve) > 0 {
			// A reserve that would leave a class none of so small a
			// limit does not apply to it.
			r.Reserve = nil
			rl, err = deriveLimits(dom, r, r.Params)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: descriptor limit: %v", ErrBadRequest, err)
		}
		rl.fp = "override:" + rl.fp
		r.limit, r.fp, rr.limits = rl.rate, rl.fp, rl
	}
	if snap.reqRulesN.Load() < maxReqLimits {
		if _, loaded := snap.reqRules.LoadOrStore(k, rr); !loaded {
			snap.reqRulesN.Add(1)
		}
	}
	return rr, nil
}

// Decide charges the request's descriptors all or nothing and reports each
// one's outcome. See the package documentation for the semantics.
//
// A request naming a domain the configuration lacks is not an error: every
// descriptor is OK and unmatched (Status.Matched false), as
// envoyproxy/ratelimit answers, so a misspelt domain limits nothing. A
// caller that must catch it checks e.Config().Domain(name) != nil once, as
// middleware.New does and the server's /v1 API does per request (404).
//
// A store error fails the decision (nothing charged) only on the calls
// that decide it. A shadow rule's count that the store fails (reported on
// WithLogger's logger unless it is an outage), and the look
// at the other keys that a refusal (a deny rule's, or the store's) takes
// for their statuses, leave those limits out of the statuses (Status.Limits)
// and the decision stands: a dry run never fails a request, and a refusal
// never turns into an error that a caller admitting on errors would pass.
// So does a Take the store refused although part of it failed
// (store.Result.Partial: a key over its limit on a live Redis Cluster
// node, another's node down): the request is refused whatever the store's
// failure policy, the limits of the failed part left out of the statuses.
func (e *Engine) Decide(ctx context.Context, req Request) (Response, error) {
	return e.decide(ctx, req, true, nil)
}

// ChargeRemaining charges, after Decide refused req with resp, what
// remained of each descriptor refused only because its cost exceeded what
// remained (its Status.Decision.Remaining above 0): the key ends exhausted,
// as envoyproxy/ratelimit's counter (an INCRBY whatever the answer) would
// be. The Envoy APIs call it: usage reported after the fact (Envoy's
// per-descriptor hits_addend applied when a stream is done, a token
// budget) that is larger than what is left would otherwise charge nothing,
// and a client whose every report exceeds what remains would never be
// limited. Decide itself keeps "a refused request charges nothing".
//
// It is one more Decide of those descriptors alone (the others of req are
// not charged: all or nothing still holds between descriptors), each at a
// cost of what remained of the tightest of its enforced limits — an
// ordinary take that never admits more than a limit holds: when a
// concurrent request took meanwhile, it refuses and charges nothing. Only
// descriptors every limit of which is a window or a bucket (fixed_window,
// sliding_window, sliding_log, token_bucket, gcra) are charged:
// concurrency would hold slots, a shaper's or smooth limiter's refusal is
// a wait, not an excess. Shadow statuses, requests_per_unit: 0 rules, a
// borrowing rule and a response a store failure policy answered
// (StoreFallback) are left as they are.
//
// A charged descriptor's status then reports 0 remaining and, as its
// ResetAfter, the time until the charged limits are full again. It
// returns how many descriptors it charged; resp is otherwise unchanged
// (Code stays OVER_LIMIT).
func (e *Engine) ChargeRemaining(ctx context.Context, req Request, resp *Response) (int, error) {
	if resp.Code != CodeOverLimit || resp.StoreFallback || len(resp.Statuses) != len(req.Descriptors) {
		return 0, nil
	}
	var idx []int
	var ds []Descriptor
	for i := range resp.Statuses {
		n := drainable(&resp.Statuses[i])
		if n <= 0 || n >= descCost(&req, i) {
			continue
		}
		d := req.Descriptors[i]
		d.Hits, d.HitsSet = n, true
		idx, ds = append(idx, i), append(ds, d)
	}
	if len(ds) == 0 {
		return 0, nil
	}
	r, err := e.decide(ctx, Request{Domain: req.Domain, Descriptors: ds, Priority: resp.Priority}, true, nil)
	if err != nil {
		return 0, fmt.Errorf("policy: charging what remains: %w", err)
	}
	if r.Code != CodeOK || len(r.leases) > 0 {
		// Refused (another request took meanwhile): nothing was charged.
		// Leases cannot be: drainable admits no concurrency limit.
		if len(r.leases) > 0 {
			_ = e.Release(context.WithoutCancel(ctx), r)
		}
		return 0, nil
	}
	for j, i := range idx {
		s := &resp.Statuses[i]
		s.Decision.Remaining = 0
		s.Decision.ResetAfter = max(s.Decision.ResetAfter, r.Statuses[j].Decision.ResetAfter)
	}
	return len(idx), nil
}

// drainable is what ChargeRemaining charges for the status s: the fewest
// units remaining among its enforced limits when it refused a cost above
// them, else 0 (nothing to charge, or a status it leaves alone).
func drainable(s *Status) int64 {
	if !s.Matched || s.Unlimited || s.Shadow || s.Borrowed || s.Code != CodeOverLimit ||
		s.Decision.Allowed || s.Decision.Remaining <= 0 || len(s.Limits) == 0 {
		return 0
	}
	n := int64(-1)
	for j := range s.Limits {
		l := &s.Limits[j]
		if l.Deny || l.Borrowed || l.lim == nil {
			return 0
		}
		switch l.lim.Algorithm() {
		case algo.FixedWindow, algo.SlidingWindow, algo.SlidingLog, algo.TokenBucket, algo.GCRA:
		default:
			return 0
		}
		if l.Shadow {
			continue
		}
		if n < 0 || l.Decision.Remaining < n {
			n = l.Decision.Remaining
		}
	}
	return max(n, 0)
}

// descCost is the cost of req's descriptor i: its own Hits when set,
// else the request's, 1 when that is 0.
func descCost(req *Request, i int) int64 {
	if d := &req.Descriptors[i]; d.Hits > 0 || d.HitsSet {
		return d.Hits
	}
	if req.Hits == 0 {
		return 1
	}
	return req.Hits
}

// StatusBuffer is room for the statuses of a one-descriptor response, kept
// by a caller between decisions (see DecideInto). Its zero value is ready.
type StatusBuffer struct {
	block statusBlock
}

// DecideInto is Decide with the statuses of a one-descriptor response
// placed in buf instead of a new allocation: resp.Statuses (and their
// Limits) alias buf and are valid until buf is used again, so a caller that
// keeps them longer copies them; what Refund gives back lives there too, so
// a caller refunds before it uses buf again. A response on several descriptors is
// allocated as by Decide. The HTTP middleware keeps one buffer per request
// in flight.
func (e *Engine) DecideInto(ctx context.Context, req Request, buf *StatusBuffer) (Response, error) {
	return e.decide(ctx, req, true, &buf.block)
}

// Peek reports what Decide would answer now, charging nothing.
func (e *Engine) Peek(ctx context.Context, req Request) (Response, error) {
	return e.decide(ctx, req, false, nil)
}

// Release gives back the concurrency slots an admitted response holds
// (Response.Holds). Releasing twice, or a response that holds nothing, is a
// no-op.
func (e *Engine) Release(ctx context.Context, resp Response) error {
	if len(resp.leases) == 0 {
		return nil
	}
	return e.st.Release(ctx, resp.leases)
}

// Refund gives back what an admitted response charged, for a request that
// was admitted but does not go on: a client that gave up while it was held
// for a shaper's Delay, an upstream that refused it before doing any
// work. Every unit its decision took is returned to the limit it came
// from, as of the instant it was taken (store.Refund: for a window, to that
// window; the lend pool it borrowed from included), and its concurrency
// slots are released as by Release. A response that charged nothing (a
// refusal, Peek) is a no-op.
//
// Refunding a response again, or a copy of it, is a no-op, as releasing
// it again is: what a response charged is recorded in memory its copies
// share, and Refund marks each unit there as given back before asking the
// store (atomically: of two concurrent Refunds, one gives each unit back).
// So a Refund whose store call failed is not retried by a second one: the
// units it could not give back expire with their window. A response from
// DecideInto is refunded before its buffer is used again.
func (e *Engine) Refund(ctx context.Context, resp Response) error {
	var err error
	var buf [4]store.Request
	if reqs := claimCharged(resp.charged, buf[:0]); len(reqs) > 0 {
		if rerr := e.st.Refund(ctx, reqs); rerr != nil {
			err = fmt.Errorf("policy: refund: %w", rerr)
		}
	}
	if rerr := e.Release(ctx, resp); rerr != nil {
		err = errors.Join(err, fmt.Errorf("policy: refund: releasing concurrency slots: %w", rerr))
	}
	return err
}

// claimCharged appends to out the requests of charged (a Response's) that
// have not been refunded and marks them refunded: their Cost, swapped to 0
// atomically in charged itself, which every copy of the Response shares.
// Only Refund touches a returned Response's Costs, and only so.
func claimCharged(charged, out []store.Request) []store.Request {
	for i := range charged {
		q := &charged[i]
		if c := atomic.SwapInt64(&q.Cost, 0); c > 0 {
			out = append(out, store.Request{Key: q.Key, Limit: q.Limit, Cost: c, Lease: q.Lease, At: q.At})
		}
	}
	return out
}

// Renew extends the concurrency slots an admitted response holds
// (Response.Holds) to expire their limits' lease TTL from now: a caller
// whose request outlives the TTL (a websocket, a long stream) renews well
// before it passes, e.g. every Response.LeaseTTL / 3, until it releases.
// Renewing a response that holds nothing, or whose slots were released or
// have expired, is a no-op: an expired lease is not revived. When the
// store is not a store.Renewer, Renew does nothing and returns nil (the
// slots then expire at their TTL, as before).
func (e *Engine) Renew(ctx context.Context, resp Response) error {
	if len(resp.leases) == 0 {
		return nil
	}
	rn, ok := e.st.(store.Renewer)
	if !ok {
		return nil
	}
	return rn.Renew(ctx, resp.leases)
}

// role is what an item is to its rule.
type role uint8

const (
	roleRate role = iota // the rule's own limit
	roleCeil             // the borrowing ceiling: all of the rule's traffic
	roleLend             // the parent's lendable pool: borrowed traffic only
	rolePool             // a priority class's share
)

// item is one store key of a decision.
type item struct {
	key    string
	lim    *algo.Limit
	cost   int64
	rule   *Rule
	role   role
	class  string // rolePool
	shadow bool
	// borrowing (roleRate of a rule with a ceil): the parent's lend pool to
	// take instead of this rate when it refuses, if the parent has one.
	borrow      bool
	lendKey     string
	lendLim     *algo.Limit
	borrowed    bool // this rate refused and the request borrows instead
	lendDec     algo.Decision
	lendDecided bool
	lendTook    int64 // what an admitted request took from the lend pool
	dec         algo.Decision
	decided     bool
	took        int64 // what an admitted request took from key (LimitStatus.Charged)
}

// descPlan is one request descriptor's part of the decision.
type descPlan struct {
	rule  *Rule
	own   *ruleLimits // rule's limits when it is a request-level one (index -1)
	items []int       // indices into plan.items, own rule first
	deny  []*Rule
	cost  int64
}

type plan struct {
	snap  *snapshot
	dom   *Domain
	items []item
	descs []descPlan
	class string
	rank  int
	// unknownClass: the request named a class the domain does not
	// declare (Response.PriorityUnknown).
	unknownClass bool
	// refused: the store refused the enforced Take as a whole (its
	// Result.Allowed), whatever its per-request decisions say.
	refused bool

	// Scratch reused across decisions (plans are pooled).
	charged []store.Request // what the decision took, At set (Response.charged)
	reqs    []store.Request
	idx     []int
	out     []algo.Decision
	enforce []int
	shadow  []int
	buf     []byte // the keys' bytes (see appendKey)
	limits  []LimitStatus
}

var planPool = sync.Pool{New: func() any { return new(plan) }}

// getPlan returns a pooled plan for n descriptors.
func getPlan(snap *snapshot, dom *Domain, n int) *plan {
	p := planPool.Get().(*plan)
	p.snap, p.dom, p.class, p.rank, p.refused, p.unknownClass = snap, dom, "", -1, false, false
	p.buf, p.limits, p.charged = p.buf[:0], nil, p.charged[:0]
	if cap(p.descs) < n {
		p.descs = make([]descPlan, n)
	}
	p.descs = p.descs[:n]
	for i := range p.descs {
		d := &p.descs[i]
		d.rule, d.own, d.items, d.deny, d.cost = nil, nil, d.items[:0], d.deny[:0], 0
	}
	return p
}

// release returns p to the pool, dropping its references.
func (p *plan) release() {
	if cap(p.items) > 256 || cap(p.descs) > 256 || cap(p.buf) > 4096 {
		return
	}
	clear(p.items)
	clear(p.reqs)
	clear(p.charged)
	for i := range p.descs {
		clear(p.descs[i].deny)
	}
	p.items, p.reqs = p.items[:0], p.reqs[:0]
	p.snap, p.dom, p.limits = nil, nil, nil
	planPool.Put(p)
}

// decide is Decide (take) or Peek; buf, when not nil, holds the statuses
// of a one-descriptor response (DecideInto).
func (e *Engine) decide(ctx context.Context, req Request, take bool, buf *statusBlock) (Response, error) {
	if err := checkRequest(&req); err != nil {
		return Response{}, err
	}
	snap := e.snap.Load()
	resp := Response{Code: CodeOK}
	dom := snap.cfg.Domain(req.Domain)
	var p *plan
	if dom != nil {
		p = getPlan(snap, dom, len(req.Descriptors))
		defer p.release()
	}
	var block *statusBlock
	resp.Statuses, block = newStatuses(p, len(req.Descriptors), buf)
	for i := range resp.Statuses {
		resp.Statuses[i].Code = CodeOK
	}
	if dom == nil {
		return resp, nil
	}
	if err := e.plan(p, &req, resp.Statuses); err != nil {
		return Response{}, err
	}
	var err error
	resp.Priority, resp.PriorityUnknown = p.class, p.unknownClass
	if len(p.items) == 0 && !p.hasDeny() {
		return resp, nil
	}
	if take {
		err = e.take(ctx, p, &resp)
	} else {
		err = e.peek(ctx, p)
	}
	if err != nil {
		return Response{}, err
	}
	e.finish(p, &resp, take)
	if e.aliasKeys {
		resp.detachKeys()
	}
	if take && resp.Code == CodeOK && len(p.charged) > 0 {
		resp.keepCharged(p.charged, block, e.aliasKeys)
	}
	return resp, nil
}

func checkRequest(req *Request) error {
	switch {
	case req.Domain == "":
		return fmt.Errorf("%w: rate limit domain must not be empty", ErrBadRequest)
	case len(req.Descriptors) == 0:
		return fmt.Errorf("%w: rate limit descriptor list must not be empty", ErrBadRequest)
	case req.Hits < 0:
		return fmt.Errorf("%w: hits %d is negative", ErrBadRequest, req.Hits)
	}
	for i, d := range req.Descriptors {
		if d.Hits < 0 {
			return fmt.Errorf("%w: descriptor %d: hits %d is negative", ErrBadRequest, i, d.Hits)
		}
	}
	return nil
}

func (p *plan) hasDeny() bool {
	for i := range p.descs {
		if len(p.descs[i].deny) > 0 {
			return true
		}
	}
	return false
}

// plan matches every descriptor, applies replaces and priority, and lists
// the store keys to decide.
func (e *Engine) plan(p *plan, req *Request, st []Status) error {
	dom := p.dom
	var replaced map[string]bool
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if len(d.Entries) == 0 {
			continue // no rule matches an empty descriptor, as in envoyproxy/ratelimit
		}
		r := dom.match(d.Entries)
		if d.Limit != nil {
			rr, err := e.requestRule(p.snap, dom, r, d.Limit)
			if err != nil {
				return fmt.Errorf("descriptor %d: %w", i, err)
			}
			r, p.descs[i].own = &rr.rule, &rr.limits
		}
		if r == nil {
			continue
		}
		p.descs[i].rule = r
		for _, name := range r.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
	}
	// Priority class: the request's own, else the highest a matched rule
	// assigns, else the domain's default.
	if len(dom.Priorities) > 0 {
		p.class = dom.DefaultPriority
		rank := -1
		if req.Priority != "" {
			rank = dom.priorityRank(req.Priority)
		}
		switch {
		case rank >= 0:
			p.class = dom.Priorities[rank] // as declared
		case req.Priority != "" && strings.TrimSpace(req.Priority) != "":
			p.unknownClass = true
		default:
			best := -1
			for i := range p.descs {
				// A rule another matched rule replaces is dropped below:
				// only the rules that remain pick the class.
				if r := p.descs[i].rule; r != nil && r.Priority != "" && !replacedRule(r, replaced) {
					if k := dom.priorityRank(r.Priority); best < 0 || k < best {
						best = k
					}
				}
			}
			if best >= 0 {
				p.class = dom.Priorities[best]
			}
		}
		p.rank = dom.priorityRank(p.class)
	}
	for i := range p.descs {
		dp := &p.descs[i]
		r := dp.rule
		if r == nil {
			continue
		}
		if replacedRule(r, replaced) {
			dp.rule = nil
			continue
		}
		d := &req.Descriptors[i]
		s := &st[i]
		s.Matched = true
		s.Rule = ruleName(r, d.Entries)
		if r.named {
			s.ConfiguredName = r.Name
		}
		s.RuleLimit = r.limit // an Envoy per-descriptor limit's
		if r.index >= 0 {
			s.RuleLimit = p.snap.limits[r.index].rate
		}
		s.Unlimited = r.Unlimited
		s.Shadow = r.Shadow || e.o.shadow
		s.MetricKey = r.metricKey
		if r.metricKey == "" {
			s.MetricKey = metricKey(r, d.Entries)
		}
		if r.Unlimited {
			s.Decision = algo.Decision{Allowed: true, Remaining: math.MaxUint32}
			continue
		}
		dp.cost = descCost(req, i)
		for l, first := r, true; l != nil; l, first = l.parent, false {
			if !first && l.Unlimited {
				break
			}
			if l.Deny {
				dp.deny = append(dp.deny, l)
			} else {
				e.addItems(p, dp, l, d.Entries)
			}
			if !l.Hierarchical {
				break
			}
		}
	}
	return nil
}

// replacedRule reports whether another matched rule's replaces (the names
// in replaced) drops r. An unlimited rule is not replaced:
// envoyproxy/ratelimit sets it aside before it drops the replaced limits,
// so it stays OK and unlimited (limit_remaining 2^32-1) whatever replaces
// it.
func replacedRule(r *Rule, replaced map[string]bool) bool {
	return r.named && replaced[r.Name] && !r.Unlimited
}

// ruleName is the Status.Rule of a match: the rule's name, or for an Envoy
// per-descriptor limit the descriptor's path with values (a key or value
// longer than maxKeyPart as its digest, as in store keys, so that a name
// stays short whatever a request carries).
func ruleName(r *Rule, entries []Entry) string {
	if r.index >= 0 {
		return r.Name
	}
	n := ruleNameOf(entries)
	if len(n) <= maxKeyPath {
		return n
	}
	// A per-descriptor limit's name is its path, as long as the request
	// makes it: past maxKeyPath bytes, its start and a digest of the whole
	// (it is a metrics label and a header's policy name).
	return string(appendDigest(append([]byte(strings.ToValidUTF8(n[:64], "")), '~'), n))
}

// ruleNameOf is the path of entries: key_value.key2_value2, a long key or
// value as its digest.
func ruleNameOf(entries []Entry) string {
	b := make([]byte, 0, 32)
	part := func(s string) {
		if len(s) > maxKeyPart {
			b = appendDigest(b, s)
		} else {
			b = append(b, s...)
		}
	}
	for i, en := range entries {
		if i > 0 {
			b = append(b, '.')
		}
		part(en.Key)
		if en.Value != "" {
			b = append(b, '_')
			part(en.Value)
		}
	}
	return string(b)
}

// metricKey is Envoy's stats key as envoyproxy/ratelimit's GetLimit builds
// it: domain.path. Without detailed_metric on the matched descriptor, an
// entry is written as its descriptor's key and value — the wildcard itself
// for a value a wildcard matched, unless value_to_metric (and no
// share_threshold) asks for the request's value; the request's value, when
// not empty, for a value-less descriptor with value_to_metric. With
// detailed_metric every entry is the request's key_value ("key_" for an
// empty value), unless some entry's value was matched by a share_threshold
// wildcard: that entry is then the wildcard, and the others are key_value,
// or key alone for an empty value.
func metricKey(r *Rule, entries []Entry) string {
	if r.Node == nil {
		return r.Domain + "." + ruleName(r, entries)
	}
	nodes := make([]*Node, r.Node.depth)
	for n := r.Node; n != nil; n = n.Parent {
		nodes[n.depth-1] = n
	}
	// wild reports that entry i's value was matched by node i's wildcard,
	// not as the exact value (a request may send the pattern itself).
	wild := func(i int) bool { return nodes[i].pattern != nil && entries[i].Value != nodes[i].Value }
	shared := false
	for i, n := range nodes {
		shared = shared || (n.ShareThreshold && wild(i))
	}
	detailed := r.Node.DetailedMetric
	b := make([]byte, 0, 64)
	b = append(b, r.Domain...)
	for i, n := range nodes {
		b = append(b, '.')
		b = append(b, n.Key...)
		v, under := entries[i].Value, entries[i].Value != ""
		switch {
		case n.ShareThreshold && wild(i):
			v, under = n.Value, true
		case detailed:
			under = under || !shared
		case wild(i) && !n.valueToMetric:
			v, under = n.Value, true
		case n.Value == "" && !n.valueToMetric:
			under = false
		}
		if under {
			b = append(b, '_')
			b = append(b, v...)
		}
	}
	return string(b)
}

// addItems adds limit l's keys (its rate, ceil and priority pools) to the
// descriptor's plan, merging keys already present (a key is charged once
// per request, with the largest cost asked of it).
func (e *Engine) addItems(p *plan, dp *descPlan, l *Rule, entries []Entry) {
	var rl ruleLimits
	if l.index < 0 { // the descriptor's own request-level limit
		rl = *dp.own
	} else {
		rl = p.snap.limits[l.index]
	}
	if rl.rate == nil {
		return
	}
	base := e.appendKey(p, l, entries, rl.fp)
	shadow := l.Shadow || e.o.shadow
	rate := item{key: base, lim: rl.rate, cost: dp.cost, rule: l, role: roleRate, shadow: shadow}
	if rl.ceil != nil && l.parent != nil {
		rate.borrow = true
		if prl := p.snap.limits[l.parent.index]; prl.lend != nil {
			rate.lendKey = e.appendKey(p, l.parent, entries, prl.fp) + "~lend"
			rate.lendLim = prl.lend
		}
	}
	dp.items = append(dp.items, p.add(rate))
	if rl.ceil != nil && l.parent != nil {
		dp.items = append(dp.items, p.add(item{key: base + "~ceil", lim: rl.ceil, cost: dp.cost, rule: l, role: roleCeil, shadow: shadow}))
	}
	for k := 0; k <= p.rank && k < len(rl.pools); k++ {
		if rl.pools[k] == nil {
			continue
		}
		class := p.dom.Priorities[k]
		dp.items = append(dp.items, p.add(item{key: base + "~p." + escape(class), lim: rl.pools[k], cost: dp.cost,
			rule: l, role: rolePool, class: class, shadow: shadow}))
	}
}

// add merges it into the plan's items and returns its index.
func (p *plan) add(it item) int {
	for i := range p.items {
		if p.items[i].key == it.key {
			x := &p.items[i]
			x.cost = max(x.cost, it.cost)
			x.shadow = x.shadow && it.shadow
			return i
		}
	}
	p.items = append(p.items, it)
	return len(p.items) - 1
}

// baseKey builds the store key of rule l for a request's entries:
// prefix, domain, then key=value for each entry down to l's descriptor (the
// wildcard itself where share_threshold pools the values), then '#' and the
// limit's fingerprint. Separators inside names and values are escaped, so
// two different descriptors never share a key, and '{' '}' are escaped so a
// value cannot pick a Redis Cluster slot.
//
// On the memory store (aliasKeys) the key is not allocated: it aliases the
// plan's buffer, to which each key of the plan is appended (a buffer that
// grows leaves the earlier keys in the old array, which they keep alive).
// Such keys live as long as the plan: the store copies the keys it keeps,
// and what a Response keeps (its leases, its wait key) is copied out by
// detachKeys before the plan goes back to the pool.
func (e *Engine) appendKey(p *plan, l *Rule, entries []Entry, fp string) string {
	if !e.aliasKeys {
		p.buf = e.appendBaseKey(p.buf[:0], p.dom.Name, p.dom.HashTag, l, entries, fp)
		return string(p.buf)
	}
	start := len(p.buf)
	p.buf = e.appendBaseKey(p.buf, p.dom.Name, p.dom.HashTag, l, entries, fp)
	return unsafe.String(&p.buf[start], len(p.buf)-start)
}

func (e *Engine) baseKey(domain string, tag bool, l *Rule, entries []Entry, fp string) string {
	return string(e.appendBaseKey(nil, domain, tag, l, entries, fp))
}

// appendBaseKey appends the store key of rule l for entries: the prefix,
// the domain, each entry of l's descriptor path as |key=value (a long key
// or value as its digest, see appendKeyPart), '#' and the limit's
// fingerprint fp. With tag (Domain.HashTag) the first entry is
// written in braces, the key's Redis Cluster hash tag; escaping keeps
// braces out of keys otherwise.
func (e *Engine) appendBaseKey(b []byte, domain string, tag bool, l *Rule, entries []Entry, fp string) []byte {
	depth := 0
	if l.Node != nil {
		depth = l.Node.depth
	} else if l.index < 0 { // an Envoy per-descriptor limit: every entry
		depth = len(entries)
	}
	var nodes [8]*Node
	path := nodes[:0]
	if l.Node != nil {
		if depth > len(nodes) {
			path = make([]*Node, depth)
		} else {
			path = nodes[:depth]
		}
		for n := l.Node; n != nil; n = n.Parent {
			path[n.depth-1] = n
		}
	}
	b = append(b, e.o.prefix...)
	b = appendEscaped(b, domain)
	path0 := len(b) // where the entries start; after the first one with a hash tag
	for i := 0; i < depth && i < len(entries); i++ {
		b = append(b, '|')
		if tag && i == 0 {
			b = append(b, '{')
		}
		b = appendKeyPart(b, entries[i].Key)
		b = append(b, '=')
		if len(path) > i && path[i].ShareThreshold {
			b = appendKeyPart(b, path[i].Value)
		} else {
			b = appendKeyPart(b, entries[i].Value)
		}
		if tag && i == 0 {
			b = append(b, '}')
			path0 = len(b)
		}
	}
	if len(b)-path0 > maxKeyPath {
		// An Envoy per-descriptor limit keys by every entry a request
		// sends, however many: past maxKeyPath bytes, the entries (after
		// the hash-tagged first one) go in as one digest.
		sum := sha256.Sum256(b[path0:])
		b = append(b[:path0], "|%P"...)
		b = base64.RawURLEncoding.AppendEncode(b, sum[:])
	}
	b = append(b, '#')
	b = append(b, fp...)
	return b
}

func escape(s string) string { return string(appendEscaped(nil, s)) }

// appendEscaped appends s with the key syntax's separators, braces, '%',
// spaces, control bytes and non-ASCII bytes percent-encoded: keys stay
// unambiguous and valid for every store (Memcached keys take no spaces or
// control bytes).
func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	// The common case, a string with nothing to escape, is one copy.
	i := 0
	for i < len(s) && !mustEscape[s[i]] {
		i++
	}
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		c := s[i]
		if mustEscape[c] {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return b
}

// mustEscape marks the bytes appendEscaped percent-encodes.
var mustEscape = func() (t [256]bool) {
	for c := range t {
		t[c] = c <= ' ' || c >= 0x7f || strings.IndexByte("%|=#~{}", byte(c)) >= 0
	}
	return t
}()

// leaseNeeded reports whether any key is a concurrency limit.
func (p *plan) leaseNeeded() bool {
	for i := range p.items {
		if p.items[i].lim.Algorithm() == algo.Concurrency {
			return true
		}
	}
	return false
}

// newLeaseID names the concurrency leases of one decision: 63 bits from
// crypto/rand, never 0. The ID is what lets a holder release its slots
// (POST /v1/release carries it in a token the client keeps), so it must
// not be guessable from the IDs other clients were given.
func newLeaseID() uint64 {
	var b [8]byte
	crand.Read(b[:]) // never fails (crypto/rand)
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// take runs the all-or-nothing decision: one store.Take over every
// enforcing key; when the only refusals are rates of rules that may borrow,
// a second Take without those rates and with their parents' lend pools;
// then the shadow keys on their own.
func (e *Engine) take(ctx context.Context, p *plan, resp *Response) error {
	var lease uint64
	if p.leaseNeeded() {
		lease = newLeaseID()
	}
	denied := false
	for i := range p.descs {
		for _, r := range p.descs[i].deny {
			if !r.Shadow && !e.o.shadow {
				denied = true
			}
		}
	}
	if denied {
		// A deny rule refuses without a store call; nothing is charged,
		// and the other keys are only looked at for the statuses: a store
		// that fails that look leaves them out (undecided), and the
		// refusal stands — failing the request would let a caller that
		// admits on errors (Envoy's failure_mode_deny: false) pass what
		// the deny rule blocks.
		_ = e.peekItems(ctx, p, allItems(p), true)
		return nil
	}
	enforce, shadow := p.enforce[:0], p.shadow[:0]
	for i := range p.items {
		if p.items[i].shadow {
			shadow = append(shadow, i)
		} else {
			enforce = append(enforce, i)
		}
	}
	p.enforce, p.shadow = enforce, shadow
	admitted := true
	if len(enforce) > 0 {
		var err error
		admitted, err = e.takeEnforced(ctx, p, enforce, lease, resp)
		if err != nil {
			return err
		}
		p.refused = !admitted
	}
	if len(shadow) == 0 {
		return nil
	}
	if !admitted {
		// For the shadow statuses only: the refusal stands if the store
		// fails this look (see the deny rule's above).
		_ = e.peekItems(ctx, p, shadow, true)
		return nil
	}
	// Shadow keys are charged for admitted requests, each on its own so
	// that one shadow refusal does not hide another's count. A shadow
	// rule is a dry run: a store error on its key leaves its status out
	// (undecided) and neither fails nor undoes the request, which the
	// enforced keys decided. A Partial refusal stands, its error or not,
	// as in takeEnforced (a bare memcached store whose decr giving a
	// refused increment back failed): the status reports it.
	reqs := append(p.reqs[:0], store.Request{})
	out := append(p.out[:0], algo.Decision{})
	p.reqs, p.out = reqs, out
	for _, i := range shadow {
		it := &p.items[i]
		reqs[0] = store.Request{Key: it.key, Limit: it.lim, Cost: it.cost, Lease: lease}
		res, err := e.st.Take(ctx, reqs, out)
		if err != nil && !res.Partial {
			e.shadowFailed(ctx, p.dom.Name, it.rule, len(p.snap.limits), err)
			continue
		}
		resp.StoreFallback = resp.StoreFallback || res.Fallback
		if res.Partial && out[0] == (algo.Decision{}) {
			continue // undecided: no store decided the key
		}
		it.dec, it.decided = out[0], true
		if res.Allowed {
			p.took(reqs, res, resp)
			if !res.Fallback {
				it.took = reqs[0].Cost
			}
		}
	}
	return nil
}

// maxShadowCauses is how many (rule, cause) pairs the shadow log
// remembers beyond one per rule of the configuration; beyond them, those
// reported longest ago are forgotten first. One per rule keeps a
// configuration's every shadow rule failing alike (an ACL that misses
// them all) to one line each per ShadowLogInterval: with a fixed bound,
// more rules than it forgot one another and logged on every request.
const maxShadowCauses = 64

// shadowFailed reports on the Engine's logger (WithLogger) that the store
// failed the count of rule r, a shadow rule of domain, with err, unless
// err is an outage (store.ErrUnavailable, store.ErrClosed, a deadline) or
// the caller ended the request, or a line of the same rule and cause was
// logged within ShadowLogInterval. rules is the configuration's number of
// rules, for the bound of the causes remembered. The error's quoted
// parts (the key, which holds descriptor values: a client's address, an
// API key) are blanked.
func (e *Engine) shadowFailed(ctx context.Context, domain string, r *Rule, rules int, err error) {
	if e.o.log == nil || ctx.Err() != nil || errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrClosed) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return
	}
	text := store.BlankQuoted(err.Error())
	e.shadowMu.Lock()
	e.shadowLog.Max = maxShadowCauses + rules
	ok, skipped := e.shadowLog.Pass(domain+"\x00"+r.Name+"\x00"+text, e.o.clock())
	e.shadowMu.Unlock()
	if !ok {
		return
	}
	e.o.log.LogAttrs(ctx, slog.LevelWarn, "shadow rule's count failed on the store; the request was decided without it",
		slog.String("domain", domain), slog.String("rule", r.Name), slog.String("err", text), slog.Int("left_out", skipped))
}

// takeEnforced takes the enforcing items all or nothing, borrowing when
// the only refusals are rates with a ceil, and reports whether the store
// admitted the request (store.Result.Allowed). A refusal that stands
// although part of the store failed (store.Result.Partial) is a refusal:
// the items it did not decide stay undecided. A refusal is the store's
// whole answer: its per-request decisions say what each request alone
// would get, and every one of them may pass when the requests together
// do not (two on one key, or another Take's units in flight), so the
// caller reads this result, not the decisions, to know whether anything
// was charged.
func (e *Engine) takeEnforced(ctx context.Context, p *plan, enforce []int, lease uint64, resp *Response) (bool, error) {
	reqs, idx, out := p.reqs[:0], p.idx[:0], p.out[:0] // idx: item index per request; -1-i for item i's lend pool
	defer func() { p.reqs, p.idx, p.out = reqs, idx, out }()
	for attempt := 0; attempt <= len(enforce); attempt++ {
		reqs, idx = reqs[:0], idx[:0]
		for _, i := range enforce {
			it := &p.items[i]
			if it.borrowed {
				if it.lendLim == nil {
					continue
				}
				if j := keyIndex(reqs, it.lendKey); j >= 0 {
					// Borrowed for two descriptors: charged once, with
					// the larger cost, as any key.
					reqs[j].Cost = max(reqs[j].Cost, it.cost)
					continue
				}
				reqs = append(reqs, store.Request{Key: it.lendKey, Limit: it.lendLim, Cost: it.cost, Lease: lease})
				idx = append(idx, -1-i)
				continue
			}
			reqs = append(reqs, store.Request{Key: it.key, Limit: it.lim, Cost: it.cost, Lease: lease})
			idx = append(idx, i)
		}
		out = growDecisions(out, len(reqs))
		res, err := e.st.Take(ctx, reqs, out)
		if err != nil && !res.Partial {
			return false, err
		}
		// A Partial refusal stands, its error or not (store/resilient
		// answers it without one): the requests whose part of the store
		// failed are not decided, and left out of the statuses.
		resp.StoreFallback = resp.StoreFallback || res.Fallback
		for j, i := range idx {
			if res.Partial && out[j] == (algo.Decision{}) {
				continue
			}
			if i >= 0 {
				p.items[i].dec, p.items[i].decided = out[j], true
			} else {
				p.lendDecision(-1-i, out[j])
			}
		}
		if res.Allowed {
			p.took(reqs, res, resp)
			if !res.Fallback {
				for j, i := range idx {
					if i >= 0 {
						p.items[i].took = reqs[j].Cost
					} else {
						p.lendTook(-1-i, reqs[j].Cost)
					}
				}
			}
			return true, nil
		}
		// Borrow when every refusal is the rate of a rule with a ceil.
		retry := false
		for j, i := range idx {
			if out[j].Allowed || res.Partial && out[j] == (algo.Decision{}) {
				continue
			}
			if i < 0 || !p.items[i].borrow {
				return false, nil
			}
			retry = true
		}
		if !retry {
			return false, nil
		}
		for j, i := range idx {
			// An undecided request of a Partial refusal is no refusal:
			// the retry takes its key again, for the store to decide.
			if i >= 0 && !out[j].Allowed && !(res.Partial && out[j] == (algo.Decision{})) {
				p.items[i].borrowed = true
			}
		}
	}
	return false, nil
}

// took records what an admitted Take of reqs (its Result res) charged: the
// concurrency slots as the response's leases (Release gives them back),
// the other units in p.charged (Refund does). A failure policy's answer
// (res.Fallback) charged nothing on the store: a refund there would give
// back units other requests spent, so its units are not recorded (a local
// fallback store keeps them until its window passes, which errs on the
// side of refusing).
func (p *plan) took(reqs []store.Request, res store.Result, resp *Response) {
	for _, q := range reqs {
		if q.Limit.Algorithm() == algo.Concurrency {
			resp.leases = append(resp.leases, q)
			continue
		}
		if res.Fallback {
			continue
		}
		q.At = res.At
		p.charged = append(p.charged, q)
	}
}

// lendDecision records the decision of item i's lend pool on every item
// that borrows from the same pool.
func (p *plan) lendDecision(i int, d algo.Decision) {
	key := p.items[i].lendKey
	for k := range p.items {
		if p.items[k].borrowed && p.items[k].lendKey == key {
			p.items[k].lendDec, p.items[k].lendDecided = d, true
		}
	}
}

// lendTook records what an admitted request took from item i's lend pool
// on every item that borrows from the same pool.
func (p *plan) lendTook(i int, cost int64) {
	key := p.items[i].lendKey
	for k := range p.items {
		if p.items[k].borrowed && p.items[k].lendKey == key {
			p.items[k].lendTook = cost
		}
	}
}

// growDecisions returns out resized to n zeroed decisions.
func growDecisions(out []algo.Decision, n int) []algo.Decision {
	if cap(out) < n {
		return make([]algo.Decision, n)
	}
	out = out[:n]
	clear(out)
	return out
}

// keyIndex is the index of the request on key in reqs, -1 when none is.
func keyIndex(reqs []store.Request, key string) int {
	for i := range reqs {
		if reqs[i].Key == key {
			return i
		}
	}
	return -1
}

// peek looks at every key without charging: for Peek, and for statuses
// after a deny rule refused. A rate that refuses while its ceil and its
// parent's lend pool pass counts as borrowed, as Decide would.
func (e *Engine) peek(ctx context.Context, p *plan) error {
	return e.peekItems(ctx, p, allItems(p), false)
}

func allItems(p *plan) []int {
	all := make([]int, len(p.items))
	for i := range all {
		all[i] = i
	}
	return all
}

// peekItems decides the items without charging. refused reports that the
// request is refused anyway: Remaining then says what is left with nothing
// charged, as after a refused Take (store.Unwind), rather than what would
// be left after this request.
func (e *Engine) peekItems(ctx context.Context, p *plan, which []int, refused bool) error {
	reqs, idx := p.reqs[:0], p.idx[:0]
	defer func() { p.reqs, p.idx = reqs, idx }()
	for _, i := range which {
		it := &p.items[i]
		reqs = append(reqs, store.Request{Key: it.key, Limit: it.lim, Cost: it.cost})
		idx = append(idx, i)
		if it.borrow && it.lendLim != nil {
			if j := keyIndex(reqs, it.lendKey); j >= 0 {
				reqs[j].Cost = max(reqs[j].Cost, it.cost)
			} else {
				reqs = append(reqs, store.Request{Key: it.lendKey, Limit: it.lendLim, Cost: it.cost})
				idx = append(idx, -1-i)
			}
		}
	}
	out := growDecisions(p.out, len(reqs))
	p.out = out
	if err := e.st.Peek(ctx, reqs, out); err != nil {
		return err
	}
	if refused {
		for j := range out {
			out[j] = store.Unwind(out[j], reqs[j].Cost)
		}
	}
	for j, i := range idx {
		if i >= 0 {
			p.items[i].dec, p.items[i].decided = out[j], true
		} else {
			key := p.items[-1-i].lendKey
			for k := range p.items {
				if p.items[k].lendKey == key {
					p.items[k].lendDec, p.items[k].lendDecided = out[j], true
				}
			}
		}
	}
	// A refused borrowing rate passes when its ceil and lend pool do.
	for i := range p.items {
		it := &p.items[i]
		if !it.borrow || !it.decided || it.dec.Allowed {
			continue
		}
		ok := !it.lendDecided || it.lendDec.Allowed
		for k := range p.items {
			if c := &p.items[k]; c.role == roleCeil && c.rule == it.rule && c.key == it.key+"~ceil" {
				ok = ok && c.decided && c.dec.Allowed
			}
		}
		it.borrowed = ok
	}
	return nil
}

// finish turns the items' decisions into statuses and the response's code,
// strategy and delay.
func (e *Engine) finish(p *plan, resp *Response, take bool) {
	now := &calendarNow{clock: e.o.clock}
	var refusing []*Rule
	var maxRetry, maxDelay time.Duration
	var waitItem *item
	shadowRefused := false
	total := 0
	for i := range p.descs {
		total += len(p.descs[i].items)*2 + len(p.descs[i].deny)
	}
	backing := p.limitStatuses(total)
	for i := range p.descs {
		dp := &p.descs[i]
		s := &resp.Statuses[i]
		if dp.rule == nil || dp.rule.Unlimited {
			continue
		}
		// The window goes with the quota the status reports: the limit in
		// force (after overrides and scales), or the tightest of a
		// hierarchy's limits below.
		s.Window = ruleWindow(dp.rule, now)
		if dp.rule.index >= 0 {
			if l := p.snap.limits[dp.rule.index].rate; l != nil {
				s.Window = headerWindow(l, 0, now)
			}
		}
		s.QuotaUnit = quotaUnit(dp.rule.limit)
		s.Limits = backing[len(backing):len(backing):cap(backing)]
		refused, borrowed := false, false
		var ceil *algo.Limit // the own rule's, when its rate borrowed
		// globalOver: a limit refused that only the global shadow mode
		// lets pass (Status.ShadowOverLimit).
		globalOver := false
		for _, r := range dp.deny {
			name := limitName(r, r.Name, s.Rule)
			st := LimitStatus{Name: name, Rule: name, Decision: algo.Decision{RetryAfter: algo.Never, ResetAfter: denyReset(r, now)},
				Window: ruleWindow(r, now), Shadow: r.Shadow || e.o.shadow, Deny: true}
			s.Limits = append(s.Limits, st)
			if st.Shadow {
				shadowRefused = true
				globalOver = globalOver || !r.Shadow
				continue
			}
			refused = true
			refusing = append(refusing, r)
			maxRetry = algo.Never
		}
		for _, k := range dp.items {
			it := &p.items[k]
			if !it.decided {
				continue
			}
			owner := limitName(it.rule, it.rule.Name, s.Rule)
			ls := LimitStatus{Name: limitName(it.rule, itemName(it), s.Rule), Rule: owner, Shadow: it.shadow,
				QuotaUnit: quotaUnit(it.lim), Borrowed: it.borrowed, lim: it.lim, cname: configuredName(it.rule), Charged: it.took}
			ls.Decision, ls.Window = statusOf(it.lim, it.dec, now)
			s.Limits = append(s.Limits, ls)
			if it.borrowed {
				borrowed = true
				if it.rule == dp.rule {
					ceil = p.ownCeil(dp)
				}
				if it.lendDecided {
					lend := LimitStatus{Name: it.rule.parent.Name + "/lend", Rule: owner, Shadow: it.shadow, QuotaUnit: quotaUnit(it.lendLim),
						lim: it.lendLim, cname: configuredName(it.rule.parent), Charged: it.lendTook}
					lend.Decision, lend.Window = statusOf(it.lendLim, it.lendDec, now)
					s.Limits = append(s.Limits, lend)
					if !it.lendDec.Allowed && !it.shadow {
						refused = true
						refusing = append(refusing, it.rule)
						maxRetry = max(maxRetry, it.lendDec.RetryAfter)
					}
				}
				continue // the rate's refusal is what borrowing answers
			}
			d := &s.Limits[len(s.Limits)-1].Decision // ls's
			if !d.Allowed {
				if it.shadow {
					shadowRefused = true
					globalOver = globalOver || !it.rule.Shadow
					continue
				}
				refused = true
				refusing = append(refusing, it.rule)
				maxRetry = max(maxRetry, d.RetryAfter)
				if waitItem == nil || d.RetryAfter > waitItem.dec.RetryAfter {
					waitItem = it
				}
				continue
			}
			if !it.shadow {
				maxDelay = max(maxDelay, d.Delay)
			}
		}
		switch {
		case refused:
			// A borrowing rate that refused is one refusal among others.
			for j := range s.Limits {
				s.Limits[j].Borrowed = false
			}
		case ceil != nil:
			// The own rule's rate refused and its ceil admitted the
			// request: the ceil is the limit in force.
			s.RuleLimit = ceil
		}
		j := tightest(s.Limits, s.Shadow && !refused)
		if j < 0 { // none of that kind: a key shared with another descriptor
			j = tightest(s.Limits, !s.Shadow || refused)
		}
		if j >= 0 {
			l := &s.Limits[j]
			s.Decision, s.Window, s.QuotaUnit = l.Decision, l.Window, l.QuotaUnit
			if l.lim != nil {
				// An ancestor, a ceil or a pool that is tighter than the
				// rule's own limit is the limit in force for this request.
				s.RuleLimit, s.ConfiguredName = l.lim, l.cname
			}
		}
		if refused {
			s.Code = CodeOverLimit
			resp.Code = CodeOverLimit
		}
		s.Borrowed = borrowed && !refused
		s.ShadowOverLimit = globalOver && !refused
		backing = backing[:len(backing)+len(s.Limits)]
	}
	if take && p.refused && resp.Code == CodeOK {
		// The store refused the Take and charged nothing, yet every limit
		// would have passed alone: no limit explains the refusal, which
		// is the store's all the same. Every descriptor that took part is
		// over; none can name a retry time, so the request is not queued.
		refusing = p.unexplained(resp)
		maxRetry = algo.Never
	}
	if resp.Code == CodeOK {
		resp.Delay = maxDelay
		if shadowRefused {
			resp.Strategy = StrategyShadow
		}
		if !take {
			resp.leases = nil
		}
		return
	}
	resp.leases = nil
	resp.Strategy, resp.Fallback, resp.Delay = strategyOf(refusing, maxRetry)
	if resp.Strategy == StrategyWait && waitItem != nil {
		resp.waitKey, resp.waitRule = waitItem.key, waitItem.rule
		resp.waitLim = waitItem.lim
		if waitItem.lim != nil {
			resp.waitAdm = waitItem.lim.AdmissionDelay(waitItem.cost)
		}
	}
}

// tightest is the index of the limit a status reports as its Decision
// among ls, -1 when there is none: of the shadow limits when shadow (a
// shadow rule's status, which no enforced limit refused, reports what its
// dry run would do), else of the enforced ones; never a rate whose refusal
// borrowing answered (Borrowed). Of those, a refusal before an admission,
// the longest retry among refusals and the fewest remaining among
// admissions, the first on a tie: the order headers.Tightest chooses the
// X-RateLimit fields in, so that the status and the fields tell of the
// same limit.
func tightest(ls []LimitStatus, shadow bool) int {
	best := -1
	for j := range ls {
		l := &ls[j]
		if l.Borrowed || l.Shadow != shadow {
			continue
		}
		if best < 0 || tighter(&l.Decision, &ls[best].Decision) {
			best = j
		}
	}
	return best
}

// tighter reports whether a is a tighter decision than b: a refusal before
// an admission, the longer retry of two refusals, the fewer remaining of
// two admissions.
func tighter(a, b *algo.Decision) bool {
	switch {
	case a.Allowed != b.Allowed:
		return !a.Allowed
	case !a.Allowed:
		return a.RetryAfter > b.RetryAfter
	}
	return a.Remaining < b.Remaining
}

// configuredName is r's rate_limit.name as configured, "" without one.
func configuredName(r *Rule) string {
	if r != nil && r.named {
		return r.Name
	}
	return ""
}

// ownCeil is the ceil of dp's own rule, nil when it has none.
func (p *plan) ownCeil(dp *descPlan) *algo.Limit {
	for _, k := range dp.items {
		if it := &p.items[k]; it.role == roleCeil && it.rule == dp.rule {
			return it.lim
		}
	}
	return nil
}

// unexplained marks over the limit every status with an enforcing limit
// in a Take the store refused as a whole while each of its requests alone
// passed, and returns their rules.
func (p *plan) unexplained(resp *Response) []*Rule {
	var refusing []*Rule
	for i := range p.descs {
		dp := &p.descs[i]
		for _, k := range dp.items {
			if p.items[k].shadow || !p.items[k].decided {
				continue
			}
			s := &resp.Statuses[i]
			s.Code, s.Borrowed, s.ShadowOverLimit = CodeOverLimit, false, false
			refusing = append(refusing, dp.rule)
			break
		}
	}
	resp.Code = CodeOverLimit
	return refusing
}

// quotaUnit is a limit's quota unit for headers (qu): ConcurrentRequests
// for a concurrency limit, "" (requests) otherwise.
func quotaUnit(l *algo.Limit) string {
	if l != nil && l.Algorithm() == algo.Concurrency {
		return ConcurrentRequests
	}
	return ""
}

// strategyOf picks the response's strategy from the refusing rules: reject
// wins over degrade, degrade over wait; wait holds only when every refusing
// rule waits and the longest retry fits the shortest max_wait.
func strategyOf(refusing []*Rule, retry time.Duration) (string, string, time.Duration) {
	var fallback string
	allWait := true
	minWait := time.Duration(math.MaxInt64)
	for _, r := range refusing {
		switch {
		case r.Strategy == StrategyReject || r.Strategy == StrategyShadow || (r.Deny && r.Strategy == StrategyWait):
			return StrategyReject, "", 0
		case r.Strategy == StrategyDegrade:
			if fallback == "" {
				fallback = r.Fallback
			}
			allWait = false
		default:
			minWait = min(minWait, r.MaxWait)
		}
	}
	if fallback != "" {
		return StrategyDegrade, fallback, 0
	}
	if allWait && retry != algo.Never && retry <= minWait {
		return StrategyWait, "", retry
	}
	return StrategyReject, "", 0
}

// limitName is a LimitStatus's name: name, or for an Envoy per-descriptor
// limit (which has no name of its own) the status's rule, the descriptor's
// path with values.
func limitName(r *Rule, name, statusRule string) string {
	if r.index < 0 {
		return statusRule
	}
	return name
}

func itemName(it *item) string {
	switch it.role {
	case roleCeil:
		return it.rule.Name + "/ceil"
	case rolePool:
		return it.rule.Name + "/" + it.class
	}
	return it.rule.Name
}

// headerWindow is a limit's window as the RateLimit-Policy field states it
// (w), for the quota q = the limit's capacity: a bucket's capacity refills
// in capacity/limit periods (burst 10 at 60 per minute: q=10;w=10, not the
// period's 60 s, which would understate the rate sixfold), and so do
// SmoothBursty's stored permits. SmoothWarmup states its stable rate
// instead (see statusOf). Concurrency slots have no window (0: w is
// omitted).
//
// A calendar month's or year's length is that of the period whose end is
// the key's stored reset (reset, the decision's ResetAfter, counted from
// the store's clock), so every instance sharing a store states the same w
// for the same key whatever its own clock reads; with nothing stored yet
// (reset 0), that of the period holding the Engine's clock.
func headerWindow(l *algo.Limit, reset time.Duration, now *calendarNow) time.Duration {
	switch l.Algorithm() {
	case algo.TokenBucket, algo.GCRA, algo.Shaper, algo.SmoothBursty:
		p := l.Params()
		us := int64(p.Period / time.Microsecond)
		// capacity × period fits in 2^53 µs (Compile checks it).
		return time.Duration(us*l.Capacity()/p.Limit) * time.Microsecond
	case algo.Concurrency:
		return 0
	}
	cal := l.Params().Calendar
	if cal == algo.CalendarNone {
		return l.Window(0) // the period: no clock needed
	}
	if reset <= 0 {
		return l.Window(now.us())
	}
	return calendarEndingNear(cal, time.UnixMicro(now.us()).Add(reset))
}

// calendarEndingNear is the length of the UTC calendar month or year whose
// end is the period boundary nearest t: t is a stored reset time read
// through this host's clock, which may be ahead of or behind the store's
// by minutes, so it falls just before or just after the boundary the store
// counted to.
func calendarEndingNear(cal algo.Calendar, t time.Time) time.Duration {
	t = t.UTC()
	years, months := 0, 1
	start := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	if cal == algo.CalendarYear {
		years, months = 1, 0
		start = time.Date(t.Year(), time.January, 1, 0, 0, 0, 0, time.UTC)
	}
	end := start
	if next := start.AddDate(years, months, 0); next.Sub(t) < t.Sub(start) {
		end = next
	}
	return end.Sub(end.AddDate(-years, -months, 0))
}

// statusOf is the decision and window a status reports for a decision d
// of l: d with the window of headerWindow, except for SmoothWarmup, whose
// capacity is one request at a time (one every period/limit): stated as
// q=1 for a window of a fraction of a second, which the header fields
// round up to whole seconds, it would understate the rate (10 per second
// would read 1 per second), so its status reports the stable rate, limit
// per period, as its quota and window.
func statusOf(l *algo.Limit, d algo.Decision, now *calendarNow) (algo.Decision, time.Duration) {
	if l.Algorithm() == algo.SmoothWarmup {
		p := l.Params()
		d.Limit = p.Limit
		return d, p.Period
	}
	return d, headerWindow(l, d.ResetAfter, now)
}

// RuleStatus is the Status an Engine reports for a matched rule named name
// whose limit l decided d, for callers deciding on a limit themselves (the
// middleware's ForLimiter) whose header fields must be those of the same
// limit in a rules file: Code OVER_LIMIT when d refused; the quota l's
// capacity over the time it takes to refill for the buckets (TokenBucket,
// GCRA, Shaper, SmoothBursty), the stable rate for SmoothWarmup, the period
// for the windows and logs (for a calendar month or year, the one whose end
// is d's reset, or with no reset the one holding now; now is called at most
// once and only for those), and no window
// for Concurrency, whose quota unit is ConcurrentRequests.
func RuleStatus(name string, l *algo.Limit, d algo.Decision, now func() time.Time) Status {
	s := Status{Code: CodeOK, Matched: true, Rule: name, RuleLimit: l, QuotaUnit: quotaUnit(l)}
	if !d.Allowed {
		s.Code = CodeOverLimit
	}
	s.Decision, s.Window = statusOf(l, d, &calendarNow{clock: now})
	return s
}

// calendarNow is the Engine's clock as a calendar window needs it: read at
// most once per decision, and only when a month or year window is
// reported (every other window is its period, whatever the time).
type calendarNow struct {
	clock func() time.Time
	at    int64 // µs since the epoch, once read
	read  bool
}

func (n *calendarNow) us() int64 {
	if !n.read {
		n.at, n.read = n.clock().UnixMicro(), true
	}
	return n.at
}

// ruleWindow is the rule's window for headers at now.
func ruleWindow(r *Rule, now *calendarNow) time.Duration {
	if r.limit != nil {
		return headerWindow(r.limit, 0, now)
	}
	period, cal := rulePeriod(r)
	if cal == algo.CalendarNone {
		return period
	}
	start, end := calendarPeriod(cal, now)
	return end.Sub(start)
}

// rulePeriod is the window of a rule without a compiled limit (a
// requests_per_unit: 0 rule): its Params' period or calendar period when
// set (an Envoy per-descriptor limit's are), else its unit; 0 when it has
// neither.
func rulePeriod(r *Rule) (time.Duration, algo.Calendar) {
	if r.Params.Period > 0 || r.Params.Calendar != algo.CalendarNone {
		return r.Params.Period, r.Params.Calendar
	}
	d, cal, _ := ParseUnit(r.Unit)
	return d, cal
}

// calendarPeriod is the UTC calendar month or year that holds now.
func calendarPeriod(cal algo.Calendar, now *calendarNow) (start, end time.Time) {
	t := time.UnixMicro(now.us()).UTC()
	if cal == algo.CalendarYear {
		start = time.Date(t.Year(), 1, 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(1, 0, 0)
	}
	start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0)
}

// denyReset is how long the current window of r, a requests_per_unit: 0
// rule, lasts after now: windows of its period aligned on the epoch, or
// the calendar period, as envoyproxy/ratelimit computes a status's
// duration_until_reset. 0 when the rule has no window.
func denyReset(r *Rule, now *calendarNow) time.Duration {
	period, cal := rulePeriod(r)
	if cal != algo.CalendarNone {
		_, end := calendarPeriod(cal, now)
		return end.Sub(time.UnixMicro(now.us()))
	}
	p := int64(period / time.Microsecond)
	if p <= 0 {
		return 0
	}
	return time.Duration(p-now.us()%p) * time.Microsecond
}

// String renders the code, e.g. "OVER_LIMIT".
func (r Response) String() string {
	s := r.Code.String()
	if r.Strategy != "" {
		s += " strategy=" + r.Strategy
	}
	if r.Delay > 0 {
		s += " delay=" + r.Delay.String()
	}
	return s + " statuses=" + strconv.Itoa(len(r.Statuses))
}
