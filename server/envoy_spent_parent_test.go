package server_test

import (
	"context"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestEnvoyCheckBesideASiblingThatTookTheParentsLast: in a hierarchy
// (tenant 2 an hour, its users 10 each), with one tenant unit used, a
// request that charges user a and only checks (hits_addend 0) user b of
// the same tenant is OK: a's charge took the tenant's last unit, which does
// not make the tenant spent to b's check. It was OVER_LIMIT, and a's
// charge given back (the check read the parent's 0 left as spent before
// the request). The tenant is then spent: a request of user c is refused,
// and so is a check alone. On memory and Redis, over gRPC.
func TestEnvoyCheckBesideASiblingThatTookTheParentsLast(t *testing.T) {
	const yaml = `
domain: h
hierarchy: true
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: hour, requests_per_unit: 2}
    descriptors:
      - key: user
        rate_limit: {name: user, unit: hour, requests_per_unit: 10}
`
	for name, e := range storeEnvs(t, yaml) {
		t.Run(name, func(t *testing.T) {
			desc := func(user string, hits uint64) *commonrl.RateLimitDescriptor {
				return &commonrl.RateLimitDescriptor{
					Entries:    []*commonrl.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme-" + name}, {Key: "user", Value: user}},
					HitsAddend: wrapperspb.UInt64(hits),
				}
			}
			call := func(what string, ds ...*commonrl.RateLimitDescriptor) *rlsv3.RateLimitResponse {
				t.Helper()
				resp, err := e.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "h", Descriptors: ds})
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				return resp
			}
			ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
			if r := call("z takes one", desc("z", 1)); r.OverallCode != ok {
				t.Fatalf("z takes one: %v", r)
			}
			r := call("a takes one, b checks", desc("a", 1), desc("b", 0))
			if r.OverallCode != ok || r.Statuses[0].Code != ok || r.Statuses[1].Code != ok {
				t.Fatalf("a takes the tenant's last unit while b checks: %v, want OK for both", r)
			}
			if r := call("c takes one", desc("c", 1)); r.OverallCode != over {
				t.Fatalf("c takes one after the tenant's 2 went: %v, want OVER_LIMIT (a's unit was charged)", r.OverallCode)
			}
			if r := call("d checks", desc("d", 0)); r.OverallCode != over {
				t.Fatalf("d checks alone the spent tenant: %v, want OVER_LIMIT", r.OverallCode)
			}
		})
	}
}
