package sim

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// arrival is one request: its time in µs since the start of the run, its
// key index and its cost in units.
type arrival struct {
	t    int64
	key  int32
	cost int32
}

// generator yields one source's arrivals in time order; ok is false when
// the source is done.
type generator interface {
	next() (a arrival, ok bool)
}

// traffic merges the sources of a scenario into one stream in time order.
// Ties go to the source listed first, so the merge is deterministic.
type traffic struct {
	gens  []generator
	heads []arrival
	live  []bool
	end   int64
}

func newTraffic(sc *Scenario, replays [][]arrival) *traffic {
	tr := &traffic{end: sc.Duration.us()}
	r := 0
	for i := range sc.Traffic {
		s := &sc.Traffic[i]
		var g generator
		if s.Kind == SourceReplay {
			g = &replayGen{arrivals: replays[r]}
			r++
		} else {
			g = newRateGen(sc, s, i)
		}
		tr.gens = append(tr.gens, g)
		a, ok := g.next()
		tr.heads = append(tr.heads, a)
		tr.live = append(tr.live, ok)
	}
	return tr
}

// fill appends arrivals to buf until it is full or the traffic ends, and
// reports whether more may follow.
func (tr *traffic) fill(buf []arrival) ([]arrival, bool) {
	for len(buf) < cap(buf) {
		best := -1
		for i, ok := range tr.live {
			if ok && (best < 0 || tr.heads[i].t < tr.heads[best].t) {
				best = i
			}
		}
		if best < 0 || tr.heads[best].t >= tr.end {
			return buf, false
		}
		buf = append(buf, tr.heads[best])
		tr.heads[best], tr.live[best] = tr.gens[best].next()
	}
	return buf, true
}

// rateGen generates arrivals from a rate that may change over time.
type rateGen struct {
	s        *Source
	rng      *rand.Rand
	zipf     *alias
	from, to float64 // µs
	tau      float64 // µs: real time, or time inside bursts for bursts
	k        int64   // steady: arrivals so far
	gap      float64 // µs between arrivals at the constant (or peak) rate
	steady   bool
	rateAt   func(t float64) float64 // per µs; nil for constant rates
	peak     float64                 // per µs: the thinning bound
	onUS     float64
	cycleUS  float64
	// flash: the rate before the crowd, and the crowd's start and the end
	// of its hold (µs); see flashStep.
	flash               bool
	base, at, holdUntil float64
}

func newRateGen(sc *Scenario, s *Source, i int) *rateGen {
	g := &rateGen{
		s:    s,
		rng:  rand.New(rand.NewPCG(sc.Seed, 0x5eed0000+uint64(i))),
		from: float64(s.From.us()),
		to:   float64(sc.Duration.us()),
	}
	if s.To > 0 && float64(s.To.us()) < g.to {
		g.to = float64(s.To.us())
	}
	if s.Zipf > 1 && s.Keys > 1 {
		g.zipf = zipfAlias(s.Zipf, s.Keys)
	}
	rate := float64(s.Rate) / 1e6
	peak := float64(s.Peak) / 1e6
	span := g.to - g.from
	switch s.Kind {
	case SourceSteady:
		g.steady = true
	case SourceBursts:
		g.steady = s.Process == "steady"
		g.onUS = float64(s.On.us())
		g.cycleUS = g.onUS + float64(s.Off.us())
	case SourceDiurnal:
		cycle := float64(s.Cycle.us())
		if cycle <= 0 {
			cycle = span
		}
		g.rateAt = func(t float64) float64 {
			return rate + (peak-rate)*(1-math.Cos(2*math.Pi*(t-g.from)/cycle))/2
		}
		g.peak = math.Max(rate, peak)
	case SourceRamp:
		g.rateAt = func(t float64) float64 {
			if span <= 0 {
				return peak
			}
			return rate + (peak-rate)*(t-g.from)/span
		}
		g.peak = math.Max(rate, peak)
	case SourceFlash:
		at := float64(s.At.us())
		rise, hold, decay := float64(s.Rise.us()), float64(s.Hold.us()), float64(s.Decay.us())
		g.rateAt = func(t float64) float64 {
			switch {
			case t < at:
				return rate
			case t < at+rise:
				return rate + (peak-rate)*(t-at)/rise
			case t < at+rise+hold:
				return peak
			case decay <= 0:
				return rate
			}
			return rate + (peak-rate)*math.Exp(-(t-at-rise-hold)/decay)
		}
		g.peak = peak
		g.flash, g.base, g.at, g.holdUntil = true, rate, at, at+rise+hold
	}
	if g.rateAt == nil {
		g.gap = 1 / rate
	} else {
		g.gap = 1 / g.peak
	}
	return g
}

// steadyAt is the time (µs, inside the bursts for bursts) of steady arrival
// i: i/rate seconds, computed from i rather than by adding gaps (a sum of
// rounded gaps drifts, and added one request at the end of some runs). The
// quotient is rounded to the nanosecond, which absorbs the rounding of a
// rate such as 100/m, then truncated to the microsecond.
func (g *rateGen) steadyAt(i int64) float64 {
	ns := math.Round(float64(i) * 1e9 / float64(g.s.Rate))
	return math.Floor(ns / 1e3)
}

// real maps time inside the bursts to real time.
func (g *rateGen) real(tau float64) float64 {
	if g.cycleUS == 0 {
		return g.from + tau
	}
	n := math.Floor(tau / g.onUS)
	return g.from + n*g.cycleUS + (tau - n*g.onUS)
}

func (g *rateGen) next() (arrival, bool) {
	for {
		bound := g.peak
		switch {
		case g.steady:
			g.tau = g.steadyAt(g.k)
			g.k++
		case g.flash:
			bound = g.flashStep()
		default:
			g.tau += g.rng.ExpFloat64() * g.gap
		}
		t := g.real(g.tau)
		if t >= g.to || math.IsInf(g.gap, 0) {
			return arrival{}, false
		}
		if g.rateAt != nil && g.rng.Float64()*bound >= g.rateAt(t) {
			continue // thinning: keep a candidate with probability rate(t)/peak
		}
		return arrival{t: int64(t), key: int32(g.s.KeyOffset + g.pick()), cost: int32(g.s.Cost)}, true
	}
}

// flashStep moves g.tau to the flash crowd's next candidate arrival and
// returns the thinning bound it was drawn with: the highest rate of its
// segment from g.tau on — the base rate before the crowd, the peak during
// the rise and hold, the current rate during the decay (which only falls).
// A candidate past its segment's end is dropped and the draw starts again
// there, which the Poisson process allows. Thinning the whole run at the
// peak drew peak × duration candidates: a crowd to 1,000,000/s for 1 s in
// an hour of 1/s took 80 s to generate its million requests.
func (g *rateGen) flashStep() float64 {
	for {
		t := g.from + g.tau
		bound, end := g.rateAt(t), math.Inf(1)
		switch {
		case t < g.at:
			bound, end = g.base, g.at
		case t < g.holdUntil:
			bound, end = g.peak, g.holdUntil
		}
		if bound <= 0 {
			if math.IsInf(end, 1) {
				g.tau = end
				return 1
			}
			g.tau = end - g.from
			continue
		}
		next := g.tau + g.rng.ExpFloat64()/bound
		if g.from+next >= end {
			g.tau = end - g.from
			continue
		}
		g.tau = next
		return bound
	}
}

func (g *rateGen) pick() int {
	switch {
	case g.s.Keys == 1:
		return 0
	case g.zipf != nil:
		return g.zipf.pick(g.rng)
	}
	return g.rng.IntN(g.s.Keys)
}

// replayGen yields arrivals read from a log.
type replayGen struct {
	arrivals []arrival
	i        int
}

func (g *replayGen) next() (arrival, bool) {
	if g.i >= len(g.arrivals) {
		return arrival{}, false
	}
	g.i++
	return g.arrivals[g.i-1], true
}

// readReplay parses a replay log: one request per line, "time key [cost]",
// fields separated by spaces or tabs. time is seconds since the start
// (decimal, e.g. 12.5) or an RFC 3339 instant taken relative to the first
// line's; times must not go backwards. key is any word; keys are numbered
// from keyOffset in order of first appearance. cost defaults to 1. Blank
// lines and lines starting with '#' are skipped. Errors read "file:line: …".
// It returns the arrivals and the key names by index (from keyOffset).
// maxReplayRequests bounds the requests of one replayed log, which is read
// into memory whole: a variable so that tests can lower it.
var maxReplayRequests = 100_000_000

// ctxReader is r that stops, with ctx's error, when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func readReplay(file string, r io.Reader, keyOffset int) ([]arrival, []string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	var (
		out    []arrival
		names  []string
		keys   = map[string]int32{}
		origin time.Time
		last   int64
		line   int
	)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s:%d: %s", ErrScenario, file, line, fmt.Sprintf(format, args...))
	}
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		f := strings.Fields(text)
		if len(f) < 2 || len(f) > 3 {
			return nil, nil, bad("want \"time key [cost]\", got %s", count(len(f), "field"))
		}
		var t int64
		if sec, err := strconv.ParseFloat(f[0], 64); err == nil {
			if math.IsNaN(sec) || sec < 0 || sec > 400*86400 {
				return nil, nil, bad("time %q must be between 0 and 400 days in seconds", f[0])
			}
			t = int64(math.Round(sec * 1e6))
		} else {
			ts, err := time.Parse(time.RFC3339Nano, f[0])
			if err != nil {
				return nil, nil, bad("time %q is neither seconds nor RFC 3339", f[0])
			}
			if origin.IsZero() {
				origin = ts
			}
			d := ts.Sub(origin)
			if d < 0 || d > 400*24*time.Hour {
				return nil, nil, bad("time %q is before the first line or over 400 days after it", f[0])
			}
			t = int64(d / time.Microsecond)
		}
		if t < last {
			return nil, nil, bad("time goes backwards (%.6fs after %.6fs); sort the log by time", float64(t)/1e6, float64(last)/1e6)
		}
		last = t
		k, ok := keys[f[1]]
		if !ok {
			if keyOffset+len(names) >= maxKeys {
				return nil, nil, bad("more than %d keys", maxKeys)
			}
			k = int32(keyOffset + len(names))
			keys[f[1]] = k
			names = append(names, f[1])
		}
		cost := int64(1)
		if len(f) == 3 {
			c, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil || c < 1 || c > 1<<30 {
				return nil, nil, bad("cost %q must be an integer between 1 and 2^30", f[2])
			}
			cost = c
		}
		if len(out) >= maxReplayRequests {
			return nil, nil, bad("more than %d requests: a replay is held in memory (%d bytes a request, more while it grows); cut or sample the log", maxReplayRequests, unsafe.Sizeof(arrival{}))
		}
		out = append(out, arrival{t: t, key: k, cost: int32(cost)})
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("%w: %s:%d: %v", ErrScenario, file, line+1, err)
	}
	return out, names, nil
}

// loadReplays reads every replay source of sc, in order, and sets the
// scenario's duration from them when it has none: up to the last request,
// rounded up to a whole second. past counts the requests at or after the
// end of the run, which are read but not offered.
func (sc *Scenario) loadReplays(ctx context.Context) (replays [][]arrival, past int, err error) {
	var lastT int64
	for i := range sc.Traffic {
		s := &sc.Traffic[i]
		if s.Kind != SourceReplay {
			continue
		}
		f, err := os.Open(s.File)
		if err != nil {
			if sc.flags {
				return nil, 0, sc.errorf(0, "--replay: %v", err)
			}
			return nil, 0, sc.errorf(s.line, "traffic[%d].file: %v", i, err)
		}
		arr, _, err := readReplay(s.File, ctxReader{ctx, f}, s.KeyOffset)
		f.Close()
		if err := ctx.Err(); err != nil {
			// A long log takes a while to read: the run stops there.
			return nil, 0, &InterruptedError{Duration: sc.Duration.D(), Replay: s.File, Err: err}
		}
		if err != nil {
			return nil, 0, err
		}
		from, to := s.From.us(), int64(math.MaxInt64)
		if s.To > 0 {
			to = s.To.us()
		}
		kept := arr[:0]
		for _, a := range arr {
			a.t += from
			if a.t < to {
				kept = append(kept, a)
			}
		}
		if n := len(kept); n > 0 && kept[n-1].t >= lastT {
			lastT = kept[n-1].t + 1
		}
		replays = append(replays, kept)
	}
	if sc.Duration == 0 {
		if lastT == 0 {
			var files []string
			for _, s := range sc.Traffic {
				if s.Kind == SourceReplay {
					files = append(files, s.File)
				}
			}
			return nil, 0, sc.errorf(0, "%s: the replay (%s) holds no request; set %s", sc.field("duration"), strings.Join(files, ", "), sc.field("duration"))
		}
		// Just past the last request, a whole number of seconds: a log
		// whose last line is at 6s runs for 7s, not 6.000001s.
		sc.Duration = Duration((time.Duration(lastT)*time.Microsecond + time.Second - 1).Truncate(time.Second))
	}
	end := sc.Duration.us()
	for _, rp := range replays {
		for j := len(rp) - 1; j >= 0 && rp[j].t >= end; j-- {
			past++
		}
	}
	return replays, past, nil
}

// alias draws from a fixed discrete distribution in constant time (Vose's
// alias method): one random number picks a column, a second decides between
// the column and its alias.
type alias struct {
	prob  []float64
	alias []int32
}

// zipfAlias is the Zipf law over n keys: key k has weight (k+1)^-s, the
// distribution math/rand's Zipf draws with v = 1, without its per-draw
// exponentials.
func zipfAlias(s float64, n int) *alias {
	w := make([]float64, n)
	sum := 0.0
	for k := range w {
		w[k] = math.Pow(float64(k+1), -s)
		sum += w[k]
	}
	a := &alias{prob: make([]float64, n), alias: make([]int32, n)}
	var small, large []int32
	for k := range w {
		w[k] = w[k] * float64(n) / sum
		if w[k] < 1 {
			small = append(small, int32(k))
		} else {
			large = append(large, int32(k))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		l, g := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		a.prob[l], a.alias[l] = w[l], g
		w[g] -= 1 - w[l]
		if w[g] < 1 {
			large = large[:len(large)-1]
			small = append(small, g)
		}
	}
	for _, k := range large {
		a.prob[k] = 1
	}
	for _, k := range small {
		a.prob[k] = 1 // rounding left a column a hair short of full
	}
	return a
}

func (a *alias) pick(rng *rand.Rand) int {
	k := rng.IntN(len(a.prob))
	if rng.Float64() < a.prob[k] {
		return k
	}
	return int(a.alias[k])
}
