package resilient

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/algo"
)

const cacheShards = 64

// overLimit remembers keys the store refused until their RetryAfter, but
// trusts each refusal for ttl at most: another instance may reset the key
// meanwhile (an admin reset deletes the store's state, not this cache).
//
// resets counts the resets of any key (see reset): a refusal is put only
// by a call that read the same count before it went to the store, so that
// a Take in flight during a Reset of its key cannot put back the refusal
// the Reset has just dropped (the key would be refused for up to ttl on
// this instance although reset). One count for the whole cache keeps a
// Take free of a per-request epoch: a reset costs the Takes then in
// flight on other keys their caching, one store call each at most.
type overLimit struct {
	seed     maphash.Seed
	perShard int
	ttl      int64 // µs
	resets   atomic.Uint64
	shards   [cacheShards]cacheShard
}

type cacheShard struct {
	mu sync.Mutex
	m  map[string]cached
}

type cached struct {
	lim   *algo.Limit
	cost  int64 // the smallest cost refused
	until int64 // µs: when the refused cost may pass again
	trust int64 // µs: when the store must be asked again: min(until, at+ttl)
	at    int64 // µs: when it was refused
	dec   algo.Decision
}

func newOverLimit(keys int, ttl time.Duration) *overLimit {
	c := &overLimit{seed: maphash.MakeSeed(), perShard: max(1, (keys+cacheShards-1)/cacheShards),
		ttl: max(1, int64(ttl/time.Microsecond))}
	for i := range c.shards {
		c.shards[i].m = make(map[string]cached)
	}
	return c
}

func (c *overLimit) shard(key string) *cacheShard {
	return &c.shards[maphash.String(c.seed, key)%cacheShards]
}

// get returns the cached refusal of cost on key under lim at now (µs),
// adjusted to now, if there is one (ok: a refusal of a cost no larger
// under the same limit). exact reports that its RetryAfter is the one the
// store would give cost: the refused cost itself, or a larger one under a
// fixed window, which refuses until its end whatever the cost it can
// pass. Under the other algorithms a larger cost waits longer (a token
// bucket's by the time its extra tokens take: 4.9 s, not 0.9 s, for 5
// tokens at 1 a second where 1 was refused), and a cost above MaxCost
// never passes: the refusal stands, but its RetryAfter would be too short.
func (c *overLimit) get(key string, lim *algo.Limit, cost, now int64) (d algo.Decision, ok, exact bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[key]
	if ok && (now >= e.trust || now < e.at) {
		// Past its trust, or refused in the future: the wall clock
		// stepped back (an NTP correction), and the entry would refuse
		// for as long as the step, with a RetryAfter as long.
		delete(sh.m, key)
		ok = false
	}
	sh.mu.Unlock()
	if !ok || e.lim != lim || cost < e.cost {
		return algo.Decision{}, false, false
	}
	d = e.dec
	d.Allowed = false
	d.RetryAfter = time.Duration(e.until-now) * time.Microsecond
	d.ResetAfter = max(0, d.ResetAfter-time.Duration(now-e.at)*time.Microsecond)
	d.Delay = 0
	exact = cost == e.cost || lim.Algorithm() == algo.FixedWindow && cost <= lim.MaxCost()
	return d, true, exact
}

// epoch returns the count of resets, to pass to put by a call that reads
// it before it goes to the store.
func (c *overLimit) epoch() uint64 { return c.resets.Load() }

// put remembers that cost on key was refused at now with decision d, by a
// call that read epoch before it went to the store; nothing is put if a
// key has been reset since (the refusal may predate the reset).
func (c *overLimit) put(key string, lim *algo.Limit, cost, now int64, d algo.Decision, epoch uint64) {
	if d.Allowed || d.IsNever() || d.RetryAfter <= 0 || cost <= 0 || lim.Algorithm() == algo.Concurrency {
		return
	}
	until := now + int64((d.RetryAfter+time.Microsecond-1)/time.Microsecond)
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// Under the shard's lock: reset counts before it takes the lock to
	// drop, so a put that sees the old count inserts before that drop.
	if c.resets.Load() != epoch {
		return
	}
	if old, ok := sh.m[key]; ok && old.lim == lim && old.cost < cost && old.trust > now && old.at <= now {
		return // the smaller refused cost is the more useful entry
	}
	if _, ok := sh.m[key]; !ok && len(sh.m) >= c.perShard {
		c.evict(sh, now)
	}
	sh.m[key] = cached{lim: lim, cost: cost, until: until, trust: min(until, now+c.ttl), at: now, dec: d}
}

// evict makes room in a full shard: every expired entry goes, else one
// entry, the first the map's iteration yields (an arbitrary one). Losing an
// entry costs one store call, never a wrong admission.
func (c *overLimit) evict(sh *cacheShard, now int64) {
	for k, e := range sh.m {
		if now >= e.trust || now < e.at {
			delete(sh.m, k)
		}
	}
	if len(sh.m) < c.perShard {
		return
	}
	for k := range sh.m {
		delete(sh.m, k)
		return
	}
}

// reset drops key for a Reset and counts the reset, so that the calls in
// flight then put no refusal (see put). Reset calls it before and after
// the store's reset: a Take that went to the store in between may have
// been refused on the state the reset deletes.
func (c *overLimit) reset(key string) {
	c.resets.Add(1)
	c.drop(key)
}

func (c *overLimit) drop(key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}

func (c *overLimit) len() int {
	n := 0
	for i := range c.shards {
		c.shards[i].mu.Lock()
		n += len(c.shards[i].m)
		c.shards[i].mu.Unlock()
	}
	return n
}
