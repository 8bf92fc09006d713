package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memory"
)

// BenchmarkShouldRateLimit is the server's own work per gRPC decision,
// without the transport: convert, decide on the memory store over 10 000
// descriptor values, record metrics, build and marshal the response.
func BenchmarkShouldRateLimit(b *testing.B) {
	cfg, err := policy.Parse("bench.yaml", []byte(`
domain: bench
descriptors:
  - key: user
    rate_limit: {name: per-user, algorithm: gcra, unit: hour, requests_per_unit: 1, burst: 2000000}
`))
	if err != nil {
		b.Fatal(err)
	}
	st, _ := memory.New()
	defer st.Close()
	eng, _ := policy.NewEngine(cfg, st)
	srv, _ := server.New(eng, st)
	h := srv.RLS()
	reqs := make([]*rlsv3.RateLimitRequest, 10_000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonrl.RateLimitDescriptor{
			{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "user", Value: fmt.Sprintf("u%05d", i)}}}}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			resp, err := h.ShouldRateLimit(context.Background(), reqs[i%len(reqs)])
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Fatal(resp, err)
			}
			if _, err := proto.Marshal(resp); err != nil {
				b.Fatal(err)
			}
			i += 7919
		}
	})
}

// BenchmarkShouldRateLimitOverLimit is BenchmarkShouldRateLimit's work on
// a refused decision, with the server logging at INFO (the decision log,
// at DEBUG, must cost nothing then) and at DEBUG (sampled: at most 10
// records a second).
func BenchmarkShouldRateLimitOverLimit(b *testing.B) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		b.Run(level.String(), func(b *testing.B) {
			cfg, err := policy.Parse("bench.yaml", []byte(`
domain: bench
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: hour, requests_per_unit: 1}
`))
			if err != nil {
				b.Fatal(err)
			}
			st, _ := memory.New()
			defer st.Close()
			eng, _ := policy.NewEngine(cfg, st)
			log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: level}))
			srv, _ := server.New(eng, st, server.WithLogger(log))
			h := srv.RLS()
			req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonrl.RateLimitDescriptor{
				{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}}}}}
			h.ShouldRateLimit(context.Background(), req)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				resp, err := h.ShouldRateLimit(context.Background(), req)
				if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
					b.Fatal(resp, err)
				}
			}
		})
	}
}
