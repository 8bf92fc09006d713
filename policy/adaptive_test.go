package policy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAdaptiveRate: a synthetic latency signal drives the rule's rate down
// to its floor and back up to its ceiling, never outside [min, max], and
// every change carries its reason.
func TestAdaptiveRate(t *testing.T) {
	cfg := mustParse(t, `
domain: a
descriptors:
  - key: backend
    rate_limit:
      name: db
      unit: second
      requests_per_unit: 200
      adaptive: {min: 0.25, max: 1, latency_threshold: 100ms, decrease: 0.5, increase: 0.25, min_samples: 5}
`)
	e := newMemEngine(t, cfg, nil)
	quota := func() int64 { return e.EffectiveLimit("a", "db").Params().Limit }
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func(latency time.Duration) ScaleChange {
		for i := 0; i < 20; i++ {
			e.Observe("a", "db", latency, false)
		}
		now = now.Add(time.Second)
		ch := e.StepAdaptive(now)
		if len(ch) != 1 {
			t.Fatalf("%d changes, want 1", len(ch))
		}
		return ch[0]
	}
	var trace []int64
	// Overload: 200 → 100 → 50, then held at the floor (0.25 × 200).
	for i, want := range []int64{100, 50, 50, 50} {
		ch := step(300 * time.Millisecond)
		trace = append(trace, quota())
		if quota() != want || !ch.Overloaded || !strings.Contains(ch.Reason, "latency") {
			t.Fatalf("overload step %d: quota %d (%s), want %d", i, quota(), ch, want)
		}
	}
	if s := e.RateScales(); len(s) != 1 || s[0].Factor != 0.25 || !strings.Contains(s[0].Reason, "> 100ms") {
		t.Fatalf("RateScales() = %+v", s)
	}
	// Recovery: +0.25 a step back up to, and not beyond, the full rate.
	for i, want := range []int64{100, 150, 200, 200} {
		ch := step(20 * time.Millisecond)
		trace = append(trace, quota())
		if quota() != want || ch.Overloaded {
			t.Fatalf("recovery step %d: quota %d (%s), want %d", i, quota(), ch, want)
		}
	}
	for _, q := range trace {
		if q < 50 || q > 200 {
			t.Fatalf("quota %d left [50, 200]: %v", q, trace)
		}
	}
	if len(e.RateScales()) != 0 {
		t.Fatalf("scale at factor 1 should be gone: %+v", e.RateScales())
	}
	// Decisions follow the scaled limit.
	for i := 0; i < 4; i++ {
		step(300 * time.Millisecond)
	}
	resp, err := e.Decide(context.Background(), req("a", ent("backend", "db")))
	if err != nil || resp.Statuses[0].Decision.Limit != 50 {
		t.Fatalf("decision limit %d (%v), want the scaled 50", resp.Statuses[0].Decision.Limit, err)
	}
	// A reload that keeps the block keeps the controller and its factor.
	if err := e.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if quota() != 50 {
		t.Fatalf("after reload quota %d, want 50 kept", quota())
	}
}

func TestRunAdaptive(t *testing.T) {
	cfg := mustParse(t, `
domain: a
descriptors:
  - key: b
    rate_limit: {name: r, unit: second, requests_per_unit: 100, adaptive: {error_ratio: 0.1, min_samples: 1}}
`)
	e := newMemEngine(t, cfg, nil)
	tick := make(chan time.Time)
	got := make(chan ScaleChange, 4)
	done := make(chan error, 1)
	go func() { done <- e.RunAdaptive(context.Background(), tick, func(c ScaleChange) { got <- c }) }()
	e.Observe("a", "r", time.Millisecond, true)
	tick <- time.Unix(1, 0)
	ch := <-got
	if ch.Domain != "a" || ch.Rule != "r" || ch.New != 0.7 || !strings.Contains(ch.String(), "a/r: factor 1 -> 0.7: error ratio") {
		t.Fatalf("change %s", ch)
	}
	close(tick)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if q := e.EffectiveLimit("a", "r").Params().Limit; q != 70 {
		t.Fatalf("quota %d, want 70", q)
	}
}

// TestObserveUnknownRule: a sample for a domain or rule the configuration
// does not have is an error naming it and the adaptive rules; one for a
// rule without an adaptive block is accepted and ignored.
func TestObserveUnknownRule(t *testing.T) {
	cfg := mustParse(t, `
domain: a
descriptors:
  - key: b
    rate_limit: {name: r, unit: second, requests_per_unit: 100, adaptive: {error_ratio: 0.1, min_samples: 1}}
  - key: c
    rate_limit: {name: plain, unit: second, requests_per_unit: 100}
`)
	e := newMemEngine(t, cfg, nil)
	for _, tc := range []struct{ domain, rule, want string }{
		{"a", "nope", `no rule "nope" in domain "a" (rules with an adaptive block: a/r)`},
		{"zz", "r", `no domain "zz" (rules with an adaptive block: a/r)`},
	} {
		err := e.Observe(tc.domain, tc.rule, time.Millisecond, false)
		if !errors.Is(err, ErrUnknownRule) || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("Observe(%s, %s) = %v, want ErrUnknownRule saying %q", tc.domain, tc.rule, err, tc.want)
		}
	}
	for _, rule := range []string{"r", "plain"} {
		if err := e.Observe("a", rule, time.Millisecond, false); err != nil {
			t.Errorf("Observe(a, %s) = %v, want nil", rule, err)
		}
	}
}
