package policy_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// The messaging example of envoyproxy/ratelimit's README: marketing
// messages to a number, 5 a day; messages of any kind to it, 100 a day.
const messagingConfig = `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
`

// TestCachedRefusalReportsOtherDescriptor: a request of two descriptors,
// one over its limit and the other (to_number) with 94 remaining, refused
// by a real Redis behind store/resilient, then repeated while the
// over-limit key is in the resilient store's cache: every answer reports
// to_number's true 94 remaining, in its status and in the RateLimit field
// (the cache reported 1, the cost, before), and charges it nothing.
func TestCachedRefusalReportsOtherDescriptor(t *testing.T) {
	addr := testserver.Redis(t)
	if addr == "" {
		t.Skip("no redis-server")
	}
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	inner, err := redis.Open("redis://"+addr, redis.WithTestClock(clock), redis.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	st, err := resilient.New(inner, resilient.WithClock(clock), resilient.WithTimeout(2*time.Second))
	if err != nil {
		inner.Close()
		t.Fatal(err)
	}
	defer st.Close()
	cfg, err := policy.Parse("messaging.yaml", []byte(messagingConfig))
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.NewEngine(cfg, st, policy.WithClock(clock),
		policy.WithKeyPrefix("fg:test:olcache:"+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	number := policy.Entry{Key: "to_number", Value: "+15550100"}
	marketing := policy.Request{Domain: "messaging", Descriptors: []policy.Descriptor{
		{Entries: []policy.Entry{{Key: "message_type", Value: "marketing"}, number}},
		{Entries: []policy.Entry{number}},
	}}
	plain := policy.Request{Domain: "messaging", Descriptors: []policy.Descriptor{{Entries: []policy.Entry{number}}}}
	for i := range 5 {
		if r, err := e.Decide(ctx, marketing); err != nil || r.Code != policy.CodeOK {
			t.Fatalf("marketing message %d: %v %v, want OK", i+1, r.Code, err)
		}
	}
	if r, err := e.Decide(ctx, plain); err != nil || r.Code != policy.CodeOK || r.Statuses[0].Decision.Remaining != 94 {
		t.Fatalf("plain message: %+v %v, want OK with 94 remaining", r, err)
	}
	for i := range 3 { // the store's refusal, then two while it is cached
		now = now.Add(300 * time.Millisecond)
		r, err := e.Decide(ctx, marketing)
		if err != nil {
			t.Fatal(err)
		}
		if r.Code != policy.CodeOverLimit || r.StoreFallback {
			t.Fatalf("marketing message 6, try %d: %v (fallback %v), want OVER_LIMIT from the store", i+1, r.Code, r.StoreFallback)
		}
		s0, s1 := r.Statuses[0], r.Statuses[1]
		if s0.Code != policy.CodeOverLimit || s0.Decision.Limit != 5 || s0.Decision.Remaining != 0 {
			t.Fatalf("try %d: marketing status %v, limit %d, remaining %d; want OVER_LIMIT, 5, 0",
				i+1, s0.Code, s0.Decision.Limit, s0.Decision.Remaining)
		}
		if s1.Code != policy.CodeOK || !s1.Decision.Allowed || s1.Decision.Limit != 100 || s1.Decision.Remaining != 94 {
			t.Fatalf("try %d: to_number status %v, allowed %v, limit %d, remaining %d; want OK, true, 100, 94",
				i+1, s1.Code, s1.Decision.Allowed, s1.Decision.Limit, s1.Decision.Remaining)
		}
		var rateLimit string
		for _, f := range headers.Fields(headers.FromStatuses(r.Statuses), headers.Options{}) {
			if f[0] == "RateLimit" {
				rateLimit = f[1]
			}
		}
		const want = `"message_type_marketing.to_number";r=0;t=43200, "to_number";r=94;t=43200`
		if rateLimit != want {
			t.Fatalf("try %d: RateLimit: %s, want %s", i+1, rateLimit, want)
		}
	}
	if r, err := e.Decide(ctx, plain); err != nil || r.Statuses[0].Decision.Remaining != 93 {
		t.Fatalf("plain message after the refusals: %+v %v, want 93 remaining (the refusals charged nothing)", r, err)
	}
}
