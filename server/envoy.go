package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/resilient"
)

// ErrBadInput is wrapped by every error about a request's content; the
// transports answer it with 400 / INVALID_ARGUMENT.
var ErrBadInput = errors.New("bad request")

func badInput(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadInput, fmt.Sprintf(format, args...))
}

// Limits bounds what one request of the native API may carry: POST
// /v1/decide and /v1/peek, and the admin API's inspect and reset, whose
// callers are told what is wrong (400). The Envoy APIs (gRPC
// ShouldRateLimit and POST /json) bound only the number of descriptors
// (EnvoyDescriptors), not their entries or values, as envoyproxy/ratelimit
// bounds nothing: Envoy fails open on a call that errs, so a client that
// could add a long value to a descriptor would escape every limit of its
// request. The number of descriptors is the proxy's configuration's (one
// per rate_limits action), not a client's; a caller of its own sending
// thousands would make the store time out, and the failure policy answer
// for every limit of the request — and open the store's breakers for
// everyone. The gRPC message size and the HTTP body limit
// (WithMaxBodyBytes) bound what they carry, and store keys stay short
// whatever the values' length (policy digests long keys and values).
type Limits struct {
	// EnvoyDescriptors bounds the descriptors of one gRPC ShouldRateLimit
	// or /json request (default 512, far above what a proxy's
	// configuration sends; -1: no bound). Past it the request is
	// INVALID_ARGUMENT / 400, the store untouched.
	EnvoyDescriptors int
	// Descriptors per request (default 64).
	Descriptors int
	// Entries per descriptor (default 16).
	Entries int
	// EntryBytes bounds the length of the domain and of one key or value
	// (default 1024).
	EntryBytes int
	// Batch bounds the requests of one /v1 batch, and the leases of one
	// /v1/release or /v1/renew (default 100).
	Batch int
}

func (l Limits) withDefaults() Limits {
	if l.EnvoyDescriptors == 0 {
		l.EnvoyDescriptors = DefaultEnvoyDescriptors
	}
	if l.Descriptors <= 0 {
		l.Descriptors = 64
	}
	if l.Entries <= 0 {
		l.Entries = 16
	}
	if l.EntryBytes <= 0 {
		l.EntryBytes = 1024
	}
	if l.Batch <= 0 {
		l.Batch = 100
	}
	return l
}

// check validates a native request: what checkRequest asks, and the
// bounds — at most Descriptors descriptors, each of 1 to Entries entries,
// keys, values and the domain of at most EntryBytes bytes. Errors say
// which descriptor and entry.
func (l Limits) check(req *policy.Request) error {
	switch {
	case len(req.Domain) > l.EntryBytes:
		return badInput("domain is %d bytes long, over the %d-byte limit", len(req.Domain), l.EntryBytes)
	case len(req.Descriptors) > l.Descriptors:
		return badInput("%d descriptors, over the limit of %d per request", len(req.Descriptors), l.Descriptors)
	}
	for i, d := range req.Descriptors {
		switch {
		case len(d.Entries) == 0:
			return badInput("descriptors[%d] has no entries", i)
		case len(d.Entries) > l.Entries:
			return badInput("descriptors[%d] has %d entries, over the limit of %d", i, len(d.Entries), l.Entries)
		}
		for j, e := range d.Entries {
			if len(e.Key) > l.EntryBytes || len(e.Value) > l.EntryBytes {
				return badInput("descriptors[%d].entries[%d]: key or value over the %d-byte limit", i, j, l.EntryBytes)
			}
		}
	}
	return checkRequest(req, 0) // the native bound, Descriptors, checked above
}

// checkRequest validates what every API asks of a request, the Envoy APIs
// included: a domain, at least one descriptor, non-empty keys, no negative
// cost, everything valid UTF-8. A descriptor without entries passes (no
// rule matches it: OK, as envoyproxy/ratelimit answers). Errors say which
// descriptor and entry.
// DefaultEnvoyDescriptors is Limits.EnvoyDescriptors' default.
const DefaultEnvoyDescriptors = 512

func checkRequest(req *policy.Request, maxDescriptors int) error {
	if maxDescriptors > 0 && len(req.Descriptors) > maxDescriptors {
		return badInput("%d descriptors, more than the %d a request may carry (--max-envoy-descriptors): a proxy's configuration sends one per rate_limits action", len(req.Descriptors), maxDescriptors)
	}
	switch {
	case req.Domain == "":
		return badInput("domain must not be empty")
	case !utf8.ValidString(req.Domain):
		return badInput("domain is not valid UTF-8")
	case len(req.Descriptors) == 0:
		return badInput("descriptors must not be empty")
	case req.Hits < 0:
		return badInput("hits %d is negative", req.Hits)
	}
	for i, d := range req.Descriptors {
		if d.Hits < 0 {
			return badInput("descriptors[%d]: hits %d is negative", i, d.Hits)
		}
		for j, e := range d.Entries {
			switch {
			case e.Key == "":
				return badInput("descriptors[%d].entries[%d]: key must not be empty", i, j)
			case !utf8.ValidString(e.Key) || !utf8.ValidString(e.Value):
				return badInput("descriptors[%d].entries[%d]: key or value is not valid UTF-8", i, j)
			}
		}
	}
	return nil
}

// maxHits bounds a request's cost on every API (gRPC, /json, /v1): no
// limit admits more at once (the algorithms keep their counts below 2^53),
// so a larger cost is a mistake to report, not a decision to make.
const maxHits = 1 << 52

// checkHits refuses a cost above maxHits (gRPC's unsigned and /v1's
// signed ones alike); what names it in the request. Negative costs are the
// engine's to refuse.
func checkHits[T int64 | uint64](what string, n T) error {
	if n > maxHits {
		return badInput("%s %d is too large: at most 2^52 (%d)", what, n, int64(maxHits))
	}
	return nil
}

// fromEnvoy converts an Envoy RateLimitRequest. For the common request,
// one descriptor of a few entries, it also returns room for the response's
// statuses (policy.Engine.DecideInto), allocated with the descriptor and its
// entries; else the buffer is nil.
func fromEnvoy(in *rlsv3.RateLimitRequest) (policy.Request, *policy.StatusBuffer, error) {
	req := policy.Request{Domain: in.GetDomain(), Hits: int64(in.GetHitsAddend())}
	var buf *policy.StatusBuffer
	ds := in.GetDescriptors()
	if len(ds) == 1 && ds[0] != nil && len(ds[0].GetEntries()) <= len(oneDescriptor{}.e) {
		one := new(oneDescriptor)
		req.Descriptors = one.d[:]
		one.d[0].Entries = one.e[:len(ds[0].GetEntries())]
		buf = &one.statuses
	} else {
		req.Descriptors = make([]policy.Descriptor, len(ds))
	}
	for i, d := range ds {
		if d == nil {
			return policy.Request{}, nil, badInput("descriptors[%d] is null", i)
		}
		if d.GetIsNegativeHits() {
			return policy.Request{}, nil, badInput("descriptors[%d]: is_negative_hits is not supported", i)
		}
		pd := &req.Descriptors[i]
		if pd.Entries == nil {
			pd.Entries = make([]policy.Entry, len(d.GetEntries()))
		}
		for j, e := range d.GetEntries() {
			pd.Entries[j] = policy.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		if h := d.GetHitsAddend(); h != nil {
			if err := checkHits(fmt.Sprintf("descriptors[%d]: hits_addend", i), h.GetValue()); err != nil {
				return policy.Request{}, nil, err
			}
			// Set, it is the cost, 0 included: 0 checks without
			// charging (envoyproxy/ratelimit's GetHitsAddends). Absent,
			// the request's hits_addend applies.
			pd.Hits, pd.HitsSet = int64(h.GetValue()), true
		}
		if lo := d.GetLimit(); lo != nil {
			unit, cal, err := unitDuration(lo.GetUnit(), lo.GetUnitMultiplier().GetValue())
			if err != nil {
				return policy.Request{}, nil, badInput("descriptors[%d].limit: %v", i, err)
			}
			pd.Limit = &policy.LimitOverride{RequestsPerUnit: int64(lo.GetRequestsPerUnit()), Unit: unit, Calendar: cal}
		}
	}
	return req, buf, nil
}

// oneDescriptor holds a one-descriptor request's descriptor and entries,
// and its response's statuses: one allocation for them all.
type oneDescriptor struct {
	d        [1]policy.Descriptor
	e        [4]policy.Entry
	statuses policy.StatusBuffer
}

// unitDuration is a request limit's window: a length, or for MONTH and
// YEAR the UTC calendar period, as `unit: month` and `unit: year` are in
// the configuration (envoyproxy/ratelimit counts 30 and 365 days from the
// epoch instead; docs/CONFIG.md lists the difference).
func unitDuration(u typev3.RateLimitUnit, mult uint32) (time.Duration, algo.Calendar, error) {
	var d time.Duration
	switch u {
	case typev3.RateLimitUnit_SECOND:
		d = time.Second
	case typev3.RateLimitUnit_MINUTE:
		d = time.Minute
	case typev3.RateLimitUnit_HOUR:
		d = time.Hour
	case typev3.RateLimitUnit_DAY:
		d = 24 * time.Hour
	case typev3.RateLimitUnit_MONTH, typev3.RateLimitUnit_YEAR:
		if mult > 1 {
			return 0, algo.CalendarNone, fmt.Errorf("unit_multiplier %d with unit %v: a calendar period takes no multiplier", mult, u)
		}
		if u == typev3.RateLimitUnit_MONTH {
			return 0, algo.CalendarMonth, nil
		}
		return 0, algo.CalendarYear, nil
	default:
		return 0, algo.CalendarNone, fmt.Errorf("unit %v is not one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR", u)
	}
	if mult > 1 {
		if mult > 1<<20 {
			return 0, algo.CalendarNone, fmt.Errorf("unit_multiplier %d is too large", mult)
		}
		if time.Duration(mult) > math.MaxInt64/d {
			// DAY × 106752 and more: the product would wrap around to
			// a period the client never asked for.
			return 0, algo.CalendarNone, fmt.Errorf("unit_multiplier %d with unit %v is too long a period (about 285 years at most)", mult, u)
		}
		d *= time.Duration(mult)
	}
	return d, algo.CalendarNone, nil
}

// envoyLimit describes a status's limit as Envoy's RateLimit: the rule's
// quota per its window, in the largest whole unit (with unit_multiplier for
// windows such as 30 s).
func envoyLimit(name string, quota int64, window time.Duration) *rlsv3.RateLimitResponse_RateLimit {
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: clampU32(quota)}
	units := []struct {
		d time.Duration
		u rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{365 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_YEAR},
		{7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
		{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
		{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
		{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
	}
	switch {
	case window >= 28*24*time.Hour && window <= 31*24*time.Hour:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_MONTH
		return rl
	case window >= 365*24*time.Hour && window <= 366*24*time.Hour:
		rl.Unit = rlsv3.RateLimitResponse_RateLimit_YEAR
		return rl
	}
	for _, u := range units {
		if window >= u.d && window%u.d == 0 {
			rl.Unit = u.u
			if m := window / u.d; m > 1 {
				rl.UnitMultiplier = wrapU32(uint32(min(m, math.MaxUint32)))
			}
			return rl
		}
	}
	return rl // UNKNOWN: a window below a second or not in whole seconds
}

func clampU32(v int64) uint32 {
	switch {
	case v < 0:
		return 0
	case v > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}

// visible returns the statuses as clients should see them in headers: a
// shadow rule's refusal is not a refusal.
func visible(st []policy.Status) []policy.Status {
	var out []policy.Status
	for i := range st {
		if st[i].Shadow && !st[i].Decision.Allowed {
			if out == nil {
				out = append([]policy.Status(nil), st...)
			}
			out[i].Decision.Allowed = true
			out[i].Decision.RetryAfter = 0
		}
	}
	if out == nil {
		return st
	}
	return out
}

// admitFields is the number of header fields of an admitted request:
// RateLimit-Policy, RateLimit, X-RateLimit-Limit, -Remaining and -Reset. A
// refusal's Retry-After makes six, kept apart so that every response does
// not carry room for it.
const admitFields = 5

// envoyParts holds a response's messages in one allocation instead of one
// per message: the response, a one-descriptor response's status and its
// duration, and the header fields. Nothing is pooled: grpc-go marshals the
// response after the handler has returned, so the parts live as long as the
// response and are never reused.
type envoyParts struct {
	resp      rlsv3.RateLimitResponse
	statusPtr [1]*rlsv3.RateLimitResponse_DescriptorStatus
	status    [1]rlsv3.RateLimitResponse_DescriptorStatus
	reset     [1]durationpb.Duration
	headerPtr [admitFields]*corev3.HeaderValue
	header    [admitFields]corev3.HeaderValue
}

// toEnvoy converts a decision into Envoy's RateLimitResponse the way
// envoyproxy/ratelimit fills it: per descriptor the code, the limit of the
// rule that matched, what remains and when the window resets; OK with no
// limit for a descriptor no rule matched; OK with remaining 2^32-1 for an
// unlimited rule; a shadow rule's refusal is OK, and a refusal that only
// the global shadow mode lets pass is OVER_LIMIT under an overall OK.
//
// limitOf returns a status's current_limit; fallback says that the
// store's failure policy answered the decision (Response.StoreFallback).
// hw, when not nil, writes the
// rate limit header fields into response_headers_to_add; nil leaves them
// out (envoyproxy/ratelimit's default).
func toEnvoy(resp *policy.Response, hw *headers.Writer, limitOf func(st *policy.Status, fallback bool) *rlsv3.RateLimitResponse_RateLimit) *rlsv3.RateLimitResponse {
	p := new(envoyParts)
	out := &p.resp
	out.OverallCode = envoyCode(resp.Code)
	var sts []rlsv3.RateLimitResponse_DescriptorStatus
	var durs []durationpb.Duration
	if n := len(resp.Statuses); n == 1 {
		sts, durs, out.Statuses = p.status[:], p.reset[:], p.statusPtr[:]
	} else {
		// One backing array for the statuses: one allocation for them all.
		sts, out.Statuses = make([]rlsv3.RateLimitResponse_DescriptorStatus, n), make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	}
	for i := range resp.Statuses {
		s := &resp.Statuses[i]
		ds := &sts[i]
		ds.Code = envoyCode(s.Code)
		if s.ShadowOverLimit {
			ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		switch {
		case !s.Matched:
			ds.Code = rlsv3.RateLimitResponse_OK
		case s.Undecided():
			// The store decided nothing for it (another descriptor
			// refused): OK with no current_limit, limit_remaining nor
			// duration_until_reset, as envoyproxy/ratelimit answers a
			// descriptor it has no limit for; Envoy's X-RateLimit-*
			// then come from the statuses that have a limit.
		case s.Unlimited:
			ds.LimitRemaining = math.MaxUint32
		default:
			d := s.Decision
			ds.CurrentLimit = limitOf(s, resp.StoreFallback)
			if ds.Code != rlsv3.RateLimitResponse_OVER_LIMIT && d.Allowed {
				// envoyproxy/ratelimit reports 0 left for a descriptor
				// over its limit, whatever a smaller cost could still
				// take: refused, or answered OK by its shadow_mode.
				ds.LimitRemaining = clampU32(d.Remaining)
			}
			if d.ResetAfter <= 0 && s.RuleLimit != nil {
				// An unused window: it resets at its end all the same.
				// Set on the status, so that the header fields say so too.
				s.Decision.ResetAfter = idleReset(s.RuleLimit, envoyNow())
				d = s.Decision
			}
			if durs == nil {
				durs = make([]durationpb.Duration, len(resp.Statuses))
			}
			durs[i] = durationpb.Duration{Seconds: resetSeconds(d)}
			ds.DurationUntilReset = &durs[i]
		}
		out.Statuses[i] = ds
	}
	if hw == nil {
		return out
	}
	// The fields, their rule's own values from hw's cache: collected on
	// the stack, then placed in the response's room for them.
	var fields [8][2]string
	n := 0
	hw.StatusFields(visible(resp.Statuses), func(name, value string) {
		if n < len(fields) {
			fields[n] = [2]string{name, value}
			n++
		}
	})
	if n > 0 {
		hvs, ptrs := p.header[:], p.headerPtr[:]
		if n > admitFields {
			hvs, ptrs = make([]corev3.HeaderValue, n), make([]*corev3.HeaderValue, n)
		}
		out.ResponseHeadersToAdd = ptrs[:n]
		for i, f := range fields[:n] {
			hvs[i].Key, hvs[i].Value = f[0], f[1]
			ptrs[i] = &hvs[i]
		}
	}
	return out
}

// envoyNow is the clock an unused window's end is reckoned from
// (idleReset); tests set it.
var envoyNow = time.Now

// resetSeconds is a status's duration_until_reset in whole seconds, as
// envoyproxy/ratelimit answers it (utils.CalculateReset: 1 to the unit's
// length) and as Envoy reads it (its X-RateLimit-Reset takes the
// duration's seconds, dropping a fraction): the time until the key is back
// to full capacity, or for a refusal that must wait longer, until its cost
// would pass; rounded up, so that a client that waits that long finds the
// window reset, and never below 1 s when something resets. 0 only when
// nothing does: a bucket that is full, a concurrency limit with no slot
// held.
func resetSeconds(d algo.Decision) int64 {
	reset := d.ResetAfter
	if !d.Allowed && d.RetryAfter != algo.Never && d.RetryAfter > reset {
		reset = d.RetryAfter
	}
	if reset <= 0 {
		return 0
	}
	return max(1, headers.Seconds(reset))
}

// idleReset is when an unused window of l resets, at now: a fixed window
// at its end (windows of its period from the epoch, or the UTC calendar
// month or year), as envoyproxy/ratelimit reports every window; a sliding
// window or log after its period, when a unit taken now would leave it. A
// bucket (token_bucket, gcra, shaper, the smooth algorithms) that nothing
// has used is full, and a concurrency limit holds no slot: 0, nothing
// resets.
func idleReset(l *algo.Limit, now time.Time) time.Duration {
	p := l.Params()
	switch l.Algorithm() {
	case algo.FixedWindow:
		t := now.UTC()
		switch p.Calendar {
		case algo.CalendarMonth:
			return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC).Sub(t)
		case algo.CalendarYear:
			return time.Date(t.Year()+1, time.January, 1, 0, 0, 0, 0, time.UTC).Sub(t)
		}
		if p.Period <= 0 {
			return 0
		}
		us := now.UnixMicro()
		per := int64(p.Period / time.Microsecond)
		return time.Duration(per-((us%per)+per)%per) * time.Microsecond
	case algo.SlidingWindow, algo.SlidingLog:
		return p.Period
	}
	return 0
}

func envoyCode(c policy.Code) rlsv3.RateLimitResponse_Code {
	switch c {
	case policy.CodeOK:
		return rlsv3.RateLimitResponse_OK
	case policy.CodeOverLimit:
		return rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return rlsv3.RateLimitResponse_UNKNOWN
}

// rlsService is the Envoy rate limit service.
type rlsService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *Server
}

// ShouldRateLimit decides an Envoy request. Bad input is INVALID_ARGUMENT
// with the reason (requests_total code "invalid"); a store failure the
// failure policy could not answer is UNAVAILABLE (Envoy then applies its
// failure_mode_deny; code "error"), its message /json's 503 body's
// ("rate limit decision failed: the store is unavailable") and the
// store's words without the key ("dial tcp 10.0.0.5:6379: connect:
// connection refused").
func (r rlsService) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	r.s.grpcInflight.Add(1) // for the drain's report
	defer r.s.grpcInflight.Add(-1)
	start := time.Now()
	resp, err := r.s.shouldRateLimit(ctx, in)
	if err != nil {
		gerr := grpcError(err)
		code := codeError
		if status.Code(gerr) == codes.InvalidArgument {
			code = codeInvalid
		}
		r.s.metrics.Request("grpc", code, time.Since(start))
		return nil, gerr
	}
	r.s.metrics.Request("grpc", codeName(resp.OverallCode), time.Since(start))
	return resp, nil
}

// codeName is c.String() without the enum descriptor's lookup for the two
// codes a decision answers.
func codeName(c rlsv3.RateLimitResponse_Code) string {
	switch c {
	case rlsv3.RateLimitResponse_OK:
		return "OK"
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return "OVER_LIMIT"
	}
	return c.String()
}

func (s *Server) shouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	req, buf, err := fromEnvoy(in)
	if err != nil {
		return nil, err
	}
	if err := checkRequest(&req, s.limits.EnvoyDescriptors); err != nil {
		return nil, err
	}
	var resp policy.Response
	if buf != nil {
		resp, err = s.engine.DecideInto(ctx, req, buf)
	} else {
		resp, err = s.engine.Decide(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	s.spendLikeEnvoy(ctx, &req, &resp)
	s.recordDecision(ctx, s.domainLabel(req.Domain), &req, &resp)
	var hw *headers.Writer
	if s.envoyHeaders {
		hw = s.headerWriter
	}
	return toEnvoy(&resp, hw, s.currentLimit), nil
}

// spendLikeEnvoy makes resp, the engine's decision of req, count usage as
// envoyproxy/ratelimit's counter does, where a token budget needs it: that
// counter is incremented whatever the answer (INCRBY), so a usage report
// larger than what is left exhausts the key, and a check (hits_addend 0)
// on it is then OVER_LIMIT.
//
//   - A descriptor refused because its cost exceeded what remained is
//     charged what remained (policy.Engine.ChargeRemaining; windows and
//     buckets only, that descriptor alone: the request's other descriptors
//     stay uncharged, all or nothing).
//   - A descriptor that only checks (its own hits_addend 0) a window's or
//     a bucket's limit with nothing left is OVER_LIMIT, and the request
//     with it: what the request's other descriptors took is given back
//     (policy.Engine.Refund). envoyproxy/ratelimit answers OK to such a
//     check only when its counter stands exactly at the limit, which a
//     counter that counts refusals seldom does; Floodgate's never passes
//     the limit, so "nothing left" is its over-limit.
//
// Shadow statuses and a decision the store's failure policy answered are
// left as they are. /v1 and the library keep "a refused request charges
// nothing" and admit checks on a spent limit.
func (s *Server) spendLikeEnvoy(ctx context.Context, req *policy.Request, resp *policy.Response) {
	if resp.StoreFallback {
		return
	}
	if resp.Code == policy.CodeOverLimit {
		if _, err := s.engine.ChargeRemaining(ctx, *req, resp); err != nil {
			s.log.Debug("envoy: charging what remains of a refused descriptor", "domain", req.Domain, "error", err)
		}
	}
	var spent []bool // by descriptor; nil: none
	var borrow []int // spent checks on a rule that may borrow
	for i := range resp.Statuses {
		if !spentCheck(&req.Descriptors[i], &resp.Statuses[i]) {
			continue
		}
		if spent == nil {
			spent = make([]bool, len(resp.Statuses))
		}
		spent[i] = true
		if mayBorrow(&resp.Statuses[i]) {
			borrow = append(borrow, i)
		}
	}
	if len(borrow) > 0 {
		// A rule with a ceil whose own rate is spent is not: a unit
		// would be borrowed from its parent while the ceil and the lend
		// pool have one. Only a look says whether they do.
		s.unspentBorrowers(ctx, req, resp.Priority, borrow, spent)
	}
	if !slices.Contains(spent, true) {
		return
	}
	if resp.Code == policy.CodeOK {
		// All or nothing: the other descriptors' charges go back.
		if err := s.engine.Refund(context.WithoutCancel(ctx), *resp); err != nil {
			s.log.Debug("envoy: giving back a request refused by a check on a spent limit", "domain", req.Domain, "error", err)
		} else {
			s.uncharged(ctx, req, resp, spent)
		}
		resp.Code, resp.Strategy, resp.Delay = policy.CodeOverLimit, policy.StrategyReject, 0
	}
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		if !spent[i] {
			continue
		}
		st.Code = policy.CodeOverLimit
		st.Decision.Allowed = false
		st.Decision.Delay = 0
		// Until a unit is back: a window's end, a bucket's next token at
		// the latest.
		st.Decision.RetryAfter = st.Decision.ResetAfter
		if p := st.RuleLimit.Params(); (p.Algorithm == algo.TokenBucket || p.Algorithm == algo.GCRA) && p.Limit > 0 {
			st.Decision.RetryAfter = min(st.Decision.RetryAfter, (p.Period+time.Duration(p.Limit)-1)/time.Duration(p.Limit))
		}
	}
}

// uncharged sets the statuses of resp's descriptors that were charged and
// then given back (all but the spent checks) to what a look at them says
// (Peek at cost 0): what remains with nothing charged, as a request the
// engine refuses reports its other descriptors, instead of what would have
// remained had the request passed. When the look fails they stay as
// decided.
func (s *Server) uncharged(ctx context.Context, req *policy.Request, resp *policy.Response, spent []bool) {
	var which []int
	for i := range resp.Statuses {
		if st := &resp.Statuses[i]; !spent[i] && st.Matched && !st.Unlimited {
			which = append(which, i)
		}
	}
	if len(which) == 0 {
		return
	}
	ds := make([]policy.Descriptor, len(which))
	for j, i := range which {
		ds[j] = req.Descriptors[i]
		ds[j].Hits, ds[j].HitsSet = 0, true
	}
	r, err := s.engine.Peek(ctx, policy.Request{Domain: req.Domain, Descriptors: ds, Priority: resp.Priority})
	if err != nil || len(r.Statuses) != len(which) {
		s.log.Debug("envoy: looking at what remains beside a check on a spent limit", "domain", req.Domain, "error", err)
		return
	}
	for j, i := range which {
		p, st := &r.Statuses[j], &resp.Statuses[i]
		st.Decision, st.Limits, st.Window = p.Decision, p.Limits, p.Window
		st.RuleLimit, st.ConfiguredName = p.RuleLimit, p.ConfiguredName
	}
}

// mayBorrow reports whether st is the status of a rule with a ceil
// (its limits list the rule's ceil, "rule/ceil"), which may borrow from
// its parent when its own rate is spent.
func mayBorrow(st *policy.Status) bool {
	for j := range st.Limits {
		if l := &st.Limits[j]; !l.Shadow && l.Rule == st.Rule && l.Name == l.Rule+"/ceil" {
			return true
		}
	}
	return false
}

// unspentBorrowers clears spent[i] for each descriptor i of which (spent
// checks on rules that may borrow) a request of one unit would be
// admitted now, borrowing: a look (Peek) at them alone, at the request's
// priority class. When the look fails the checks stay spent.
func (s *Server) unspentBorrowers(ctx context.Context, req *policy.Request, priority string, which []int, spent []bool) {
	ds := make([]policy.Descriptor, len(which))
	for j, i := range which {
		ds[j] = req.Descriptors[i]
		ds[j].Hits, ds[j].HitsSet = 1, true
	}
	r, err := s.engine.Peek(ctx, policy.Request{Domain: req.Domain, Descriptors: ds, Priority: priority})
	if err != nil || len(r.Statuses) != len(which) {
		s.log.Debug("envoy: looking whether a check on a spent rate may borrow", "domain", req.Domain, "error", err)
		return
	}
	for j, i := range which {
		if r.Statuses[j].Code == policy.CodeOK {
			spent[i] = false
		}
	}
}

// spentCheck reports whether st, the status of d, is a check (a cost of
// 0) admitted on an enforced window or bucket that had nothing left before
// the request: one of its limits stands at 0 left and the request took
// nothing from it (LimitStatus.Charged). A limit its own request's other
// descriptors emptied — an identical descriptor's, a parent's in a
// hierarchy — is not spent to the check.
func spentCheck(d *policy.Descriptor, st *policy.Status) bool {
	if !d.HitsSet || d.Hits != 0 || !st.Matched || st.Unlimited || st.Shadow || st.Borrowed ||
		st.Code != policy.CodeOK || !st.Decision.Allowed || st.Decision.Remaining > 0 || st.RuleLimit == nil {
		return false
	}
	for i := range st.Limits {
		l := &st.Limits[i]
		if l.Shadow || l.Borrowed || l.Deny || !l.Decision.Allowed || l.Decision.Remaining > 0 || l.Charged > 0 || l.Limit() == nil {
			continue
		}
		switch l.Limit().Algorithm() {
		case algo.FixedWindow, algo.SlidingWindow, algo.SlidingLog, algo.TokenBucket, algo.GCRA:
			return true
		}
	}
	return false
}

func grpcError(err error) error {
	switch {
	case errors.Is(err, ErrBadInput), errors.Is(err, policy.ErrBadRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	// What /json's 503 says, then the store's own words as StoreLog
	// shows them (keyless): the error's text holds the store key (a
	// descriptor's value: a client's address, an API key) and the
	// wrappers' chain.
	return status.Error(codes.Unavailable, "rate limit decision failed: "+store.Failure(err)+": "+shown(keyless(err)))
}

func wrapU32(v uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(v) }

// limitKey identifies a current_limit: the limit in force, the name it
// is reported under, and whether it is the limit's local share (the local
// failure policy's, Server.localShare).
type limitKey struct {
	limit *algo.Limit
	name  string
	local bool
}

// maxCachedLimits bounds a ruleCache: per-descriptor limits of requests
// bring limits of their own, which the engine keeps up to a bound and
// compiles afresh past it.
const maxCachedLimits = 8192

// ruleCache maps the limits of one version of the engine's snapshot to
// their current_limit, so that a response shares them instead of
// allocating its own.
type ruleCache struct {
	version uint64
	m       sync.Map // limitKey → *rlsv3.RateLimitResponse_RateLimit
	n       atomic.Int64
}

// currentLimit is a matched status's current_limit: the limit in force of
// the descriptor's own rule (with runtime overrides and rate scales; a
// per-descriptor limit's own), as its requests per period — not a
// bucket's burst — under the rule's configured name ("" without
// rate_limit.name, as envoyproxy/ratelimit leaves it: a rule's path holds
// configured and requested values). A requests_per_unit: 0 rule is 0 per
// its unit. When the local failure policy answered (fallback, with
// WithInstances above 1), it is the limit's share that policy decides on
// (resilient.Share): the limit in force then, which limit_remaining
// counts down.
func (s *Server) currentLimit(st *policy.Status, fallback bool) *rlsv3.RateLimitResponse_RateLimit {
	l := st.RuleLimit
	if l == nil {
		return envoyLimit(st.ConfiguredName, 0, st.Window)
	}
	v := s.engine.Version()
	c := s.rules.Load()
	if c == nil || c.version != v {
		c = &ruleCache{version: v}
		s.rules.Store(c)
	}
	k := limitKey{l, st.ConfiguredName, fallback && s.localShare > 1}
	if x, ok := c.m.Load(k); ok {
		return x.(*rlsv3.RateLimitResponse_RateLimit)
	}
	var rl *rlsv3.RateLimitResponse_RateLimit
	p := l.Params()
	if k.local {
		p = resilient.Share(l, s.localShare).Params()
	}
	switch p.Calendar {
	case algo.CalendarMonth:
		rl = &rlsv3.RateLimitResponse_RateLimit{Name: k.name, RequestsPerUnit: clampU32(p.Limit), Unit: rlsv3.RateLimitResponse_RateLimit_MONTH}
	case algo.CalendarYear:
		rl = &rlsv3.RateLimitResponse_RateLimit{Name: k.name, RequestsPerUnit: clampU32(p.Limit), Unit: rlsv3.RateLimitResponse_RateLimit_YEAR}
	default:
		rl = envoyLimit(k.name, p.Limit, p.Period)
	}
	if c.n.Add(1) <= maxCachedLimits {
		c.m.Store(k, rl)
	}
	return rl
}
