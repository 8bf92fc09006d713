package adaptive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config sets a Controller's bounds, signals and steps. Zero fields take the
// defaults listed; at least one signal (LatencyThreshold or ErrorRatio) is
// required. The yaml tags name the fields of a rule's adaptive block.
type Config struct {
	// Min is the lowest factor (default 0.1); 0.000001 <= Min <= Max
	// (factors are kept to six decimals).
	Min float64 `yaml:"min"`
	// Max is the highest factor (default 1).
	Max float64 `yaml:"max"`
	// Initial is the factor before the first step (default Max); within
	// [Min, Max].
	Initial float64 `yaml:"initial"`
	// LatencyThreshold is the latency the Quantile must stay at or below;
	// 0 disables the latency signal.
	LatencyThreshold time.Duration `yaml:"latency_threshold"`
	// Quantile is the latency quantile compared with LatencyThreshold
	// (default 0.99); in (0, 1].
	Quantile float64 `yaml:"quantile"`
	// ErrorRatio is the fraction of failed samples the interval must stay
	// at or below, e.g. 0.05; 0 disables the error signal; below 1.
	ErrorRatio float64 `yaml:"error_ratio"`
	// Decrease multiplies the factor on overload (default 0.7); in (0, 1).
	// A step lowers the factor by at least 0.000001 (down to Min).
	Decrease float64 `yaml:"decrease"`
	// Increase is added to the factor after a healthy interval (default
	// 0.05); positive. A step adds at least 0.000001 (up to Max).
	Increase float64 `yaml:"increase"`
	// Interval is how often the owner should call Step, e.g. the period
	// of the ticker given to Run (default 1s; at least MinInterval).
	// The controller itself evaluates whatever interval passed between
	// two steps; policy.Engine.StepAdaptive steps each rule's controller
	// at its own Interval.
	Interval time.Duration `yaml:"interval"`
	// MinSamples is the fewest samples a step needs to judge (default
	// 10; at least 1). A step with fewer leaves the factor unchanged and
	// carries its samples into the next step, unless an interval brings
	// no sample at all (see the package doc).
	MinSamples int64 `yaml:"min_samples"`
}

// Change is the outcome of one Step.
type Change struct {
	// At is the time given to Step.
	At time.Time
	// Old and New are the factor before and after the step; equal when
	// nothing changed.
	Old, New float64
	// Reason says why, e.g. "p99 latency 180ms > 100ms threshold",
	// "error ratio 12% > 5%", "recovered: p99 40ms", "healthy: p99 40ms"
	// (at Max), or "too few samples: 3 < 10".
	Reason string
	// Overloaded reports that a signal passed its threshold.
	Overloaded bool
	// Samples and Errors count the samples judged and the failed ones:
	// the interval's, with those carried from steps that had too few.
	Samples, Errors int64
	// Latency is the latency quantile of the samples judged (estimated,
	// see the package doc); zero without the latency signal, or when too
	// few samples left nothing judged.
	Latency time.Duration
}

// Changed reports whether the factor moved.
func (c Change) Changed() bool { return c.Old != c.New }

// String formats the change for logs, e.g.
// "factor 1 -> 0.7: p99 latency 180ms > 100ms threshold".
func (c Change) String() string {
	return "factor " + fmtFactor(c.Old) + " -> " + fmtFactor(c.New) + ": " + c.Reason
}

// Controller is an AIMD controller over a rate factor. Create it with New.
type Controller struct {
	cfg   Config
	hist  bool   // latency signal on: keep the histogram
	slowT uint64 // LatencyThreshold in ns

	cur    atomic.Pointer[window] // where Observe counts
	factor atomic.Uint64          // math.Float64bits of the factor

	mu    sync.Mutex // serialises steps; guards spare and held
	spare *window
	held  tally // samples of steps that had too few, judged with the next
}

// New validates cfg, fills in its defaults and returns a Controller at the
// Initial factor. Errors name the field and the rule it breaks.
func New(cfg Config) (*Controller, error) {
	cfg, err := Normalize(cfg)
	if err != nil {
		return nil, err
	}
	c := &Controller{cfg: cfg, hist: cfg.LatencyThreshold > 0, slowT: uint64(cfg.LatencyThreshold)}
	c.cur.Store(c.newWindow())
	c.spare = c.newWindow()
	if c.hist {
		c.held.count = make([]uint64, numBuckets)
		c.held.sum = make([]uint64, numBuckets)
	}
	c.factor.Store(math.Float64bits(c.bound(cfg.Initial)))
	return c, nil
}

// MinInterval is the shortest Interval that Normalize accepts: a
// controller stepped more often would judge a handful of samples.
const MinInterval = 10 * time.Millisecond

// Normalize returns cfg with its zero fields set to their defaults, as
// New would use it, or the error New would return. Two configurations
// that normalise alike make controllers that behave alike (a written
// default is no change).
func Normalize(cfg Config) (Config, error) {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.Min, 0.1)
	def(&cfg.Max, 1)
	def(&cfg.Initial, cfg.Max)
	def(&cfg.Quantile, 0.99)
	def(&cfg.Decrease, 0.7)
	def(&cfg.Increase, 0.05)
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.MinSamples == 0 {
		cfg.MinSamples = 10
	}
	bad := func(field string, v any, rule string) error {
		return fmt.Errorf("adaptive: %s %v: %s", field, v, rule)
	}
	switch {
	// Max is checked before Min, whose range it bounds: a Max that is no
	// factor at all is the field to name, not a Min the user may not
	// even have written.
	case math.IsInf(cfg.Max, 0) || math.IsNaN(cfg.Max):
		return cfg, bad("max", cfg.Max, "must be finite")
	case cfg.Max < 1e-6:
		return cfg, bad("max", cfg.Max, "must be at least 0.000001")
	case !(cfg.Min >= 1e-6 && cfg.Min <= cfg.Max):
		return cfg, bad("min", cfg.Min, fmt.Sprintf("must be in [0.000001, max %v]", cfg.Max))
	case !(cfg.Initial >= cfg.Min && cfg.Initial <= cfg.Max):
		return cfg, bad("initial", cfg.Initial, fmt.Sprintf("must be in [min %v, max %v]", cfg.Min, cfg.Max))
	case cfg.LatencyThreshold < 0:
		return cfg, bad("latency_threshold", cfg.LatencyThreshold, "must not be negative")
	case !(cfg.Quantile > 0 && cfg.Quantile <= 1):
		return cfg, bad("quantile", cfg.Quantile, "must be in (0, 1]")
	case !(cfg.ErrorRatio >= 0 && cfg.ErrorRatio < 1):
		return cfg, bad("error_ratio", cfg.ErrorRatio, "must be in [0, 1)")
	case cfg.LatencyThreshold == 0 && cfg.ErrorRatio == 0:
		return cfg, errors.New("adaptive: no signal: set latency_threshold, error_ratio or both")
	case !(cfg.Decrease > 0 && cfg.Decrease < 1):
		return cfg, bad("decrease", cfg.Decrease, "must be in (0, 1)")
	case !(cfg.Increase > 0) || math.IsInf(cfg.Increase, 0):
		return cfg, bad("increase", cfg.Increase, "must be positive and finite")
	case cfg.Interval < MinInterval:
		return cfg, bad("interval", cfg.Interval, "must be at least 10ms")
	case cfg.MinSamples < 1:
		return cfg, bad("min_samples", cfg.MinSamples, "must be at least 1 (an interval without samples is no evidence)")
	}
	return cfg, nil
}

func (c *Controller) newWindow() *window {
	w := &window{}
	if c.hist {
		w.h = &histogram{}
	}
	return w
}

// Config returns the controller's configuration with the defaults filled in.
func (c *Controller) Config() Config { return c.cfg }

// Factor returns the current factor, in [Min, Max].
func (c *Controller) Factor() float64 { return math.Float64frombits(c.factor.Load()) }

// SetFactor moves the factor to f rounded to six decimals within [Min, Max]
// and returns the factor set: the next Step moves from there. The owner
// calls it when the factor in force is not the controller's (a limit that
// only compiles at another factor, a reload that keeps a factor under new
// bounds, a manual scale handed back).
func (c *Controller) SetFactor(f float64) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	f = c.bound(f)
	c.factor.Store(math.Float64bits(f))
	return f
}

// Pending returns how many samples the current interval has so far, not
// counting those carried from steps that had too few.
func (c *Controller) Pending() int64 { return int64(c.cur.Load().n.Load()) }

// Observe records one request: its latency (negative counts as 0) and
// whether it failed. It is lock-free and costs a few atomic adds.
func (c *Controller) Observe(latency time.Duration, failed bool) {
	w := c.cur.Load()
	w.n.Add(1)
	if failed {
		w.errs.Add(1)
	}
	if w.h != nil {
		v := uint64(max(latency, 0))
		if v > c.slowT {
			w.slow.Add(1)
		}
		i := bucketOf(v)
		w.h.count[i].Add(1)
		w.h.sum[i].Add(v)
	}
}

// Step ends the current interval at now, judges its samples and moves the
// factor: times Decrease (not below Min) on overload, plus Increase (not
// above Max) when healthy, by at least 0.000001 either way, unchanged with
// fewer than MinSamples samples, which are then carried into the next step
// unless its interval has none.
func (c *Controller) Step(now time.Time) Change {
	c.mu.Lock()
	defer c.mu.Unlock()

	w := c.cur.Swap(c.spare)
	c.spare = w
	t := &c.held
	n := w.n.Swap(0)
	if n == 0 {
		t.drop() // no traffic: what was carried says nothing of now
	}
	t.n += n
	t.errs += w.errs.Swap(0)
	t.slow += w.slow.Swap(0)
	if w.h != nil {
		w.h.drainInto(t)
	}

	old := c.Factor()
	ch := Change{At: now, Old: old, New: old, Samples: int64(t.n), Errors: int64(t.errs)}
	if ch.Samples < c.cfg.MinSamples {
		ch.Reason = "too few samples: " + strconv.FormatInt(ch.Samples, 10) + " < " + strconv.FormatInt(c.cfg.MinSamples, 10)
		return ch
	}
	n, errs, slow := t.n, t.errs, t.slow
	var est time.Duration
	if c.hist {
		est = t.quantile(c.cfg.Quantile)
	}
	t.drop()

	var over []string
	var latOver bool
	if c.hist {
		// The nearest-rank quantile is above the threshold exactly when
		// fewer than ⌈q·n⌉ samples are at or below it.
		rank := ceilRank(c.cfg.Quantile, n)
		latOver = slow > n-rank
		// Keep the printed estimate on the side of the exact decision.
		thr := c.cfg.LatencyThreshold
		if latOver && est <= thr {
			est = thr + 1
		} else if !latOver && est > thr {
			est = thr
		}
		ch.Latency = est
		if latOver {
			over = append(over, c.quantileName()+" latency "+fmtAbove(est, thr)+" threshold")
		}
	}
	ratio := float64(errs) / float64(n)
	errOver := c.cfg.ErrorRatio > 0 && ratio > c.cfg.ErrorRatio
	if errOver {
		over = append(over, "error ratio "+pctAbove(ratio, c.cfg.ErrorRatio))
	}

	if latOver || errOver {
		ch.Overloaded = true
		ch.New = c.bound(min(old*c.cfg.Decrease, old-factorUnit))
		ch.Reason = strings.Join(over, ", ")
	} else {
		var ok []string
		if c.hist {
			ok = append(ok, c.quantileName()+" "+fmtLatency(est))
		}
		if c.cfg.ErrorRatio > 0 {
			ok = append(ok, "error ratio "+fmtPct(ratio))
		}
		ch.New = c.bound(old + max(c.cfg.Increase, factorUnit))
		verb := "recovered: "
		if ch.New == old {
			verb = "healthy: "
		}
		ch.Reason = verb + strings.Join(ok, ", ")
	}
	c.factor.Store(math.Float64bits(ch.New))
	return ch
}

// Run steps the controller on every tick and calls apply (when not nil)
// with each Change that moved the factor. It returns nil when tick is
// closed and ctx.Err() when ctx is done. Give it a time.Ticker's channel
// with Config().Interval in a server, a channel fed by hand in tests.
func (c *Controller) Run(ctx context.Context, tick <-chan time.Time, apply func(Change)) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now, ok := <-tick:
			if !ok {
				return nil
			}
			if ch := c.Step(now); ch.Changed() && apply != nil {
				apply(ch)
			}
		}
	}
}

func (c *Controller) quantileName() string {
	return "p" + strconv.FormatFloat(math.Round(c.cfg.Quantile*1e5)/1e3, 'f', -1, 64)
}

// ceilRank returns ⌈q·n⌉ in [1, n] for n > 0, immune to q·n landing a
// rounding error above an integer (0.99·100).
func ceilRank(q float64, n uint64) uint64 {
	r := uint64(math.Ceil(q*float64(n) - 1e-9))
	return min(max(r, 1), n)
}

// window holds one interval's counters.
type window struct {
	n, errs, slow atomic.Uint64
	h             *histogram // nil without the latency signal
}

// The histogram is log-linear: values below 32ns have a bucket each; above,
// every power of two is split into 32 equal buckets, so a bucket is at most
// 1/32 of its values wide. Values from 2^41ns (36 minutes) share the last.
const (
	subBits    = 5
	subCount   = 1 << subBits
	maxExp     = 40
	numBuckets = subCount + (maxExp-subBits+1)*subCount
)

type histogram struct {
	count [numBuckets]atomic.Uint64
	sum   [numBuckets]atomic.Uint64 // ns; the mean locates a bucket's samples
}

func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(v) - 1
	if e > maxExp {
		return numBuckets - 1
	}
	return subCount + (e-subBits)*subCount + int(v>>(e-subBits)&(subCount-1))
}

// tally holds the samples a step judges: its interval's, added to those
// of earlier steps that had fewer than MinSamples. count and sum are the
// histogram's, nil without the latency signal.
type tally struct {
	n, errs, slow uint64
	count, sum    []uint64
}

// drop forgets the tally's samples.
func (t *tally) drop() {
	t.n, t.errs, t.slow = 0, 0, 0
	clear(t.count)
	clear(t.sum)
}

// drainInto empties the histogram into t.
func (h *histogram) drainInto(t *tally) {
	for i := range h.count {
		t.count[i] += h.count[i].Swap(0)
		t.sum[i] += h.sum[i].Swap(0)
	}
}

// quantile returns the mean of the samples in the bucket holding the
// nearest-rank q-quantile of t's histogram (0 when empty).
func (t *tally) quantile(q float64) time.Duration {
	var total uint64
	for _, n := range t.count {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := ceilRank(q, total)
	var cum uint64
	for i, n := range t.count {
		cum += n
		if cum >= rank {
			return time.Duration(t.sum[i] / n)
		}
	}
	return 0
}

// factorUnit is the least a step moves the factor (within [Min, Max]): the
// sixth decimal that factors are rounded to, which would otherwise take
// back an Increase, or a cut by Decrease, of less than half of it, and
// leave the controller stuck where its signal says to move.
const factorUnit = 1e-6

func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

// bound rounds a factor to six decimals within [Min, Max].
func (c *Controller) bound(x float64) float64 {
	return min(c.cfg.Max, max(c.cfg.Min, round6(x)))
}

func fmtFactor(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// fmtLatency rounds to three significant digits: 180ms, 40.1ms, 1.25s.
func fmtLatency(d time.Duration) string {
	unit := time.Duration(1)
	for d/unit >= 1000 {
		unit *= 10
	}
	return d.Round(unit).String()
}

// fmtAbove formats "est > thr" so that the two never print alike.
func fmtAbove(est, thr time.Duration) string {
	a, b := fmtLatency(est), fmtLatency(thr)
	if a == b {
		a = est.String()
	}
	return a + " > " + b
}

// fmtPct formats a ratio as a percentage with at most one decimal: 12%, 0.5%.
func fmtPct(r float64) string {
	return strconv.FormatFloat(math.Round(r*1000)/10, 'f', -1, 64) + "%"
}

func pctAbove(r, thr float64) string {
	a, b := fmtPct(r), fmtPct(thr)
	if a == b {
		a = strconv.FormatFloat(math.Round(r*1e6)/1e4, 'f', -1, 64) + "%"
	}
	return a + " > " + b
}
