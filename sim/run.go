package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/floodgate/floodgate/algo"
)

// Result is everything a run measured. It holds no wall-clock figure, so the
// same scenario and seed give the same Result.
type Result struct {
	// Scenario is the validated scenario that ran.
	Scenario *Scenario
	// Offered is the traffic itself as a contender that admits everything:
	// its Window series is the perfect count of the focus key's requests.
	Offered ContenderResult
	// Ideal is the perfect sliding window (the real sliding_log algorithm
	// on one limiter) deciding the same arrivals.
	Ideal ContenderResult
	// Contenders are in the scenario's order.
	Contenders []ContenderResult
	// Keys is the number of distinct keys that received requests.
	Keys int
	// ReplayPast is the number of replayed requests at or after the end of
	// the run (a Duration shorter than the log): read, but not offered.
	// `floodgate sim` warns about them.
	ReplayPast int
}

// ContenderResult is one contender's measures.
type ContenderResult struct {
	// Name, Strategy and Algorithm describe the contender.
	Name, Strategy, Algorithm string
	// Metrics are the totals over the run.
	Metrics Metrics
	// Series are per bin.
	Series Series
	// Worst, when Run was given WithWorstKeyWindows and the contender took
	// some key over the limit, follows that key (Metrics.MaxWindowKey)
	// instead of the focus key: the key the window charts show. Nil
	// otherwise.
	Worst *KeyWindow
}

// KeyWindow is one key's admitted units in the trailing Period at each
// bin's end, for a contender and for the ideal on the same arrivals.
type KeyWindow struct {
	// Key is the key's index.
	Key int
	// Window is the contender's series, Ideal the ideal limiter's.
	Window, Ideal []int64
}

// Bins is the number of points in every series.
func (r *Result) Bins() int { return len(r.Offered.Series.Admitted) }

// BinEnd is the end of bin i from the start of the run.
func (r *Result) BinEnd(i int) time.Duration {
	return min(time.Duration(i+1)*r.Scenario.Bin.D(), r.Scenario.Duration.D())
}

// Option configures Run.
type Option func(*runConfig)

type runConfig struct {
	progress io.Writer
	chunk    int
	worst    bool
}

// WithWorstKeyWindows makes Run follow, for each contender that took a key
// over the limit, the window of the key it took furthest over
// (ContenderResult.Worst), which the window charts then show. Finding that
// key needs the whole run, so the contenders whose worst key is not the
// focus key run a second time over the same arrivals, beside the ideal:
// up to twice the work. `floodgate sim --out` sets it.
func WithWorstKeyWindows() Option { return func(c *runConfig) { c.worst = true } }

// WithProgress draws a progress bar on w (usually stderr) while the run
// goes on, a few times a second. Default: none.
func WithProgress(w io.Writer) Option { return func(c *runConfig) { c.progress = w } }

// withChunk sets how many arrivals are handed to the contenders at a time
// (default 8192); tests use small chunks to exercise the hand-over.
func withChunk(n int) Option { return func(c *runConfig) { c.chunk = max(1, n) } }

type chunk struct {
	arr  []arrival
	refs atomic.Int32
}

// InterruptedError is Run's error when ctx ends the run early: it wraps
// ctx's error (errors.Is(err, context.Canceled) holds for a cancelled ctx)
// and says how far the simulation got.
type InterruptedError struct {
	// Simulated is the simulated time of the last request fed to the
	// contenders, from the start of the run; Requests counts them.
	Simulated time.Duration
	Requests  int64
	// Duration is the run's simulated duration.
	Duration time.Duration
	// Worst is true when the run itself was complete and the second pass
	// of WithWorstKeyWindows was interrupted; Result is then the run's
	// result, whole but for ContenderResult.Worst, which only the
	// report's window charts read.
	Worst  bool
	Result *Result
	// Replay is the replay log being read when the run was interrupted,
	// before any request was fed.
	Replay string
	// Err is ctx's error.
	Err error
}

func (e *InterruptedError) Error() string {
	if e.Replay != "" {
		return fmt.Sprintf("interrupted while reading the replay log %s: %v", e.Replay, e.Err)
	}
	if e.Worst {
		return fmt.Sprintf("interrupted after the run, while following each contender's worst key (%s of %s simulated again): %v", fmtDur(e.Simulated.Truncate(time.Millisecond)), fmtDur(e.Duration), e.Err)
	}
	return fmt.Sprintf("interrupted at %s of %s simulated (%s): %v", fmtDur(e.Simulated.Truncate(time.Millisecond)), fmtDur(e.Duration), count(e.Requests, "request"), e.Err)
}

// Unwrap returns ctx's error.
func (e *InterruptedError) Unwrap() error { return e.Err }

// Run simulates sc: it generates (or replays) the arrivals once and feeds
// them, in time order, to the ideal limiter and to every contender, each on
// its own goroutine. It stops early when ctx is done, with an
// *InterruptedError that wraps ctx's error.
func Run(ctx context.Context, sc *Scenario, opts ...Option) (*Result, error) {
	cfg := runConfig{chunk: 8192}
	for _, o := range opts {
		o(&cfg)
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	replays, past, err := sc.loadReplays(ctx)
	if err != nil {
		return nil, err
	}
	if err := sc.checkBin(); err != nil {
		return nil, err
	}
	// The focus key must be one the traffic can send to: the count charts
	// and the CSV's window columns follow it.
	// A run whose only sources are empty replays sends to no key at all.
	keys, focused, sends := 0, false, false
	for _, s := range sc.Traffic {
		keys = max(keys, s.KeyOffset+s.Keys)
		if s.Kind != SourceReplay {
			sends = true
			focused = focused || s.KeyOffset <= sc.FocusKey && sc.FocusKey < s.KeyOffset+s.Keys
		}
	}
	for _, rp := range replays {
		sends = sends || len(rp) > 0
		for _, a := range rp {
			keys = max(keys, int(a.key)+1)
			focused = focused || int(a.key) == sc.FocusKey
		}
	}
	if sends && !focused {
		return nil, sc.errorf(0, "focus_key: no traffic source sends to key %d (their keys: %s), so the count charts and the CSV's window columns would show a key without requests; set focus_key to one of theirs", sc.FocusKey, sc.trafficKeys(replays))
	}
	keys = max(keys, sc.FocusKey+1)
	if err := sc.checkKeyTables(keys); err != nil {
		return nil, err
	}
	if err := sc.checkRequests(); err != nil {
		return nil, err
	}
	bins := int((sc.Duration.us() + sc.Bin.us() - 1) / sc.Bin.us())

	ideal := Contender{Name: "ideal (perfect sliding window)", Algorithm: "sliding_log"}
	idealSc := *sc
	idealSc.Contenders = []Contender{ideal}
	idealSc.validated = false
	if err := idealSc.validateContender(0); err != nil {
		return nil, err
	}
	ideal = idealSc.Contenders[0]

	off := &offered{r: newRecorder(sc, bins, keys)}
	off.r.seriesOnly = true
	engines := []engine{off}
	specs := []*Contender{{Name: "offered", Strategy: "-", Algorithm: "-"}, &ideal}
	ie, err := newEngine(sc, &ideal, newRecorder(sc, bins, keys), keys, 0)
	if err != nil {
		return nil, err
	}
	// A contender that is the plain sliding log decides exactly as the ideal
	// does: run it once and report it twice.
	twin := -1
	for i, c := range sc.Contenders {
		if c.Strategy == StrategySingle && c.kind == ideal.kind {
			twin = i
			break
		}
	}
	if twin < 0 {
		engines = append(engines, ie)
	}
	for i := range sc.Contenders {
		c := &sc.Contenders[i]
		e, err := newEngine(sc, c, newRecorder(sc, bins, keys), keys, i+1)
		if err != nil {
			return nil, sc.errorf(c.line, "%s (%s): %v", c.where(i, ""), c.Name, err)
		}
		engines = append(engines, e)
		specs = append(specs, c)
	}

	if err := feed(ctx, sc, replays, engines, cfg, newProgress(cfg.progress, sc.Duration.D())); err != nil {
		return nil, err
	}
	res := &Result{Scenario: sc, Keys: off.keys, ReplayPast: past}
	if twin >= 0 {
		specs = append(specs[:1], specs[2:]...)
	}
	for i, e := range engines {
		if err := e.err(); err != nil {
			return nil, err
		}
		r := e.rec()
		cr := ContenderResult{Name: specs[i].Name, Strategy: specs[i].Strategy, Algorithm: specs[i].Algorithm, Metrics: r.m, Series: r.s}
		if i == 0 {
			res.Offered = cr
		} else {
			res.Contenders = append(res.Contenders, cr)
		}
	}
	idealRec := ie.rec()
	if twin >= 0 {
		res.Ideal = res.Contenders[twin]
		res.Ideal.Series.Estimate = nil
		res.Ideal.Name, res.Ideal.Strategy, res.Ideal.Algorithm = ideal.Name, ideal.Strategy, ideal.Algorithm
		idealRec = engines[1+twin].rec()
	} else {
		res.Ideal, res.Contenders = res.Contenders[0], res.Contenders[1:]
	}
	for i := range res.Contenders {
		c := &res.Contenders[i]
		if i != twin {
			c.Metrics.compareUnits(engines[len(engines)-len(res.Contenders)+i].rec().keys, idealRec.keys)
		}
	}
	if cfg.worst {
		if err := worstWindows(ctx, sc, replays, cfg, res, &ideal, bins, keys); err != nil {
			if ie := (*InterruptedError)(nil); errors.As(err, &ie) {
				ie.Worst, ie.Result = true, res
			}
			return nil, err
		}
	}
	return res, nil
}

// worstWindows fills in ContenderResult.Worst: the contenders whose worst
// key is the focus key already have its series; the others run again,
// with the same salts (so the same random choices), following their worst
// key, beside one ideal per such key.
func worstWindows(ctx context.Context, sc *Scenario, replays [][]arrival, cfg runConfig, res *Result, ideal *Contender, bins, keys int) error {
	var engines []engine
	var follow []int // per engine: the contender index, or -1 for an ideal
	idealOf := map[int]int{}
	for i, c := range res.Contenders {
		m := c.Metrics
		if m.MaxWindow <= sc.Limit {
			continue
		}
		if m.MaxWindowKey == sc.FocusKey {
			c.Worst = &KeyWindow{Key: sc.FocusKey, Window: c.Series.Window, Ideal: res.Ideal.Series.Window}
			res.Contenders[i] = c
			continue
		}
		newRec := func() *recorder {
			r := newRecorder(sc, bins, keys)
			r.focus = m.MaxWindowKey
			return r
		}
		if _, ok := idealOf[m.MaxWindowKey]; !ok {
			e, err := newEngine(sc, ideal, newRec(), keys, 0)
			if err != nil {
				return err
			}
			idealOf[m.MaxWindowKey] = len(engines)
			engines, follow = append(engines, e), append(follow, -1)
		}
		e, err := newEngine(sc, &sc.Contenders[i], newRec(), keys, i+1)
		if err != nil {
			return err
		}
		engines, follow = append(engines, e), append(follow, i)
	}
	if len(engines) == 0 {
		return nil
	}
	if err := feed(ctx, sc, replays, engines, cfg, newProgress(nil, 0)); err != nil {
		return err
	}
	for j, e := range engines {
		if follow[j] < 0 {
			continue
		}
		c := &res.Contenders[follow[j]]
		key := c.Metrics.MaxWindowKey
		c.Worst = &KeyWindow{Key: key, Window: e.rec().s.Window, Ideal: engines[idealOf[key]].rec().s.Window}
	}
	return nil
}

// feed generates (or replays) the arrivals and hands them, in time order,
// to every engine, each on its own goroutine, and finishes them.
func feed(ctx context.Context, sc *Scenario, replays [][]arrival, engines []engine, cfg runConfig, bar *progress) error {
	var err error
	// Up to 16 chunks are in flight; they are made as needed, so that a
	// small run allocates little.
	free := make(chan *chunk, 16)
	made := 0
	nextChunk := func() *chunk {
		select {
		case ch := <-free:
			return ch
		default:
		}
		if made < cap(free) {
			made++
			return &chunk{arr: make([]arrival, 0, cfg.chunk)}
		}
		return <-free
	}
	inputs := make([]chan *chunk, len(engines))
	var wg sync.WaitGroup
	for i, e := range engines {
		inputs[i] = make(chan *chunk, cap(free))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ch := range inputs[i] {
				for _, a := range ch.arr {
					e.arrive(a)
				}
				if ch.refs.Add(-1) == 0 {
					free <- ch
				}
			}
			e.finish()
		}()
	}

	tr := newTraffic(sc, replays)
	more := true
	var fed int64
	var reached time.Duration
	for more {
		if err = ctx.Err(); err != nil {
			err = &InterruptedError{Simulated: reached, Requests: fed, Duration: sc.Duration.D(), Err: err}
			break
		}
		ch := nextChunk()
		ch.arr, more = tr.fill(ch.arr[:0])
		if len(ch.arr) == 0 {
			free <- ch
			continue
		}
		ch.refs.Store(int32(len(engines)))
		for _, in := range inputs {
			in <- ch
		}
		fed += int64(len(ch.arr))
		reached = time.Duration(ch.arr[len(ch.arr)-1].t) * time.Microsecond
		bar.update(reached)
	}
	for _, in := range inputs {
		close(in)
	}
	wg.Wait()
	bar.done(err == nil)
	if err != nil {
		return err
	}
	for _, e := range engines {
		if err := e.err(); err != nil {
			return err
		}
	}
	return nil
}

// progress draws "[=====>    ]  45%  27m0s of 1h0m0s simulated" on one
// line, redrawn at most five times a second.
type progress struct {
	w     io.Writer
	total time.Duration
	last  time.Time
	drawn bool
}

func newProgress(w io.Writer, total time.Duration) *progress {
	return &progress{w: w, total: total, last: time.Now()}
}

func (p *progress) update(at time.Duration) {
	if p.w == nil || time.Since(p.last) < 200*time.Millisecond {
		return
	}
	p.last = time.Now()
	p.draw(at)
}

func (p *progress) draw(at time.Duration) {
	frac := 1.0
	if p.total > 0 {
		frac = min(1, float64(at)/float64(p.total))
	}
	const width = 30
	n := int(frac * width)
	bar := strings.Repeat("=", n)
	if n < width {
		bar += ">" + strings.Repeat(" ", width-n-1)
	}
	fmt.Fprintf(p.w, "\r[%s] %3d%%  %v of %v simulated", bar, int(frac*100), at.Truncate(time.Second), p.total)
	p.drawn = true
}

func (p *progress) done(ok bool) {
	if p.w == nil || !p.drawn {
		return
	}
	if ok {
		p.draw(p.total)
	}
	fmt.Fprintln(p.w)
}

// maxKeyTableBytes bounds the memory a run may need for its per-key
// tables; a variable so that tests can lower it.
var maxKeyTableBytes int64 = 8 << 30

// checkKeyTables refuses a run whose per-key tables would not fit in
// maxKeyTableBytes. Every contender, the ideal and the offered traffic keep
// a table indexed by key up to the highest key index (not only the keys
// that receive requests), and a distributed contender one more per
// instance: the memory grows with keys × contenders × instances whatever
// the number of requests, and a run over millions of keys would otherwise
// exhaust the machine's memory and be killed.
func (sc *Scenario) checkKeyTables(keys int) error {
	logBytes := int64(unsafe.Sizeof(keyLog{})) + 8*int64(unsafe.Sizeof(logEntry{})) // a log's first ring
	stateBytes := int64(unsafe.Sizeof(algo.State{}))
	k := int64(sc.Instances)
	for _, e := range sc.Events {
		k = max(k, int64(e.Instances))
	}
	perKey := 2 * logBytes // the offered traffic and the ideal
	for _, c := range sc.Contenders {
		perKey += logBytes
		switch c.Strategy {
		case StrategySingle, StrategyCentral:
			// The state lives in the log's table.
		case StrategyLease:
			perKey += stateBytes + max(k, int64(c.Instances))*int64(unsafe.Sizeof(leaseState{}))
		default:
			perKey += stateBytes + max(k, int64(c.Instances))*stateBytes
		}
	}
	if need := int64(keys) * perKey; need > maxKeyTableBytes {
		return sc.errorf(0, "%s × %s, the ideal and the offered traffic (up to %s) need about %s of per-key tables, over the bound of %s: simulate fewer keys (a sample of them behaves alike), fewer contenders or fewer instances",
			count(keys, "key"), count(len(sc.Contenders), "contender"), count(k, "instance"), fmtBytes(need), fmtBytes(maxKeyTableBytes))
	}
	return nil
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", (n+1023)/1024)
}

// trafficKeys lists the key ranges of sc's sources for an error message:
// "0-9, 100-109".
func (sc *Scenario) trafficKeys(replays [][]arrival) string {
	var parts []string
	r := 0
	for _, s := range sc.Traffic {
		lo, hi := s.KeyOffset, s.KeyOffset+s.Keys-1
		if s.Kind == SourceReplay {
			if r >= len(replays) || len(replays[r]) == 0 {
				r++
				continue
			}
			lo, hi = int(replays[r][0].key), int(replays[r][0].key)
			for _, a := range replays[r] {
				lo, hi = min(lo, int(a.key)), max(hi, int(a.key))
			}
			r++
		}
		if lo == hi {
			parts = append(parts, fmt.Sprint(lo))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", lo, hi))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// maxGeneratedRequests bounds the requests a run's generated sources are
// expected to offer; a variable so that tests can lower it.
var maxGeneratedRequests = 1e10

// checkRequests refuses a run whose generated sources are expected to offer
// more than maxGeneratedRequests requests: the simulator decides a few
// hundred thousand to a few million requests a second, so such a run would
// go on for hours (--rate 1e7 over 400 days: 3.5 × 10^14 requests, years).
// Replays are bounded by maxReplayRequests.
func (sc *Scenario) checkRequests() error {
	var total float64
	for _, s := range sc.Traffic {
		if s.Kind == SourceReplay {
			continue
		}
		to := sc.Duration.D().Seconds()
		if s.To > 0 {
			to = min(to, s.To.D().Seconds())
		}
		span := max(0, to-s.From.D().Seconds())
		rate, peak := float64(s.Rate), float64(s.Peak)
		switch s.Kind {
		case SourceBursts:
			on, off := s.On.D().Seconds(), s.Off.D().Seconds()
			total += rate * span * on / (on + off)
		case SourceDiurnal, SourceRamp:
			total += (rate + peak) / 2 * span
		case SourceFlash:
			total += rate*span + (peak-rate)*(s.Rise.D().Seconds()/2+s.Hold.D().Seconds()+s.Decay.D().Seconds())
		default:
			total += rate * span
		}
	}
	if total > maxGeneratedRequests {
		return sc.errorf(0, "the traffic would offer about %.3g requests, over the bound of %.3g (hours of work at the simulator's half a million or so a second): a shorter %s, a lower rate, or the same shape scaled down (divide the rates and the limit by the same factor)",
			total, maxGeneratedRequests, sc.field("duration"))
	}
	return nil
}
