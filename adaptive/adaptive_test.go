package adaptive

import (
	"context"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// feed observes n samples of one latency, the first `failed` of them failed.
func feed(c *Controller, n int, latency time.Duration, failed int) {
	for i := range n {
		c.Observe(latency, i < failed)
	}
}

// mixed observes fast samples at 40ms and slow ones at 500ms.
func mixed(fast, slow int) func(*Controller) {
	return func(c *Controller) {
		feed(c, fast, 40*time.Millisecond, 0)
		feed(c, slow, 500*time.Millisecond, 0)
	}
}

func steady(n int, latency time.Duration, failed int) func(*Controller) {
	return func(c *Controller) { feed(c, n, latency, failed) }
}

type step struct {
	feed    func(*Controller)
	old     float64
	new     float64
	reason  string
	latency time.Duration
}

func runSteps(t *testing.T, c *Controller, steps []step) {
	t.Helper()
	t0 := time.Unix(1_700_000_000, 0)
	for i, s := range steps {
		if s.feed != nil {
			s.feed(c)
		}
		at := t0.Add(time.Duration(i+1) * time.Second)
		ch := c.Step(at)
		if ch.Old != s.old || ch.New != s.new || ch.Reason != s.reason || !ch.At.Equal(at) {
			t.Errorf("t%d: Step = %v -> %v %q, want %v -> %v %q", i+1, ch.Old, ch.New, ch.Reason, s.old, s.new, s.reason)
		}
		if s.latency != 0 && ch.Latency != s.latency {
			t.Errorf("t%d: Latency = %v, want %v", i+1, ch.Latency, s.latency)
		}
		if got := c.Factor(); got != s.new {
			t.Errorf("t%d: Factor() = %v, want %v", i+1, got, s.new)
		}
	}
}

// TestLatencySignalDownAndUp drives the factor down with a slow signal to
// its floor and back up to its ceiling with a fast one, one interval at a
// time.
func TestLatencySignalDownAndUp(t *testing.T) {
	c, err := New(Config{LatencyThreshold: 100 * time.Millisecond, MinSamples: 50})
	if err != nil {
		t.Fatal(err)
	}
	fast, slow := steady(100, 40*time.Millisecond, 0), steady(100, 180*time.Millisecond, 0)
	const over = "p99 latency 180ms > 100ms threshold"
	steps := []step{
		{fast, 1, 1, "healthy: p99 40ms", 40 * time.Millisecond},
		{slow, 1, 0.7, over, 180 * time.Millisecond},
		{slow, 0.7, 0.49, over, 0},
		{slow, 0.49, 0.343, over, 0},
		{slow, 0.343, 0.2401, over, 0},
		{slow, 0.2401, 0.16807, over, 0},
		{slow, 0.16807, 0.117649, over, 0},
		{slow, 0.117649, 0.1, over, 0}, // floor
		{slow, 0.1, 0.1, over, 0},
		{steady(49, 180*time.Millisecond, 0), 0.1, 0.1, "too few samples: 49 < 50", 0},
		{nil, 0.1, 0.1, "too few samples: 0 < 50", 0},
	}
	for f := 0.15; f < 1.001; f += 0.05 {
		f = round6(f)
		steps = append(steps, step{fast, round6(f - 0.05), f, "recovered: p99 40ms", 0})
	}
	steps = append(steps, step{fast, 1, 1, "healthy: p99 40ms", 0})
	runSteps(t, c, steps)
}

// TestQuantileBoundary holds the p99 decision to one sample: 1 slow sample
// in 100 leaves the p99 fast, 2 make it slow.
func TestQuantileBoundary(t *testing.T) {
	c, err := New(Config{LatencyThreshold: 100 * time.Millisecond, MinSamples: 1})
	if err != nil {
		t.Fatal(err)
	}
	runSteps(t, c, []step{
		{mixed(99, 1), 1, 1, "healthy: p99 40ms", 40 * time.Millisecond},
		{mixed(98, 2), 1, 0.7, "p99 latency 500ms > 100ms threshold", 500 * time.Millisecond},
		{mixed(990, 10), 0.7, 0.75, "recovered: p99 40ms", 0},
		{mixed(989, 11), 0.75, 0.525, "p99 latency 500ms > 100ms threshold", 0},
		{mixed(1, 0), 0.525, 0.575, "recovered: p99 40ms", 0},
		{mixed(0, 1), 0.575, 0.4025, "p99 latency 500ms > 100ms threshold", 0},
	})
}

func TestErrorRatio(t *testing.T) {
	c, err := New(Config{ErrorRatio: 0.05, Min: 0.5, Max: 2, Initial: 1, Increase: 0.25, Decrease: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	runSteps(t, c, []step{
		{steady(100, time.Millisecond, 12), 1, 0.5, "error ratio 12% > 5%", 0},
		{steady(100, time.Millisecond, 12), 0.5, 0.5, "error ratio 12% > 5%", 0},
		{steady(200, time.Millisecond, 10), 0.5, 0.75, "recovered: error ratio 5%", 0}, // 5% is not above 5%
		{steady(200, time.Millisecond, 1), 0.75, 1, "recovered: error ratio 0.5%", 0},
		{steady(10000, time.Millisecond, 501), 1, 0.5, "error ratio 5.01% > 5%", 0},
		{steady(100, time.Millisecond, 0), 0.5, 0.75, "recovered: error ratio 0%", 0},
		{steady(100, time.Millisecond, 0), 0.75, 1, "recovered: error ratio 0%", 0},
		{steady(100, time.Millisecond, 0), 1, 1.25, "recovered: error ratio 0%", 0},
		{steady(100, time.Millisecond, 0), 1.25, 1.5, "recovered: error ratio 0%", 0},
		{steady(100, time.Millisecond, 0), 1.5, 1.75, "recovered: error ratio 0%", 0},
		{steady(100, time.Millisecond, 0), 1.75, 2, "recovered: error ratio 0%", 0},
		{steady(100, time.Millisecond, 0), 2, 2, "healthy: error ratio 0%", 0},
	})
}

func TestBothSignals(t *testing.T) {
	c, err := New(Config{LatencyThreshold: 100 * time.Millisecond, Quantile: 0.95, ErrorRatio: 0.05, MinSamples: 1})
	if err != nil {
		t.Fatal(err)
	}
	runSteps(t, c, []step{
		{steady(100, 180*time.Millisecond, 12), 1, 0.7, "p95 latency 180ms > 100ms threshold, error ratio 12% > 5%", 0},
		{steady(100, 40*time.Millisecond, 12), 0.7, 0.49, "error ratio 12% > 5%", 0},
		{steady(100, 1500*time.Millisecond, 0), 0.49, 0.343, "p95 latency 1.5s > 100ms threshold", 0},
		{steady(100, 100*time.Millisecond, 5), 0.343, 0.393, "recovered: p95 100ms, error ratio 5%", 0},
	})
}

// TestEstimateStaysOnTheDecisionSide feeds latencies in one histogram
// bucket around the threshold: the printed p99 agrees with the decision.
func TestEstimateStaysOnTheDecisionSide(t *testing.T) {
	thr := 100 * time.Millisecond
	c, err := New(Config{LatencyThreshold: thr, MinSamples: 1})
	if err != nil {
		t.Fatal(err)
	}
	// All samples 1µs over the threshold; their bucket's mean is exact.
	feed(c, 10, thr+time.Microsecond, 0)
	if ch := c.Step(time.Unix(1, 0)); ch.Reason != "p99 latency 100.001ms > 100ms threshold" {
		t.Errorf("Reason = %q", ch.Reason)
	}
	// Half at the threshold, half far below it in the same bucket: the
	// bucket mean is below the threshold, the rank sample above it.
	c, _ = New(Config{LatencyThreshold: thr, MinSamples: 1})
	feed(c, 1, thr-time.Millisecond, 0)
	feed(c, 99, thr+time.Nanosecond, 0)
	if ch := c.Step(time.Unix(1, 0)); !ch.Overloaded || ch.Latency <= thr || ch.Reason != "p99 latency 100.000001ms > 100ms threshold" {
		t.Errorf("Step = %+v", ch)
	}
	c, _ = New(Config{LatencyThreshold: thr, MinSamples: 1})
	feed(c, 99, thr, 0)
	feed(c, 1, thr+600*time.Microsecond, 0) // same bucket: the mean is above thr
	if ch := c.Step(time.Unix(1, 0)); ch.Overloaded || ch.Latency > thr || ch.Reason != "healthy: p99 100ms" {
		t.Errorf("Step = %+v", ch)
	}
}

func TestChangeString(t *testing.T) {
	ch := Change{Old: 1, New: 0.7, Reason: "p99 latency 180ms > 100ms threshold"}
	if got, want := ch.String(), "factor 1 -> 0.7: p99 latency 180ms > 100ms threshold"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if !ch.Changed() || (Change{Old: 0.5, New: 0.5}).Changed() {
		t.Error("Changed() wrong")
	}
}

// TestRun drives Run through a hand-fed tick channel: only the steps that
// moved the factor reach apply, in order.
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := New(Config{LatencyThreshold: 100 * time.Millisecond, Increase: 0.2, MinSamples: 1})
		if err != nil {
			t.Fatal(err)
		}
		tick := make(chan time.Time)
		var got []string
		done := make(chan error)
		go func() { done <- c.Run(t.Context(), tick, func(ch Change) { got = append(got, ch.String()) }) }()
		t0 := time.Now()
		for i, lat := range []time.Duration{40, 180, 180, 40, 40, 40, 40} {
			feed(c, 10, lat*time.Millisecond, 0)
			tick <- t0.Add(time.Duration(i) * time.Second)
			synctest.Wait() // the step is over before the next samples
		}
		close(tick)
		if err := <-done; err != nil {
			t.Fatalf("Run = %v, want nil after the tick channel closed", err)
		}
		want := []string{
			"factor 1 -> 0.7: p99 latency 180ms > 100ms threshold",
			"factor 0.7 -> 0.49: p99 latency 180ms > 100ms threshold",
			"factor 0.49 -> 0.69: recovered: p99 40ms",
			"factor 0.69 -> 0.89: recovered: p99 40ms",
			"factor 0.89 -> 1: recovered: p99 40ms",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("applied:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}

		ctx, cancel := context.WithCancel(t.Context())
		go func() { done <- c.Run(ctx, make(chan time.Time), nil) }()
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run after cancel = %v, want context.Canceled", err)
		}
	})
}

func TestNewErrors(t *testing.T) {
	lat := 100 * time.Millisecond
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "adaptive: no signal: set latency_threshold, error_ratio or both"},
		{Config{LatencyThreshold: lat, Min: -1}, "adaptive: min -1: must be in [0.000001, max 1]"},
		{Config{LatencyThreshold: lat, Min: 2}, "adaptive: min 2: must be in [0.000001, max 1]"},
		{Config{LatencyThreshold: lat, Max: math.Inf(1)}, "adaptive: max +Inf: must be finite"},
		// The field at fault is named, not the Min it bounds.
		{Config{LatencyThreshold: lat, Max: math.NaN()}, "adaptive: max NaN: must be finite"},
		{Config{LatencyThreshold: lat, Max: -1}, "adaptive: max -1: must be at least 0.000001"},
		{Config{LatencyThreshold: lat, Min: 0.05, Max: 1e-7}, "adaptive: max 1e-07: must be at least 0.000001"},
		{Config{LatencyThreshold: lat, Max: 0.05}, "adaptive: min 0.1: must be in [0.000001, max 0.05]"},
		{Config{LatencyThreshold: lat, Initial: 0.05}, "adaptive: initial 0.05: must be in [min 0.1, max 1]"},
		{Config{LatencyThreshold: -lat}, "adaptive: latency_threshold -100ms: must not be negative"},
		{Config{LatencyThreshold: lat, Quantile: 1.5}, "adaptive: quantile 1.5: must be in (0, 1]"},
		{Config{ErrorRatio: 1}, "adaptive: error_ratio 1: must be in [0, 1)"},
		{Config{ErrorRatio: math.NaN()}, "adaptive: error_ratio NaN: must be in [0, 1)"},
		{Config{LatencyThreshold: lat, Decrease: 1}, "adaptive: decrease 1: must be in (0, 1)"},
		{Config{LatencyThreshold: lat, Increase: -0.1}, "adaptive: increase -0.1: must be positive and finite"},
		{Config{LatencyThreshold: lat, Interval: -time.Second}, "adaptive: interval -1s: must be at least 10ms"},
		{Config{LatencyThreshold: lat, MinSamples: -1}, "adaptive: min_samples -1: must be at least 1 (an interval without samples is no evidence)"},
	} {
		if _, err := New(tc.cfg); err == nil || err.Error() != tc.want {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	c, err := New(Config{ErrorRatio: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Min: 0.1, Max: 1, Initial: 1, Quantile: 0.99, ErrorRatio: 0.1, Decrease: 0.7, Increase: 0.05, Interval: time.Second, MinSamples: 10}
	if got := c.Config(); got != want {
		t.Errorf("Config() = %+v, want %+v", got, want)
	}
}

func TestBuckets(t *testing.T) {
	for _, v := range []uint64{0, 1, 31, 32, 33, 63, 64, 65, 1000, 1 << 20, 180_000_000, 1<<41 - 1} {
		checkBucket(t, v)
	}
	if got := bucketOf(math.MaxUint64); got != numBuckets-1 {
		t.Errorf("bucketOf(max) = %d, want the last bucket", got)
	}
}

// bounds returns bucket i's range [lo, hi).
func bounds(i int) (lo, hi uint64) {
	if i < subCount {
		return uint64(i), uint64(i) + 1
	}
	k := i - subCount
	shift := k / subCount
	lo = uint64(subCount+k%subCount) << shift
	return lo, lo + 1<<shift
}

func checkBucket(t *testing.T, v uint64) {
	t.Helper()
	i := bucketOf(v)
	if i < 0 || i >= numBuckets {
		t.Fatalf("bucketOf(%d) = %d, out of range", v, i)
	}
	if i == numBuckets-1 && v >= 1<<(maxExp+1) {
		return
	}
	lo, hi := bounds(i)
	if v < lo || v >= hi {
		t.Fatalf("bucketOf(%d) = %d = [%d, %d)", v, i, lo, hi)
	}
	if (hi-lo)*subCount > max(lo, subCount) {
		t.Fatalf("bucket %d = [%d, %d) wider than 1/%d of its values", i, lo, hi, subCount)
	}
}

func FuzzBucketOf(f *testing.F) {
	f.Add(uint64(0))
	f.Add(uint64(180_000_000))
	f.Fuzz(func(t *testing.T, v uint64) { checkBucket(t, v) })
}

// FuzzController holds any configuration New accepts, and any sample
// stream, to the bounds: the factor never leaves [Min, Max] and moves only
// in the direction the reason says.
func FuzzController(f *testing.F) {
	f.Add(0.1, 1.0, 0.7, 0.05, int64(100_000_000), 0.05, []byte{10, 200, 3, 0, 255})
	f.Add(0.5, 0.5, 0.1, 1.0, int64(0), 0.5, []byte{1})
	f.Fuzz(func(t *testing.T, lo, hi, dec, inc float64, thr int64, ratio float64, samples []byte) {
		c, err := New(Config{Min: lo, Max: hi, Decrease: dec, Increase: inc, LatencyThreshold: time.Duration(thr), ErrorRatio: ratio, MinSamples: 1})
		if err != nil {
			return
		}
		cfg := c.Config()
		for i, b := range samples {
			c.Observe(time.Duration(b)*time.Millisecond, b%7 == 0)
			if i%5 != 4 {
				continue
			}
			ch := c.Step(time.Unix(int64(i), 0))
			if ch.New < cfg.Min || ch.New > cfg.Max || c.Factor() != ch.New {
				t.Fatalf("factor %v outside [%v, %v] (Factor %v)", ch.New, cfg.Min, cfg.Max, c.Factor())
			}
			if ch.Overloaded && ch.New > ch.Old || !ch.Overloaded && ch.New < ch.Old || ch.Reason == "" {
				t.Fatalf("step %+v moves against its reason", ch)
			}
		}
	})
}

func BenchmarkObserve(b *testing.B) {
	c, err := New(Config{LatencyThreshold: 100 * time.Millisecond, ErrorRatio: 0.05})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var i time.Duration
		for pb.Next() {
			i++
			c.Observe(i%200*time.Millisecond, i%50 == 0)
		}
	})
}

func BenchmarkStep(b *testing.B) {
	c, err := New(Config{LatencyThreshold: 100 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	now := time.Unix(0, 0)
	for b.Loop() {
		feed(c, 10, 50*time.Millisecond, 0)
		c.Step(now)
	}
}

// TestNormalize: a default written out normalises like the field left out,
// and an interval under MinInterval is refused.
func TestNormalize(t *testing.T) {
	a, err := Normalize(Config{LatencyThreshold: 250 * time.Millisecond, Min: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Normalize(Config{LatencyThreshold: 250 * time.Millisecond, Min: 0.2, Decrease: 0.7, Interval: time.Second})
	if err != nil || a != b {
		t.Errorf("Normalize: %+v and %+v (%v), want equal", a, b, err)
	}
	if _, err := Normalize(Config{ErrorRatio: 0.1, Interval: time.Millisecond}); err == nil || err.Error() != "adaptive: interval 1ms: must be at least 10ms" {
		t.Errorf("Normalize(interval 1ms) = %v", err)
	}
}

// TestSetFactor: the factor set is bounded and rounded, and the next step
// moves from it in the direction of its signal.
func TestSetFactor(t *testing.T) {
	c, err := New(Config{Min: 0.2, LatencyThreshold: 100 * time.Millisecond, MinSamples: 1})
	if err != nil {
		t.Fatal(err)
	}
	if f := c.SetFactor(0.05); f != 0.2 || c.Factor() != 0.2 {
		t.Errorf("SetFactor(0.05) = %v, factor %v; want the min 0.2", f, c.Factor())
	}
	if f := c.SetFactor(0.25); f != 0.25 {
		t.Fatalf("SetFactor(0.25) = %v", f)
	}
	c.Observe(time.Millisecond, false)
	if c.Pending() != 1 {
		t.Errorf("Pending() = %d, want 1", c.Pending())
	}
	if ch := c.Step(time.Unix(1, 0)); ch.Old != 0.25 || ch.New != 0.3 {
		t.Errorf("healthy step from 0.25: %s", ch)
	}
	c.Observe(time.Second, false)
	if ch := c.Step(time.Unix(2, 0)); ch.Old != 0.3 || ch.New != 0.21 {
		t.Errorf("overloaded step from 0.3: %s", ch)
	}
}

// TestStepSmallerThanRounding: an Increase, or a Decrease's cut, smaller
// than the six decimals factors are kept to still moves the factor by one
// unit of the sixth decimal toward its signal, within [Min, Max]. Before,
// the rounding took the step back: a controller with Increase 0.0000004
// stayed at 0.5 for good, below its Max of 1, saying "healthy", and one
// with Decrease 0.9999995 never went down from 0.5 under overload.
func TestStepSmallerThanRounding(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		latency time.Duration
		want    []float64 // the factor after each step
		reason  string    // the first step's
	}{
		{"tiny increase", Config{Initial: 0.5, Increase: 0.0000004}, time.Millisecond, []float64{0.500001, 0.500002}, "recovered: p99 1ms"},
		{"tiny increase at max", Config{Initial: 0.999999, Increase: 0.0000004}, time.Millisecond, []float64{1, 1}, "recovered: p99 1ms"},
		{"decrease close to 1", Config{Initial: 0.5, Decrease: 0.9999995}, time.Second, []float64{0.499999, 0.499998}, "p99 latency 1s > 100ms threshold"},
		{"decrease close to 1 at min", Config{Min: 0.1, Initial: 0.100001, Decrease: 0.9999995}, time.Second, []float64{0.1, 0.1}, "p99 latency 1s > 100ms threshold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.LatencyThreshold, tc.cfg.MinSamples = 100*time.Millisecond, 1
			c, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range tc.want {
				c.Observe(tc.latency, false)
				ch := c.Step(time.Unix(int64(i), 0))
				if ch.New != want || c.Factor() != want {
					t.Errorf("step %d: %s, want the factor %v", i, ch, want)
				}
				if i == 0 && ch.Reason != tc.reason {
					t.Errorf("step 0: reason %q, want %q", ch.Reason, tc.reason)
				}
			}
		})
	}
}

// TestTooFewSamplesCarried: a step with fewer than MinSamples samples
// carries them into the next, so that a rule whose lowered factor itself
// admits fewer than MinSamples requests an interval is still judged and
// recovers; an interval without samples drops what was carried. Without
// the carry a factor cut to where it admits 8 samples a second stayed
// there for good, healthy as the samples were.
func TestTooFewSamplesCarried(t *testing.T) {
	c, err := New(Config{LatencyThreshold: 100 * time.Millisecond, Initial: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	fast, slow := 20*time.Millisecond, 200*time.Millisecond
	runSteps(t, c, []step{
		{feed: steady(8, fast, 0), old: 0.5, new: 0.5, reason: "too few samples: 8 < 10"},
		{feed: steady(8, fast, 0), old: 0.5, new: 0.55, reason: "recovered: p99 20ms", latency: fast},
		{feed: steady(8, fast, 0), old: 0.55, new: 0.55, reason: "too few samples: 8 < 10"},
		{feed: steady(2, slow, 0), old: 0.55, new: 0.385, reason: "p99 latency 200ms > 100ms threshold", latency: slow},
		{feed: steady(6, slow, 0), old: 0.385, new: 0.385, reason: "too few samples: 6 < 10"},
		{old: 0.385, new: 0.385, reason: "too few samples: 0 < 10"}, // the 6 slow ones dropped
		{feed: steady(4, fast, 0), old: 0.385, new: 0.385, reason: "too few samples: 4 < 10"},
		{feed: steady(6, fast, 1), old: 0.385, new: 0.435, reason: "recovered: p99 20ms", latency: fast},
	})
	feed(c, 9, fast, 3)
	if ch := c.Step(time.Unix(1_700_000_100, 0)); ch.Samples != 9 || ch.Errors != 3 {
		t.Errorf("too few: Samples, Errors = %d, %d, want 9, 3", ch.Samples, ch.Errors)
	}
	feed(c, 3, fast, 0)
	if ch := c.Step(time.Unix(1_700_000_101, 0)); ch.Samples != 12 || ch.Errors != 3 || ch.New != 0.485 {
		t.Errorf("carried: Samples, Errors, New = %d, %d, %v, want 12, 3, 0.485", ch.Samples, ch.Errors, ch.New)
	}
}

// TestLoweredFactorRecovers: the controller of a rule of 50 requests a
// second, cut by an overload of five seconds to a factor that admits
// fewer than MinSamples requests a second, comes back to its Max once the
// latency is healthy again.
func TestLoweredFactorRecovers(t *testing.T) {
	c, err := New(Config{LatencyThreshold: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	for s := 1; s <= 60 && (s <= 5 || c.Factor() < 1); s++ {
		lat := 20 * time.Millisecond
		if s <= 5 {
			lat = 200 * time.Millisecond
		}
		feed(c, int(c.Factor()*50), lat, 0) // demand above the limit
		c.Step(t0.Add(time.Duration(s) * time.Second))
		if s == 5 && c.Factor() != 0.16807 {
			t.Fatalf("after the overload: factor %v, want 0.16807", c.Factor())
		}
	}
	if got := c.Factor(); got != 1 {
		t.Errorf("a minute later: factor %v, want 1", got)
	}
}
