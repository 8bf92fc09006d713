package sim

import (
	"fmt"
	"math/rand/v2"

	"github.com/floodgate/floodgate/algo"
)

// epoch is the absolute time (µs since the Unix epoch) of the start of every
// run: midnight UTC, a multiple of every period that divides a day, so that
// fixed windows of a minute or an hour start with the run.
const epoch = int64(19676) * 86400 * 1_000_000

// engine runs one contender over the arrivals, in time order.
type engine interface {
	arrive(a arrival)
	finish()
	rec() *recorder
	err() error
}

// fifo is a queue of events due in the order they were pushed.
type fifo[T any] struct {
	buf  []T
	head int
}

func (q *fifo[T]) push(v T)    { q.buf = append(q.buf, v) }
func (q *fifo[T]) empty() bool { return q.head == len(q.buf) }
func (q *fifo[T]) peek() *T    { return &q.buf[q.head] }
func (q *fifo[T]) pop() (v T) {
	v = q.buf[q.head]
	q.head++
	if q.head > 256 && q.head*2 > len(q.buf) {
		q.buf = q.buf[:copy(q.buf, q.buf[q.head:])]
		q.head = 0
	}
	return v
}

// grow makes s long enough to index k.
func grow[T any](s []T, k int) []T {
	if k < len(s) {
		return s
	}
	return append(s, make([]T, k+1-len(s))...)
}

// single is one limiter: the algorithm alone, as a library user in one
// process would run it.
type single struct {
	r        *recorder
	lim      *algo.Limit // states live beside the judge's logs: recorder.key(k).state
	hold     int64
	releases fifo[release]
	seq      uint64
	est      *estimator
}

type release struct {
	t     int64
	key   int32
	lease uint64
}

func newSingle(sc *Scenario, c *Contender, r *recorder, keys int) (*single, error) {
	lim, err := c.compile(sc.Limit, sc.Period)
	if err != nil {
		return nil, err
	}
	e := &single{r: r, lim: lim, hold: c.Hold.us()}
	switch c.kind {
	case algo.FixedWindow, algo.SlidingWindow:
		est, err := newEstimator(c, sc)
		if err != nil {
			return nil, err
		}
		e.est = est
		r.s.Estimate = make([]float64, len(r.s.Window))
		r.sampleHook = est.sample
	}
	return e, nil
}

func (e *single) rec() *recorder { return e.r }
func (e *single) err() error     { return nil }
func (e *single) finish()        { e.r.finish() }

func (e *single) arrive(a arrival) {
	for !e.releases.empty() && e.releases.peek().t <= a.t {
		rl := e.releases.pop()
		e.lim.Release(&e.r.key(rl.key).state, epoch+rl.t, rl.lease)
	}
	st := &e.r.key(a.key).state
	cost := int64(a.cost)
	var d algo.Decision
	if e.lim.Algorithm() == algo.Concurrency {
		e.seq++
		d = e.lim.TakeLease(st, epoch+a.t, cost, e.seq)
		if d.Allowed {
			e.releases.push(release{t: a.t + e.hold, key: a.key, lease: e.seq})
		}
	} else {
		d = e.lim.Take(st, epoch+a.t, cost)
	}
	e.r.decide(a.t, a.t, a.key, cost, d.Allowed, a.t+d.Delay.Microseconds())
	if e.est != nil && int(a.key) == e.r.focus {
		e.est.observe(a)
	}
}

// estimator is the counting view of the articles' figures: the real
// algorithm fed every arrival of the focus key with a limit it never
// reaches, read back with Peek.
type estimator struct {
	lim   *algo.Limit
	huge  int64
	state algo.State
}

func newEstimator(c *Contender, sc *Scenario) (*estimator, error) {
	const huge = 1 << 40
	lim, err := c.compile(huge, sc.Period)
	if err != nil {
		return nil, err
	}
	return &estimator{lim: lim, huge: huge}, nil
}

func (e *estimator) observe(a arrival) { e.lim.Take(&e.state, epoch+a.t, int64(a.cost)) }

func (e *estimator) sample(b int64) float64 {
	d := e.lim.Peek(&e.state, epoch+b, 0)
	return float64(e.huge - d.Remaining)
}

// balancer spreads requests over the K instances of a cluster.
type balancer struct {
	policy  string
	k       int
	rr      int
	rng     *rand.Rand
	weights []int
	current []int
	seed    uint64
	epoch   int32
	owner   []int32 // sticky: the instance of each key, valid when ownerEp matches
	ownerEp []int32
}

func newBalancer(c *Contender, seed uint64, salt int) *balancer {
	return &balancer{
		policy:  c.Balancer,
		k:       c.Instances,
		rng:     rand.New(rand.NewPCG(seed, 0xba1a0000+uint64(salt))),
		weights: c.Weights,
		seed:    seed,
		epoch:   1,
	}
}

func (b *balancer) resize(k int) {
	b.k = k
	b.rr %= k
	b.current = nil
	b.epoch++
}

func (b *balancer) pick(key int32) int {
	switch b.policy {
	case BalanceRandom:
		return b.rng.IntN(b.k)
	case BalanceWeighted:
		return b.weighted()
	case BalanceSticky:
		return b.sticky(key)
	}
	i := b.rr
	b.rr = (b.rr + 1) % b.k
	return i
}

// weighted is nginx's smooth weighted round robin: deterministic, and
// spreads the picks of each instance evenly over time.
func (b *balancer) weighted() int {
	if b.current == nil {
		b.current = make([]int, b.k)
	}
	best, total := -1, 0
	for i := range b.k {
		w := 1
		if i < len(b.weights) {
			w = b.weights[i]
		}
		b.current[i] += w
		total += w
		if best < 0 || b.current[i] > b.current[best] {
			best = i
		}
	}
	b.current[best] -= total
	return best
}

// sticky is rendezvous hashing: a key goes to the instance with the highest
// hash of (key, instance), so adding instances only moves keys to the new
// ones.
func (b *balancer) sticky(key int32) int {
	b.owner = grow(b.owner, int(key))
	b.ownerEp = grow(b.ownerEp, int(key))
	if b.ownerEp[key] == b.epoch {
		return int(b.owner[key])
	}
	best, bestH := 0, uint64(0)
	for i := range b.k {
		h := mix(b.seed ^ uint64(key)<<20 ^ uint64(i))
		if i == 0 || h > bestH {
			best, bestH = i, h
		}
	}
	b.owner[key], b.ownerEp[key] = int32(best), b.epoch
	return best
}

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// cluster is what every distributed strategy shares: K instances, a load
// balancer and the scale events.
type cluster struct {
	r      *recorder
	sc     *Scenario
	c      *Contender
	lb     *balancer
	k      int
	events []Event
	ei     int
	fail   error
}

func newCluster(sc *Scenario, c *Contender, r *recorder, salt int) cluster {
	return cluster{r: r, sc: sc, c: c, lb: newBalancer(c, sc.Seed, salt), k: c.Instances, events: sc.Events}
}

func (cl *cluster) rec() *recorder { return cl.r }
func (cl *cluster) err() error     { return cl.fail }

// nextEvent is the time of the next scale event, or false.
func (cl *cluster) nextEvent() (int64, bool) {
	if cl.ei < len(cl.events) {
		return cl.events[cl.ei].At.us(), true
	}
	return 0, false
}

// scale applies the next scale event and returns the new K.
func (cl *cluster) scale() int {
	e := cl.events[cl.ei]
	cl.ei++
	cl.k = e.Instances
	cl.lb.resize(cl.k)
	return cl.k
}

// central decides every request on one store: exact for an exact
// algorithm, at the price of a round trip per decision.
type central struct {
	cluster
	lim *algo.Limit // the store's states: recorder.key(k).state
	rtt int64
}

func (e *central) arrive(a arrival) {
	for t, ok := e.nextEvent(); ok && t <= a.t; t, ok = e.nextEvent() {
		e.scale()
	}
	cost := int64(a.cost)
	// The store decides half a round trip after the request arrived; with a
	// constant round trip, stores see requests in arrival order.
	d := e.lim.Take(&e.r.key(a.key).state, epoch+a.t+e.rtt/2, cost)
	e.r.m.StoreCalls++
	e.r.decide(a.t, a.t, a.key, cost, d.Allowed, a.t+e.rtt+d.Delay.Microseconds())
}

func (e *central) finish() { e.r.finish() }

// local gives each instance limit ÷ K of its own, or with share full the
// whole limit.
type local struct {
	cluster
	lim    *algo.Limit
	states [][]algo.State
}

func (e *local) compile() {
	for len(e.states) < e.k {
		e.states = append(e.states, nil)
	}
	if e.c.Share == ShareFull {
		if e.lim == nil {
			e.lim, e.fail = e.c.compile(e.sc.Limit, e.sc.Period)
		}
		return
	}
	k := int64(e.k)
	c := *e.c
	if c.Burst > 0 {
		c.Burst = max(1, c.Burst/k)
	}
	lim, err := c.compile(max(1, e.sc.Limit/k), e.sc.Period)
	if err != nil {
		e.fail = fmt.Errorf("%s: limit ÷ %d: %w", e.c.Name, k, err)
		return
	}
	e.lim = lim
}

func (e *local) arrive(a arrival) {
	for t, ok := e.nextEvent(); ok && t <= a.t; t, ok = e.nextEvent() {
		e.scale()
		e.compile()
	}
	if e.fail != nil {
		return
	}
	i := e.lb.pick(a.key)
	e.states[i] = grow(e.states[i], int(a.key))
	cost := int64(a.cost)
	d := e.lim.Take(&e.states[i][a.key], epoch+a.t, cost)
	e.r.decide(a.t, a.t, a.key, cost, d.Allowed, a.t+d.Delay.Microseconds())
}

func (e *local) finish() { e.r.finish() }

// sticky pins each key to one instance that enforces the whole limit; a
// key that moves when the cluster scales starts afresh on its new instance.
type sticky struct {
	cluster
	lim    *algo.Limit
	states [][]algo.State
}

func (e *sticky) arrive(a arrival) {
	for t, ok := e.nextEvent(); ok && t <= a.t; t, ok = e.nextEvent() {
		k := e.scale()
		for len(e.states) < k {
			e.states = append(e.states, nil)
		}
	}
	i := e.lb.pick(a.key)
	e.states[i] = grow(e.states[i], int(a.key))
	cost := int64(a.cost)
	d := e.lim.Take(&e.states[i][a.key], epoch+a.t, cost)
	e.r.decide(a.t, a.t, a.key, cost, d.Allowed, a.t+d.Delay.Microseconds())
}

func (e *sticky) finish() { e.r.finish() }

// async decides locally on a shared count that lags: each instance
// publishes its admissions to a broker, an aggregator counts them with the
// real algorithm, and instances read that count, Lag behind, plus their
// own admissions not yet counted (the Kafka design of the articles).
type async struct {
	cluster
	limit   int64
	counter *algo.Limit // the contender's algorithm with a limit it never reaches
	huge    int64
	global  []algo.State
	// logs, for the sliding log, count instead of counter: its exact
	// count is the units delivered in (now - Period, now], and the real
	// algorithm holds at most 2^20 of them, fewer than an overshoot past
	// a limit near 2^20 delivers (the deliveries it refused were lost).
	logs      []keyLog
	period    int64
	pending   [][]int64 // per instance, per key: own admissions not yet delivered
	lag       int64
	delivered fifo[delivery]
}

type delivery struct {
	t    int64
	inst int32
	key  int32
	cost int64
}

func (e *async) run(now int64) {
	for {
		te, okE := e.nextEvent()
		okD := !e.delivered.empty() && e.delivered.peek().t <= now
		switch {
		case okE && te <= now && (!okD || te <= e.delivered.peek().t):
			k := e.scale()
			for len(e.pending) < k {
				e.pending = append(e.pending, nil)
			}
		case okD:
			d := e.delivered.pop()
			if e.logs != nil {
				e.logs[d.key].push(d.t, d.cost)
			} else {
				e.counter.Take(&e.global[d.key], epoch+d.t, d.cost)
			}
			e.pending[d.inst][d.key] -= d.cost
		default:
			return
		}
	}
}

func (e *async) arrive(a arrival) {
	e.run(a.t)
	i := e.lb.pick(a.key)
	e.pending[i] = grow(e.pending[i], int(a.key))
	cost := int64(a.cost)
	var seen int64
	if e.logs != nil {
		e.logs = grow(e.logs, int(a.key))
		k := &e.logs[a.key]
		k.prune(a.t - e.period)
		seen = k.sum
	} else {
		e.global = grow(e.global, int(a.key))
		seen = e.huge - e.counter.Peek(&e.global[a.key], epoch+a.t, 0).Remaining
	}
	ok := seen+e.pending[i][a.key]+cost <= e.limit
	if ok {
		e.pending[i][a.key] += cost
		e.delivered.push(delivery{t: a.t + e.lag, inst: int32(i), key: a.key, cost: cost})
		e.r.m.StoreCalls++
	}
	e.r.decide(a.t, a.t, a.key, cost, ok, a.t)
}

func (e *async) finish() { e.r.finish() }

// lease lets each instance take slices of budget from a central store and
// spend them locally; unused units go back when the lease expires, or
// before the next lease when they are too few for a request. When the
// store refuses, the instance rejects that key's requests that cost as
// much or more locally until the store's retry time. As in store/lease, a
// request that cannot be leased goes to the store on its own (see
// leasable).
type lease struct {
	cluster
	lim     *algo.Limit
	forward bool // the algorithm is not leased: every request goes to the store
	store   []algo.State
	leases  [][]leaseState // per instance, per key
	size    int64
	ttl     int64
	rtt     int64
	grants  fifo[grant]
	expires fifo[expiry]
}

type leaseState struct {
	balance   int64
	gen       int32
	at        int64 // when the store granted the current lease
	denyUntil int64 // the store refused: reject locally until then
	denyCost  int64 // the cost it refused: smaller requests still ask it
	inflight  bool
	waiters   []arrival
}

type grant struct {
	t, at         int64
	inst, key     int32
	granted, want int64
	retry         int64 // when nothing was granted: how long until one unit fits
}

type expiry struct {
	t         int64
	inst, key int32
	gen       int32
}

func (e *lease) slot(i int, key int32) *leaseState {
	for len(e.leases) <= i {
		e.leases = append(e.leases, nil)
	}
	e.leases[i] = grow(e.leases[i], int(key))
	return &e.leases[i][key]
}

func (e *lease) run(now int64) {
	for {
		best, bt := 0, int64(0)
		if t, ok := e.nextEvent(); ok && t <= now {
			best, bt = 1, t
		}
		if !e.expires.empty() && e.expires.peek().t <= now && (best == 0 || e.expires.peek().t < bt) {
			best, bt = 2, e.expires.peek().t
		}
		if !e.grants.empty() && e.grants.peek().t <= now && (best == 0 || e.grants.peek().t < bt) {
			best = 3
		}
		switch best {
		case 1:
			e.scale()
		case 2:
			x := e.expires.pop()
			ls := e.slot(int(x.inst), x.key)
			if ls.gen == x.gen && ls.balance > 0 {
				e.lim.Refund(&e.store[x.key], epoch+x.t, epoch+ls.at, ls.balance)
				e.r.m.StoreCalls++
				ls.balance = 0
			}
		case 3:
			e.granted(e.grants.pop())
		default:
			return
		}
	}
}

// fetch asks the store for a lease big enough for the first waiter.
func (e *lease) fetch(i int, key int32, now int64) {
	ls := e.slot(i, key)
	want := max(e.size, int64(ls.waiters[0].cost))
	at := now + e.rtt/2
	st := &e.store[key]
	if ls.balance > 0 {
		// As store/lease: the units left, too few for the waiter, go back
		// at the time they were charged before a new lease is taken;
		// units charged at different times cannot be given back as one.
		e.lim.Refund(st, epoch+at, epoch+ls.at, ls.balance)
		e.r.m.StoreCalls++
		ls.balance = 0
	}
	var got int64
	d := e.lim.Take(st, epoch+at, want)
	switch {
	case d.Allowed:
		got = want
	case d.Remaining >= int64(ls.waiters[0].cost):
		// Take what is left; one script on a real store does both steps.
		if e.lim.Take(st, epoch+at, d.Remaining).Allowed {
			got = d.Remaining
		}
	}
	var retry int64
	if got == 0 {
		retry = e.lim.Peek(st, epoch+at, int64(ls.waiters[0].cost)).RetryAfter.Microseconds()
	}
	e.r.m.StoreCalls++
	ls.inflight = true
	e.grants.push(grant{t: now + e.rtt, at: at, inst: int32(i), key: key, granted: got, want: want, retry: retry})
}

func (e *lease) granted(g grant) {
	ls := e.slot(int(g.inst), g.key)
	ls.inflight = false
	if g.granted == 0 && g.retry > 0 {
		// Remember the refusal, as an instance caches keys already over
		// their limit, instead of asking the store again for every request.
		ls.denyUntil, ls.denyCost = g.at+g.retry, int64(ls.waiters[0].cost)
	}
	if g.granted > 0 {
		ls.balance += g.granted
		ls.gen++
		ls.at = g.at
		e.expires.push(expiry{t: g.t + e.ttl, inst: g.inst, key: g.key, gen: ls.gen})
	}
	n := 0
	for _, w := range ls.waiters {
		if int64(w.cost) > ls.balance {
			break
		}
		ls.balance -= int64(w.cost)
		e.r.decide(g.t, w.t, w.key, int64(w.cost), true, g.t)
		n++
	}
	ls.waiters = ls.waiters[:copy(ls.waiters, ls.waiters[n:])]
	if len(ls.waiters) == 0 {
		return
	}
	if g.granted == g.want {
		e.fetch(int(g.inst), g.key, g.t) // the store had more: ask again
		return
	}
	for _, w := range ls.waiters {
		e.r.decide(g.t, w.t, w.key, int64(w.cost), false, g.t)
	}
	ls.waiters = ls.waiters[:0]
}

// leasable reports whether store/lease decides requests of kind k from
// slices: not the shaper and the Smooth algorithms, whose admitted requests
// carry a delay that depends on when they arrive (a slice taken ahead would
// lose it). The sliding log, which store/lease does not lease either, is
// leased here; see docs/SIM.md's known limits.
func leasable(k algo.Kind) bool {
	switch k {
	case algo.Shaper, algo.SmoothBursty, algo.SmoothWarmup:
		return false
	}
	return true
}

func (e *lease) arrive(a arrival) {
	e.run(a.t)
	e.store = grow(e.store, int(a.key))
	i := e.lb.pick(a.key)
	cost := int64(a.cost)
	if e.forward || cost > e.size {
		// store/lease hands the request to the shared store unchanged: one
		// round trip, and the store's delay on top.
		d := e.lim.Take(&e.store[a.key], epoch+a.t+e.rtt/2, cost)
		e.r.m.StoreCalls++
		e.r.decide(a.t, a.t, a.key, cost, d.Allowed, a.t+e.rtt+d.Delay.Microseconds())
		return
	}
	ls := e.slot(i, a.key)
	if len(ls.waiters) == 0 && ls.balance >= cost {
		ls.balance -= cost
		e.r.decide(a.t, a.t, a.key, cost, true, a.t)
		return
	}
	if len(ls.waiters) == 0 && a.t < ls.denyUntil && cost >= ls.denyCost {
		e.r.decide(a.t, a.t, a.key, cost, false, a.t)
		return
	}
	ls.waiters = append(ls.waiters, a)
	if !ls.inflight {
		e.fetch(i, a.key, a.t)
	}
}

func (e *lease) finish() {
	e.run(1 << 62)
	e.r.finish()
}

// newEngine builds the engine of contender c.
func newEngine(sc *Scenario, c *Contender, r *recorder, keys, salt int) (engine, error) {
	if c.Strategy == StrategySingle {
		return newSingle(sc, c, r, keys)
	}
	lim, err := c.compile(sc.Limit, sc.Period)
	if err != nil {
		return nil, err
	}
	cl := newCluster(sc, c, r, salt)
	switch c.Strategy {
	case StrategyCentral:
		return &central{cluster: cl, lim: lim, rtt: c.RTT.us()}, nil
	case StrategyLocal:
		e := &local{cluster: cl}
		e.compile()
		return e, e.fail
	case StrategySticky:
		return &sticky{cluster: cl, lim: lim, states: make([][]algo.State, cl.k)}, nil
	case StrategyAsync:
		e := &async{cluster: cl, limit: sc.Limit, pending: make([][]int64, cl.k), lag: c.Lag.us(), period: sc.Period.us()}
		if c.kind == algo.SlidingLog {
			e.logs = make([]keyLog, min(keys, 1<<16))
			return e, nil
		}
		e.huge = 1 << 40
		if e.counter, err = c.compile(e.huge, sc.Period); err != nil {
			return nil, err
		}
		e.global = make([]algo.State, min(keys, 1<<16))
		return e, nil
	case StrategyLease:
		return &lease{cluster: cl, lim: lim, forward: !leasable(c.kind), store: make([]algo.State, min(keys, 1<<16)),
			size: c.LeaseSize, ttl: c.LeaseTTL.us(), rtt: c.RTT.us()}, nil
	}
	return nil, fmt.Errorf("unknown strategy %q", c.Strategy)
}

// offered admits everything: its series are the traffic itself, and its
// window is the perfect count of the focus key's requests.
type offered struct {
	r    *recorder
	seen []bool
	keys int
}

func (e *offered) arrive(a arrival) {
	e.seen = grow(e.seen, int(a.key))
	if !e.seen[a.key] {
		e.seen[a.key] = true
		e.keys++
	}
	e.r.decide(a.t, a.t, a.key, int64(a.cost), true, a.t)
}
func (e *offered) finish()        { e.r.finish() }
func (e *offered) rec() *recorder { return e.r }
func (e *offered) err() error     { return nil }
