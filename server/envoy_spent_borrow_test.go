package server_test

import (
	"context"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A check (hits_addend 0) on a rule with a ceil whose own rate is spent is
// OK while a unit could still be borrowed from its parent: a request of 1
// is admitted then, so the rule is not spent. It was OVER_LIMIT (its
// rate's 0 remaining read as the rule's). Once the ceil is spent too, the
// check is OVER_LIMIT. On memory and Redis, gRPC and /json.
func TestEnvoySpentCheckOnABorrowingRule(t *testing.T) {
	const yaml = `
domain: b
hierarchy: true
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: minute, requests_per_unit: 100, lendable: 0.5}
    descriptors:
      - key: user
        rate_limit: {name: user, unit: minute, requests_per_unit: 1, ceil: 3}
`
	for name, e := range storeEnvs(t, yaml) {
		t.Run(name, func(t *testing.T) {
			awayFromMinuteEnd(name)
			req := func(h uint64) *rlsv3.RateLimitRequest {
				r := envoyReq("b", 0, []string{"tenant", "a", "user", "u"})
				r.Descriptors[0].HitsAddend = wrapperspb.UInt64(h)
				return r
			}
			grpcCall := func(h uint64) rlsv3.RateLimitResponse_Code {
				g, err := e.rls.ShouldRateLimit(context.Background(), req(h))
				if err != nil {
					t.Fatal(err)
				}
				return g.OverallCode
			}
			ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
			if c := grpcCall(1); c != ok {
				t.Fatalf("the rate's unit: %v", c)
			}
			for k := range 2 {
				if c := grpcCall(0); c != ok {
					t.Fatalf("borrow %d: check with the rate spent, the ceil not: %v, want OK", k, c)
				}
				if g, _ := e.json(t, req(0)); g.OverallCode != ok {
					t.Fatalf("borrow %d: check over /json too: %v, want OK", k, g.OverallCode)
				}
				if c := grpcCall(1); c != ok {
					t.Fatalf("borrow %d: %v, want OK", k, c)
				}
			}
			// 1 on the rate, 2 borrowed: the ceil of 3 is spent.
			if c := grpcCall(0); c != over {
				t.Fatalf("check with the ceil spent: %v, want OVER_LIMIT", c)
			}
			if c := grpcCall(1); c != over {
				t.Fatalf("a unit with the ceil spent: %v, want OVER_LIMIT", c)
			}
		})
	}
}
