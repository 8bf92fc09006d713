package policy

import (
	"context"
	"fmt"
	"sort"
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
type adaptiveRule struct {
	ref ruleRef
	cfg adaptive.Config
	ctl *adaptive.Controller
	// clamped: the last factor applied was not the controller's. Guarded
	// by Engine.mu.
	clamped bool
}

// adaptiveSet is what Observe reads without a lock.
type adaptiveSet map[ruleRef]*adaptive.Controller

// syncAdaptiveLocked keeps one controller per adaptive rule of the config in
// force: an unchanged block keeps its controller (and its factor) across
// reloads, a new one starts at its initial factor, and a rule that lost its
// block loses its scale. It runs before a snapshot is built.
func (e *Engine) syncAdaptiveLocked(cfg *Config) {
	old := map[ruleRef]*adaptiveRule{}
	for _, a := range e.adaptive {
		old[a.ref] = a
	}
	var next []*adaptiveRule
	set := adaptiveSet{}
	for _, r := range cfg.rules {
		if r.Adaptive == nil || r.limit == nil {
			continue
		}
		ref := ruleRef{r.Domain, r.Name}
		if _, dup := set[ref]; dup {
			continue
		}
		a := old[ref]
		if a == nil || a.cfg != *r.Adaptive {
			ctl, err := adaptive.New(*r.Adaptive)
			if err != nil {
				continue // validated at load; cannot happen
			}
			a = &adaptiveRule{ref: ref, cfg: *r.Adaptive, ctl: ctl}
			delete(e.scales, ref)
			want := ctl.Factor()
			f, err := e.fitScaleLocked(cfg, ref, 1, want)
			reason := "adaptive: initial factor"
			if err != nil {
				a.clamped = true
				reason = clampReason(reason, want, f, err)
			}
			if f != 1 {
				e.scales[ref] = RateScale{Domain: ref.domain, Rule: ref.rule, Factor: f, Reason: reason, At: e.o.clock()}
			}
		}
		delete(old, ref)
		next = append(next, a)
		set[ref] = a.ctl
	}
	for ref := range old {
		delete(e.scales, ref)
	}
	e.adaptive = next
	e.adaptiveSet.Store(&set)
}

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
	out := make([]RateScale, 0, len(e.adaptive))
	for _, a := range e.adaptive {
		s, ok := e.scales[a.ref]
		if !ok {
			s = RateScale{Domain: a.ref.domain, Rule: a.ref.rule, Factor: 1}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Domain != out[j].Domain {
			return out[i].Domain < out[j].Domain
		}
		return out[i].Rule < out[j].Rule
	})
	return out
}

// StepAdaptive ends every adaptive controller's interval at now, applies
// the factors that moved (as SetRateScale would, with the controller's
// reason; a factor whose limit does not compile is clamped, see
// ScaleChange) and returns every step's outcome, moved or not.
func (e *Engine) StepAdaptive(now time.Time) []ScaleChange {
	e.mu.Lock()
	rules := append([]*adaptiveRule(nil), e.adaptive...)
	e.mu.Unlock()
	out := make([]ScaleChange, 0, len(rules))
	for _, a := range rules {
		ch := ScaleChange{Domain: a.ref.domain, Rule: a.ref.rule, Change: a.ctl.Step(now)}
		if ch.Changed() {
			ch = e.applyScale(a, ch)
		}
		out = append(out, ch)
	}
	return out
}

// applyScale installs a controller's new factor, or the nearest one whose
// limit compiles, unless a reload replaced the controller meanwhile, and
// returns the change as applied.
func (e *Engine) applyScale(a *adaptiveRule, ch ScaleChange) ScaleChange {
	e.mu.Lock()
	defer e.mu.Unlock()
	current := false
	for _, b := range e.adaptive {
		current = current || b == a
	}
	if !current {
		return ch
	}
	ch.Old = 1
	if s, ok := e.scales[a.ref]; ok {
		ch.Old = s.Factor
	}
	want := ch.New
	f, err := e.fitScaleLocked(e.cfg, a.ref, ch.Old, want)
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
	if f == 1 {
		delete(e.scales, a.ref)
	} else {
		e.scales[a.ref] = RateScale{Domain: a.ref.domain, Rule: a.ref.rule, Factor: f, Reason: ch.Reason, At: ch.At}
	}
	_ = e.swapLocked(e.cfg)
	return ch
}

// clampReason says why factor want gave way to got.
func clampReason(reason string, want, got float64, err error) string {
	return fmt.Sprintf("%s; factor %v refused, %v applied: %v", reason, want, got, err)
}

// RunAdaptive calls StepAdaptive on every tick until ctx is done (it
// returns ctx.Err()) or tick is closed (nil), and passes report each change
// that moved a factor or began a clamp (see ScaleChange.Clamped). Give it a
// time.Ticker's channel in a server (one second is the controllers' default
// interval), a hand-fed one in tests.
func (e *Engine) RunAdaptive(ctx context.Context, tick <-chan time.Time, report func(ScaleChange)) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now, ok := <-tick:
			if !ok {
				return nil
			}
			for _, ch := range e.StepAdaptive(now) {
				if ch.report && report != nil {
					report(ch)
				}
			}
		}
	}
}
