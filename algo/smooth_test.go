package algo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// guava replays Guava's RateLimiterTest: acquire(n) is a Take that is
// always admitted (MaxWait of a day) after which the caller sleeps the
// Delay, as Guava's acquire does; sleep advances the fake clock. Events
// are written as Guava's test writes them: "R0.50" for an acquire that
// waited half a second, "U4.00" for a sleep of four seconds.
type guava struct {
	l      *Limit
	s      State
	now    int64
	events []string
}

func newGuava(t *testing.T, p Params) *guava {
	p.MaxWait = 24 * time.Hour
	g := &guava{l: mustCompile(t, p), now: base}
	// Guava's limiter exists from its creation; a cost-0 take creates the
	// key at the same instant.
	g.l.Take(&g.s, g.now, 0)
	return g
}

func (g *guava) acquire(n int64) time.Duration {
	d := g.l.Take(&g.s, g.now, n)
	if !d.Allowed {
		panic(fmt.Sprintf("acquire(%d) refused with MaxWait of a day: %+v", n, d))
	}
	g.now += d.Delay.Microseconds()
	g.events = append(g.events, "R"+hundredths(d.Delay))
	return d.Delay
}

func (g *guava) sleep(d time.Duration) {
	g.now += d.Microseconds()
	g.events = append(g.events, "U"+hundredths(d))
}

// hundredths formats d in seconds with two decimals, rounding half up
// like Java's String.format("%.2f").
func hundredths(d time.Duration) string {
	h := (d.Microseconds() + 5000) / 10000
	return fmt.Sprintf("%d.%02d", h/100, h%100)
}

func (g *guava) check(t *testing.T, want ...string) {
	t.Helper()
	got := strings.Join(g.events, ", ")
	if w := strings.Join(want, ", "); got != w {
		t.Errorf("events\n got %s\nwant %s", got, w)
	}
	g.events = nil
}

func TestGuavaSimple(t *testing.T) {
	g := newGuava(t, Params{Algorithm: SmoothBursty, Limit: 5, Period: time.Second})
	g.acquire(1)
	g.acquire(1)
	g.acquire(1)
	g.check(t, "R0.00", "R0.20", "R0.20")
}

func TestGuavaSimpleWithWait(t *testing.T) {
	g := newGuava(t, Params{Algorithm: SmoothBursty, Limit: 5, Period: time.Second})
	g.acquire(1)
	g.sleep(200 * time.Millisecond)
	g.acquire(1)
	g.acquire(1)
	g.check(t, "R0.00", "U0.20", "R0.00", "R0.20")
}

func TestGuavaEarliestAvailableIsInPast(t *testing.T) {
	g := newGuava(t, Params{Algorithm: SmoothBursty, Limit: 5, Period: time.Second})
	g.acquire(1)
	g.sleep(400 * time.Millisecond)
	g.acquire(1)
	g.acquire(1)
	g.acquire(1)
	g.check(t, "R0.00", "U0.40", "R0.00", "R0.00", "R0.20")
}

func TestGuavaOneSecondBurst(t *testing.T) {
	g := newGuava(t, Params{Algorithm: SmoothBursty, Limit: 5, Period: time.Second})
	g.sleep(time.Second) // max capacity reached
	g.sleep(time.Second) // this makes no difference
	g.acquire(1)         // from storage
	g.acquire(1)
	g.acquire(3)
	g.acquire(1) // the free one, concluding a burst of 6 permits
	g.acquire(1) // storage exhausted
	g.check(t, "U1.00", "U1.00", "R0.00", "R0.00", "R0.00", "R0.00", "R0.20")
}

func TestGuavaSimpleWeights(t *testing.T) {
	// Each acquire pays for the one before it.
	g := newGuava(t, Params{Algorithm: SmoothBursty, Limit: 1, Period: time.Second})
	for _, n := range []int64{1, 1, 2, 4, 8, 1} {
		g.acquire(n)
	}
	g.check(t, "R0.00", "R1.00", "R1.00", "R2.00", "R4.00", "R8.00")
}

func TestGuavaWarmUp(t *testing.T) {
	g := newGuava(t, Params{Algorithm: SmoothWarmup, Limit: 2, Period: time.Second, WarmupPeriod: 4 * time.Second, ColdFactor: 3})
	// The exact waits of the first round, in µs: 0, 1.375, 1.125, 0.875,
	// 0.625 s, then the stable 0.5 s.
	want := []time.Duration{0, 1375000, 1125000, 875000, 625000, 500000, 500000, 500000}
	for i, w := range want {
		if got := g.acquire(1); got != w*time.Microsecond {
			t.Errorf("acquire #%d waited %v, want %v", i+1, got, w*time.Microsecond)
		}
	}
	g.sleep(500 * time.Millisecond) // repay the last acquire
	g.sleep(4 * time.Second)        // cold again
	for range 8 {
		g.acquire(1)
	}
	g.sleep(500 * time.Millisecond) // repay the last acquire
	g.sleep(2 * time.Second)        // not cold: it takes another 2s
	for range 8 {
		g.acquire(1)
	}
	g.check(t,
		"R0.00", "R1.38", "R1.13", "R0.88", "R0.63", "R0.50", "R0.50", "R0.50",
		"U0.50", "U4.00",
		"R0.00", "R1.38", "R1.13", "R0.88", "R0.63", "R0.50", "R0.50", "R0.50",
		"U0.50", "U2.00",
		"R0.00", "R0.50", "R0.50", "R0.50", "R0.50", "R0.50", "R0.50", "R0.50")
}

func TestGuavaWarmUpWithColdFactor(t *testing.T) {
	g := newGuava(t, Params{Algorithm: SmoothWarmup, Limit: 5, Period: time.Second, WarmupPeriod: 4 * time.Second, ColdFactor: 10})
	for range 8 {
		g.acquire(1)
	}
	g.sleep(200 * time.Millisecond)
	g.sleep(4 * time.Second)
	for range 8 {
		g.acquire(1)
	}
	g.sleep(200 * time.Millisecond)
	g.sleep(time.Second) // still warm: it would take another 3s to go cold
	for range 8 {
		g.acquire(1)
	}
	g.check(t,
		"R0.00", "R1.75", "R1.26", "R0.76", "R0.30", "R0.20", "R0.20", "R0.20",
		"U0.20", "U4.00",
		"R0.00", "R1.75", "R1.26", "R0.76", "R0.30", "R0.20", "R0.20", "R0.20",
		"U0.20", "U1.00",
		"R0.00", "R0.20", "R0.20", "R0.20", "R0.20", "R0.20", "R0.20", "R0.20")
}

func TestGuavaWarmUpWithColdFactor1(t *testing.T) {
	g := newGuava(t, Params{Algorithm: SmoothWarmup, Limit: 5, Period: time.Second, WarmupPeriod: 4 * time.Second, ColdFactor: 1})
	for range 8 {
		g.acquire(1)
	}
	g.sleep(340 * time.Millisecond)
	for range 8 {
		g.acquire(1)
	}
	g.check(t,
		"R0.00", "R0.20", "R0.20", "R0.20", "R0.20", "R0.20", "R0.20", "R0.20",
		"U0.34",
		"R0.00", "R0.20", "R0.20", "R0.20", "R0.20", "R0.20", "R0.20", "R0.20")
}

// Guava's tryAcquire without and with a timeout: a timeout is MaxWait, and
// limits that differ only in MaxWait share a state layout, so one state
// can be asked with several.
func TestGuavaTryAcquire(t *testing.T) {
	p := Params{Algorithm: SmoothBursty, Limit: 5, Period: time.Second}
	try := map[time.Duration]*Limit{}
	for _, w := range []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond} {
		p.MaxWait = w
		try[w] = mustCompile(t, p)
	}
	in := instants{"t0": 0, "t1": 100 * time.Millisecond}
	t.Run("immediate", func(t *testing.T) {
		l := mustCompile(t, Params{Algorithm: SmoothBursty, Limit: 1, Period: time.Second})
		runSteps(t, l, in, []step{
			{at: "t0", cost: 1, allowed: true, remaining: 0},
			{at: "t0", cost: 1, allowed: false, remaining: 0, retry: time.Second},
		})
	})
	t.Run("no wait allowed", func(t *testing.T) {
		runSteps(t, try[0], in, []step{
			{at: "t0", cost: 1, allowed: true, remaining: 0},
			{at: "t0", cost: 1, allowed: false, remaining: 0, retry: 200 * time.Millisecond},
			{at: "t0", cost: 1, allowed: false, remaining: 0, retry: 200 * time.Millisecond},
			{at: "t1", cost: 1, allowed: false, remaining: 0, retry: 100 * time.Millisecond},
		})
	})
	t.Run("some wait allowed", func(t *testing.T) {
		// Guava's tryAcquire sleeps the wait when it succeeds.
		var s State
		now := base
		for i, c := range []struct {
			sleep   time.Duration
			timeout time.Duration
			allowed bool
		}{
			{0, 0, true},
			{0, 200 * time.Millisecond, true},
			{0, 100 * time.Millisecond, false},
			{100 * time.Millisecond, 100 * time.Millisecond, true},
		} {
			now += c.sleep.Microseconds()
			d := try[c.timeout].Take(&s, now, 1)
			if d.Allowed != c.allowed {
				t.Errorf("step %d: tryAcquire(timeout %v) at %v = %v, want %v", i, c.timeout, time.Duration(now-base)*time.Microsecond, d.Allowed, c.allowed)
			}
			now += d.Delay.Microseconds()
		}
	})
}

func TestSmoothBurstySteps(t *testing.T) {
	// 5 per second, one second stored, no waiting.
	l := mustCompile(t, Params{Algorithm: SmoothBursty, Limit: 5, Period: time.Second})
	runSteps(t, l, instants{
		"t0": 0,
		"t1": 199999 * time.Microsecond,
		"t2": 200 * time.Millisecond,
		"t3": 1400 * time.Millisecond,
		"t4": 1600 * time.Millisecond,
	}, []step{
		// A fresh key stores nothing; the first request is free and the
		// next pays for it.
		{at: "t0", cost: 1, allowed: true, remaining: 0},
		{at: "t0", cost: 1, allowed: false, remaining: 0, retry: 200 * time.Millisecond},
		{at: "t1", cost: 1, allowed: false, remaining: 0, retry: time.Microsecond},
		{at: "t2", cost: 1, allowed: true, remaining: 0},
		// 1s idle stores 5 (the maximum): a request of 5 is served from
		// storage and the next is free.
		{at: "t3", cost: 5, allowed: true, remaining: 1},
		{at: "t3", cost: 1, allowed: true, remaining: 0},
		// Up to MaxCost (5 stored + a period's 5) is admitted while the
		// ticket is free, paid for by whoever comes next: 10 units take
		// 2s. More can never pass (Guava would admit any size).
		{at: "t4", cost: 11, allowed: false, remaining: 1, retry: Never},
		{at: "t4", cost: 10, allowed: true, remaining: 0},
		{at: "t4", cost: 1, allowed: false, remaining: 0, retry: 2 * time.Second},
		// A clock that steps back is read as the latest time seen.
		{at: "t2", cost: 1, allowed: false, remaining: 0, retry: 2 * time.Second},
	})
}

func TestSmoothWarmupSteps(t *testing.T) {
	// Guava's example with MaxWait 1s: a cold limiter refuses what it
	// would make wait longer.
	l := mustCompile(t, Params{Algorithm: SmoothWarmup, Limit: 2, Period: time.Second, WarmupPeriod: 4 * time.Second, MaxWait: time.Second})
	runSteps(t, l, instants{
		"t0": 0,
		"t1": 375 * time.Millisecond,
		"t2": 1375 * time.Millisecond,
		"t3": 1500 * time.Millisecond,
	}, []step{
		// Stored permits are not free while cold: nothing more passes
		// without waiting.
		{at: "t0", cost: 1, allowed: true, remaining: 0},
		{at: "t0", cost: 1, allowed: false, remaining: 0, retry: 375 * time.Millisecond},
		{at: "t1", cost: 1, allowed: true, remaining: 0, delay: time.Second},
		// The ticket is now at 2.5s: refused at 1.375s, admitted at 1.5s.
		{at: "t2", cost: 1, allowed: false, remaining: 0, retry: 125 * time.Millisecond},
		{at: "t3", cost: 1, allowed: true, remaining: 0, delay: time.Second},
	})
}

// One acquire(3) costs what three acquire(1) do: the request after them is
// served at the same instant. Guava truncates each wait to the µs, so the
// three-step path may be short by up to 1µs per extra step.
func TestSmoothCostIsAdditive(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	params := []Params{
		{Algorithm: SmoothBursty, Limit: 5, Period: time.Second},
		{Algorithm: SmoothWarmup, Limit: 2, Period: time.Second, WarmupPeriod: 4 * time.Second},
	}
	for range 200 {
		params = append(params, randomSmooth(r))
	}
	for i, p := range params {
		for _, idle := range []time.Duration{0, p.Period / 3, p.Period, 10 * p.Period, p.WarmupPeriod / 2, 2 * p.WarmupPeriod} {
			one, three := newGuava(t, p), newGuava(t, p)
			one.sleep(idle)
			three.sleep(idle)
			one.acquire(3)
			for range 3 {
				three.acquire(1)
			}
			// The next request is served when the ticket is free.
			one.acquire(1)
			three.acquire(1)
			a, b := one.now, three.now
			exact := i < 2 && idle != p.Period/3 // whole permits: no truncation
			if d := a - b; d < 0 || d > 2 || (exact && d != 0) {
				t.Errorf("%v after %v idle: next request after acquire(3) at %d, after 3×acquire(1) at %d", one.l, idle, a-base, b-base)
			}
		}
	}
}

func randomSmooth(r *rand.Rand) Params {
	p := Params{Limit: 1 + r.Int64N(1000), Period: time.Duration(1+r.Int64N(100_000)) * time.Millisecond}
	if r.IntN(2) == 0 {
		p.Algorithm = SmoothBursty
		p.MaxBurstSeconds = r.Float64() * 5
	} else {
		p.Algorithm = SmoothWarmup
		p.WarmupPeriod = time.Duration(1+r.Int64N(10_000)) * time.Millisecond
		p.ColdFactor = 1 + r.Float64()*9
	}
	return p
}

// A request can never cost more than MaxCost: the stored permits plus
// what the longer of Period and MaxWait is worth. Guava would admit a huge
// acquire(n) and make every later request pay for it, so one request could
// hold a shared key for centuries; here it is refused as Never and leaves
// the key as it was. A request of MaxCost is admitted, and the next one
// passes again within the longer of Period and MaxWait plus what the
// stored permits are worth.
func TestSmoothHugeCost(t *testing.T) {
	for _, p := range []Params{
		{Algorithm: SmoothBursty, Limit: 1, Period: time.Hour},
		{Algorithm: SmoothBursty, Limit: 10, Period: time.Second, MaxBurstSeconds: 2},
		{Algorithm: SmoothBursty, Limit: 1, Period: time.Second, MaxWait: time.Minute},
		{Algorithm: SmoothWarmup, Limit: 1, Period: time.Hour, WarmupPeriod: time.Hour},
		{Algorithm: SmoothWarmup, Limit: 10, Period: time.Second, WarmupPeriod: 5 * time.Second},
	} {
		l := mustCompile(t, p)
		horizon := max(p.Period, p.MaxWait)
		var s State
		for _, cost := range []int64{l.MaxCost() + 1, 1 << 62, math.MaxInt64} {
			if d := l.Take(&s, base, cost); d.Allowed || !d.IsNever() {
				t.Fatalf("%v: Take(%d) with MaxCost %d = %+v, want Never", l, cost, l.MaxCost(), d)
			}
		}
		if d := l.Take(&s, base, 1); !d.Allowed || d.Delay != 0 {
			t.Fatalf("%v: Take(1) after refused huge costs = %+v, want admitted at once", l, d)
		}
		var fresh State
		d := l.Take(&fresh, base, l.MaxCost())
		if !d.Allowed {
			t.Fatalf("%v: Take(MaxCost %d) on a fresh key = %+v, want admitted", l, l.MaxCost(), d)
		}
		// A fresh key's stored permits: none for SmoothBursty (each
		// unit of MaxCost is then paid at the stable rate), a warm-up's
		// worth for SmoothWarmup.
		bound := horizon + time.Duration(p.MaxBurstSeconds*float64(time.Second)) + 2*p.WarmupPeriod
		if p.Algorithm == SmoothBursty && p.MaxBurstSeconds == 0 {
			bound += time.Second // the default MaxBurstSeconds
		}
		later := base + int64(bound/time.Microsecond)
		if d := l.Take(&fresh, later, 1); !d.Allowed {
			t.Fatalf("%v: Take(1) %v after Take(MaxCost %d) = %+v, want admitted", l, bound, l.MaxCost(), d)
		}
	}
}

func TestSmoothRefund(t *testing.T) {
	// A refund moves the ticket back by what the cost is worth at the
	// stable rate, never before the latest time seen.
	l := mustCompile(t, Params{Algorithm: SmoothBursty, Limit: 5, Period: time.Second, MaxWait: time.Second})
	runSteps(t, l, instants{"t0": 0}, []step{
		{at: "t0", cost: 5, allowed: true, remaining: 0},
		{at: "t0", cost: 5, allowed: true, remaining: 0, delay: time.Second},
		{at: "t0", cost: 1, allowed: false, remaining: 0, retry: time.Second},
		{at: "t0", op: opRefund, from: "t0", cost: 5},
		{at: "t0", cost: 1, allowed: true, remaining: 0, delay: time.Second},
		{at: "t0", op: opRefund, from: "t0", cost: 100},
		{at: "t0", cost: 1, allowed: true, remaining: 0},
	})
}
