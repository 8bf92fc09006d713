package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/floodgate/floodgate/internal/causelog"
)

// Reasons of an upstream failure, as WithUpstreamErrors receives them: a
// small fixed set, fit for a metric's label.
const (
	// ReasonConnect: the upstream could not be reached (the dial failed:
	// refused, unreachable, name not resolved).
	ReasonConnect = "connect"
	// ReasonTimeout: the upstream kept the request waiting longer than
	// WithUpstreamTimeout, before the response header or between reads of
	// the body.
	ReasonTimeout = "timeout"
	// ReasonReset: the upstream closed or reset the connection before the
	// response was complete: no header, or a body cut short (fewer bytes
	// than its Content-Length, a chunked stream without its last chunk).
	ReasonReset = "reset"
	// ReasonOther: any other failure (a malformed response, a TLS error).
	ReasonOther = "other"
)

// UpstreamLogInterval is how often the error log repeats a line about the
// same upstream failure: a failure whose cause (its route, its reason and
// its text, numbers and quoted parts aside) was logged less than this long
// ago is counted, not logged, and the next line of that cause says how
// many were left out. An upstream failing under load makes a line a minute
// per cause and route, not one per request; the metric WithUpstreamErrors
// feeds counts each one.
const UpstreamLogInterval = time.Minute

// maxUpstreamCauses bounds the causes the log remembers; beyond it, those
// reported longest ago are forgotten first.
const maxUpstreamCauses = 64

// WithUpstreamErrors receives the reason (ReasonConnect, ReasonTimeout,
// ReasonReset or ReasonOther) of each upstream failure: those answered
// with 502 or 504, and those after the response header that cut the
// response short (default: none). Failures a client caused (it went away,
// sent its body too slowly, or sent one that could not be read: malformed,
// cut short, reset, over a limit) are not upstream failures.
// metrics.Metrics.GatewayUpstreamErrors returns one for
// floodgate_gateway_upstream_errors_total.
func WithUpstreamErrors(fn func(reason string)) Option {
	return func(o *options) { o.upstreamErrs = fn }
}

// WithResponses receives, once per request when the gateway is done with
// it, the name of the route it matched ("" for none), the status the client
// was sent (101 for a protocol upgrade) and whether the upstream answered
// it (false: the gateway did — a refusal, a 400 for an ambiguous or bad
// request, a 502 or 504 for an upstream failure, ...). Default: none.
// metrics.Metrics.GatewayResponses returns one for
// floodgate_gateway_responses_total.
func WithResponses(fn func(route string, status int, upstream bool)) Option {
	return func(o *options) { o.responses = fn }
}

// upstreamLog rate-limits the error log's lines about upstream failures,
// by cause, as server.StoreLog does the store's.
type upstreamLog struct {
	mu     sync.Mutex
	now    func() time.Time
	causes causelog.Limiter
}

// pass reports whether a line of cause is due now, and how many of it were
// left out since the last one.
func (l *upstreamLog) pass(cause string) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.now != nil {
		now = l.now()
	}
	l.causes.Interval, l.causes.Max = UpstreamLogInterval, maxUpstreamCauses
	return l.causes.Pass(cause, now)
}

// causeVaries blanks what makes one cause's texts differ (ports,
// addresses, byte counts, quoted values).
var causeVaries = regexp.MustCompile(`[0-9]+|"[^"]*"|'[^']*'`)

// upstreamFailed reports an upstream failure of r: counted (WithUpstreamErrors)
// every time, logged with r's route at most once per cause per
// UpstreamLogInterval.
func (g *Gateway) upstreamFailed(r *http.Request, reason string, err error) {
	if g.o.upstreamErrs != nil {
		g.o.upstreamErrs(reason)
	}
	var rt *route
	if st := stateOf(r); st != nil {
		rt = st.rt
	}
	g.logUpstream(r, rt, reason, err)
}

// noUpgrade logs, as upstream failures are (not counted: the upstream was
// not asked), a protocol upgrade answered 502 because an h2c upstream
// cannot take one.
func (g *Gateway) noUpgrade(r *http.Request, rt *route, up string) {
	g.logUpstream(r, rt, "upgrade", fmt.Errorf("a request to switch to %q answered 502: HTTP/2 (h2c) has no protocol upgrade, so websockets cannot reach this upstream", up))
}

// logUpstream logs err about r, on route rt (nil: none), at most once per
// cause per UpstreamLogInterval.
func (g *Gateway) logUpstream(r *http.Request, rt *route, reason string, err error) {
	if g.o.errLog == nil {
		return
	}
	route := "a request no route matches (proxied unlimited)"
	if rt != nil {
		route = fmt.Sprintf("route %q", rt.name)
	}
	// The route is part of the cause: one route's failures must not hide
	// another's (its upstream path may be the one that is down). Routes
	// are configured, so the causes stay few.
	ok, skipped := g.upLog.pass(reason + "|" + route + "|" + causeVaries.ReplaceAllString(err.Error(), "#"))
	if !ok {
		return
	}
	err = fmt.Errorf("gateway: %s: upstream %s: %w", route, g.shown, err)
	if skipped > 0 {
		err = fmt.Errorf("%w (%d more like it since the last report)", err, skipped)
	}
	g.log(r, err)
}

// reasonOf classifies an upstream failure; timedOut is whether the
// upstream timer cancelled the request.
func reasonOf(err error, timedOut bool) string {
	if timedOut {
		return ReasonTimeout
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return ReasonConnect
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return ReasonTimeout
	}
	for _, e := range []error{io.EOF, io.ErrUnexpectedEOF, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE, net.ErrClosed} {
		if errors.Is(err, e) {
			return ReasonReset
		}
	}
	return ReasonOther
}
