package limiter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// Hit is one limit's part in an AllowAll: Cost units of Key under Limiter.
type Hit struct {
	// Limiter decides the hit. Required.
	Limiter *Limiter
	// Key is the key under Limiter (its key prefix and name are prefixed
	// to it: see Limiter.StoreKey).
	Key string
	// Cost is the number of units to take. Zero means 1, as
	// middleware.WithCost and policy descriptors have it, so that a Hit
	// written without a cost is charged rather than admitted for free
	// (unlike AllowN, whose n of 0 takes nothing); a negative cost is an
	// error wrapping store.ErrBadRequest.
	Cost int64
}

// Result is the outcome of AllowAll.
type Result struct {
	// Allowed reports that every hit was admitted and charged. When false,
	// none is charged.
	Allowed bool
	// Decisions holds one decision per hit, in order. After a refusal,
	// Decisions[i].Allowed says whether hit i alone would have passed and
	// Remaining is what it has with nothing charged (as store.Store.Take),
	// except for a hit that repeats the store key of an earlier hit (see
	// AllowAll): its decision is that of the costs of the hits on that key
	// up to it, added up, when they would be refused together. At least
	// one decision of a refusal is refused.
	Decisions []algo.Decision

	hits []Hit
	// charges says, for each hit, what giving it back needs (one slice for
	// the three, one allocation).
	charges []charge
	// cancelled is shared by the copies of an admitted Result (it is
	// returned and passed by value), so that only one Cancel gives back.
	cancelled *atomic.Bool
}

// charge is what giving one hit back needs: the store time of its charge,
// its Concurrency lease (0 otherwise), and whether a store's failure policy
// decided it (store.Result.Fallback: nothing to give back on the store).
type charge struct {
	at       int64
	lease    uint64
	fallback bool
}

// RetryAfter is the longest RetryAfter among the refused hits: when the
// whole acquisition could pass if nobody else takes meanwhile. It is zero
// when Allowed, and algo.Never when a hit's cost, or the added-up costs of
// the hits on a repeated store key, exceed its capacity: a refusal's
// RetryAfter is never zero.
func (r Result) RetryAfter() time.Duration {
	var after time.Duration
	for _, d := range r.Decisions {
		if !d.Allowed && d.RetryAfter > after {
			after = d.RetryAfter
		}
	}
	return after
}

// Cancel gives back everything an admitted AllowAll took (refunds, and
// releases of Concurrency leases); for SmoothBursty and SmoothWarmup hits
// the refund is inexact and leaves those limits stricter than before the
// take (see AllowAll and algo.Limit.Refund). It does nothing for a refusal, for the
// zero Result, or after a first Cancel on the Result or any copy of it,
// as Reservation.Cancel and Lease.Release: only the first call gives back
// (and reports the store's errors), even if it failed. Units a store's
// failure policy admitted (store.Result.Fallback) were not charged on the
// store and are not refunded there, here or in AllowAll's roll-back. After
// a Reset of a hit's key, the units go back to the state that followed, as
// Reservation.Cancel's do.
func (r Result) Cancel(ctx context.Context) error {
	if !r.Allowed || r.cancelled == nil || r.cancelled.Swap(true) {
		return nil
	}
	var errs []error
	for i := len(r.hits) - 1; i >= 0; i-- {
		h := r.hits[i]
		c := r.charges[i]
		errs = append(errs, h.Limiter.giveBack(ctx, h.Key, h.Cost, c.at, c.lease, c.fallback))
	}
	return errors.Join(errs...)
}

// storeGroup is the hits of AllowAll that share a store, in the order of
// their first appearance.
type storeGroup struct {
	st  store.Store
	idx []int
	// timeout bounds each store call over the group: the shortest
	// WithStoreTimeout among its hits' limiters; 0: none.
	timeout time.Duration
}

// sameStore reports whether a and b are the same store.Store value. ==
// would panic on two values of one uncomparable type, which a user's store
// wrapper passed by value can be (a struct holding a slice), also inside a
// comparable one (a struct whose interface field holds it): such values
// are never the same. The check is of the values (reflect.Value's
// Comparable looks into interfaces), not only of their type.
func sameStore(a, b store.Store) bool {
	t := reflect.TypeOf(a)
	if t != reflect.TypeOf(b) {
		return false
	}
	// A pointer, the usual store, compares without a look inside (and
	// without the allocations of reflect.ValueOf).
	if t != nil && t.Kind() != reflect.Pointer && !(reflect.ValueOf(a).Comparable() && reflect.ValueOf(b).Comparable()) {
		return false
	}
	return a == b
}

// bound returns ctx bounded by the group's timeout, as Limiter.bound.
func (g *storeGroup) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if g.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, g.timeout)
}

// AllowAll takes every hit or none: the building block of hierarchical
// limits (global → tenant → user → endpoint). When all the limiters share
// one store (the same store.Store value), it is one store Take, atomic in
// the store. Otherwise the hits are grouped by store and each group is
// taken in turn; when a group refuses, the groups already taken are given
// back (Refund, or Release for Concurrency leases) in reverse order and the
// groups not yet tried are peeked so that every decision is reported. In
// that case another caller may briefly see the units of a group that is
// being rolled back as taken. A store value that is not comparable (a
// struct value holding a slice, a map or a func, or an interface holding
// such a value) is the same value as no other, itself included: each of
// its hits is a group of its own.
//
// A store key (the same store.Store value and the same key prefix, name,
// separator and key: see Limiter.StoreKey) may appear in several hits: the
// same Limiter and key twice, two Limiters sharing a prefix and a name, or
// prefixes, names and keys whose concatenations meet.
// Their costs add up, as if one hit asked for their sum: two hits of cost
// 3 on a limit of 5 are refused although each alone would pass, and the
// later hit's decision reports the sum's refusal, with the RetryAfter of
// the sum, or algo.Never when the sum exceeds the capacity. (Package
// policy, by contrast, charges a key that several descriptors of a request
// name once, with the largest cost any of them asks; to get that here,
// merge such hits before calling AllowAll.)
//
// "None" is exact in units but, for the Smooth algorithms, not in state.
// A roll-back (like Result.Cancel) gives units back with store.Refund,
// which restores the windows, logs and buckets exactly but not SmoothBursty
// and SmoothWarmup (algo.Limit.Refund): it moves their ticket back by what
// the cost is worth at the stable rate, never before the store's now, and
// does not restore the stored permits the take spent, erring towards
// strictness. A refused AllowAll that took from such a limit in a group
// before the refusing one leaves it stricter than if it had not been
// called: a SmoothBursty limit lets fewer requests through without waiting,
// and a SmoothWarmup limit's ticket can stay ahead of now, so that its next
// admission waits (a Delay of up to about its warm-up period, where it
// would have had none) although nothing stays charged. Hits in one store
// are never rolled back: the store refuses them all before taking any.
// To avoid it, keep Smooth limits in one store with the others, or order
// the hits so that their store comes last (groups follow the order of
// each store's first hit): the last group is never rolled back.
//
// Concurrency hits are held under a new lease each; Result.Cancel releases
// them. An empty hits is admitted. With an error from a store's Take the
// Result is the zero Result (not Allowed); a refusal whose roll-back or
// peeks failed is returned with those errors, Allowed false.
func AllowAll(ctx context.Context, hits []Hit) (Result, error) {
	res := Result{
		Decisions: make([]algo.Decision, len(hits)),
		hits:      append([]Hit(nil), hits...),
		charges:   make([]charge, len(hits)),
	}
	var groups []storeGroup
	for i, h := range hits {
		if h.Limiter == nil {
			return Result{}, fmt.Errorf("limiter: AllowAll: hit %d: %w: nil limiter", i, store.ErrBadRequest)
		}
		if !h.Limiter.made() {
			return Result{}, fmt.Errorf("limiter: AllowAll: hit %d: %w", i, errNotMade)
		}
		if err := h.Limiter.checkCost(h.Cost); err != nil {
			return Result{}, fmt.Errorf("limiter: AllowAll: hit %d: %w", i, err)
		}
		if h.Cost == 0 {
			res.hits[i].Cost = 1
		}
		if h.Limiter.limit.Algorithm() == algo.Concurrency {
			id, err := h.Limiter.newLeaseID()
			if err != nil {
				return Result{}, fmt.Errorf("limiter: AllowAll: hit %d: %w", i, err)
			}
			res.charges[i].lease = id
		}
		g := 0
		for g < len(groups) && !sameStore(groups[g].st, h.Limiter.st) {
			g++
		}
		if g == len(groups) {
			groups = append(groups, storeGroup{st: h.Limiter.st})
		}
		groups[g].idx = append(groups[g].idx, i)
		if t := h.Limiter.timeout; t > 0 && (groups[g].timeout == 0 || t < groups[g].timeout) {
			groups[g].timeout = t
		}
	}
	request := func(i int) store.Request {
		h := res.hits[i]
		return store.Request{Key: h.Limiter.prefix + h.Key, Limit: h.Limiter.limit, Cost: h.Cost, Lease: res.charges[i].lease}
	}
	res.Allowed = true
	for gi, g := range groups {
		reqs := make([]store.Request, len(g.idx))
		for j, i := range g.idx {
			reqs[j] = request(i)
		}
		out := make([]algo.Decision, len(reqs))
		tctx, cancel := g.bound(ctx)
		r, err := g.st.Take(tctx, reqs, out)
		cancel()
		if err != nil {
			rerr := rollBack(ctx, &res, groups[:gi])
			return Result{}, errors.Join(fmt.Errorf("limiter: AllowAll: %w", err), rerr)
		}
		for j, i := range g.idx {
			res.Decisions[i] = out[j]
			res.charges[i].at, res.charges[i].fallback = r.At, r.Fallback
		}
		if r.Allowed {
			continue
		}
		res.Allowed = false
		errs := []error{rollBack(ctx, &res, groups[:gi])}
		// The store decided each hit alone: a key repeated in the group
		// can refuse though every hit on it passes alone.
		if err := addUpRepeats(ctx, g, &res, request); err != nil {
			errs = append(errs, err)
		}
		if !refusedAny(res.Decisions, g.idx) {
			// The added-up costs pass now: the units came back between the
			// Take and the Peek (or a store refused with no refused
			// decision). Name a refusing hit all the same, with the
			// shortest wait there is, rather than a refusal that says
			// retry in 0.
			i := g.idx[len(g.idx)-1]
			d := res.Decisions[i]
			d.Allowed, d.RetryAfter, d.Delay = false, time.Microsecond, 0
			res.Decisions[i] = d
		}
		// Report what the groups not tried would have decided.
		for _, later := range groups[gi+1:] {
			reqs := make([]store.Request, len(later.idx))
			for j, i := range later.idx {
				reqs[j] = request(i)
			}
			out := make([]algo.Decision, len(reqs))
			pctx, cancel := later.bound(ctx)
			err := later.st.Peek(pctx, reqs, out)
			cancel()
			if err != nil {
				errs = append(errs, fmt.Errorf("limiter: AllowAll: peek: %w", err))
				continue
			}
			for j, i := range later.idx {
				res.Decisions[i] = store.Unwind(out[j], res.hits[i].Cost)
			}
			if err := addUpRepeats(ctx, later, &res, request); err != nil {
				errs = append(errs, err)
			}
		}
		return res, errors.Join(errs...)
	}
	res.cancelled = new(atomic.Bool)
	return res, nil
}

// addUpRepeats replaces the decision of each hit of g that repeats the
// store key of an earlier hit of g by the Peek of the costs of the hits on
// that key up to it, added up, when that Peek refuses: the store charges a
// repeated key the sum of its hits' costs (see AllowAll), so a refusal of
// the sum must be reported, with the sum's RetryAfter (algo.Never beyond
// the capacity), where every hit alone passes.
func addUpRepeats(ctx context.Context, g storeGroup, res *Result, request func(int) store.Request) error {
	if len(g.idx) < 2 {
		return nil
	}
	var (
		sums map[string]int64
		idx  []int
		reqs []store.Request
	)
	for _, i := range g.idx {
		r := request(i)
		if sums == nil {
			sums = make(map[string]int64, len(g.idx))
		}
		sum, seen := sums[r.Key]
		if sum += r.Cost; sum < 0 {
			sum = math.MaxInt64 // overflow: beyond any capacity
		}
		sums[r.Key] = sum
		if seen {
			r.Cost, r.Lease = sum, 0
			idx, reqs = append(idx, i), append(reqs, r)
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	out := make([]algo.Decision, len(reqs))
	ctx, cancel := g.bound(ctx)
	defer cancel()
	if err := g.st.Peek(ctx, reqs, out); err != nil {
		return fmt.Errorf("limiter: AllowAll: peek: %w", err)
	}
	for j, i := range idx {
		if !out[j].Allowed {
			res.Decisions[i] = out[j]
		}
	}
	return nil
}

// refusedAny reports whether a decision of the hits idx is refused.
func refusedAny(ds []algo.Decision, idx []int) bool {
	for _, i := range idx {
		if !ds[i].Allowed {
			return true
		}
	}
	return false
}

// rollBack gives back what the groups took, last first, and reports their
// decisions as if nothing had been charged.
func rollBack(ctx context.Context, res *Result, groups []storeGroup) error {
	var errs []error
	ctx = context.WithoutCancel(ctx) // a cancelled caller must not leave units taken
	for g := len(groups) - 1; g >= 0; g-- {
		for _, i := range groups[g].idx {
			h := res.hits[i]
			c := res.charges[i]
			if err := h.Limiter.giveBack(ctx, h.Key, h.Cost, c.at, c.lease, c.fallback); err != nil {
				errs = append(errs, err)
			}
			res.Decisions[i] = store.Unwind(res.Decisions[i], h.Cost)
		}
	}
	return errors.Join(errs...)
}
