package server_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/server"
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

// /v1 says when the failure policy answered instead of the store
// (store_fallback): a client can tell the policy's OK or OVER_LIMIT from
// the limit's, which read the same otherwise.
func TestV1SaysWhenTheFailurePolicyAnswered(t *testing.T) {
	rs := testserver.NewRedis(t)
	if rs == nil {
		t.Skip("no redis-server")
	}
	e := newStoreLogEnv(t, "redis://"+rs.Addr, 50*time.Millisecond)
	h := httptest.NewServer(e.srv.HTTPHandler())
	defer h.Close()
	decide := func() server.V1Response {
		t.Helper()
		resp, err := http.Post(h.URL+"/v1/decide", "application/json",
			strings.NewReader(`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out server.V1Response
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := decide(); !out.Allowed || out.StoreFallback {
		t.Fatalf("store up: %+v, want allowed by the store", out)
	}
	if err := rs.Pause(); err != nil {
		t.Fatal(err)
	}
	out := decide()
	if err := rs.Resume(); err != nil {
		t.Fatal(err)
	}
	if !out.StoreFallback {
		t.Fatalf("store paused: %+v, want store_fallback", out)
	}
}
