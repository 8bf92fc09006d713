package server_test

import (
	"context"
	"strings"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestEnvoyUnitMultiplierOverflow: a per-descriptor limit whose unit ×
// unit_multiplier passes what a time.Duration holds (DAY × 106752 and
// more) is INVALID_ARGUMENT saying so. The product wrapped around: DAY ×
// 300000 (821 years asked) was decided on a period of about 237 years, and
// DAY × 200000 was refused as "needs a positive unit, got
// -324095h34m33.709551616s", a negative period the client never sent.
func TestEnvoyUnitMultiplierOverflow(t *testing.T) {
	e := newEnv(t)
	for _, mult := range []uint32{106752, 200000, 300000, 1 << 20} {
		r := envoyReq("messaging", 1, []string{"to_number", "555"})
		r.Descriptors[0].Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{
			RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_DAY, UnitMultiplier: wrapperspb.UInt32(mult)}
		resp, err := e.rls.ShouldRateLimit(context.Background(), r)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors[0].limit: unit_multiplier") ||
			!strings.Contains(err.Error(), "too long") {
			t.Errorf("DAY × %d: %v %v, want InvalidArgument saying descriptors[0].limit: unit_multiplier … too long", mult, resp, err)
		}
	}
}

// TestEnvoySpentCheckReportsNothingCharged: a check (hits_addend 0) on a
// spent limit refuses the request it is in and gives back what the
// request's other descriptors took; their statuses then say what remains
// with nothing charged, as those of a request the engine refused do (1000
// left), not what would have remained had the request passed (950): the
// refund made that number wrong by the request's cost.
func TestEnvoySpentCheckReportsNothingCharged(t *testing.T) {
	for name, e := range storeEnvs(t, usageConfig) {
		t.Run(name, func(t *testing.T) {
			awayFromMinuteEnd(name)
			for _, viaJSON := range []bool{false, true} {
				v := transport(viaJSON)
				if resp, _ := e.ask(t, usage("user", v, u64(1000), 0), viaJSON); resp.OverallCode != rlsv3.RateLimitResponse_OK {
					t.Fatalf("%s: 1000 of 1000: %v", v, resp)
				}
				mixed := envoyReq("ai", 50, []string{"user", v}, []string{"model", v})
				mixed.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
				resp, _ := e.ask(t, mixed, viaJSON)
				if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].Code != rlsv3.RateLimitResponse_OK ||
					resp.Statuses[1].LimitRemaining != 1000 {
					t.Errorf("%s: a check on the spent user and 50 on model: %v, want OVER_LIMIT with model OK and 1000 left (nothing charged)", v, resp)
				}
				if resp, _ := e.ask(t, usage("model", v, u64(0), 0), viaJSON); resp.Statuses[0].LimitRemaining != 1000 {
					t.Errorf("%s: model after the refused request: %v, want 1000 left", v, resp)
				}
			}
		})
	}
}

// TestEnvoyCheckBesideItsOwnCharge: a check (hits_addend 0) identical to
// another descriptor of the request that has a cost is charged with it
// (identical descriptors are charged once, with the largest cost), so it
// is no check on a spent limit when that charge takes the last units:
// 100 and a check of the same key on a fresh limit of 100 is OK, as the
// 100 alone is (and as envoyproxy/ratelimit answers it: its counter then
// stands at the limit). It was OVER_LIMIT and charged nothing: the check's
// status read the charge's 0 left as a limit spent before the request.
func TestEnvoyCheckBesideItsOwnCharge(t *testing.T) {
	for name, e := range storeEnvs(t, usageConfig) {
		t.Run(name, func(t *testing.T) {
			awayFromMinuteEnd(name)
			for _, viaJSON := range []bool{false, true} {
				v := transport(viaJSON)
				both := envoyReq("ai", 1000, []string{"user", v}, []string{"user", v})
				both.Descriptors[1].HitsAddend = wrapperspb.UInt64(0)
				resp, _ := e.ask(t, both, viaJSON)
				if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK ||
					resp.Statuses[1].Code != rlsv3.RateLimitResponse_OK {
					t.Errorf("%s: 1000 and a check of the same user on 1000: %v, want OK", v, resp)
				}
				if resp, _ := e.ask(t, usage("user", v, u64(0), 0), viaJSON); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
					t.Errorf("%s: a check after it: %v, want OVER_LIMIT (the 1000 was charged)", v, resp)
				}
			}
		})
	}
}
