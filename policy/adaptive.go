package policy

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/adaptive"
)

// ScaleChange is one move of an adaptive rule's rate factor. When the
// controller moved, Old and New are the factors in force before and after
// the step; they differ from the controller's when its factor was clamped.
type ScaleChange struct {
	Domain, Rule string
	adaptive.Change
	// Clamped reports that the controller's factor (Wanted) would give a
	// limit that does not compile (say, a daily token bucket whose
	// capacity × period passes 2^53 µs): New is the factor nearest it
	// that does, or Old, and Reason says why.
	Clamped bool
	// Wanted is the controller's factor when Clamped, else 0.
	Wanted float64
	// report: the change moved the factor, or a clamp began.
	report bool
}

// String formats the change for logs, e.g.
// "api/per-user: factor 1 -> 0.7: p99 latency 180ms > 100ms threshold".
func (c ScaleChange) String() string {
	return c.Domain + "/" + c.Rule + ": " + c.Change.String()
}

// adaptiveRule is the controller of one rule with an adaptive block.
// Its fields other than ref, cfg and ctl are guarded by Engine.mu.
type adaptiveRule struct {
	ref ruleRef
	cfg adaptive.Config // normalised: defaults filled in
	ctl *adaptive.Controller
	// clamped: the last factor applied was not the controller's.
	clamped bool
	// due is when the next step is due; zero: at the next StepAdaptive.
	due time.Time
	// last is the last step's outcome (or the last reload's note), moved
	// or not; zero before the first.
	last ScaleChange
	// gen counts the factors set on the controller from outside a step
	// (a manual scale removed): a step that ran meanwhile, outside the
	// lock, computed from the factor before and is dropped.
	gen uint64
}

// adaptiveRules is the Engine's adaptive state, guarded by Engine.mu.
type adaptiveRules struct {
	list []*adaptiveRule
	// stepAt is the time of the last StepAdaptive: a controller a reload
	// creates is first due one interval after it.
	stepAt time.Time
	// notes are changes a reload made to factors (settings changed),
	// reported by the next RunAdaptive tick.
	notes []ScaleChange
}

// adaptiveSet is what Observe reads without a lock.
type adaptiveSet map[ruleRef]*adaptive.Controller

// pinned reports whether a manual scale (SetRateScale) holds a's rule:
// its controller is paused until the scale is removed.
func (e *Engine) pinnedLocked(ref ruleRef) (RateScale, bool) {
	s, ok := e.scales[ref]
	return s, ok && s.Manual
}

// inForceLocked returns the factor in force for ref (1 without a scale).
func (e *Engine) inForceLocked(ref ruleRef) float64 {
	if s, ok := e.scales[ref]; ok {
		return s.Factor
	}
	return 1
}

// installLocked makes f, with reason, the controller's factor in force for
// a (unless a manual scale pins the rule), trying the limits it gives: a
// factor whose limits do not compile gives way to the nearest that does,
// between the factor in force and f. The controller is set to the factor
// installed, so that its next step moves from there. It returns the factor
// in force after, and the clamp's error. It does not swap the snapshot.
func (e *Engine) installLocked(cfg *Config, a *adaptiveRule, f float64, reason string, at time.Time) (float64, error) {
	if s, ok := e.pinnedLocked(a.ref); ok {
		return s.Factor, nil
	}
	old := e.inForceLocked(a.ref)
	got, err := e.fitScaleLocked(cfg, a.ref, old, f)
	if err != nil {
		reason = clampReason(reason, f, got, err)
	}
	a.clamped = err != nil
	a.ctl.SetFactor(got)
	e.putScaleLocked(a.ref, got, reason, at)
	return got, err
}

// syncAdaptiveLocked keeps one controller per adaptive rule of the config in
// force. A block whose settings are unchanged (compared with their defaults
// filled in, so that writing a default out is no change) keeps its
// controller, its factor and its samples across reloads. A block whose
// settings changed gets a new controller that keeps the factor in force,
// moved into its new [min, max] (noted for RunAdaptive to report); a new
// block starts at its initial factor. A manual scale (SetRateScale) is kept
// through all of these, and pauses the controller. A rule that lost its
// block loses its controller's scale, not a manual one. It runs before a
// snapshot is built.
func (e *Engine) syncAdaptiveLocked(cfg *Config) {
	old := map[ruleRef]*adaptiveRule{}
	for _, a := range e.adaptive.list {
		old[a.ref] = a
	}
	now := e.o.clock()
	var next []*adaptiveRule
	set := adaptiveSet{}
	for _, r := range cfg.rules {
		if r.Adaptive == nil || r.limit == nil {
			continue
		}
		ref := ruleRef{r.Domain, r.Name}
		if _, dup := set[ref]; dup {
			continue // the loader refuses it
		}
		norm, err := adaptive.Normalize(*r.Adaptive)
		if err != nil {
			continue // validated at load; cannot happen
		}
		prev := old[ref]
		a := prev
		if a == nil || a.cfg != norm {
			ctl, err := adaptive.New(norm)
			if err != nil {
				continue
			}
			a = &adaptiveRule{ref: ref, cfg: norm, ctl: ctl}
			if at := e.adaptive.stepAt; !at.IsZero() {
				a.due = at.Add(norm.Interval)
			}
			if prev == nil {
				f, _ := e.installLocked(cfg, a, ctl.Factor(), "adaptive: initial factor", now)
				a.last = ScaleChange{Domain: ref.domain, Rule: ref.rule, Change: adaptive.Change{At: now, Old: f, New: f, Reason: "adaptive: initial factor"}}
			} else {
				e.keepFactorLocked(cfg, prev, a, now)
			}
		}
		delete(old, ref)
		next = append(next, a)
		set[ref] = a.ctl
	}
	for ref := range old {
		if _, manual := e.pinnedLocked(ref); !manual {
			delete(e.scales, ref)
		}
	}
	e.adaptive.list = next
	e.adaptiveSet.Store(&set)
}

// keepFactorLocked starts a, prev's successor with other settings, at the
// factor in force, moved into a's [min, max], and notes the change.
func (e *Engine) keepFactorLocked(cfg *Config, prev, a *adaptiveRule, now time.Time) {
	was := e.inForceLocked(a.ref)
	ch := ScaleChange{Domain: a.ref.domain, Rule: a.ref.rule, Change: adaptive.Change{At: now, Old: was, New: was}, report: true}
	if s, ok := e.pinnedLocked(a.ref); ok {
		a.ctl.SetFactor(prev.ctl.Factor())
		ch.Reason = "adaptive settings changed: paused by a manual scale: " + s.Reason
	} else {
		want := a.ctl.SetFactor(prev.ctl.Factor())
		reason := "adaptive settings changed: factor kept at " + fmtFactor(want)
		if want != prev.ctl.Factor() {
			reason = "adaptive settings changed: factor " + fmtFactor(prev.ctl.Factor()) + " moved to " + fmtFactor(want) + " within the new [min " + fmtFactor(a.cfg.Min) + ", max " + fmtFactor(a.cfg.Max) + "]"
		}
		f, err := e.installLocked(cfg, a, want, reason, now)
		ch.New = f
		ch.Reason = reason
		if err != nil {
			ch.Clamped, ch.Wanted = true, want
			ch.Reason = clampReason(reason, want, f, err)
		}
	}
	a.last = ch
	a.last.report = false
	e.adaptive.notes = append(e.adaptive.notes, ch)
}

func fmtFactor(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// Observe feeds one request's outcome (its latency, and whether it failed)
// to the adaptive controller of rule in domain. It is lock-free. For a rule
// without an adaptive block it records nothing and returns nil; when the
// configuration in force has no such domain or rule it records nothing and
// returns an error wrapping ErrUnknownRule that names it and the rules
// with an adaptive block. The server calls it for every sample posted to
// /v1/observe.
func (e *Engine) Observe(domain, rule string, latency time.Duration, failed bool) error {
	s := e.adaptiveSet.Load()
	if s != nil {
		if c := (*s)[ruleRef{domain, rule}]; c != nil {
			c.Observe(latency, failed)
			return nil
		}
	}
	d := e.snap.Load().cfg.Domain(domain)
	if d == nil {
		return fmt.Errorf("%w: no domain %q%s", ErrUnknownRule, domain, s.list())
	}
	for _, r := range d.rules {
		if r.Name == rule {
			return nil
		}
	}
	return fmt.Errorf("%w: no rule %q in domain %q%s", ErrUnknownRule, rule, domain, s.list())
}

// list names the adaptive rules for an error message.
func (s *adaptiveSet) list() string {
	if s == nil || len(*s) == 0 {
		return " (no rule has an adaptive block)"
	}
	names := make([]string, 0, len(*s))
	for ref := range *s {
		names = append(names, ref.domain+"/"+ref.rule)
	}
	sort.Strings(names)
	return " (rules with an adaptive block: " + strings.Join(names, ", ") + ")"
}

// AdaptiveRules lists the rules with an adaptive block and their current
// factors, sorted by domain and rule.
func (e *Engine) AdaptiveRules() []RateScale {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]RateScale, 0, len(e.adaptive.list))
	for _, a := range e.adaptive.list {
		out = append(out, e.scaleLocked(a.ref))
	}
	sortScales(out)
	return out
}

// putScaleLocked makes f ref's scale, for reason at at: none at all when f
// is 1. It does not swap the snapshot. e.mu is held.
func (e *Engine) putScaleLocked(ref ruleRef, f float64, reason string, at time.Time) {
	if f == 1 {
		delete(e.scales, ref)
		return
	}
	e.scales[ref] = RateScale{Domain: ref.domain, Rule: ref.rule, Factor: f, Reason: reason, At: at}
}

// scaleLocked is ref's scale in force: factor 1 and no reason without
// one. e.mu is held.
func (e *Engine) scaleLocked(ref ruleRef) RateScale {
	if s, ok := e.scales[ref]; ok {
		return s
	}
	return RateScale{Domain: ref.domain, Rule: ref.rule, Factor: 1}
}

func sortScales(out []RateScale) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Domain != out[j].Domain {
			return out[i].Domain < out[j].Domain
		}
		return out[i].Rule < out[j].Rule
	})
}

// AdaptiveState is an adaptive rule as AdaptiveStates reports it.
type AdaptiveState struct {
	// RateScale is the factor in force and why (Factor 1 and no Reason
	// without a scale); Manual when a manual scale pauses the controller.
	RateScale
	// Settings are the adaptive block's, with the defaults filled in.
	Settings adaptive.Config
	// Status says what the controller does: "active", or "paused by a
	// manual scale: <reason>".
	Status string
	// Controller is the controller's own factor (the one it resumes
	// from is the manual scale's, see SetRateScale).
	Controller float64
	// Last is the last step, moved or not (or the last reload's change of
	// settings); its At is zero before the first.
	Last adaptive.Change
	// Pending counts the samples of the interval in progress.
	Pending int64
	// Next is when the next step is due; zero: at the next tick.
	Next time.Time
}

// AdaptiveStates lists the adaptive rules with their settings, factor in
// force, last step and the samples so far of the current interval, sorted
// by domain and rule. It costs one pass over the adaptive rules.
func (e *Engine) AdaptiveStates() []AdaptiveState {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]AdaptiveState, 0, len(e.adaptive.list))
	for _, a := range e.adaptive.list {
		s := e.scaleLocked(a.ref)
		st := AdaptiveState{RateScale: s, Settings: a.cfg, Status: "active", Controller: a.ctl.Factor(),
			Last: a.last.Change, Pending: a.ctl.Pending(), Next: a.due}
		if s.Manual {
			st.Status = "paused by a manual scale: " + s.Reason
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Domain != out[j].Domain {
			return out[i].Domain < out[j].Domain
		}
		return out[i].Rule < out[j].Rule
	})
	return out
}

// AdaptiveTick returns the period a stepping loop should tick at: the
// shortest interval of the adaptive rules in force, one second when there
// are none.
func (e *Engine) AdaptiveTick() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := time.Duration(0)
	for _, a := range e.adaptive.list {
		if p == 0 || a.cfg.Interval < p {
			p = a.cfg.Interval
		}
	}
	if p == 0 {
		p = time.Second
	}
	return p
}

// stepSlack is how early a step is still due: a ticker's jitter.
const stepSlack = 100 * time.Millisecond

// StepAdaptive steps the adaptive controllers that are due at now, each at
// its own interval: a controller is stepped at the first call (the first
// call after it was created by a reload: one interval after the call
// before), then once its interval has passed since its last due time (up
// to 100ms or a quarter interval early is due, so that a ticker's jitter
// skips no step;
// a call late by more than an interval steps once and starts the schedule
// again from now). It applies the factors that moved (with the
// controller's reason; a factor whose limit does not compile is clamped,
// see ScaleChange) and returns every step's outcome, moved or not. A rule
// that a manual scale pins is stepped too (its samples are dropped), and
// its outcome says it is paused.
func (e *Engine) StepAdaptive(now time.Time) []ScaleChange {
	e.mu.Lock()
	e.adaptive.stepAt = now
	var rules []*adaptiveRule
	var gens []uint64
	for _, a := range e.adaptive.list {
		iv := a.cfg.Interval
		if !a.due.IsZero() && now.Before(a.due.Add(-min(iv/4, stepSlack))) {
			continue
		}
		if a.due.IsZero() || now.Sub(a.due) >= iv {
			a.due = now.Add(iv)
		} else {
			a.due = a.due.Add(iv)
		}
		rules = append(rules, a)
		gens = append(gens, a.gen)
	}
	e.mu.Unlock()
	out := make([]ScaleChange, 0, len(rules))
	for i, a := range rules {
		ch := ScaleChange{Domain: a.ref.domain, Rule: a.ref.rule, Change: a.ctl.Step(now)}
		out = append(out, e.applyScale(a, gens[i], ch))
	}
	return out
}

// applyScale installs a controller's new factor, or the nearest one whose
// limit compiles, unless a reload replaced the controller meanwhile or a
// manual scale pins the rule, and returns the change as applied. Old is
// the factor in force; New never moves against the step's signal (down
// when healthy, up when overloaded). gen is a.gen when the step began: a
// factor set from outside since (a manual scale removed, resuming the
// controller there) makes the step's result stale, and it is dropped.
func (e *Engine) applyScale(a *adaptiveRule, gen uint64, ch ScaleChange) ScaleChange {
	e.mu.Lock()
	defer e.mu.Unlock()
	current := false
	for _, b := range e.adaptive.list {
		current = current || b == a
	}
	if !current {
		return ch
	}
	if a.gen != gen {
		ch.Old = e.inForceLocked(a.ref)
		ch.New = ch.Old
		ch.Reason = "step dropped: the factor was set by hand while it ran"
		ch.report = false
		return ch
	}
	defer func() { a.last = ch; a.last.report = false }()
	ch.Old = e.inForceLocked(a.ref)
	if s, ok := e.pinnedLocked(a.ref); ok {
		ch.New = ch.Old
		ch.Reason = "paused by a manual scale: " + s.Reason
		return ch
	}
	want := ch.New
	if (ch.Overloaded && want > ch.Old) || (!ch.Overloaded && want < ch.Old) {
		want = ch.Old // cannot happen: the controller moves from the factor in force
	}
	f, err := e.fitScaleLocked(e.cfg, a.ref, ch.Old, want)
	a.ctl.SetFactor(f)
	ch.New = f
	ch.report = ch.Changed()
	if err != nil {
		ch.Clamped, ch.Wanted = true, want
		ch.Reason = clampReason(ch.Reason, want, f, err)
		ch.report = ch.report || !a.clamped
	}
	a.clamped = err != nil
	if f == ch.Old {
		return ch
	}
	e.putScaleLocked(a.ref, f, ch.Reason, ch.At)
	_ = e.swapLocked(e.cfg)
	return ch
}

// clampReason says why factor want gave way to got.
func clampReason(reason string, want, got float64, err error) string {
	return fmt.Sprintf("%s; factor %v refused, %v applied: %v", reason, want, got, err)
}

// setScaleLocked is SetRateScale's work once the rule is found, e.mu held.
// On a rule with an adaptive block a scale other than 1 pins the rule:
// the controller is paused (its steps drop their samples and move
// nothing) until the scale is removed. Removing it (factor 1, or
// RemoveRateScale) hands the rule back to the controller at the manual
// factor moved into the controller's [min, max], so the limit does not jump
// and the next step moves from there. On a rule without a manual scale,
// factor 1 changes nothing and the controller keeps its factor. It
// reports whether a manual scale was removed.
func (e *Engine) setScaleLocked(ref ruleRef, factor float64, reason string) (removed bool, err error) {
	var a *adaptiveRule
	for _, b := range e.adaptive.list {
		if b.ref == ref {
			a = b
		}
	}
	now := e.o.clock()
	pin, pinned := e.pinnedLocked(ref)
	if factor == 1 && a != nil {
		if !pinned {
			return false, nil
		}
		a.gen++
		want := a.ctl.SetFactor(pin.Factor)
		why := "manual scale removed (" + pin.Reason + "): the controller resumes at " + fmtFactor(want)
		// The manual factor compiles: the nearest to want that does is
		// between the two.
		f, err := e.fitScaleLocked(e.cfg, ref, pin.Factor, want)
		if err != nil {
			why = clampReason(why, want, f, err)
		}
		a.clamped = err != nil
		a.ctl.SetFactor(f)
		e.putScaleLocked(ref, f, why, now)
		a.last = ScaleChange{Domain: ref.domain, Rule: ref.rule, Change: adaptive.Change{At: now, Old: pin.Factor, New: f, Reason: why}}
		return true, e.swapLocked(e.cfg)
	}
	_, had := e.scales[ref]
	scale := RateScale{Domain: ref.domain, Rule: ref.rule, Factor: factor, Reason: reason, At: now, Manual: true}
	restore := swapEntry(e.scales, ref, scale, factor != 1) // 1 removes the scale
	if err := e.checkRefLocked(e.cfg, ref); err != nil {
		restore()
		return false, fmt.Errorf("%w: rate scale %v refused: %w", ErrBadRequest, factor, err)
	}
	if a != nil {
		a.last = ScaleChange{Domain: ref.domain, Rule: ref.rule, Change: adaptive.Change{At: now, Old: e.inForceLocked(ref), New: factor, Reason: "paused by a manual scale: " + reason}}
	}
	return had && factor == 1, e.swapLocked(e.cfg)
}

// RemoveRateScale removes the manual scale of rule in domain (as
// SetRateScale with factor 1) and reports whether there was one; on an
// adaptive rule the controller resumes (see SetRateScale).
func (e *Engine) RemoveRateScale(domain, rule string) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.findRulesLocked(domain, rule); err != nil {
		return false, err
	}
	return e.setScaleLocked(ruleRef{domain, rule}, 1, "")
}

// RunAdaptive calls StepAdaptive on every tick until ctx is done (it
// returns ctx.Err()) or tick is closed (nil), and passes report each change
// that moved a factor or began a clamp (see ScaleChange.Clamped), and each
// factor a reload moved or kept under new adaptive settings. Give it a
// time.Ticker's channel in a server ticking at AdaptiveTick (each
// controller is stepped at its own interval, see StepAdaptive), a
// hand-fed one in tests.
func (e *Engine) RunAdaptive(ctx context.Context, tick <-chan time.Time, report func(ScaleChange)) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now, ok := <-tick:
			if !ok {
				return nil
			}
			e.mu.Lock()
			notes := e.adaptive.notes
			e.adaptive.notes = nil
			e.mu.Unlock()
			if report != nil {
				for _, ch := range notes {
					report(ch)
				}
			}
			for _, ch := range e.StepAdaptive(now) {
				if ch.report && report != nil {
					report(ch)
				}
			}
		}
	}
}
