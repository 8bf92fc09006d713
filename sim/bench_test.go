package sim

import (
	"context"
	"testing"
	"time"
)

// benchScenario is the performance target: 10k requests a second over 10k
// clients (Zipf 1.1), limit 100 a minute each, through 8 contenders (plus
// the ideal limiter and the offered-traffic recorder).
func benchScenario(d time.Duration) *Scenario {
	return &Scenario{
		Seed: 1, Duration: Duration(d), Limit: 100, Period: Duration(time.Minute),
		Traffic: []Source{{Kind: SourcePoisson, Rate: 10_000, Keys: 10_000, Zipf: 1.1}},
		Contenders: []Contender{
			{Algorithm: "fixed_window"},
			{Algorithm: "sliding_window"},
			{Algorithm: "sliding_window", SubWindows: 4},
			{Algorithm: "sliding_log"},
			{Algorithm: "token_bucket"},
			{Algorithm: "gcra"},
			{Strategy: StrategyCentral},
			{Strategy: StrategyLocal},
		},
	}
}

// BenchmarkRun reports simulated requests per second of wall time (each
// request decided by all 8 contenders and the ideal) and decisions per
// second. The 1h case is the target: 36 million requests.
func BenchmarkRun(b *testing.B) {
	for _, d := range []time.Duration{time.Minute, time.Hour} {
		b.Run(d.String(), func(b *testing.B) {
			if d == time.Hour && testing.Short() {
				b.Skip("the hour-long run takes seconds; skipped with -short")
			}
			b.ReportAllocs()
			var requests, decisions int64
			for b.Loop() {
				res, err := Run(context.Background(), benchScenario(d))
				if err != nil {
					b.Fatal(err)
				}
				requests += res.Offered.Metrics.Requests
				for _, c := range append(res.Contenders, res.Ideal) {
					decisions += c.Metrics.Requests
				}
			}
			b.ReportMetric(float64(requests)/b.Elapsed().Seconds(), "sim-req/s")
			b.ReportMetric(float64(decisions)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
