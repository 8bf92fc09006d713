package policy

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// Lease is the part of an admitted Response's concurrency slots held on
// one store key: everything Engine.ReleaseLeases needs to give them back,
// from any process that shares the store. It lets a caller that cannot
// keep the Response (the server's /v1 API hands it out as a token) release
// later, elsewhere.
type Lease struct {
	// Key is the store key of the concurrency limit.
	Key string
	// Cost is the number of slots held on Key (at least 1).
	Cost int64
	// ID is the lease the slots were taken under: a random non-zero value
	// drawn per decision, which is what makes a Lease hard to forge.
	ID uint64
	// Limit is the concurrency limit's number of slots.
	Limit int64
	// TTL is the limit's effective lease TTL: the slots come back on their
	// own that long after the decision.
	TTL time.Duration
}

// Leases returns the concurrency slots the response holds, one Lease per
// store key; nil when it holds none (Holds is false). The slice is the
// caller's.
func (r Response) Leases() []Lease {
	if len(r.leases) == 0 {
		return nil
	}
	out := make([]Lease, len(r.leases))
	for i, q := range r.leases {
		out[i] = Lease{Key: q.Key, Cost: q.Cost, ID: q.Lease, Limit: q.Limit.Params().Limit, TTL: q.Limit.Window(0)}
	}
	return out
}

// LeaseTTL is the shortest effective lease TTL among the concurrency
// slots the response holds: how often a caller that keeps them must renew
// (Engine.Renew) at the latest. Zero when it holds none.
func (r Response) LeaseTTL() time.Duration {
	var ttl time.Duration
	for i, q := range r.leases {
		if d := q.Limit.Window(0); i == 0 || d < ttl {
			ttl = d
		}
	}
	return ttl
}

// LeaseError is ReleaseLeases' error for a lease it refuses; it wraps
// ErrBadRequest and the reason.
type LeaseError struct {
	// Index is the lease's index in the slice given to ReleaseLeases.
	Index int
	// Err says what is wrong with it.
	Err error
}

// Error reads "<ErrBadRequest>: lease <Index>: <Err>".
func (e *LeaseError) Error() string {
	return fmt.Sprintf("%v: lease %d: %v", ErrBadRequest, e.Index, e.Err)
}

// Unwrap returns ErrBadRequest and the reason, for errors.Is and As.
func (e *LeaseError) Unwrap() []error { return []error{ErrBadRequest, e.Err} }

// ReleaseLeases gives back the slots of leases, as Release does for the
// Response they came from. Releasing twice, or after the slots expired,
// is a no-op. Every lease is checked before any store call, and a
// *LeaseError names the first bad one: an ID of 0 (the anonymous lease,
// which only expires), a cost below 1, a key this Engine did not build for
// a concurrency limit (outside its key prefix, or whose fingerprint names
// another algorithm), or a limit that does not compile.
func (e *Engine) ReleaseLeases(ctx context.Context, leases []Lease) error {
	reqs, err := e.leaseRequests(leases)
	if err != nil {
		return err
	}
	if len(reqs) == 0 {
		return nil
	}
	return e.st.Release(ctx, reqs)
}

// RenewLeases extends the slots of leases to expire their TTL from now,
// as Renew does for the Response they came from, with the same checks as
// ReleaseLeases; a TTL longer than any concurrency limit of the key's
// domain has is cut to the longest that one has. Renewing leases that
// were released or have expired is a no-op: they are not revived. When the store is not a store.Renewer it
// checks the leases and does nothing more.
func (e *Engine) RenewLeases(ctx context.Context, leases []Lease) error {
	reqs, err := e.leaseRequests(leases)
	if err != nil {
		return err
	}
	rn, ok := e.st.(store.Renewer)
	if len(reqs) == 0 || !ok {
		return nil
	}
	// A renewal extends slots by the TTL it carries, and a token's TTL is
	// the client's to forge: never by more than this configuration's
	// longest concurrency lease, or a forged TTL of centuries would hold
	// every slot of a key long after its holder is gone.
	for i := range reqs {
		ttl, longest := reqs[i].Limit.Window(0), e.longestLeaseTTL(reqs[i].Key)
		if ttl <= longest {
			continue
		}
		if longest <= 0 {
			return &LeaseError{Index: i, Err: fmt.Errorf("no concurrency limit of this configuration has a lease TTL of %v", ttl)}
		}
		lim, err := e.leaseLimit(reqs[i].Key, leases[i].Limit, longest)
		if err != nil {
			return &LeaseError{Index: i, Err: fmt.Errorf("no concurrency limit of this configuration has a lease TTL of %v", ttl)}
		}
		reqs[i].Limit = lim
	}
	return rn.Renew(ctx, reqs)
}

// leaseDomain returns the escaped domain of key, which passed
// concurrencyKey.
func (e *Engine) leaseDomain(key string) string {
	rest := strings.TrimPrefix(key, e.o.prefix)
	dom, _, _ := strings.Cut(rest[:strings.IndexByte(rest, '#')], "|")
	return dom
}

// leaseLimit returns the concurrency limit of n slots and an effective
// lease TTL of ttl for a lease on key (which passed concurrencyKey): the
// configuration's own compiled limit when a rule in force of key's domain
// has one (overrides and scales included), else one compiled for the
// lease, as for a rule a reload removed or changed. Reusing the
// configuration's limit matters to stores that cache per *algo.Limit
// (store/redis): a limit compiled per lease released or renewed would
// churn their caches. A concurrency limit's store state depends on its
// slots and TTL only, so either limit releases and renews the same.
func (e *Engine) leaseLimit(key string, n int64, ttl time.Duration) (*algo.Limit, error) {
	for l := range e.leaseLimits(key) {
		if l.Params().Limit == n && l.Window(0) == ttl {
			return l, nil
		}
	}
	return algo.Compile(algo.Params{Algorithm: algo.Concurrency, Limit: n, LeaseTTL: ttl})
}

// leaseLimits yields the concurrency limits, overrides and scales applied,
// of the rules in force of the domain of key (which passed concurrencyKey).
func (e *Engine) leaseLimits(key string) iter.Seq[*algo.Limit] {
	return func(yield func(*algo.Limit) bool) {
		snap := e.snap.Load()
		if snap.cfg == nil {
			return
		}
		dom := e.leaseDomain(key)
		var buf [64]byte
		last, in, seen := "", false, false
		for _, r := range snap.cfg.rules {
			if r.index < 0 {
				continue
			}
			if !seen || r.Domain != last { // a domain's rules come together: escape each once
				last, in, seen = r.Domain, string(appendEscaped(buf[:0], r.Domain)) == dom, true
			}
			if !in {
				continue
			}
			rl := snap.limits[r.index]
			for _, ls := range [2][]*algo.Limit{{rl.rate, rl.ceil, rl.lend}, rl.pools} {
				for _, l := range ls {
					if l != nil && l.Algorithm() == algo.Concurrency && !yield(l) {
						return
					}
				}
			}
		}
	}
}

// longestLeaseTTL is the longest effective lease TTL among the
// concurrency limits (overrides included) of the domain key belongs to, 0
// if it has none. key passed concurrencyKey.
func (e *Engine) longestLeaseTTL(key string) time.Duration {
	var longest time.Duration
	for l := range e.leaseLimits(key) {
		longest = max(longest, l.Window(0))
	}
	return longest
}

// leaseRequests checks every lease before any store call and rebuilds
// their store requests; a *LeaseError names the first bad one.
func (e *Engine) leaseRequests(leases []Lease) ([]store.Request, error) {
	reqs := make([]store.Request, len(leases))
	for i, l := range leases {
		q, err := e.leaseRequest(l)
		if err != nil {
			return nil, &LeaseError{Index: i, Err: err}
		}
		reqs[i] = q
	}
	return reqs, nil
}

// leaseRequest validates l and rebuilds the store request that releases it.
func (e *Engine) leaseRequest(l Lease) (store.Request, error) {
	switch {
	case l.ID == 0:
		return store.Request{}, fmt.Errorf("lease id 0 is the anonymous lease, which cannot be released")
	case l.Cost < 1:
		return store.Request{}, fmt.Errorf("cost %d: want at least 1 slot", l.Cost)
	}
	if err := e.concurrencyKey(l.Key); err != nil {
		return store.Request{}, err
	}
	lim, err := e.leaseLimit(l.Key, l.Limit, l.TTL)
	if err != nil {
		return store.Request{}, err
	}
	return store.Request{Key: l.Key, Limit: lim, Cost: l.Cost, Lease: l.ID}, nil
}

// concurrencyKey checks that key is one this Engine builds for a
// concurrency limit: its prefix, then the escaped domain and entries
// (which hold no '#'), then '#' and a fingerprint naming the algorithm
// (see appendBaseKey and fingerprint). The check matters because a release
// is not authenticated beyond its lease id: a store told to release on a
// key holding another algorithm's state may treat that state as corrupt
// and drop it (the Redis scripts delete a key of the wrong type), which
// would hand its budget back to whoever forged the lease.
func (e *Engine) concurrencyKey(key string) error {
	rest, ok := strings.CutPrefix(key, e.o.prefix)
	if !ok {
		return fmt.Errorf("key %q is outside the key prefix %q", key, e.o.prefix)
	}
	_, fp, ok := strings.Cut(rest, "#")
	if !ok {
		return fmt.Errorf("key %q has no limit fingerprint ('#'): not a key of a rule", key)
	}
	if !strings.HasPrefix(fp, algo.Concurrency.String()+":") {
		return fmt.Errorf("key %q is not a concurrency limit's key (its fingerprint is %q)", key, fp)
	}
	return nil
}
