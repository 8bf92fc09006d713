package policy

import (
	"testing"
	"time"
)

// A step runs its controller outside the Engine's lock. When a manual scale
// is removed while it runs (the controller resumed at the manual factor),
// the step computed from the factor before: its result is dropped, and the
// rule stays at the factor it resumed at, instead of jumping to the stale
// step's result (here 0.49 → 0.54 applied over a resume at 0.25).
func TestStepDroppedWhenScaleRemovedMeanwhile(t *testing.T) {
	r := newAdaptiveRig(t, pinYAML)
	slow, fast := 400*time.Millisecond, 10*time.Millisecond
	r.step("database", slow, 1*time.Second) // 1 -> 0.7
	r.step("database", slow, 2*time.Second) // 0.7 -> 0.49
	if err := r.e.SetRateScale("d", "database", 0.25, "incident"); err != nil {
		t.Fatal(err)
	}
	// The step of StepAdaptive, cut at its unlocked middle: the controller
	// (still at 0.49) steps on healthy samples...
	for range 20 {
		if err := r.e.Observe("d", "database", fast, false); err != nil {
			t.Fatal(err)
		}
	}
	r.e.mu.Lock()
	a := r.e.adaptive.list[0]
	gen := a.gen
	r.e.mu.Unlock()
	ch := ScaleChange{Domain: "d", Rule: "database", Change: a.ctl.Step(r.start.Add(3 * time.Second))}
	// ...while an operator removes the manual scale: the rule resumes at 0.25.
	if err := r.e.SetRateScale("d", "database", 1, "all clear"); err != nil {
		t.Fatal(err)
	}
	got := r.e.applyScale(a, gen, ch)
	if got.Changed() || got.New != 0.25 {
		t.Errorf("stale step applied: %+v, want it dropped at 0.25", got)
	}
	if q := r.quota("database"); q != 500 {
		t.Fatalf("quota %d after the stale step, want 500 (resumed at 0.25)", q)
	}
	// The next step moves from 0.25.
	if ch := r.step("database", fast, 4*time.Second); ch == nil || ch.Old != 0.25 || ch.New != 0.3 {
		t.Fatalf("next healthy step: %+v, want 0.25 -> 0.3", ch)
	}
}
