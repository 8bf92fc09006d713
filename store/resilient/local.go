package resilient

import (
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

// maxShares bounds the shares share keeps. They are keyed by the limit,
// and a server compiles new limits on every reload and override (and a
// request-carried limit, past the policy's cache of them, on every
// request): kept without a bound, the shares of limits long gone would
// pile up for as long as the process runs. Past the bound the kept
// shares are dropped, and each is compiled again at its next use.
const maxShares = 4096

// share returns l divided by the instance count, compiled once per limit
// (see maxShares).
func (s *Store) share(l *algo.Limit) *algo.Limit {
	n := int64(s.cfg.instances)
	if n == 1 {
		return l
	}
	if d, ok := s.divided.Load(l); ok {
		return d.(*algo.Limit)
	}
	d := Share(l, s.cfg.instances)
	if s.shares.Add(1) > maxShares {
		s.divided.Clear()
		s.shares.Store(1)
	}
	if prev, loaded := s.divided.LoadOrStore(l, d); loaded {
		return prev.(*algo.Limit)
	}
	return d
}

// Share returns the local share of l for one of n instances: its Limit
// becomes max(1, ⌊Limit ÷ n⌋), and so does the burst of the token bucket and
// GCRA; the shaper's queue (Burst) and its Delay become ⌊· ÷ n⌋; a token
// bucket's initial tokens are divided likewise. When the divided parameters
// do not compile, or n <= 1, l itself is returned.
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
	}
	d, err := algo.Compile(p)
	if err != nil {
		return l
	}
	return d
}
