package policy

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"
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
	// Manual reports a scale set by SetRateScale rather than by an
	// adaptive controller; on an adaptive rule it pauses the controller.
	Manual bool
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
// exactly (no float rounding), at least 1 and at most 2^53, a value
// checkExact refuses.
func mulDiv(v, num, den int64) int64 {
	hi, lo := bits.Mul64(uint64(v), uint64(num))
	if hi >= uint64(den) {
		return maxExact
	}
	q, _ := bits.Div64(hi, lo, uint64(den))
	return int64(min(max(q, 1), maxExact))
}

// maxExact is the algorithms' bound: a quota, a burst or initial tokens
// must stay below 2^53 for Go and Lua to compute the same.
const maxExact = 1 << 53

// checkExact refuses parameters at the bound. mulDiv and scaled stop at
// 2^53, and algo.Compile refuses a limit that large but takes a burst of
// 2^53 at a 1µs period, so the check is made here.
func checkExact(p algo.Params) error {
	switch {
	case p.Limit >= maxExact:
		return fmt.Errorf("requests_per_unit reaches 2^53; it must stay below")
	case p.Burst >= maxExact:
		return fmt.Errorf("burst reaches 2^53 (a configured burst scales with the quota; give the override a burst); it must stay below")
	case p.InitialTokens != nil && *p.InitialTokens >= maxExact:
		return fmt.Errorf("initial_tokens reach 2^53; they must stay below")
	}
	return nil
}

// describe names a limit's quota for an error message, e.g.
// "105000 per 24h0m0s" or "20 per 1s, burst 40".
func describe(p algo.Params) string {
	per := p.Period.String()
	if p.Calendar != algo.CalendarNone {
		per = p.Calendar.String()
	}
	s := quantity(p.Limit) + " per " + per
	if p.Burst > 0 {
		s += ", burst " + quantity(p.Burst)
	}
	return s
}

// quantity formats v, which mulDiv and scaled cap at 2^53, so that the
// cap does not read as an exact result.
func quantity(v int64) string {
	if v >= maxExact {
		return "2^53 or more"
	}
	return strconv.FormatInt(v, 10)
}

// compileLocked compiles r (a rule of cfg) with the override and scale in
// force; the error names the rule and the limit that does not compile.
func (e *Engine) compileLocked(cfg *Config, r *Rule) (ruleLimits, error) {
	p := e.effectiveLocked(r)
	var rl ruleLimits
	err := checkExact(p)
	if err == nil {
		rl, err = deriveLimits(cfg.Domain(r.Domain), r, p)
	}
	if err != nil {
		return rl, fmt.Errorf("%s/%s: limit %s does not compile: %w", r.Domain, r.Name, describe(p), err)
	}
	return rl, nil
}

// checkRefLocked compiles every limited rule of cfg that ref names with
// the overrides and scales in force, and returns the first error.
func (e *Engine) checkRefLocked(cfg *Config, ref ruleRef) error {
	d := cfg.Domain(ref.domain)
	if d == nil {
		return nil
	}
	for _, r := range d.rules {
		if r.Name != ref.rule || r.limit == nil {
			continue
		}
		if _, err := e.compileLocked(cfg, r); err != nil {
			return err
		}
	}
	return nil
}

// swapEntry sets m[k] to v, or deletes it when !set, and returns a
// function that puts back the entry m had before: the override and scale
// setters try a change, check the limits it gives and undo it if they do
// not compile.
func swapEntry[K comparable, V any](m map[K]V, k K, v V, set bool) (restore func()) {
	old, had := m[k]
	if set {
		m[k] = v
	} else {
		delete(m, k)
	}
	return func() {
		if had {
			m[k] = old
		} else {
			delete(m, k)
		}
	}
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
	for _, r := range rules {
		if r.Params.Algorithm == algo.Concurrency && (o.Period > 0 || o.Burst > 0) {
			return fmt.Errorf("%w: rule %q is a concurrency limit: an override sets its slots (requests_per_unit) only, not a period or a burst", ErrBadRequest, rule)
		}
	}
	ref := ruleRef{domain, rule}
	restore := swapEntry(e.overrides, ref, o, true)
	if err := e.checkRefLocked(e.cfg, ref); err != nil {
		restore()
		return fmt.Errorf("%w: override refused: %w", ErrBadRequest, err)
	}
	return e.swapLocked(e.cfg)
}

// RemoveOverride restores the configured limit of rule in domain and
// reports whether there was an override. It fails with ErrBadRequest,
// keeping the override, when the configured limit with the rule's rate
// scale does not compile.
func (e *Engine) RemoveOverride(domain, rule string) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ref := ruleRef{domain, rule}
	if _, ok := e.overrides[ref]; !ok {
		return false, nil
	}
	restore := swapEntry(e.overrides, ref, Override{}, false)
	if err := e.checkRefLocked(e.cfg, ref); err != nil {
		restore()
		return false, fmt.Errorf("%w: removing the override refused: %w", ErrBadRequest, err)
	}
	return true, e.swapLocked(e.cfg)
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
// <= 1000; 1 removes the scale) and records reason: a manual scale. On a
// rule with an adaptive block it pins the factor and pauses the
// controller until the scale is removed, when the controller resumes from
// the manual factor moved into its [min, max] (factor 1 on an adaptive
// rule without a manual scale changes nothing). The scale applies on top of
// an override. It fails with ErrUnknownRule when the rule does not exist,
// and with ErrBadRequest, changing nothing, when the limit it would give
// (with the rule's override) does not compile.
func (e *Engine) SetRateScale(domain, rule string, factor float64, reason string) error {
	if !(factor > 0 && factor <= 1000) || math.IsNaN(factor) {
		return fmt.Errorf("%w: rate scale must be in (0, 1000], got %v", ErrBadRequest, factor)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.findRulesLocked(domain, rule); err != nil {
		return err
	}
	_, err := e.setScaleLocked(ruleRef{domain, rule}, factor, reason)
	return err
}

// fitScaleLocked returns want when the rules of cfg that ref names compile
// scaled by it. Otherwise it returns the factor nearest want, between prev
// and want and with at most six decimals, that compiles (prev when none
// does), and why want does not. It leaves e.scales as it found it.
func (e *Engine) fitScaleLocked(cfg *Config, ref ruleRef, prev, want float64) (float64, error) {
	defer swapEntry(e.scales, ref, RateScale{}, false)() // each try sets its own
	try := func(f float64) error {
		e.scales[ref] = RateScale{Domain: ref.domain, Rule: ref.rule, Factor: f}
		return e.checkRefLocked(cfg, ref)
	}
	refused := try(want)
	if refused == nil {
		return want, nil
	}
	// Bisect: good compiles (or is prev), bad does not.
	good, bad := prev, want
	for range 64 {
		mid := good + (bad-good)/2
		if mid == good || mid == bad {
			break
		}
		if try(mid) == nil {
			good = mid
		} else {
			bad = mid
		}
	}
	f := math.Floor(good*1e6) / 1e6
	if want < prev {
		f = math.Ceil(good*1e6) / 1e6
	}
	if (f-prev)*(want-prev) <= 0 || try(f) != nil {
		f = prev
	}
	return f, refused
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

// EffectiveLimits returns the configuration in force and, for any of its
// rules, the limit the rule is decided with now (the configured one with
// its override and scale applied; nil for a rule without a limit or of
// another configuration), both from one snapshot: a reload in between
// cannot pair a rule with another configuration's limit. Unlike
// EffectiveLimit it tells apart rules that share a name.
func (e *Engine) EffectiveLimits() (*Config, func(*Rule) *algo.Limit) {
	s := e.snap.Load()
	return s.cfg, func(r *Rule) *algo.Limit {
		if r == nil || r.limit == nil || r.index >= len(s.cfg.rules) || s.cfg.rules[r.index] != r {
			return nil
		}
		return s.limits[r.index].rate
	}
}

// EffectiveLimit returns the limit rule of domain is decided with now: the
// configured one with its override and scale applied; nil when the rule
// does not exist or has no limit. Of rules that share a name it returns
// the first's (see EffectiveLimits).
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
