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

// TestOverLimitDebugLog: at --log-level debug a refused decision is a
// DEBUG record with its domain, rule name, entry keys and retry time but
// no descriptor value (a user's address), at most MaxOverLimitLogs per
// second of the server's clock, the next second's first record saying how
// many were left out; admitted decisions make none, and at INFO nothing
// is logged.
func TestOverLimitDebugLog(t *testing.T) {
	const yaml = "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {name: per-user, unit: hour, requests_per_unit: 1}\n"
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		t.Run(level.String(), func(t *testing.T) {
			buf := &logBuffer{}
			srv := serverFor(t, yaml, server.WithLogger(slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level}))))
			now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
			server.SetNow(srv, func() time.Time { return now })
			req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonrl.RateLimitDescriptor{
				{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "user", Value: "alice@example.com"}}}}}
			decide := func(want rlsv3.RateLimitResponse_Code) {
				t.Helper()
				resp, err := srv.RLS().ShouldRateLimit(context.Background(), req)
				if err != nil || resp.OverallCode != want {
					t.Fatalf("ShouldRateLimit: %v %v, want %v", resp, err, want)
				}
			}
			decide(rlsv3.RateLimitResponse_OK)
			for range 25 {
				decide(rlsv3.RateLimitResponse_OVER_LIMIT)
			}
			now = now.Add(time.Second)
			decide(rlsv3.RateLimitResponse_OVER_LIMIT)
			recs := buf.lines("decision over limit")
			if level == slog.LevelInfo {
				if len(buf.String()) != 0 {
					t.Fatalf("at INFO the decisions logged:\n%s", buf)
				}
				return
			}
			if len(recs) != server.MaxOverLimitLogs+1 {
				t.Fatalf("%d records for 25 refusals in a second and 1 in the next, want %d:\n%s", len(recs), server.MaxOverLimitLogs+1, buf)
			}
			for _, want := range []string{"level=DEBUG", "domain=d", "rule=per-user", "keys=user", "retry_after=", "refused_descriptors=1", "store_fallback=false"} {
				if !strings.Contains(recs[0], want) {
					t.Errorf("record %q lacks %s", recs[0], want)
				}
			}
			if strings.Contains(buf.String(), "alice") {
				t.Errorf("a record shows the descriptor's value:\n%s", buf)
			}
			if strings.Contains(recs[server.MaxOverLimitLogs-1], "unlogged") || !strings.Contains(recs[server.MaxOverLimitLogs], "unlogged=15") {
				t.Errorf("the next second's record does not say 15 were left out:\n%s", buf)
			}
		})
	}
}
