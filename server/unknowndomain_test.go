package server_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/server"
)

// TestUnknownDomainWarns: Envoy's API answers a decision for a domain the
// configuration does not have OK with no limit (as envoyproxy/ratelimit),
// so a mistyped domain lifts every limit silently. The server WARNs, at
// most once a minute of its clock, naming the domain, the configured ones
// (and the one that differs only in case), and how many such decisions
// came since the last line; decisions on a configured domain log nothing.
func TestUnknownDomainWarns(t *testing.T) {
	const yaml = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	buf := &logBuffer{}
	srv := serverFor(t, yaml, server.WithLogger(slog.New(slog.NewTextHandler(buf, nil))))
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	server.SetNow(srv, func() time.Time { return now })
	decide := func(domain string) {
		t.Helper()
		req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonrl.RateLimitDescriptor{
			{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}}}}
		if _, err := srv.RLS().ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	decide("api")
	decide("api")
	if s := buf.String(); s != "" {
		t.Fatalf("decisions on the configured domain logged:\n%s", s)
	}
	for range 5 {
		decide("API")
	}
	recs := buf.lines("a domain the configuration does not have")
	if len(recs) != 1 {
		t.Fatalf("%d WARNs for 5 decisions on an unknown domain within a minute, want 1:\n%s", len(recs), buf)
	}
	for _, want := range []string{"level=WARN", "domain=API", `did you mean \"api\"`, "decisions=1", `configured="domains \"api\""`} {
		if !strings.Contains(recs[0], want) {
			t.Errorf("the WARN lacks %s: %s", want, recs[0])
		}
	}
	now = now.Add(time.Minute)
	decide("nope")
	recs = buf.lines("a domain the configuration does not have")
	if len(recs) != 2 || !strings.Contains(recs[1], "domain=nope") || !strings.Contains(recs[1], "decisions=5") || strings.Contains(recs[1], "did you mean") {
		t.Fatalf("a minute later, want a second WARN for nope counting the 4 left out and itself (decisions=5), without a hint:\n%s", buf)
	}
}
