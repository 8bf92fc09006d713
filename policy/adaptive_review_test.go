package policy

import (
	"context"
	"strings"
	"testing"
	"time"
)

// adaptiveRig drives one engine's adaptive rules by hand: samples, then a
// step at a given offset from a fixed start.
type adaptiveRig struct {
	t     *testing.T
	e     *Engine
	start time.Time
}

func newAdaptiveRig(t *testing.T, yaml string) *adaptiveRig {
	return &adaptiveRig{t: t, e: newMemEngine(t, mustParse(t, yaml), nil), start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// step feeds 20 samples of latency to domain/rule and steps at start+at,
// returning the change of that rule (nil when it was not stepped).
func (r *adaptiveRig) step(rule string, latency time.Duration, at time.Duration) *ScaleChange {
	r.t.Helper()
	for range 20 {
		if err := r.e.Observe("d", rule, latency, false); err != nil {
			r.t.Fatal(err)
		}
	}
	for _, ch := range r.e.StepAdaptive(r.start.Add(at)) {
		if ch.Rule == rule {
			return &ch
		}
	}
	return nil
}

func (r *adaptiveRig) quota(rule string) int64 {
	return r.e.EffectiveLimit("d", rule).Params().Limit
}

const pinYAML = `
domain: d
descriptors:
  - key: k
    rate_limit:
      name: database
      unit: second
      requests_per_unit: 2000
      adaptive: {min: 0.2, latency_threshold: 250ms, min_samples: 1}
`

// TestManualScalePinsAdaptive: a manual scale on an adaptive rule holds
// (the controller is paused, an overload does not raise it); removing it
// (factor 1) hands the rule back to the controller at the manual factor,
// and the next steps move in the direction of their signal.
func TestManualScalePinsAdaptive(t *testing.T) {
	r := newAdaptiveRig(t, pinYAML)
	slow, fast := 400*time.Millisecond, 10*time.Millisecond
	r.step("database", slow, 1*time.Second) // 1 -> 0.7
	r.step("database", slow, 2*time.Second) // 0.7 -> 0.49
	if q := r.quota("database"); q != 980 {
		t.Fatalf("quota %d, want 980 (0.49)", q)
	}
	if err := r.e.SetRateScale("d", "database", 0.25, "incident 42"); err != nil {
		t.Fatal(err)
	}
	// Overloaded: the pinned factor stays (an overload never raises it).
	for i := range 3 {
		ch := r.step("database", slow, time.Duration(3+i)*time.Second)
		if ch == nil || ch.Changed() || ch.New != 0.25 || !strings.Contains(ch.Reason, "paused by a manual scale: incident 42") {
			t.Fatalf("pinned overloaded step %d: %+v", i, ch)
		}
		if q := r.quota("database"); q != 500 {
			t.Fatalf("pinned step %d: quota %d, want 500 (0.25)", i, q)
		}
	}
	// Healthy while pinned: still held.
	if ch := r.step("database", fast, 6*time.Second); ch == nil || ch.Changed() || r.quota("database") != 500 {
		t.Fatalf("pinned healthy step: %+v, quota %d", ch, r.quota("database"))
	}
	// Removed: the controller resumes at 0.25; healthy raises it.
	if err := r.e.SetRateScale("d", "database", 1, "back"); err != nil {
		t.Fatal(err)
	}
	if q := r.quota("database"); q != 500 {
		t.Fatalf("after removing the scale: quota %d, want 500 (resumes at 0.25)", q)
	}
	ch := r.step("database", fast, 7*time.Second)
	if ch == nil || ch.Old != 0.25 || ch.New != 0.3 {
		t.Fatalf("healthy step after the scale was removed: %+v, want 0.25 -> 0.3", ch)
	}
	ch = r.step("database", slow, 8*time.Second)
	if ch == nil || ch.Old != 0.3 || ch.New != 0.21 {
		t.Fatalf("overloaded step: %+v, want 0.3 -> 0.21", ch)
	}
	// A factor of 1 on an adaptive rule without a manual scale changes
	// nothing: the controller keeps its factor.
	if err := r.e.SetRateScale("d", "database", 1, "noop"); err != nil {
		t.Fatal(err)
	}
	if q := r.quota("database"); q != 420 {
		t.Fatalf("factor 1 without a manual scale: quota %d, want 420 (0.21 kept)", q)
	}
}

// TestManualScaleBelowMinResumesAtMin: a manual factor below the
// controller's min is allowed (an operator's call); removed, the
// controller resumes at its min and climbs from there when healthy.
func TestManualScaleBelowMinResumesAtMin(t *testing.T) {
	r := newAdaptiveRig(t, pinYAML)
	if err := r.e.SetRateScale("d", "database", 0.05, "drain"); err != nil {
		t.Fatal(err)
	}
	if q := r.quota("database"); q != 100 {
		t.Fatalf("quota %d, want 100", q)
	}
	if err := r.e.SetRateScale("d", "database", 1, ""); err != nil {
		t.Fatal(err)
	}
	if q := r.quota("database"); q != 400 {
		t.Fatalf("after removal: quota %d, want 400 (min 0.2)", q)
	}
	if ch := r.step("database", time.Millisecond, time.Second); ch == nil || ch.Old != 0.2 || ch.New != 0.25 {
		t.Fatalf("healthy step: %+v, want 0.2 -> 0.25", ch)
	}
}

// TestAdaptiveIntervals: each controller steps at its own interval, a
// ticker's jitter skipping none of its steps.
func TestAdaptiveIntervals(t *testing.T) {
	r := newAdaptiveRig(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {name: fast, unit: second, requests_per_unit: 100, adaptive: {error_ratio: 0.1, min_samples: 1}}
  - key: b
    rate_limit: {name: slow, unit: second, requests_per_unit: 100, adaptive: {error_ratio: 0.1, min_samples: 1, interval: 3s}}
`)
	steps := map[string][]string{}
	for _, at := range []time.Duration{1000, 2010, 2990, 4000, 5020, 6000, 7000} {
		for _, ch := range r.e.StepAdaptive(r.start.Add(at * time.Millisecond)) {
			steps[ch.Rule] = append(steps[ch.Rule], (at * time.Millisecond).String())
		}
	}
	if got := strings.Join(steps["fast"], " "); got != "1s 2.01s 2.99s 4s 5.02s 6s 7s" {
		t.Errorf("fast (1s) stepped at %s", got)
	}
	if got := strings.Join(steps["slow"], " "); got != "1s 4s 7s" {
		t.Errorf("slow (3s) stepped at %s", got)
	}
	if p := r.e.AdaptiveTick(); p != time.Second {
		t.Errorf("AdaptiveTick() = %v, want 1s", p)
	}
}

// TestAdaptiveIntervalAfterReload: a controller a reload creates is first
// stepped one interval after the last step, not at the next tick.
func TestAdaptiveIntervalAfterReload(t *testing.T) {
	r := newAdaptiveRig(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {name: fast, unit: second, requests_per_unit: 100, adaptive: {error_ratio: 0.1, min_samples: 1}}
`)
	r.e.StepAdaptive(r.start.Add(time.Second))
	if err := r.e.SetConfig(mustParse(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {name: fast, unit: second, requests_per_unit: 100, adaptive: {error_ratio: 0.1, min_samples: 1}}
  - key: b
    rate_limit: {name: slow, unit: second, requests_per_unit: 100, adaptive: {error_ratio: 0.1, min_samples: 1, interval: 5s}}
`)); err != nil {
		t.Fatal(err)
	}
	var slow []time.Duration
	for s := 2; s <= 11; s++ {
		for _, ch := range r.e.StepAdaptive(r.start.Add(time.Duration(s) * time.Second)) {
			if ch.Rule == "slow" {
				slow = append(slow, time.Duration(s)*time.Second)
			}
		}
	}
	if len(slow) != 2 || slow[0] != 6*time.Second || slow[1] != 11*time.Second {
		t.Errorf("slow stepped at %v, want [6s 11s]", slow)
	}
}

const keepYAML = `
domain: d
descriptors:
  - key: k
    rate_limit:
      name: database
      unit: second
      requests_per_unit: 1000
      adaptive: {latency_threshold: 250ms, min_samples: 1%s}
`

// TestAdaptiveReloadKeepsFactor: writing a default out is no change (the
// factor held at min stays); a real change keeps the factor in force,
// moved into the new bounds, and says so; a manual scale survives both.
func TestAdaptiveReloadKeepsFactor(t *testing.T) {
	r := newAdaptiveRig(t, strings.Replace(keepYAML, "%s", ", min: 0.2", 1))
	for i := range 6 {
		r.step("database", time.Second, time.Duration(i+1)*time.Second)
	}
	if q := r.quota("database"); q != 200 {
		t.Fatalf("quota %d, want 200 (min 0.2)", q)
	}
	reload := func(extra string) {
		t.Helper()
		if err := r.e.SetConfig(mustParse(t, strings.Replace(keepYAML, "%s", extra, 1))); err != nil {
			t.Fatal(err)
		}
	}
	reload(", min: 0.2, decrease: 0.7, interval: 1s, quantile: 0.99")
	if q := r.quota("database"); q != 200 {
		t.Fatalf("after writing the defaults out: quota %d, want 200 kept", q)
	}
	reload(", min: 0.2, decrease: 0.5")
	if q := r.quota("database"); q != 200 {
		t.Fatalf("after changing decrease: quota %d, want 200 kept", q)
	}
	// The new controller moves from the factor kept.
	if ch := r.step("database", time.Millisecond, 10*time.Second); ch == nil || ch.Old != 0.2 || ch.New != 0.25 {
		t.Fatalf("healthy step after the change: %+v, want 0.2 -> 0.25", ch)
	}
	reload(", decrease: 0.5, min: 0.3")
	if q := r.quota("database"); q != 300 {
		t.Fatalf("after raising min: quota %d, want 300 (0.25 moved into [0.3, 1])", q)
	}
	if err := r.e.SetRateScale("d", "database", 0.1, "incident"); err != nil {
		t.Fatal(err)
	}
	reload(", min: 0.3, decrease: 0.6")
	if q := r.quota("database"); q != 100 {
		t.Fatalf("manual scale after a change of settings: quota %d, want 100", q)
	}
}

// TestAdaptiveReloadNotes: RunAdaptive reports a factor a change of
// settings kept or moved, with the reason.
func TestAdaptiveReloadNotes(t *testing.T) {
	r := newAdaptiveRig(t, strings.Replace(keepYAML, "%s", "", 1))
	r.step("database", time.Second, time.Second) // 0.7
	if err := r.e.SetConfig(mustParse(t, strings.Replace(keepYAML, "%s", ", increase: 0.1", 1))); err != nil {
		t.Fatal(err)
	}
	tick := make(chan time.Time)
	got := make(chan ScaleChange, 4)
	done := make(chan error, 1)
	go func() { done <- r.e.RunAdaptive(context.Background(), tick, func(c ScaleChange) { got <- c }) }()
	tick <- r.start.Add(2 * time.Second)
	close(tick)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(got)
	var reasons []string
	for c := range got {
		reasons = append(reasons, c.String())
	}
	if len(reasons) == 0 || !strings.Contains(reasons[0], "d/database: factor 0.7 -> 0.7: adaptive settings changed: factor kept at 0.7") {
		t.Errorf("reports %q, want the reload's note first", reasons)
	}
	st := r.e.AdaptiveStates()
	if len(st) != 1 || st[0].Settings.Increase != 0.1 || st[0].Settings.Decrease != 0.7 || st[0].Status != "active" {
		t.Errorf("AdaptiveStates() = %+v", st)
	}
}

// TestAdaptiveStatesPaused: the state says a manual scale pauses the
// controller, and keeps the last step's reason when it moved nothing.
func TestAdaptiveStatesPaused(t *testing.T) {
	r := newAdaptiveRig(t, strings.Replace(keepYAML, "min_samples: 1%s", "min_samples: 30", 1))
	r.step("database", time.Millisecond, time.Second)
	st := r.e.AdaptiveStates()
	if len(st) != 1 || st[0].Last.Reason != "too few samples: 20 < 30" || st[0].Last.At != r.start.Add(time.Second) || st[0].Settings.MinSamples != 30 {
		t.Fatalf("AdaptiveStates() = %+v", st)
	}
	r.e.Observe("d", "database", time.Millisecond, false)
	if err := r.e.SetRateScale("d", "database", 0.5, "incident 42"); err != nil {
		t.Fatal(err)
	}
	st = r.e.AdaptiveStates()
	if st[0].Status != "paused by a manual scale: incident 42" || st[0].Factor != 0.5 || !st[0].Manual || st[0].Pending != 1 {
		t.Fatalf("AdaptiveStates() = %+v", st)
	}
	if ok, err := r.e.RemoveRateScale("d", "database"); !ok || err != nil {
		t.Fatalf("RemoveRateScale = %v, %v", ok, err)
	}
	if ok, err := r.e.RemoveRateScale("d", "database"); ok || err != nil {
		t.Fatalf("RemoveRateScale again = %v, %v", ok, err)
	}
	st = r.e.AdaptiveStates()
	if st[0].Status != "active" || st[0].Factor != 0.5 || st[0].Manual || !strings.Contains(st[0].Reason, "resumes at 0.5") {
		t.Fatalf("after removal: %+v", st)
	}
}

// TestAdaptiveSharedName: rules of one domain sharing a name are refused
// when any of them has an adaptive block, at its line; without one they
// load (an override applies to every rule of the name).
func TestAdaptiveSharedName(t *testing.T) {
	const yaml = `domain: d
descriptors:
  - key: a
    rate_limit:
      name: shared
      unit: second
      requests_per_unit: 10
      adaptive: {error_ratio: 0.1}
  - key: b
    rate_limit:
      name: shared
      unit: second
      requests_per_unit: 10
      adaptive: {latency_threshold: 100ms}
  - key: c
    rate_limit: {name: shared, unit: second, requests_per_unit: 10}
`
	_, err := Parse("shared.yaml", []byte(yaml))
	for _, want := range []string{
		`shared.yaml:8: adaptive: the rule name "shared" is shared with the rate_limit at line 10, 16 of domain "d"`,
		`shared.yaml:14: adaptive: the rule name "shared" is shared with the rate_limit at line 4, 16 of domain "d"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse = %v, want %q", err, want)
		}
	}
	plain := strings.NewReplacer("      adaptive: {error_ratio: 0.1}\n", "", "      adaptive: {latency_threshold: 100ms}\n", "").Replace(yaml)
	if _, err := Parse("shared.yaml", []byte(plain)); err != nil {
		t.Errorf("shared names without adaptive blocks: %v", err)
	}
}

// TestAdaptiveWrittenZeros: a 0 written for a field whose zero means its
// default in the Go API is an error at its line; validate's dump shows
// the effective settings.
func TestAdaptiveWrittenZeros(t *testing.T) {
	for field, want := range map[string]string{
		"min":         "z.yaml:7: adaptive: min 0: must be at least 0.000001",
		"max":         "z.yaml:7: adaptive: max 0: must be at least min",
		"initial":     "z.yaml:7: adaptive: initial 0: must be in [min, max]",
		"quantile":    "z.yaml:7: adaptive: quantile 0: must be in (0, 1]",
		"decrease":    "z.yaml:7: adaptive: decrease 0: must be in (0, 1)",
		"increase":    "z.yaml:7: adaptive: increase 0: must be positive",
		"min_samples": "z.yaml:7: adaptive: min_samples 0: must be at least 1",
		"interval":    "z.yaml:7: adaptive: interval must be positive, got 0s",
	} {
		zero := "0"
		if field == "interval" {
			zero = "0s"
		}
		yaml := "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n      adaptive: {error_ratio: 0.1, " + field + ": " + zero + "}\n"
		_, err := Parse("z.yaml", []byte(yaml))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: 0: Parse = %v, want %q", field, err, want)
		}
	}
	cfg := mustParse(t, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 10, adaptive: {error_ratio: 0.1, interval: 5s}}\n")
	if d := cfg.Dump(); !strings.Contains(d, "adaptive={min:0.1 max:1 initial:1 latency_threshold:0s quantile:0.99 error_ratio:0.1 decrease:0.7 increase:0.05 interval:5s min_samples:10}") {
		t.Errorf("Dump() = %s", d)
	}
}
