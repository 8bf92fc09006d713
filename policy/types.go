package policy

import (
	"context"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// Entry is one key/value pair of a descriptor, as in Envoy's
// RateLimitDescriptor.Entry.
type Entry struct {
	Key   string
	Value string
}

// Descriptor is an ordered list of entries (Envoy's RateLimitDescriptor):
// [{remote_address, 10.0.0.1}, {path, /api}] matches the configured
// descriptor tree level by level.
type Descriptor struct {
	Entries []Entry
	// Limit, when set, replaces the limit of the rule this descriptor
	// matches (Envoy's per-descriptor limit override) and nothing else:
	// the rule's ancestors in a hierarchy are still taken, its strategy,
	// priority and reserves stay; it does not borrow (no ceil), and it is
	// enforced even when the rule is in shadow mode (as envoyproxy/ratelimit
	// builds it; the Engine's global shadow mode still covers it; a
	// strategy: shadow becomes reject). A descriptor no rule matches is
	// limited by it alone.
	Limit *LimitOverride
	// Hits, when > 0 or when HitsSet, is this descriptor's cost instead
	// of Request.Hits.
	Hits int64
	// HitsSet makes Hits this descriptor's cost even when it is 0: a cost
	// of 0 decides without charging anything (Envoy's per-descriptor
	// hits_addend set to 0, a check before the real cost is known).
	HitsSet bool
}

// LimitOverride is a limit supplied with the request instead of the config.
type LimitOverride struct {
	RequestsPerUnit int64
	// Unit is the window's length; Calendar, when set (algo.CalendarMonth
	// or algo.CalendarYear), makes the window that UTC calendar period
	// instead, as `unit: month` does in the configuration, and Unit is
	// then 0.
	Unit     time.Duration
	Calendar algo.Calendar
}

// Request asks whether a request may pass every limit its descriptors match.
type Request struct {
	// Domain selects the configuration's domain. Required.
	Domain string
	// Descriptors are decided together, all or nothing.
	Descriptors []Descriptor
	// Hits is the cost of the request (Envoy's hits_addend); 0 means 1.
	Hits int64
	// Priority is the request's priority class name, matched ignoring
	// case and surrounding spaces ("" is the default class, or the one a
	// matched rule's priority assigns); a name the domain does not declare
	// counts as the default class and sets Response.PriorityUnknown.
	Priority string
}

// Code is a decision's outcome, numbered as Envoy's RateLimitResponse.Code.
type Code int32

// Codes.
const (
	CodeUnknown   Code = 0
	CodeOK        Code = 1
	CodeOverLimit Code = 2
)

// String returns "OK", "OVER_LIMIT" or "UNKNOWN".
func (c Code) String() string {
	switch c {
	case CodeOK:
		return "OK"
	case CodeOverLimit:
		return "OVER_LIMIT"
	}
	return "UNKNOWN"
}

// Status is the outcome for one descriptor.
type Status struct {
	// Code is OK or OVER_LIMIT for this descriptor. A descriptor that
	// matched no rule, or an unlimited one, is OK.
	Code Code
	// Matched reports that a rule applied; when false the other fields
	// are zero.
	Matched bool
	// Rule is the matched rule's name: its rate_limit.name, else the path
	// of keys and values that reached it (e.g. "generic_key_foo"). It is the
	// policy name in the RateLimit headers.
	Rule string
	// ConfiguredName is the rate_limit.name, as configured, of the rule
	// RuleLimit belongs to: "" when that rule has none and for an Envoy
	// per-descriptor limit. Unlike Rule it never holds a path, which
	// carries configured and requested values (Envoy's current_limit.name).
	ConfiguredName string
	// RuleLimit is the limit Decision comes from, as it is in force (with
	// its runtime override and rate scale applied): the descriptor's own
	// rule's, or the request's per-descriptor limit, unless another limit
	// of the request's path was tighter — an ancestor in a hierarchy, the
	// ceil that admitted a borrowed request, a priority pool. Envoy's
	// current_limit reports it beside limit_remaining, which comes from
	// the same limit. nil when the rule is unlimited or a
	// requests_per_unit: 0 rule.
	RuleLimit *algo.Limit
	// Unlimited reports a rule with unlimited: true.
	Unlimited bool
	// Shadow reports a rule in shadow mode: Code is OK even when the
	// Decision refused.
	Shadow bool
	// ShadowOverLimit reports a descriptor over a limit that only the
	// Engine's global shadow mode (WithShadowMode) keeps from refusing; a
	// rule's own shadow_mode does not set it. Code stays OK. Envoy's APIs
	// answer such a descriptor OVER_LIMIT under an overall OK, as
	// envoyproxy/ratelimit's global shadow mode does.
	ShadowOverLimit bool
	// Decision is the algorithm's answer for this descriptor's limit: the
	// tightest of Limits when several applied — a refusing one first (the
	// longest retry), else the one with the fewest remaining — among the
	// enforced limits, or for a shadow rule's status that no enforced
	// limit refused, among its shadow limits (what its dry run would
	// answer). A rate whose refusal borrowing answered (LimitStatus.Borrowed)
	// is never it: a borrowed admission reports the limits that admitted
	// it, its ceil first of all. Window and QuotaUnit are that limit's.
	Decision algo.Decision
	// Window is the policy window for headers (w).
	Window time.Duration
	// QuotaUnit is the unit of the quota for headers (qu): "" for
	// requests, "concurrent-requests" for a concurrency limit.
	QuotaUnit string
	// Borrowed reports that the descriptor's own rate refused and the
	// request passed on its ceil by borrowing from its parent.
	Borrowed bool
	// MetricKey is Envoy's stats key for the match: "domain.key_value.key2",
	// with the request's values where detailed_metric or value_to_metric
	// ask for them.
	MetricKey string
	// Limits lists every limit this descriptor was measured against, in
	// order: its own rule first, then its ancestors up the hierarchy, and
	// the derived limits of borrowing and priority classes. Decision is
	// the tightest of them.
	Limits []LimitStatus
}

// Undecided reports a status the store could not decide: its rule
// matched and is limited, but the store failed its key while another key
// refused the request (store.Result.Partial), or failed the look a
// refusal takes at the other keys, or a shadow rule's count. It was
// measured against no limit (no Limits) and its Decision is the zero one,
// which no real decision is (a limit's capacity is at least 1), Allowed
// aside: a caller may set it since, as the server does on a shadow
// status. Its answers state no limit and no count: a quota of 0 with 0
// remaining would be false.
func (s *Status) Undecided() bool {
	if !s.Matched || s.Unlimited || len(s.Limits) != 0 {
		return false
	}
	d := s.Decision
	d.Allowed = false
	return d == algo.Decision{}
}

// ConcurrentRequests is the quota unit of a concurrency limit, as the
// header fields state it (qu; draft-ietf-httpapi-ratelimit-headers-10).
const ConcurrentRequests = "concurrent-requests"

// LimitStatus is the outcome of one limit a descriptor was measured against.
type LimitStatus struct {
	// Name is the rule's name; a derived limit appends its role:
	// "name/ceil", "name/lend", "name/<priority class>". An Envoy
	// per-descriptor limit has no name of its own: its Name is the
	// Status's Rule, the descriptor's path ("remote_address_192.0.2.9").
	Name string
	// Rule is the rule the limit belongs to, as Status.Rule names rules:
	// the rule itself for its own limit, its ceil and its priority pools;
	// for a parent's lend pool, the rule that borrowed from it (the pool
	// counts that rule's borrowed traffic, and is a shadow limit when that
	// rule is a shadow one). Name is "tenant/lend", Rule "user".
	Rule string
	// Decision is the store's answer for this limit alone. After a
	// refusal by another limit, it says whether this one would have
	// passed and its Remaining is as if nothing was charged.
	Decision algo.Decision
	// Window is the limit's window for headers (w).
	Window time.Duration
	// QuotaUnit is the unit of the quota for headers (qu): "" for
	// requests, "concurrent-requests" for a concurrency limit.
	QuotaUnit string
	// Shadow limits never refuse.
	Shadow bool
	// lim and cname are the limit itself and its rule's configured name
	// (rate_limit.name, "" without one): when it is the Status's Decision,
	// they are the Status's RuleLimit and ConfiguredName, so that what the
	// Envoy APIs report as current_limit is the limit whose remaining
	// they report.
	lim   *algo.Limit
	cname string
	// Borrowed marks a rate whose refusal borrowing answered: the request
	// was admitted on its rule's ceil (Status.Borrowed). It is listed as
	// it stands (refusing, Remaining what is left of it) but never is the
	// Status's Decision, and header fields never report it as the
	// tightest limit.
	Borrowed bool
	// Charged is what this request took from the limit's key: the units
	// (or concurrency slots) of the largest cost any of its descriptors
	// asks of the key, which the engine charges once per request. So a
	// descriptor that only checks (its cost 0, Envoy's hits_addend 0)
	// reads here what its request's other descriptors took from a key it
	// shares with them (an identical descriptor's, a parent's in a
	// hierarchy), and a Remaining of 0 with Charged above 0 says that
	// this request took the last units, not that they were gone before
	// it. 0 when nothing was taken: a refused request, a Peek, a refusing
	// or borrowing rate, a check alone on the key, and a decision the
	// store's failure policy answered (Response.StoreFallback).
	Charged int64
	// Deny marks a requests_per_unit: 0 rule (always refuses, no store).
	// Its Decision refuses with RetryAfter algo.Never and ResetAfter the
	// time left in the rule's current window (windows aligned on the
	// epoch, or the UTC calendar month or year), as envoyproxy/ratelimit
	// reports duration_until_reset for such a rule.
	Deny bool
}

// Limit is the limit the status is of, as in force when it was decided
// (with its runtime override and rate scale applied); nil for a
// requests_per_unit: 0 rule (Deny). The middleware reads a shaper's rate
// from it to move the requests queued behind one that gave its turn up.
func (l LimitStatus) Limit() *algo.Limit { return l.lim }

// Response is the outcome of a Request.
type Response struct {
	// Code is OVER_LIMIT when any descriptor is over its limit (not in
	// shadow mode), else OK.
	Code Code
	// Statuses holds one Status per request descriptor, in order.
	Statuses []Status
	// Delay is how long the caller should hold the request before passing
	// it on (shapers, queues); zero for most rules.
	Delay time.Duration
	// Strategy is the matched rules' strategy on excess when Code is
	// OVER_LIMIT: "reject" (default), "wait", "degrade" or "shadow".
	Strategy string
	// Fallback names the fallback a degrade strategy asks the caller to run.
	Fallback string
	// Priority is the priority class the request was decided in, as the
	// domain declares it ("" when its domain declares none).
	Priority string
	// PriorityUnknown reports that Request.Priority named a class the
	// domain does not declare (ignoring case and surrounding spaces): the
	// request was decided in the default class, Priority. A typo in a
	// client's class, or classes renamed in the configuration, show here
	// rather than as lowest-priority traffic only.
	PriorityUnknown bool
	// Waited is how long Engine.DecideWait held the request (in the wait
	// queue and for a shaper's Delay) before answering.
	Waited time.Duration
	// StoreFallback reports that a store failure policy answered for at
	// least one of the decision's store calls (store.Result.Fallback: the
	// store was down or too slow), so Code is that policy's — an
	// OVER_LIMIT of FailClosed refuses whatever the limit's state.
	StoreFallback bool

	// leases are the concurrency slots an admitted request holds, for
	// Engine.Release.
	leases []store.Request
	// charged are the other store requests an admitted request's decision
	// took — its limits', the lend pools it borrowed from, not the rates
	// borrowing stood in for — with the store time of their Take in At,
	// for Engine.Refund. On a response of Engine.DecideInto their keys
	// may live in its buffer.
	charged []store.Request
	// waitKey and waitRule name the exhausted key a wait strategy queues
	// on (the refusing wait rule's key with the longest retry).
	waitKey  string
	waitRule *Rule
	// waitAdm is the Delay an admission by waitLim carries once the
	// request's retry has come (algo.Limit.AdmissionDelay: a shaper's
	// queue, a smooth limiter's max_wait), which DecideWait holds the
	// request for after the queue.
	waitAdm time.Duration
	// waitLim is the limit of waitKey, from which DecideWait projects a
	// waiter's turn, and a request the queue turned away estimates its
	// retry (internal/queueretry.After).
	waitLim *algo.Limit
}

// Holds reports whether the response holds concurrency leases that the
// caller should give back with Engine.Release when the request completes.
func (r Response) Holds() bool { return len(r.leases) > 0 }

// Decider is what the server, the middleware and the gateway call. The
// policy Engine implements it.
type Decider interface {
	// Decide charges the request's descriptors all or nothing.
	Decide(ctx context.Context, req Request) (Response, error)
	// Peek reports the decision without charging anything.
	Peek(ctx context.Context, req Request) (Response, error)
}
