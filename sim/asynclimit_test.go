package sim

import "testing"

// The async aggregator over the sliding log counts every unit delivered,
// however near the limit is to the sliding log's 2^20: a run scaled up by
// 100 (limit and cost) decides as the run it scales. Its counter was the
// sliding log with a limit of 2^20, which refused the deliveries of an
// overshoot past 2^20 (1,375,000 units in a window over a limit of
// 1,000,000 here): they were never counted, and the instances admitted
// on, 2,750,000 units in 2 s where the run scaled down admits 25,000 × 100
// (over 10 s: +10% on the ideal instead of −3.8%).
func TestAsyncSlidingLogCountsPastTwoToThe20(t *testing.T) {
	scaled := func(factor int64) Metrics {
		sc := &Scenario{
			Duration: sec(2), Limit: 10_000 * factor, Period: sec(1),
			Traffic:    []Source{{Kind: SourceSteady, Rate: 2000, Cost: 10 * factor}},
			Contenders: []Contender{{Strategy: StrategyAsync, Lag: sec(0.25)}},
		}
		return run(t, sc).Contenders[0].Metrics
	}
	small, big := scaled(1), scaled(100)
	if big.MaxWindow <= 1<<20 {
		t.Fatalf("max in a window %d: want the overshoot past 2^20 the test is about", big.MaxWindow)
	}
	if big.AdmittedUnits != 100*small.AdmittedUnits || big.MaxWindow != 100*small.MaxWindow || big.Over != small.Over || big.Under != small.Under {
		t.Errorf("limit 1,000,000, cost 1000: admitted %d units, max in a window %d, over %d, under %d; want 100 × the run at limit 10,000, cost 10: %d units, %d, over %d, under %d",
			big.AdmittedUnits, big.MaxWindow, big.Over, big.Under, 100*small.AdmittedUnits, 100*small.MaxWindow, small.Over, small.Under)
	}
}
