package policy

import (
	"context"
	"time"

	"github.com/floodgate/floodgate/algo"
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
	// Limit, when set, replaces the configured limit for this descriptor
	// (Envoy's per-descriptor limit override).
	Limit *LimitOverride
	// Hits, when > 0, is this descriptor's cost instead of Request.Hits.
	Hits int64
}

// LimitOverride is a limit supplied with the request instead of the config.
type LimitOverride struct {
	RequestsPerUnit int64
	Unit            time.Duration
}

// Request asks whether a request may pass every limit its descriptors match.
type Request struct {
	// Domain selects the configuration's domain. Required.
	Domain string
	// Descriptors are decided together, all or nothing.
	Descriptors []Descriptor
	// Hits is the cost of the request (Envoy's hits_addend); 0 means 1.
	Hits int64
	// Priority is the request's priority class name ("" is the default
	// class); see the rules' priority settings.
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
	// Unlimited reports a rule with unlimited: true.
	Unlimited bool
	// Shadow reports a rule in shadow mode: Code is OK even when the
	// Decision refused.
	Shadow bool
	// Decision is the algorithm's answer for this descriptor's limit (the
	// tightest one when a hierarchy applied several).
	Decision algo.Decision
	// Window is the policy window for headers (w).
	Window time.Duration
}

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
}

// Decider is what the server, the middleware and the gateway call. The
// policy Engine implements it.
type Decider interface {
	// Decide charges the request's descriptors all or nothing.
	Decide(ctx context.Context, req Request) (Response, error)
	// Peek reports the decision without charging anything.
	Peek(ctx context.Context, req Request) (Response, error)
}
