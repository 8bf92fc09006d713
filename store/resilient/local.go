package resilient

import (
	"math"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/limitcache"
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
// keeps (see limitcache.Cache).
const maxShares = limitcache.Max

// share returns l divided by the instance count, compiled once per limit
// while it stays in use (see limitcache.Cache). A share is the divided
// limit's parameters and nothing else: the counts it decides live in the
// local store under the request's key, so a share dropped and compiled
// again decides on the same state as before.
func (s *Store) share(l *algo.Limit) *algo.Limit {
	if s.cfg.instances == 1 {
		return l
	}
	if d, ok := s.shares.Get(l); ok {
		return d
	}
	return s.shares.Put(l, Share(l, s.cfg.instances))
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
