package server_test

import (
	"context"
	"strings"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
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
