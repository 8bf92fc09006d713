package policy

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"time"

	"github.com/floodgate/floodgate/algo"
)

// Override replaces a rule's limit at run time: the admin API's runtime
// overrides. A zero Period keeps the configured period; a zero Burst
// scales the configured one with the quota (see Burst).
type Override struct {
	// RequestsPerUnit is the new quota per period. Required, > 0.
	RequestsPerUnit int64
	// Period, when > 0, replaces the rule's unit or period (a calendar
	// unit becomes this fixed period).
	Period time.Duration
	// Burst, when > 0, replaces the rule's burst (bucket capacity, or the
	// shaper's queue). When 0, a token bucket's or GCRA's configured burst
	// (and initial_tokens) scales with the quota, keeping the configured
	// burst-to-quota ratio: 20 per second with burst 40 overridden to 5 per
	// minute has burst 10, not 40.
	Burst int64
}

// RuleOverride is one override as Overrides lists it.
type RuleOverride struct {
	Domain, Rule string
	Override
	// Active reports that the configuration in force has the rule; an
	// override outlives a reload that removes its rule, and applies again
	// if the rule comes back.
	Active bool
}

// RateScale is a factor applied to a rule's rate, by an adaptive
// controller or by hand, with the reason for the last change.
type RateScale struct {
	Domain, Rule string
	// Factor multiplies the rule's requests_per_unit (and an explicit
	// burst), rounded down, never below 1.
	Factor float64
	// Reason says why the factor was set, e.g. "p99 latency 180ms > 100ms".
	Reason string
	// At is when it was set (the Engine's clock).
	At time.Time
}

type ruleRef struct{ domain, rule string }

// findRules returns the limited rules of the config in force named rule in
// domain (several rules may share a name).
func (e *Engine) findRulesLocked(domain, rule string) ([]*Rule, error) {
	d := e.cfg.Domain(domain)
	if d == nil {
		return nil, fmt.Errorf("%w: no domain %q", ErrUnknownRule, domain)
	}
	var out []*Rule
	for _, r := range d.rules {
		if r.Name == rule {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no rule %q in domain %q", ErrUnknownRule, rule, domain)
	}
	for _, r := range out {
		if r.limit == nil {
			return nil, fmt.Errorf("%w: rule %q in domain %q is unlimited or blocks everything; it has no limit to change", ErrBadRequest, rule, domain)
		}
	}
	return out, nil
}

// effectiveLocked returns r's parameters with its override and scale
// applied.
func (e *Engine) effectiveLocked(r *Rule) algo.Params {
	p := r.Params
	ref := ruleRef{r.Domain, r.Name}
	if o, ok := e.overrides[ref]; ok {
		if o.Burst > 0 {
			p.Burst = o.Burst
		} else if o.RequestsPerUnit != p.Limit {
			// An explicit burst is a multiple of the quota; keep the
			// multiple, or a smaller quota would still admit the whole
			// configured burst at once.
			if p.Burst > 0 && (p.Algorithm == algo.TokenBucket || p.Algorithm == algo.GCRA) {
				p.Burst = mulDiv(p.Burst, o.RequestsPerUnit, p.Limit)
			}
			if p.InitialTokens != nil {
				v := mulDiv(*p.InitialTokens, o.RequestsPerUnit, p.Limit)
				if *p.InitialTokens == 0 {
					v = 0
				}
				p.InitialTokens = &v
			}
		}
		p.Limit = o.RequestsPerUnit
		if o.Period > 0 {
			p.Period, p.Calendar = o.Period, algo.CalendarNone
		}
	}
	if s, ok := e.scales[ref]; ok && s.Factor != 1 {
		p = scaled(p, s.Factor)
	}
	return p
}

// mulDiv returns v × num ÷ den for positive num and den, rounded down,
// exactly (no float rounding), at least 1 and at most 2^53 (Compile
// reports a value that large).
func mulDiv(v, num, den int64) int64 {
	hi, lo := bits.Mul64(uint64(v), uint64(num))
	if hi >= uint64(den) {
		return 1 << 53
	}
	q, _ := bits.Div64(hi, lo, uint64(den))
	return int64(min(max(q, 1), 1<<53))
}

// SetOverride makes rule (a rule's name) of domain use o instead of its
// configured limit, from the next decision on, until RemoveOverride. An
// adaptive scale still applies on top. It fails with ErrUnknownRule when
// the rule does not exist, and with ErrBadRequest when the resulting limit
// is invalid (the error says why).
func (e *Engine) SetOverride(domain, rule string, o Override) error {
	if o.RequestsPerUnit <= 0 {
		return fmt.Errorf("%w: override requests_per_unit must be > 0, got %d", ErrBadRequest, o.RequestsPerUnit)
	}
	if o.Period < 0 || o.Burst < 0 {
		return fmt.Errorf("%w: override period and burst must not be negative", ErrBadRequest)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	rules, err := e.findRulesLocked(domain, rule)
	if err != nil {
		return err
	}
	ref := ruleRef{domain, rule}
	old, had := e.overrides[ref]
	e.overrides[ref] = o
	for _, r := range rules {
		if _, err := deriveLimits(e.cfg.Domain(domain), r, e.effectiveLocked(r)); err != nil {
			if had {
				e.overrides[ref] = old
			} else {
				delete(e.overrides, ref)
			}
			return fmt.Errorf("%w: override of %s/%s: %v", ErrBadRequest, domain, rule, err)
		}
	}
	return e.swapLocked(e.cfg)
}

// RemoveOverride restores the configured limit of rule in domain and
// reports whether there was an override.
func (e *Engine) RemoveOverride(domain, rule string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	ref := ruleRef{domain, rule}
	if _, ok := e.overrides[ref]; !ok {
		return false
	}
	delete(e.overrides, ref)
	_ = e.swapLocked(e.cfg) // the configured limits compiled before
	return true
}

// Overrides lists the runtime overrides, sorted by domain and rule.
func (e *Engine) Overrides() []RuleOverride {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]RuleOverride, 0, len(e.overrides))
	for ref, o := range e.overrides {
		_, err := e.findRulesLocked(ref.domain, ref.rule)
		out = append(out, RuleOverride{Domain: ref.domain, Rule: ref.rule, Override: o, Active: err == nil})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Domain != out[j].Domain {
			return out[i].Domain < out[j].Domain
		}
		return out[i].Rule < out[j].Rule
	})
	return out
}

// SetRateScale multiplies the rate of rule in domain by factor (0 < factor
// <= 1000; 1 removes the scale) and records reason. It is the hook adaptive
// controllers drive; a person may call it too. The scale applies on top of
// an override.
func (e *Engine) SetRateScale(domain, rule string, factor float64, reason string) error {
	if !(factor > 0 && factor <= 1000) || math.IsNaN(factor) {
		return fmt.Errorf("%w: rate scale must be in (0, 1000], got %v", ErrBadRequest, factor)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.findRulesLocked(domain, rule); err != nil {
		return err
	}
	ref := ruleRef{domain, rule}
	if factor == 1 {
		delete(e.scales, ref)
	} else {
		e.scales[ref] = RateScale{Domain: domain, Rule: rule, Factor: factor, Reason: reason, At: e.o.clock()}
	}
	return e.swapLocked(e.cfg)
}

// RateScales lists the scales in force, sorted by domain and rule.
func (e *Engine) RateScales() []RateScale {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]RateScale, 0, len(e.scales))
	for _, s := range e.scales {
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

// EffectiveLimit returns the limit rule of domain is decided with now: the
// configured one with its override and scale applied; nil when the rule
// does not exist or has no limit.
func (e *Engine) EffectiveLimit(domain, rule string) *algo.Limit {
	s := e.snap.Load()
	d := s.cfg.Domain(domain)
	if d == nil {
		return nil
	}
	for _, r := range d.rules {
		if r.Name == rule && r.limit != nil {
			return s.limits[r.index].rate
		}
	}
	return nil
}
