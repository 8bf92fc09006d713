package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/server"
)

// manyDescs is a messaging request of n descriptors, each its own key.
func manyDescs(n int) *rlsv3.RateLimitRequest {
	descs := make([][]string, n)
	for i := range descs {
		descs[i] = []string{"k", fmt.Sprint("v", i)}
	}
	return envoyReq("messaging", 0, descs...)
}

// The Envoy APIs bound the number of descriptors of a request (512 by
// default, Limits.EnvoyDescriptors): past it, gRPC is INVALID_ARGUMENT and
// /json 400, saying so, before any store call — thousands of descriptors
// made the store time out, the failure policy answer the request and the
// store's breakers open for everyone. At the bound it is decided; -1 lifts
// the bound.
func TestEnvoyDescriptorBound(t *testing.T) {
	e := newEnv(t)
	_, err := e.rls.ShouldRateLimit(context.Background(), manyDescs(server.DefaultEnvoyDescriptors+1))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "513 descriptors, more than the 512") {
		t.Fatalf("513 descriptors over gRPC: %v, want INVALID_ARGUMENT naming the bound", err)
	}
	if _, code := e.json(t, manyDescs(server.DefaultEnvoyDescriptors+1)); code != http.StatusBadRequest {
		t.Fatalf("513 descriptors over /json: %d, want 400", code)
	}
	if _, err := e.rls.ShouldRateLimit(context.Background(), manyDescs(server.DefaultEnvoyDescriptors)); err != nil {
		t.Fatalf("512 descriptors: %v, want an answer", err)
	}
	small := newEnv(t, server.WithLimits(server.Limits{EnvoyDescriptors: 2}))
	if _, err := small.rls.ShouldRateLimit(context.Background(), manyDescs(3)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("3 descriptors over a bound of 2: %v", err)
	}
	none := newEnv(t, server.WithLimits(server.Limits{EnvoyDescriptors: -1}))
	if _, err := none.rls.ShouldRateLimit(context.Background(), manyDescs(600)); err != nil {
		t.Fatalf("600 descriptors without a bound: %v", err)
	}
}
