package server

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// drainingHealth is the gRPC health service: grpc-go's health.Server, whose
// Watch calls end when the drain begins. A Watch (grpc-go's and
// grpc-java's client-side health checking hold one per connection) never
// ends on its own, and GracefulStop waits for every call in flight: one
// watching client held each drain to its timeout, then had its connection
// cut, and the drain's WARN reported calls cut off. Each watch now ends,
// with status OK, once the client has been sent a status other than
// SERVING after the drain began (NOT_SERVING; SERVICE_UNKNOWN for a name
// the server does not serve), so the client always reads why before the
// end of the stream. During the shutdown delay the watches go on (the
// server still serves); they end at the drain.
type drainingHealth struct {
	*health.Server
	s *Server
}

func (h drainingHealth) Watch(in *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	w := &drainedWatch{Health_WatchServer: stream, ctx: ctx, cancel: cancel, draining: &h.s.draining}
	w.last.Store(-1)
	// A watch whose last status is not SERVING when the drain begins is
	// sent nothing more (health.Server sends changes only): end it then.
	defer context.AfterFunc(h.s.drainCtx, w.end)()
	err := h.Server.Watch(in, w)
	if w.ended.Load() && stream.Context().Err() == nil {
		return nil
	}
	return err
}

// drainedWatch is a Watch call's stream as health.Server sees it: its
// context is cancelled, which ends the call, once the drain has begun and
// the last status sent is not SERVING.
type drainedWatch struct {
	healthpb.Health_WatchServer
	ctx      context.Context
	cancel   context.CancelFunc
	draining *atomic.Bool
	last     atomic.Int32 // the last status sent, -1 before the first
	ended    atomic.Bool
}

func (w *drainedWatch) Context() context.Context { return w.ctx }

func (w *drainedWatch) Send(r *healthpb.HealthCheckResponse) error {
	err := w.Health_WatchServer.Send(r)
	w.last.Store(int32(r.GetStatus()))
	// Stored before draining is read, as Serve sets draining before the
	// drain's end runs: one of the two sees the other's write.
	if w.draining.Load() {
		w.end()
	}
	return err
}

// end ends the watch once draining, unless the client's last status is
// SERVING (the drain's NOT_SERVING is on its way) or it has had none yet.
func (w *drainedWatch) end() {
	if last := w.last.Load(); last >= 0 && last != int32(healthpb.HealthCheckResponse_SERVING) {
		w.ended.Store(true)
		w.cancel()
	}
}
