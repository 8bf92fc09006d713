package policy

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/algo"
)

// ruleLimits are a rule's compiled limits as an Engine applies them: the
// rule's own limit and the derived ones of borrowing and priority classes,
// after runtime overrides and adaptive scaling.
type ruleLimits struct {
	rate  *algo.Limit
	ceil  *algo.Limit   // Rule.Ceil > 0: the child's total, rate plus borrowed
	lend  *algo.Limit   // Rule.Lendable < 1: what children may borrow in total
	pools []*algo.Limit // by priority rank; non-nil where the class has a reserve
	fp    string        // key fingerprint
}

// scaled returns p with its quota (and an explicit bucket burst and initial
// level) multiplied by f, rounded down but never below 1.
func scaled(p algo.Params, f float64) algo.Params {
	mul := func(v int64) int64 {
		x := math.Floor(float64(v)*f + 1e-9)
		if x < 1 {
			return 1
		}
		if x >= 1<<53 {
			return 1 << 53 // out of bounds: the override and scale checks refuse it
		}
		return int64(x)
	}
	p.Limit = mul(p.Limit)
	if p.Burst > 0 && (p.Algorithm == algo.TokenBucket || p.Algorithm == algo.GCRA) {
		p.Burst = mul(p.Burst)
	}
	if p.InitialTokens != nil {
		v := int64(math.Floor(float64(*p.InitialTokens)*f + 1e-9))
		p.InitialTokens = &v
	}
	return p
}

// mulDivUp returns v × num ÷ den for v >= 0 and positive num and den,
// rounded up, exactly; at most limit.
func mulDivUp(v, num, den, limit int64) int64 {
	hi, lo := bits.Mul64(uint64(v), uint64(num))
	lo, carry := bits.Add64(lo, uint64(den-1), 0)
	hi += carry
	if hi >= uint64(den) {
		return limit
	}
	q, _ := bits.Div64(hi, lo, uint64(den))
	return int64(min(q, uint64(limit)))
}

// fingerprint names the state layout of a limit in its store key, so a
// reload that changes a rule's algorithm or period starts from fresh state
// instead of misreading the old one; a change of quota keeps the state.
func fingerprint(p algo.Params) string {
	var b strings.Builder
	b.WriteString(p.Algorithm.String())
	b.WriteByte(':')
	switch {
	case p.Calendar != algo.CalendarNone:
		b.WriteString(p.Calendar.String())
	default:
		b.WriteString(strconv.FormatInt(int64(p.Period/1000), 10)) // µs
	}
	if p.Algorithm == algo.SlidingWindow && p.SubWindows > 1 {
		fmt.Fprintf(&b, "/%d", p.SubWindows)
	}
	return b.String()
}

// KeyLayout reads back the state layout a store key of the Engine names
// after its last '#' (fingerprint's text, with "override:" before it for
// a per-descriptor limit and a "~role" after it for a derived limit's
// key: docs/STORES.md, "Store keys"). The Params hold the Algorithm and,
// for a fixed or a sliding window, the Period or Calendar and a sliding
// window's SubWindows; another algorithm's period is not read. ok is
// false for a key that names no layout. The admin API uses it to find a
// window's counters on a store that names them after the window
// (memcached).
func KeyLayout(key string) (p algo.Params, ok bool) {
	i := strings.LastIndexByte(key, '#')
	if i < 0 {
		return p, false
	}
	fp, _, _ := strings.Cut(key[i+1:], "~")
	fp = strings.TrimPrefix(fp, "override:")
	name, period, ok := strings.Cut(fp, ":")
	if !ok {
		return p, false
	}
	kind, err := algo.ParseKind(name)
	if err != nil || kind.String() != name {
		return p, false
	}
	p.Algorithm = kind
	if kind != algo.FixedWindow && kind != algo.SlidingWindow {
		return p, true
	}
	period, sub, hasSub := strings.Cut(period, "/")
	switch {
	case kind == algo.FixedWindow && period == algo.CalendarMonth.String():
		p.Calendar = algo.CalendarMonth
	case kind == algo.FixedWindow && period == algo.CalendarYear.String():
		p.Calendar = algo.CalendarYear
	default:
		us, err := strconv.ParseInt(period, 10, 64)
		if err != nil || us <= 0 || us > 1<<53 {
			return p, false
		}
		p.Period = time.Duration(us) * time.Microsecond
	}
	if hasSub {
		n, err := strconv.Atoi(sub)
		if err != nil || kind != algo.SlidingWindow || n < 2 {
			return p, false
		}
		p.SubWindows = n
	}
	return p, true
}

// deriveLimits compiles the limits of rule r from params p (the rule's own,
// or overridden and scaled ones). The error names the YAML field at fault.
//
// The derived limits start as the rule's does and keep a full state as
// long (Retain): a token bucket's ceiling starts at its initial tokens
// scaled to the ceil, rounded up (⌈initial_tokens × ceil ÷
// requests_per_unit⌉: it never holds back a request the rate admits), and
// a lend pool at the lendable share of them, rounded down (what children
// may borrow of a parent that starts short). Were they to start full, a
// fresh key of a rule with initial_tokens could borrow up to its ceil at
// once, and the rule's retain would hold for its rate only.
func deriveLimits(d *Domain, r *Rule, p algo.Params) (ruleLimits, error) {
	var rl ruleLimits
	var err error
	if rl.rate, err = algo.Compile(p); err != nil {
		return rl, err
	}
	rl.fp = fingerprint(p)
	if r.Ceil > 0 {
		c := p
		if r.Ceil <= p.Limit {
			return rl, fmt.Errorf("ceil: must be greater than requests_per_unit %d, got %d", p.Limit, r.Ceil)
		}
		c.Limit = r.Ceil
		if p.Burst > 0 && (p.Algorithm == algo.TokenBucket || p.Algorithm == algo.GCRA) {
			c.Burst = (p.Burst*r.Ceil + p.Limit - 1) / p.Limit
		}
		if p.InitialTokens != nil {
			capacity := c.Burst
			if capacity == 0 {
				capacity = c.Limit
			}
			v := mulDivUp(*p.InitialTokens, r.Ceil, p.Limit, capacity)
			c.InitialTokens = &v
		}
		if rl.ceil, err = algo.Compile(c); err != nil {
			return rl, fmt.Errorf("ceil: %w", err)
		}
	}
	if r.Lendable > 0 && r.Lendable < 1 {
		if err := checkLendable(p, r.Lendable); err != nil {
			return rl, err
		}
		lp := scaled(p, r.Lendable)
		if rl.lend, err = algo.Compile(lp); err != nil {
			return rl, fmt.Errorf("lendable: %w", err)
		}
	}
	if len(r.Reserve) > 0 && d != nil {
		rl.pools = make([]*algo.Limit, len(d.Priorities))
		for i, class := range d.Priorities {
			share := r.Reserve[class]
			if share <= 0 {
				continue
			}
			if math.Floor(float64(p.Limit)*(1-share)+1e-9) < 1 {
				return rl, fmt.Errorf("reserve: %s: a share of %g leaves no capacity of %d for that class", class, share, p.Limit)
			}
			pp := scaled(p, 1-share)
			if rl.pools[i], err = algo.Compile(pp); err != nil {
				return rl, fmt.Errorf("reserve: %s: %w", class, err)
			}
		}
	}
	return rl, nil
}

// checkLendable refuses a lendable share that makes a lend pool of less
// than one unit: scaled would round it up to 1, lending more than the
// share. The capacities are the quota and an explicit bucket burst, the
// ones scaled scales; the error names the smaller and the smallest share
// that lends one unit of it.
func checkLendable(p algo.Params, share float64) error {
	capacity, what := p.Limit, "requests_per_unit"
	if p.Burst > 0 && p.Burst < capacity && (p.Algorithm == algo.TokenBucket || p.Algorithm == algo.GCRA) {
		capacity, what = p.Burst, "burst"
	}
	if math.Floor(float64(capacity)*share+1e-9) >= 1 {
		return nil
	}
	return fmt.Errorf("lendable: %g of %s %d is %g, less than one unit, so the children could borrow nothing; "+
		"set lendable to at least %g (one unit), or raise %s", share, what, capacity, float32(float64(capacity)*share), minShare(capacity), what)
}

// minShare returns the smallest share, with at most three significant
// digits, of which capacity rounds down to at least one unit.
func minShare(capacity int64) float64 {
	v := 1 / float64(capacity)
	step := math.Pow(10, math.Floor(math.Log10(v))-2)
	s := math.Ceil(v/step-1e-6) * step
	for {
		s, _ = strconv.ParseFloat(strconv.FormatFloat(s, 'g', 3, 64), 64)
		if math.Floor(float64(capacity)*s+1e-9) >= 1 {
			return s
		}
		s += step
	}
}
