package server_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate/floodgate/internal/testserver"
)

// The gRPC health service (what Envoy's grpc_health_check and Kubernetes
// gRPC probes ask) says whether the server answers decisions, not whether
// its store does: during a store outage --on-store-error answers, and a
// fleet reported NOT_SERVING would be taken out of rotation, so that Envoy
// fails open whatever the policy says. /readyz on --admin reports the
// store. It used to turn NOT_SERVING with the store.
func TestGRPCHealthIgnoresTheStore(t *testing.T) {
	rs := testserver.NewRedis(t)
	if rs == nil {
		t.Skip("no redis-server")
	}
	e := newStoreLogEnv(t, "redis://"+rs.Addr, 50*time.Millisecond)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := e.srv.GRPCServer()
	go g.Serve(lis)
	defer g.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	check := func(when string) {
		t.Helper()
		for _, name := range []string{"", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"} {
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
			if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("%s: health of %q = %v %v, want SERVING", when, name, r, err)
			}
		}
	}
	if err := e.srv.CheckStore(ctx); err != nil {
		t.Fatal(err)
	}
	check("store up")
	if err := rs.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.CheckStore(ctx); err == nil {
		t.Fatal("CheckStore with the store killed: no error")
	}
	check("store down")
}
