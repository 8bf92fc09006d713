package resilient

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// divide returns reqs with each limit replaced by its local share.
func (s *Store) divide(reqs []store.Request) []store.Request {
	out := make([]store.Request, len(reqs))
	for i, r := range reqs {
		r.Limit = s.share(r.Limit)
		out[i] = r
	}
	return out
}

// maxShares bounds each of the two generations of local shares that share
// keeps (see shareCache). They are keyed by the limit, and a server
// compiles new limits on every reload and override (and a request-carried
// limit, past the policy's cache of them, on every request): kept without
// a bound, the shares of limits long gone would pile up for as long as the
// process runs.
const maxShares = 4096

// shareCache holds the local shares of limits in two generations of at
// most maxShares each, 2·maxShares in all. A share is looked for in the
// current generation, then in the previous one; only a share in neither is
// compiled, and goes into the current one. When the current one is full it
// becomes the previous one, and the previous one is dropped: a share goes
// after maxShares other shares at least have been compiled since its own.
//
// Only compiled shares fill a generation, so a set of live limits of up to
// 2·maxShares that stops changing turns the generations at most twice more
// and is then never compiled again. A share found in the previous
// generation is not copied into the current one: the copies would fill it
// and turn the generations with no new limit, dropping shares in use, so
// that a set of more than maxShares live limits would keep being compiled.
// (One map cleared when it filled, as before, compiled a share on nearly
// every decision of an outage past maxShares live limits: 11 allocations
// instead of none.)
//
// A share is the divided limit's parameters and nothing else: the counts
// it decides live in the local store under the request's key, so a share
// dropped and compiled again decides on the same state as before.
//
// The zero value is empty and ready; lookups take no lock, and a lock
// orders the turns of the generations.
type shareCache struct {
	gens   atomic.Pointer[shareGens]
	turnMu sync.Mutex
}

type shareGens struct {
	cur, prev *shareGen
}

// shareGen is one generation: m holds at most maxShares shares, each of
// which holds a place counted in n before it is stored (n may go past
// maxShares only by the places it refuses).
type shareGen struct {
	m sync.Map // *algo.Limit → *algo.Limit
	n atomic.Int64
}

// share returns l divided by the instance count, compiled once per limit
// while it stays in use (see shareCache).
func (s *Store) share(l *algo.Limit) *algo.Limit {
	if s.cfg.instances == 1 {
		return l
	}
	g := s.shares.load()
	if d, ok := g.cur.m.Load(l); ok {
		return d.(*algo.Limit)
	}
	if d, ok := g.prev.m.Load(l); ok {
		return d.(*algo.Limit)
	}
	return s.shares.put(g, l, Share(l, s.cfg.instances))
}

// load returns the generations, made on first use.
func (c *shareCache) load() *shareGens {
	if g := c.gens.Load(); g != nil {
		return g
	}
	c.gens.CompareAndSwap(nil, &shareGens{cur: new(shareGen), prev: new(shareGen)})
	return c.gens.Load()
}

// put stores d as l's share in the current generation, turning the
// generations first when it is full, and returns the share stored for l:
// d, or one another caller stored first (an equal one).
func (c *shareCache) put(g *shareGens, l, d *algo.Limit) *algo.Limit {
	for g.cur.n.Add(1) > maxShares {
		g = c.turn(g)
	}
	if v, loaded := g.cur.m.LoadOrStore(l, d); loaded {
		g.cur.n.Add(-1)
		return v.(*algo.Limit)
	}
	return d
}

// turn makes full's current generation the previous one under a new,
// empty current one, unless another caller has turned them already, and
// returns the generations now in use.
func (c *shareCache) turn(full *shareGens) *shareGens {
	c.turnMu.Lock()
	defer c.turnMu.Unlock()
	if g := c.gens.Load(); g != full {
		return g
	}
	g := &shareGens{cur: new(shareGen), prev: full.cur}
	c.gens.Store(g)
	return g
}

// Share returns the local share of l for one of n instances: its Limit
// becomes max(1, ⌊Limit ÷ n⌋), and so does the burst of the token bucket and
// GCRA; the shaper's queue (Burst) and its Delay become ⌊· ÷ n⌋; a token
// bucket's initial tokens are divided likewise. A SmoothBursty limit's
// capacity (its stored permits plus the free ticket) becomes
// max(1, ⌊Capacity ÷ n⌋): its MaxBurstSeconds is set so that it stores one
// permit fewer (none, to within 10⁻⁹ of a permit, at capacity 1); kept, it
// would store ⌊Limit ÷ n⌋ permits, and the n free tickets would make the
// shares admit n−1 more at once than l (32 for 17 at n = 16). SmoothWarmup
// keeps its WarmupPeriod: its stored permits slow it down. When the
// divided parameters do not compile, or n <= 1, l itself is returned.
func Share(l *algo.Limit, n int) *algo.Limit {
	if n <= 1 {
		return l
	}
	p := l.Params()
	div := func(v int64) int64 { return max(1, v/int64(n)) }
	p.Limit = div(p.Limit)
	switch p.Algorithm {
	case algo.TokenBucket, algo.GCRA:
		p.Burst = div(p.Burst)
		if p.InitialTokens != nil {
			it := min(*p.InitialTokens/int64(n), p.Burst)
			p.InitialTokens = &it
		}
	case algo.Shaper:
		p.Burst /= int64(n)
		p.Delay = min(p.Delay/int64(n), p.Burst)
	case algo.SmoothBursty:
		return shareBursty(l, p, div(l.Capacity()))
	}
	d, err := algo.Compile(p)
	if err != nil {
		return l
	}
	return d
}

// shareBursty compiles p, a SmoothBursty share of l at its divided Limit,
// with MaxBurstSeconds set for a capacity of want: want−1 stored permits
// are MaxBurstSeconds × Limit ÷ Period. The float64 quotient may fall a
// hair short of want−1 permits, which truncate to one fewer; a few steps
// up to the next float64 give the exact capacity, never more.
func shareBursty(l *algo.Limit, p algo.Params, want int64) *algo.Limit {
	perm := float64(p.Period) / float64(time.Second) / float64(p.Limit) // seconds per permit
	stored := float64(want - 1)
	if want <= 1 {
		stored = 1e-9 // MaxBurstSeconds must be > 0; 0 is the default, 1 s
	}
	p.MaxBurstSeconds = stored * perm
	var d *algo.Limit
	for range 4 {
		c, err := algo.Compile(p)
		if err != nil || c.Capacity() > want {
			break
		}
		d = c
		if c.Capacity() == want {
			break
		}
		p.MaxBurstSeconds = math.Nextafter(p.MaxBurstSeconds, math.Inf(1))
	}
	if d == nil {
		// Not compiled at want (a MaxBurstSeconds past algo's bound):
		// capacity 1 keeps under the bound, l itself would not.
		p.MaxBurstSeconds = 1e-9 * perm
		c, err := algo.Compile(p)
		if err != nil {
			return l
		}
		d = c
	}
	return d
}
