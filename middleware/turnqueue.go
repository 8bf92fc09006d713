package middleware

import (
	"context"
	"net/http"

	"github.com/floodgate/floodgate/policy"
)

// turnQueues are a Middleware's held requests, by shaper key: a request
// that gives its turn up (its client went away, a handler around the
// middleware cancelled it) gives it to the requests queued behind it on
// its key, as policy.Turns documents. Engine.DecideWait holds its own
// requests with another; each keeps its own requests' turns.
type turnQueues = policy.Turns

// holdTurn holds an admitted request for resp's Delay, within its gRPC
// client's deadline (grpcDeadline), as holdCall does, except that a
// shaper's turn moves up when a request queued ahead of it gives its own
// up (see policy.Turns). It returns false when the request cannot wait
// that long or its context ends first, and then gives its turn up: the
// caller refunds what it charged.
func (m *Middleware) holdTurn(ctx context.Context, r *http.Request, req policy.Request, resp policy.Response) bool {
	ctx, cancel := grpcDeadline(ctx, r)
	defer cancel()
	return m.mayHold(ctx, resp.Delay) && m.turns.Hold(ctx, req, resp) == nil
}
