package sim

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// run validates and runs sc, failing the test on error.
func run(t testing.TB, sc *Scenario, opts ...Option) *Result {
	t.Helper()
	res, err := Run(context.Background(), sc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func contender(t testing.TB, res *Result, name string) Metrics {
	t.Helper()
	for _, c := range res.Contenders {
		if c.Name == name {
			return c.Metrics
		}
	}
	t.Fatalf("no contender %q", name)
	return Metrics{}
}

func sec(s float64) Duration { return Duration(time.Duration(s * float64(time.Second))) }

// A fixed window of 100 per minute under 100 requests just before a window
// boundary and 100 just after admits all 200: exactly twice the limit in
// the minute that straddles the boundary. The sliding log admits 100.
func TestFixedWindowBoundaryBurstAdmitsTwiceTheLimit(t *testing.T) {
	sc := &Scenario{
		Duration: sec(120), Limit: 100, Period: sec(60),
		Traffic:    []Source{{Kind: SourceSteady, Rate: 100, From: sec(59), To: sec(61)}},
		Contenders: []Contender{{Algorithm: "fixed_window"}, {Algorithm: "sliding_log"}},
	}
	res := run(t, sc)
	if got := res.Offered.Metrics.Requests; got != 200 {
		t.Fatalf("offered %d requests, want 200", got)
	}
	fw := contender(t, res, "fixed_window")
	if fw.MaxWindow != 200 || fw.Admitted != 200 || fw.Over != 100 || fw.WorstOver != 100 {
		t.Errorf("fixed_window: max in a window %d, admitted %d, over %d, worst over %d; want 200, 200, 100, 100",
			fw.MaxWindow, fw.Admitted, fw.Over, fw.WorstOver)
	}
	sl := contender(t, res, "sliding_log")
	if sl.MaxWindow != 100 || sl.Admitted != 100 || sl.Over != 0 || sl.Under != 0 {
		t.Errorf("sliding_log: max in a window %d, admitted %d, over %d, under %d; want 100, 100, 0, 0", sl.MaxWindow, sl.Admitted, sl.Over, sl.Under)
	}
	// The window series shows the straddling minute: 200 admitted in the
	// 60 s ending at 61 s.
	if w := res.Contenders[0].Series.Window[60]; w != 200 {
		t.Errorf("fixed_window window at 61s = %d, want 200", w)
	}
}

// The sliding log, alone or behind a central store, never lets any key
// exceed its limit in any window, and never refuses a request that fits —
// under bursts, Zipf keys and random costs of several seeds.
func TestSlidingLogNeverExceedsTheLimit(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		sc := &Scenario{
			Seed: seed, Duration: sec(120), Limit: 50, Period: sec(10), Bin: sec(1),
			Traffic: []Source{
				{Kind: SourcePoisson, Rate: 40, Keys: 5, Zipf: 1.5},
				{Kind: SourceBursts, Rate: 300, On: sec(2), Off: sec(13), Keys: 5, Cost: 3},
				{Kind: SourceFlash, Rate: 1, Peak: 200, At: sec(60), Rise: sec(5), Hold: sec(5), Keys: 2},
			},
			Contenders: []Contender{
				{Algorithm: "sliding_log"},
				{Strategy: StrategyCentral, RTT: Duration(3 * time.Millisecond)},
			},
		}
		res := run(t, sc)
		for _, c := range append([]ContenderResult{res.Ideal}, res.Contenders...) {
			m := c.Metrics
			if m.Over != 0 || m.Under != 0 || m.MaxWindow > sc.Limit {
				t.Errorf("seed %d, %s: over %d, under %d, max in a window %d (limit %d); want 0, 0, <= limit",
					seed, c.Name, m.Over, m.Under, m.MaxWindow, sc.Limit)
			}
			if m.AdmittedUnits != res.Ideal.Metrics.AdmittedUnits {
				t.Errorf("seed %d, %s admitted %d units, the ideal %d", seed, c.Name, m.AdmittedUnits, res.Ideal.Metrics.AdmittedUnits)
			}
		}
		if res.Ideal.Metrics.Admitted == res.Offered.Metrics.Requests {
			t.Errorf("seed %d: the traffic never reached the limit; the test proves nothing", seed)
		}
	}
}

// Per-instance limits (limit ÷ K) with a load balancer that sends 3/4 of
// the traffic to one of two instances: the busy instance admits its half
// of the limit, the quiet one all it gets, so the cluster admits
// min(90, 50) + min(30, 50) = 80 per second where the limit is 100.
func TestLocalLimitsUnderAdmitWithSkewedTraffic(t *testing.T) {
	const secs = 60
	sc := &Scenario{
		Duration: sec(secs), Limit: 100, Period: sec(1),
		Traffic:    []Source{{Kind: SourceSteady, Rate: 120}},
		Contenders: []Contender{{Strategy: StrategyLocal, Instances: 2, Weights: []int{3, 1}}},
	}
	res := run(t, sc)
	m := res.Contenders[0].Metrics
	rate := func(share float64) float64 { return math.Min(120*share, 100/2) }
	want := (rate(0.75) + rate(0.25)) * secs // 4800
	if got := float64(m.AdmittedUnits); math.Abs(got-want) > 0.01*want {
		t.Errorf("local ÷2 with a 3:1 balancer admitted %.0f, want %.0f ± 1%%", got, want)
	}
	ideal := float64(res.Ideal.Metrics.AdmittedUnits)
	if math.Abs(ideal-100*secs) > 0.01*100*secs {
		t.Errorf("ideal admitted %.0f, want %d ± 1%%", ideal, 100*secs)
	}
	// The cluster never holds more than 80 in a window, so each of the 40
	// requests a second the busy instance refuses would have fitted: all
	// are under-admissions.
	if u := float64(m.Under); math.Abs(u-40*secs) > 0.02*40*secs {
		t.Errorf("under-admitted %.0f, want about %d", u, 40*secs)
	}
	if m.Over != 0 {
		t.Errorf("over-admitted %d, want 0", m.Over)
	}
}

// Asynchronous count sharing with lag L: from idle, K instances behind
// round robin at rate R keep admitting until the lagging count shows the
// limit, so the window admits limit + R·L·(K-1)/K: roughly rate × lag.
func TestAsyncSharingOverAdmitsRateTimesLag(t *testing.T) {
	for _, tc := range []struct {
		k    int
		rate float64
		lag  float64
	}{{4, 2000, 0.5}, {8, 1000, 1}, {2, 4000, 0.25}} {
		sc := &Scenario{
			Duration: sec(5), Limit: 1000, Period: sec(10),
			Traffic:    []Source{{Kind: SourceSteady, Rate: Rate(tc.rate)}},
			Contenders: []Contender{{Strategy: StrategyAsync, Instances: tc.k, Lag: sec(tc.lag)}},
		}
		res := run(t, sc)
		m := res.Contenders[0].Metrics
		want := tc.rate * tc.lag * float64(tc.k-1) / float64(tc.k)
		if got := float64(m.WorstOver); math.Abs(got-want) > 0.02*want+2 {
			t.Errorf("K=%d, rate %v/s, lag %vs: over-admitted %v, want %.0f (rate × lag × (K-1)/K)", tc.k, tc.rate, tc.lag, got, want)
		}
	}
}

// Sticky sessions: when the cluster grows, the keys rendezvous hashing
// moves to a new instance start afresh there, so each of them gets a
// second full limit inside the window; keys that stay get none.
func TestStickyScaleOutGivesMovedKeysASecondLimit(t *testing.T) {
	const keys = 64
	sc := &Scenario{
		Seed: 7, Duration: sec(10), Limit: 20, Period: sec(10), Instances: 2,
		Traffic:    []Source{{Kind: SourceSteady, Rate: keys * 6, Keys: keys}},
		Events:     []Event{{At: sec(5), Instances: 4}},
		Contenders: []Contender{{Strategy: StrategySticky}},
	}
	// Steady traffic with uniform keys is not round robin over keys; give
	// each key its own steady source instead so that every key is busy.
	sc.Traffic = nil
	for k := range keys {
		sc.Traffic = append(sc.Traffic, Source{Kind: SourceSteady, Rate: 6, KeyOffset: k})
	}
	res := run(t, sc)
	b2 := newBalancer(&Contender{Balancer: BalanceSticky, Instances: 2}, sc.Seed, 0)
	b4 := newBalancer(&Contender{Balancer: BalanceSticky, Instances: 4}, sc.Seed, 0)
	moved := 0
	for k := range int32(keys) {
		if b2.pick(k) != b4.pick(k) {
			moved++
		}
	}
	if moved == 0 || moved == keys {
		t.Fatalf("%d of %d keys moved; the test needs some of each", moved, keys)
	}
	m := res.Contenders[0].Metrics
	if want := int64(moved) * sc.Limit; m.Over != want {
		t.Errorf("sticky 2→4 instances: over-admitted %d, want %d (%d moved keys × limit %d)", m.Over, want, moved, sc.Limit)
	}
	if m.MaxWindow != 2*sc.Limit {
		t.Errorf("max in a window %d, want %d", m.MaxWindow, 2*sc.Limit)
	}
}

// The central store adds its round trip to every admitted request and
// makes one store call per decision; leases make far fewer calls.
func TestLatencyAndStoreCalls(t *testing.T) {
	sc := &Scenario{
		Duration: sec(30), Limit: 1000, Period: sec(1),
		Traffic: []Source{{Kind: SourcePoisson, Rate: 500}},
		Contenders: []Contender{
			{Strategy: StrategyCentral, RTT: Duration(2 * time.Millisecond)},
			{Strategy: StrategyLease, LeaseSize: 50, LeaseTTL: sec(1)},
			{Algorithm: "shaper", Burst: 10},
		},
	}
	res := run(t, sc)
	c := res.Contenders[0].Metrics
	if c.CallsPerDecision() != 1 || c.LatencyMax != 2000 || c.MeanLatency() != 2000 {
		t.Errorf("central: %.3f calls per decision, latency max %dµs mean %.0fµs; want 1, 2000, 2000", c.CallsPerDecision(), c.LatencyMax, c.MeanLatency())
	}
	l := res.Contenders[1].Metrics
	if cpd := l.CallsPerDecision(); cpd <= 0 || cpd > 0.1 {
		t.Errorf("lease of 50: %.3f calls per decision, want about 1/50 per instance refill", cpd)
	}
	if s := res.Contenders[2].Metrics; s.LatencyMax == 0 {
		t.Errorf("shaper added no latency")
	}
}

// The articles' figures, as numbers: on the same traffic, the two-window
// estimate is closer to the perfect count than the fixed window, and four
// 15 s sub-windows closer still.
func TestEstimatesApproachThePerfectCount(t *testing.T) {
	sc, err := LoadScenario("article")
	if err != nil {
		t.Fatal(err)
	}
	res := run(t, sc)
	perfect := res.Offered.Series.Window
	errOf := func(name string) float64 {
		for _, c := range res.Contenders {
			if c.Name == name {
				sum := 0.0
				for i, e := range c.Series.Estimate {
					sum += math.Abs(e - float64(perfect[i]))
				}
				return sum / float64(len(perfect))
			}
		}
		t.Fatalf("no contender %q", name)
		return 0
	}
	fixed, two, four := errOf("fixed_window"), errOf("sliding_window 1×1m"), errOf("sliding_window 4×15s")
	if !(fixed > 2*two && two > four && four > 0) {
		t.Errorf("mean distance from the perfect count: fixed %.1f, two windows %.1f, 4×15s %.1f; want fixed ≫ two > four > 0", fixed, two, four)
	}
}

// Leases trade a bounded error for fewer store calls: units are charged to
// the store when leased and spent within the lease's life, so a window can
// hold at most the units leased but unspent at its start on top of the
// limit: K instances × (a lease plus a remainder below one cost).
func TestLeaseErrorIsBounded(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		const k, size = 4, 25
		sc := &Scenario{
			Seed: seed, Duration: sec(60), Limit: 500, Period: sec(1),
			Traffic: []Source{
				{Kind: SourcePoisson, Rate: 400, Keys: 3},
				{Kind: SourceBursts, Rate: 3000, On: sec(3), Off: sec(7), Keys: 3},
			},
			Contenders: []Contender{{Strategy: StrategyLease, Instances: k, LeaseSize: size, LeaseTTL: Duration(200 * time.Millisecond), Balancer: BalanceRandom}},
		}
		res := run(t, sc)
		m := res.Contenders[0].Metrics
		if bound := sc.Limit + 2*k*size; m.MaxWindow > bound {
			t.Errorf("seed %d: max in a window %d, want <= limit + 2·K·lease = %d", seed, m.MaxWindow, bound)
		}
		if cpd := m.CallsPerDecision(); cpd > 0.2 {
			t.Errorf("seed %d: %.3f store calls per decision, want far fewer than one", seed, cpd)
		}
	}
}

// The Zipf key mix follows its law: key k is drawn with probability
// proportional to (k+1)^-s.
func TestZipfKeysFollowTheLaw(t *testing.T) {
	const n, s, draws = 50, 1.3, 400_000
	a := zipfAlias(s, n)
	rng := rand.New(rand.NewPCG(1, 2))
	counts := make([]float64, n)
	for range draws {
		counts[a.pick(rng)]++
	}
	sum := 0.0
	for k := range n {
		sum += math.Pow(float64(k+1), -s)
	}
	for _, k := range []int{0, 1, 4, 20, 49} {
		want := draws * math.Pow(float64(k+1), -s) / sum
		if got := counts[k]; math.Abs(got-want) > 5*math.Sqrt(want)+1 {
			t.Errorf("key %d drawn %.0f times, want %.0f ± 5σ", k, got, want)
		}
	}
}
