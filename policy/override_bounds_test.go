package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// dailyBucket is a rule at the edge of the algorithms' bounds: a token
// bucket's capacity × period must stay below 2^53 µs, and a day is
// 8.64e10 µs, so 104 249 per day is the most it can hold.
const dailyBucket = `
domain: t
descriptors:
  - key: k
    rate_limit: {name: daily, algorithm: token_bucket, unit: day, requests_per_unit: 100000}
`

// checkLimit fails unless both the limit in force and a decision's limit
// are want.
func checkLimit(t *testing.T, e *Engine, domain, rule string, want int64) {
	t.Helper()
	if got := e.EffectiveLimit(domain, rule).Params().Limit; got != want {
		t.Errorf("EffectiveLimit(%s, %s) = %d, want %d", domain, rule, got, want)
	}
	resp, err := e.Peek(context.Background(), req(domain, ent("k", "v")))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Statuses[0].Decision.Limit; got != want {
		t.Errorf("decision limit %d, want %d", got, want)
	}
}

// wantRefused fails unless err is an ErrBadRequest whose message holds
// every one of parts.
func wantRefused(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if !errors.Is(err, ErrBadRequest) {
		t.Fatalf("%s = %v, want ErrBadRequest", what, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q does not say %q", what, err, p)
		}
	}
}

// TestScaleBeyondBoundsRefused: a scale whose limit does not compile is
// refused, naming the rule, the limit and why, and changes nothing.
func TestScaleBeyondBoundsRefused(t *testing.T) {
	e := newMemEngine(t, mustParse(t, dailyBucket), nil)
	v := e.Version()
	err := e.SetRateScale("t", "daily", 1.05, "test")
	wantRefused(t, "SetRateScale(t, daily, 1.05)", err, "t/daily", "105000", "2^53")
	if s := e.RateScales(); len(s) != 0 {
		t.Errorf("RateScales() = %+v, want none", s)
	}
	if e.Version() != v {
		t.Errorf("version %d after a refused scale, want %d", e.Version(), v)
	}
	checkLimit(t, e, "t", "daily", 100000)
	// The largest scale that compiles is taken.
	if err := e.SetRateScale("t", "daily", 1.04, "test"); err != nil {
		t.Fatal(err)
	}
	checkLimit(t, e, "t", "daily", 104000)
}

// TestScaleOverOverrideRefused: an override accepted under a scale stays
// valid only while the scale does; moving the scale (to 1 included) or
// removing the override so that the combination no longer compiles is
// refused.
func TestScaleOverOverrideRefused(t *testing.T) {
	e := newMemEngine(t, mustParse(t, dailyBucket), nil)
	if err := e.SetRateScale("t", "daily", 0.5, "test"); err != nil {
		t.Fatal(err)
	}
	if err := e.SetOverride("t", "daily", Override{RequestsPerUnit: 150000, Period: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	checkLimit(t, e, "t", "daily", 75000)
	wantRefused(t, "SetRateScale(t, daily, 1)", e.SetRateScale("t", "daily", 1, "test"), "t/daily", "150000", "2^53")
	wantRefused(t, "SetRateScale(t, daily, 0.8)", e.SetRateScale("t", "daily", 0.8, "test"), "t/daily", "120000")
	if s := e.RateScales(); len(s) != 1 || s[0].Factor != 0.5 {
		t.Errorf("RateScales() = %+v, want the 0.5 kept", s)
	}
	if o := e.Overrides(); len(o) != 1 || !o[0].Active || o[0].RequestsPerUnit != 150000 {
		t.Errorf("Overrides() = %+v, want the 150000 kept", o)
	}
	checkLimit(t, e, "t", "daily", 75000)

	// Removing an override is a change of limit too.
	if err := e.SetOverride("t", "daily", Override{RequestsPerUnit: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := e.SetRateScale("t", "daily", 5, "test"); err != nil {
		t.Fatal(err)
	}
	checkLimit(t, e, "t", "daily", 5000)
	had, err := e.RemoveOverride("t", "daily")
	wantRefused(t, "RemoveOverride(t, daily)", err, "t/daily", "500000")
	if had {
		t.Error("a refused RemoveOverride reported it removed the override")
	}
	checkLimit(t, e, "t", "daily", 5000)
	if err := e.SetRateScale("t", "daily", 1, "test"); err != nil {
		t.Fatal(err)
	}
	if had, err := e.RemoveOverride("t", "daily"); !had || err != nil {
		t.Fatalf("RemoveOverride = %v, %v, want true, nil", had, err)
	}
	checkLimit(t, e, "t", "daily", 100000)
}

// TestOverrideAtTheBound: limits stay below 2^53, whether the override
// itself, its scaled burst or a scale on top would cross it.
func TestOverrideAtTheBound(t *testing.T) {
	const max = 1<<53 - 1
	e := newMemEngine(t, mustParse(t, dailyBucket), nil)
	if err := e.SetOverride("t", "daily", Override{RequestsPerUnit: max, Period: time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	checkLimit(t, e, "t", "daily", max)
	wantRefused(t, "SetRateScale(t, daily, 2)", e.SetRateScale("t", "daily", 2, "test"), "t/daily", "2^53")
	checkLimit(t, e, "t", "daily", max)
	wantRefused(t, "SetOverride(2^53)", e.SetOverride("t", "daily", Override{RequestsPerUnit: 1 << 53, Period: time.Microsecond}), "t/daily", "2^53")
	checkLimit(t, e, "t", "daily", max)

	// A configured burst scales with the quota: twice 2^53 - 1 is past
	// the bound, not 2^53.
	e = newMemEngine(t, mustParse(t, `
domain: t
descriptors:
  - key: k
    rate_limit: {name: burst, algorithm: token_bucket, unit: second, requests_per_unit: 100000, burst: 200000}
`), nil)
	err := e.SetOverride("t", "burst", Override{RequestsPerUnit: max, Period: time.Microsecond})
	wantRefused(t, "SetOverride(2^53 - 1 with twice the burst)", err, "t/burst", "burst", "2^53")
	if got := e.EffectiveLimit("t", "burst").String(); got != "token_bucket 100000/1s capacity 200000" {
		t.Errorf("effective %s after a refused override", got)
	}
	if err := e.SetOverride("t", "burst", Override{RequestsPerUnit: max / 2, Period: time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	if l := e.EffectiveLimit("t", "burst"); l.Capacity() >= 1<<53 {
		t.Errorf("effective %s: capacity not below 2^53", l)
	}
}

// TestAdaptiveScaleClamped: an adaptive controller asking for a factor
// whose limit does not compile gets the largest one that does, and the
// change says why.
func TestAdaptiveScaleClamped(t *testing.T) {
	e := newMemEngine(t, mustParse(t, `
domain: t
descriptors:
  - key: k
    rate_limit:
      name: daily
      algorithm: token_bucket
      unit: day
      requests_per_unit: 100000
      adaptive: {min: 0.5, max: 2, initial: 1, latency_threshold: 100ms, increase: 0.25, min_samples: 1}
`), nil)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func() ScaleChange {
		e.Observe("t", "daily", time.Millisecond, false)
		now = now.Add(time.Second)
		ch := e.StepAdaptive(now)
		if len(ch) != 1 {
			t.Fatalf("%d changes, want 1", len(ch))
		}
		return ch[0]
	}
	ch := step()
	if !ch.Clamped || !ch.Changed() || ch.Old != 1 || ch.New >= 1.25 || !strings.Contains(ch.Reason, "2^53") {
		t.Fatalf("first step: %+v, want a clamped change from 1 that says why", ch)
	}
	checkLimit(t, e, "t", "daily", 104249)
	if s := e.AdaptiveRules(); len(s) != 1 || s[0].Factor != ch.New || s[0].Reason != ch.Reason {
		t.Errorf("AdaptiveRules() = %+v, want the change's factor and reason", s)
	}
	// Asked for more again, the rule holds where it is.
	ch = step()
	if !ch.Clamped || ch.Changed() {
		t.Errorf("second step: %+v, want clamped and unchanged", ch)
	}
	checkLimit(t, e, "t", "daily", 104249)

	// An initial factor past the bound is clamped at load.
	e = newMemEngine(t, mustParse(t, `
domain: t
descriptors:
  - key: k
    rate_limit:
      name: daily
      algorithm: token_bucket
      unit: day
      requests_per_unit: 100000
      adaptive: {min: 0.5, max: 2, latency_threshold: 100ms}
`), nil)
	checkLimit(t, e, "t", "daily", 104249)
	if s := e.AdaptiveRules(); len(s) != 1 || !strings.Contains(s[0].Reason, "2^53") {
		t.Errorf("AdaptiveRules() = %+v, want the clamp's reason", s)
	}
}
