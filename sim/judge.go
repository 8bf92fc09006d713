package sim

import "github.com/floodgate/floodgate/algo"

// The judge: every decision a contender makes is checked against a perfect
// sliding window over what that same contender has admitted. An admission
// that makes some key's units in (t-Period, t] exceed Limit is an
// over-admission; a rejection of a request that would have fitted is an
// under-admission. Admitted requests count at the instant they proceed
// (after a shaper's delay or a store round trip), which is what the
// protected service sees.

// Metrics sums up one contender's run.
type Metrics struct {
	// Requests and Units are the decisions made and the units asked for.
	Requests, Units int64
	// Admitted and AdmittedUnits count the admitted requests and their units.
	Admitted, AdmittedUnits int64
	// Over counts admitted requests that pushed their key over Limit in the
	// trailing Period; Under counts rejected requests that would have fitted.
	Over, Under int64
	// MaxWindow is the most units any one key had admitted within any span of
	// Period; WorstOver is max(0, MaxWindow - Limit). MaxWindowKey is that
	// key (the first to reach MaxWindow).
	MaxWindow, WorstOver int64
	MaxWindowKey         int
	// ExcessUnits and MissingUnits compare the units admitted with the
	// ideal's key by key over the whole run: the units admitted beyond what
	// the ideal admitted for the same key, and the units short of it,
	// summed over the keys. Unlike Over and Under, which count decisions,
	// they do not grow with the offered load. Zero for the ideal.
	ExcessUnits, MissingUnits int64
	// LatencySum and LatencyMax (µs) are the delays added to admitted
	// requests: shaping, pacing, waiting for a store or a lease.
	LatencySum, LatencyMax int64
	// StoreCalls counts round trips to a shared store and messages to a
	// broker: one per decision for central, one per lease and per refund
	// for lease, one per admitted request for async.
	StoreCalls int64
}

// Wrong is the share of decisions that differ from what a perfect sliding
// window would have decided given the same history, in [0, 1]. Under
// overload it grows with the requests refused, even for a contender that
// admits exactly the ideal's units; see ExcessUnits and MissingUnits.
func (m Metrics) Wrong() float64 { return ratio(m.Over+m.Under, m.Requests) }

// CallsPerDecision is StoreCalls ÷ Requests.
func (m Metrics) CallsPerDecision() float64 { return ratio(m.StoreCalls, m.Requests) }

// MeanLatency is the mean added latency of admitted requests, in µs.
func (m Metrics) MeanLatency() float64 { return ratio(m.LatencySum, m.Admitted) }

// compareUnits fills m's ExcessUnits and MissingUnits from the units each
// key had admitted by the contender (keys) and by the ideal.
func (m *Metrics) compareUnits(keys, ideal []keyLog) {
	for k := range max(len(keys), len(ideal)) {
		var got, want int64
		if k < len(keys) {
			got = keys[k].admitted
		}
		if k < len(ideal) {
			want = ideal[k].admitted
		}
		if got > want {
			m.ExcessUnits += got - want
		} else {
			m.MissingUnits += want - got
		}
	}
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Series holds one contender's time series, one value per bin.
type Series struct {
	// Admitted is the units that proceeded during the bin.
	Admitted []int64
	// Rejected is the requests rejected during the bin.
	Rejected []int64
	// Over and Under are the wrong decisions made during the bin.
	Over, Under []int64
	// Window is the focus key's admitted units in the Period ending at the
	// bin's end.
	Window []int64
	// AllWindow is every key's admitted units together in the Period ending
	// at the bin's end: divided by Period, the admitted rate smoothed over
	// one window. When Period is a multiple of Bin it is the sum of the
	// last Period ÷ Bin bins of Admitted (a unit that proceeds exactly at a
	// bin's end counts in the next bin), except at the end of a last bin
	// cut short by the run's end, where those bins would cover less than
	// the Period.
	AllWindow []int64
	// Estimate, for fixed and sliding windows on one limiter, is the count
	// the algorithm itself believes the focus key's traffic has reached at
	// the bin's end, fed every arrival and never limiting (the articles'
	// comparison); nil otherwise.
	Estimate []float64
}

func newSeries(n int) Series {
	return Series{
		Admitted: make([]int64, n), Rejected: make([]int64, n),
		Over: make([]int64, n), Under: make([]int64, n),
		Window: make([]int64, n), AllWindow: make([]int64, n),
	}
}

// keyLog is one key's admitted units in the trailing window, oldest first,
// in a ring whose size is a power of two. Admissions at the same instant
// share an entry: only the sums over windows matter.
type keyLog struct {
	ring    []logEntry
	head, n int
	oldest  int64 // ring[head].t, kept here so that a prune with nothing to drop reads no ring
	sum     int64
	pending int64 // admitted units that have not proceeded yet
	// admitted is the key's units admitted over the run (proceeded).
	admitted int64
	// state is the algorithm state of a one-limiter engine (single,
	// central), kept beside the judge's log of the same key: one cache
	// miss per decision instead of two.
	state algo.State
}

type logEntry struct{ t, c int64 }

func (k *keyLog) prune(cut int64) {
	if k.n == 0 || k.oldest > cut {
		return
	}
	mask := len(k.ring) - 1
	for k.n > 0 && k.ring[k.head].t <= cut {
		k.sum -= k.ring[k.head].c
		k.head = (k.head + 1) & mask
		k.n--
	}
	if k.n > 0 {
		k.oldest = k.ring[k.head].t
	}
}

func (k *keyLog) push(t, c int64) {
	k.sum += c
	mask := len(k.ring) - 1
	if k.n > 0 {
		if last := &k.ring[(k.head+k.n-1)&mask]; last.t == t {
			last.c += c
			return
		}
	}
	if k.n == len(k.ring) {
		ring := make([]logEntry, max(8, 2*len(k.ring)))
		for i := range k.n {
			ring[i] = k.ring[(k.head+i)&mask]
		}
		k.ring, k.head = ring, 0
		mask = len(ring) - 1
	}
	k.ring[(k.head+k.n)&mask] = logEntry{t, c}
	if k.n == 0 {
		k.oldest = t
	}
	k.n++
}

// proceedItem is an admitted request waiting to proceed.
type proceedItem struct {
	t    int64
	key  int32
	cost int64
}

// recorder judges one contender's decisions and fills its series. Calls
// come in non-decreasing time order.
type recorder struct {
	limit, period, bin, end int64
	focus                   int
	keys                    []keyLog
	all                     keyLog        // every key's admissions together, when binsPerPeriod is 0
	binsPerPeriod           int           // Period ÷ Bin when it divides evenly
	seriesOnly              bool          // judge no key but the focus key (the offered traffic)
	waiting                 []proceedItem // a min-heap by t
	nextSample              int           // index of the next bin end to sample
	m                       Metrics
	s                       Series
	sampleHook              func(b int64) float64

	// tail, when hasTail (binsPerPeriod is not 0 and the last bin is cut
	// short by the run's end), sums the units proceeding in
	// (end - Period, end]: that bin's AllWindow, which the bins do not tile.
	tail    int64
	hasTail bool
}

func newRecorder(sc *Scenario, bins, keys int) *recorder {
	r := &recorder{
		limit: sc.Limit, period: sc.Period.us(), bin: sc.Bin.us(), end: sc.Duration.us(),
		focus: sc.FocusKey,
		keys:  make([]keyLog, min(max(keys, sc.FocusKey+1), 1<<16)), // more grow on demand
		s:     newSeries(bins),
	}
	if r.period%r.bin == 0 {
		r.binsPerPeriod = int(r.period / r.bin)
		r.hasTail = r.end%r.bin != 0
	}
	return r
}

func (r *recorder) key(k int32) *keyLog {
	if int(k) >= len(r.keys) {
		r.keys = append(r.keys, make([]keyLog, int(k)+1-len(r.keys))...)
	}
	return &r.keys[k]
}

func (r *recorder) binOf(t int64) int {
	i := int(t / r.bin)
	if i >= len(r.s.Admitted) {
		return -1
	}
	return i
}

// sampleAt is the end of bin i (the run's end for a partial last bin).
func (r *recorder) sampleAt(i int) int64 {
	return min(int64(i+1)*r.bin, r.end)
}

// advance lets everything strictly before now happen: admitted requests
// proceed and bin ends are sampled. Requests due exactly at now proceed too.
func (r *recorder) advance(now int64) {
	for {
		b := int64(-1)
		if r.nextSample < len(r.s.Window) {
			b = r.sampleAt(r.nextSample)
		}
		if len(r.waiting) > 0 && r.waiting[0].t <= now && (b < 0 || r.waiting[0].t <= b) {
			it := r.pop()
			r.proceed(it.t, it.key, it.cost)
			r.key(it.key).pending -= it.cost
			continue
		}
		if b >= 0 && b < now {
			r.sample(b)
			continue
		}
		return
	}
}

func (r *recorder) sample(b int64) {
	i := r.nextSample
	r.nextSample++
	k := r.key(int32(r.focus))
	k.prune(b - r.period)
	r.s.Window[i] = k.sum
	if r.hasTail && b == r.end {
		r.s.AllWindow[i] = r.tail
	} else if r.binsPerPeriod > 0 {
		// The bins tile the window exactly (up to the instant of the edges):
		// sum the last Period ÷ Bin of them.
		var sum int64
		for j := max(0, i+1-r.binsPerPeriod); j <= i; j++ {
			sum += r.s.Admitted[j]
		}
		r.s.AllWindow[i] = sum
	} else {
		r.all.prune(b - r.period)
		r.s.AllWindow[i] = r.all.sum
	}
	if r.sampleHook != nil {
		r.s.Estimate[i] = r.sampleHook(b)
	}
}

// decide records a decision made at now about a request that arrived at
// arrived; an admitted one proceeds at proceed (>= now).
func (r *recorder) decide(now, arrived int64, key int32, cost int64, allowed bool, proceed int64) {
	if now > r.waitingOrSampleDue() {
		r.advance(now)
	}
	r.m.Requests++
	r.m.Units += cost
	k := r.key(key)
	if !allowed {
		k.prune(now - r.period)
		i := r.binOf(now)
		if k.sum+k.pending+cost <= r.limit {
			r.m.Under++
			if i >= 0 {
				r.s.Under[i]++
			}
		}
		if i >= 0 {
			r.s.Rejected[i]++
		}
		return
	}
	r.m.Admitted++
	r.m.AdmittedUnits += cost
	lat := proceed - arrived
	r.m.LatencySum += lat
	r.m.LatencyMax = max(r.m.LatencyMax, lat)
	if proceed <= now {
		r.proceed(now, key, cost)
		return
	}
	k.pending += cost
	r.push(proceedItem{t: proceed, key: key, cost: cost})
}

// waitingOrSampleDue is the earliest instant before which nothing is due.
func (r *recorder) waitingOrSampleDue() int64 {
	due := int64(1<<62 - 1)
	if r.nextSample < len(r.s.Window) {
		due = r.sampleAt(r.nextSample)
	}
	if len(r.waiting) > 0 && r.waiting[0].t-1 < due {
		due = r.waiting[0].t - 1
	}
	return due
}

func (r *recorder) proceed(t int64, key int32, cost int64) {
	i := r.binOf(t)
	if i >= 0 {
		r.s.Admitted[i] += cost
	}
	if r.binsPerPeriod == 0 {
		r.all.push(t, cost)
	} else if r.hasTail && t > r.end-r.period && t <= r.end {
		r.tail += cost
	}
	if r.seriesOnly && int(key) != r.focus {
		return
	}
	k := r.key(key)
	k.admitted += cost
	k.prune(t - r.period)
	if k.sum+cost > r.limit {
		r.m.Over++
		if i >= 0 {
			r.s.Over[i]++
		}
	}
	k.push(t, cost)
	if k.sum > r.m.MaxWindow {
		r.m.MaxWindow = k.sum
		r.m.MaxWindowKey = int(key)
		r.m.WorstOver = max(0, k.sum-r.limit)
	}
}

// finish lets everything up to the end of the run happen, and admitted
// requests still waiting proceed after it.
func (r *recorder) finish() {
	r.advance(r.end)
	for r.nextSample < len(r.s.Window) {
		r.sample(r.sampleAt(r.nextSample))
	}
	for len(r.waiting) > 0 {
		it := r.pop()
		r.proceed(it.t, it.key, it.cost)
		r.key(it.key).pending -= it.cost
	}
}

func (r *recorder) push(it proceedItem) {
	h := append(r.waiting, it)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p].t <= h[i].t {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	r.waiting = h
}

func (r *recorder) pop() proceedItem {
	h := r.waiting
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	i := 0
	for {
		l, m := 2*i+1, i
		if l < n && h[l].t < h[m].t {
			m = l
		}
		if l+1 < n && h[l+1].t < h[m].t {
			m = l + 1
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	r.waiting = h
	return top
}
