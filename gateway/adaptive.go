package gateway

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/floodgate/floodgate/policy"
)

// WithAdaptiveSamples(false) stops the gateway feeding the adaptive rules
// (rules with an adaptive block) samples of the requests it proxies.
// Default true: each request a route's limits admitted and the gateway
// sent upstream is one sample to each adaptive rule that decided it (a
// matched rule, or one of its ancestors in a hierarchy, with an adaptive
// block), given to the Decider's Observe (policy.Engine.Observe) once
// the gateway is done with the request: its latency, from the time the
// request is handed to the transport to the upstream's response header
// (to the failure when there is none), and whether it failed — the
// upstream answered 5xx, could not be reached or reset the connection
// (502), timed out (504), or failed after the header (a body cut short).
// Requests the gateway answers itself (refused, 400, a degrade fallback,
// a client that went away, sent its body too slowly or sent one that could
// not be read: malformed, cut short, over a limit) and those that
// reach no adaptive rule feed nothing; a route whose domain has no
// adaptive rule costs nothing. With samples off, or a Decider without
// Observe, adaptive rules move only on samples posted to /v1/observe.
func WithAdaptiveSamples(on bool) Option { return func(o *options) { o.noSamples = !on } }

// observer takes the adaptive rules' samples: a *policy.Engine.
type observer interface {
	Observe(domain, rule string, latency time.Duration, failed bool) error
}

// adaptiveRules names dom's rules with an adaptive block, nil when it has
// none.
func adaptiveRules(dom *policy.Domain) []string {
	var names []string
	for _, r := range dom.Rules() {
		if r.Adaptive != nil && !r.Unlimited && !r.Deny {
			names = append(names, r.Name)
		}
	}
	return names
}

// samples is what a request's adaptive samples need. The fields are set
// on the request's goroutine: ServeHTTP and the proxy's hooks, which
// ReverseProxy calls on it.
type samples struct {
	// fed marks the route's adaptive rules (rt.adaptive, by index) that
	// decided the request; more names those past the 64th.
	fed  uint64
	more []string
	// sent is when the request was handed to the transport; latency the
	// time from then to the response header or failure (0: neither yet).
	sent    time.Time
	latency time.Duration
	// failed: the upstream failed or answered 5xx; skip: the client made
	// the request fail (no sample).
	failed, skip bool
	// grpcRes is a gRPC call's response, whose trailers (read with its
	// body) carry its status; nil for any other request.
	grpcRes *http.Response
}

// decided marks the adaptive rules among those that decided the admitted
// request (middleware.CheckAdmitted's callback).
func (st *reqState) decided(resp policy.Response) {
	for i := range resp.Statuses {
		s := &resp.Statuses[i]
		if !s.Matched {
			continue
		}
		st.mark(s.Rule)
		for j := range s.Limits {
			if l := s.Limits[j].Rule; l != s.Rule {
				st.mark(l) // an ancestor in a hierarchy
			}
		}
	}
}

func (st *reqState) mark(rule string) {
	i := slices.Index(st.rt.adaptive, rule)
	switch {
	case i < 0:
	case i < 64:
		st.fed |= 1 << i
	case !slices.Contains(st.more, rule):
		st.more = append(st.more, rule)
	}
}

// sampled reports whether the request feeds samples.
func (st *reqState) sampled() bool { return st != nil && (st.fed != 0 || st.more != nil) }

// answered notes the upstream's response header.
func (st *reqState) answered(res *http.Response) {
	if !st.sampled() || st.latency != 0 {
		return
	}
	st.latency = max(time.Since(st.sent), 1)
	if res.StatusCode >= 500 {
		st.failed = true
	}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/grpc") {
		st.grpcRes = res
		st.failed = st.failed || grpcFailed(res.Header) // trailers-only
	}
}

// grpcFailed reports a gRPC status that says the upstream failed or is
// overloaded: UNKNOWN, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, INTERNAL,
// UNAVAILABLE, DATA_LOSS. The caller's own mistakes (INVALID_ARGUMENT,
// NOT_FOUND, ...) are not the upstream's failures.
func grpcFailed(h http.Header) bool {
	switch h.Get("Grpc-Status") {
	case "2", "4", "8", "13", "14", "15":
		return true
	}
	return false
}

// failedUpstream notes an upstream failure, before or after the header.
func (st *reqState) failedUpstream() {
	if !st.sampled() {
		return
	}
	if st.latency == 0 {
		st.latency = max(time.Since(st.sent), 1)
	}
	st.failed = true
}

// clientFault notes a request that failed through its client.
func (st *reqState) clientFault() {
	if st != nil {
		st.skip = true
	}
}

// feed gives each adaptive rule that decided the request its sample.
func (g *Gateway) feed(st *reqState) {
	if st.skip || st.sent.IsZero() || st.latency == 0 {
		return
	}
	if st.grpcRes != nil && grpcFailed(st.grpcRes.Trailer) {
		st.failed = true // an HTTP 200 whose gRPC status says it failed
	}
	for i, name := range st.rt.adaptive {
		if i < 64 && st.fed&(1<<i) != 0 {
			_ = g.obs.Observe(st.rt.domain, name, st.latency, st.failed)
		}
	}
	for _, name := range st.more {
		_ = g.obs.Observe(st.rt.domain, name, st.latency, st.failed)
	}
}
