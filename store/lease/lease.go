package lease

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// Defaults of the options.
const (
	// DefaultSlice is how many units a Store takes from the shared store
	// at a time.
	DefaultSlice = 10
	// DefaultTTL is how long a slice may be used before its unused units
	// go back to the shared store.
	DefaultTTL = time.Second
)

// ErrInvalidOption is wrapped by New's errors for an option out of range.
var ErrInvalidOption = errors.New("lease: invalid option")

// Option configures New.
type Option func(*config)

type config struct {
	slice int64
	ttl   time.Duration
	clock func() time.Time
}

// WithSlice sets how many units are taken from the shared store at a time
// (default DefaultSlice; at least 2 — a slice of 1 is no lease).
func WithSlice(n int64) Option { return func(c *config) { c.slice = n } }

// WithTTL sets how long a slice may be used (default DefaultTTL): its
// unused units then go back to the shared store. It bounds how long a unit
// is charged before it is admitted.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithClock replaces the monotonic clock that expires slices (tests).
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// Stats counts what a Store did since New.
type Stats struct {
	// Local is the number of decisions made in process: admissions from
	// a slice and refusals repeated from the shared store's.
	Local int64
	// Takes is the number of Takes sent to the shared store for leased
	// keys (slices and exact retries); pass-through calls are not counted.
	Takes int64
	// Returned is the number of unused units given back to the shared
	// store (expired slices, Close, Reset excluded).
	Returned int64
	// Keys is the number of keys with a slice or a remembered refusal.
	Keys int
}

// Store is a store.Store that leases slices of each key's budget from
// another; see the package documentation. It is safe for concurrent use.
type Store struct {
	inner store.Store
	slice int64
	ttl   time.Duration
	clock func() time.Time
	seed  maphash.Seed

	shards [64]shard

	local, takes, returned atomic.Int64

	// closed is set when Close begins: a Take that then holds its key's
	// lock decides nothing from a slice, and takes none, so that Close's
	// give-back, which takes each key's lock after it, leaves none held.
	closed atomic.Bool

	stop chan struct{}
	done chan struct{}
	once sync.Once
	// life bounds the janitor's give-backs; Close ends it when its own
	// time is up.
	life    context.Context
	endLife context.CancelFunc
}

// pass is what pass-through Takes charged on a key under limit at the
// store's instant at, and no refund gave back.
type pass struct {
	at    int64
	limit *algo.Limit
	n     int64
}

// passed returns the units pass-through Takes charged on e's key under
// l at at and no refund gave back, and where they are counted (nil for
// none). e's lock is held.
func (e *entry) passed(at int64, l *algo.Limit) *int64 {
	for i := range e.passes {
		if p := &e.passes[i]; p.at == at && p.limit == l && at != 0 {
			return &p.n
		}
	}
	return nil
}

// errClosed is Take's error once Close has begun.
var errClosed = fmt.Errorf("lease store: %w", store.ErrClosed)

type shard struct {
	mu sync.Mutex
	m  map[string]*entry
	// pend holds what pass-through Takes charged at the store's instant
	// pendAt on the shard's keys that had no entry then, for a slice a
	// key may yet take at that instant (see notePassed); the notes of an
	// earlier instant are dropped, as no slice is taken at one.
	pendAt int64
	pend   map[string][]pass
}

// entry is one key's lease. lock (a one-slot channel, so that a waiter can
// give up with its context) guards everything below it.
type entry struct {
	lock chan struct{}

	limit   *algo.Limit
	units   int64     // unused units of the slice
	at      int64     // the shared store's time of the slice's take (µs)
	expires time.Time // when the slice's units go back
	dec     algo.Decision
	// charged is how many units the shared store holds charged at the
	// instant at for this entry: the slice's unused ones and those
	// admitted from it, and from the earlier slices taken at that same
	// instant (a store clock that stands still, or is coarser than a
	// round trip); a refund to the slice puts back at most charged -
	// units.
	charged int64
	// passes are what Takes that went to the shared store as they were
	// (several requests at once) charged there for this key, by instant
	// and limit, less what refunds gave back: a refund stamped with the
	// slice's instant may be of those, when both were charged at one
	// instant. Only the slice's instant and the latest after it are kept
	// (see notePass).
	passes []pass

	// A refusal of the shared store for refusedCost, repeated until
	// refusedUntil (a TTL at most) for requests that need as much, with
	// the RetryAfter that ends at refusedRetry.
	refusedUntil time.Time
	refusedRetry time.Time
	refusedCost  int64
	refused      algo.Decision

	// dead: removed from its shard's map; a caller holding it looks again.
	dead bool
}

// New wraps inner, which the Store then owns (Close closes it). Options and
// their defaults: WithSlice (DefaultSlice), WithTTL (DefaultTTL), WithClock
// (time.Now). A nil Option is ignored. An option out of range is an error
// wrapping ErrInvalidOption.
// The Store runs one goroutine, which gives back expired slices; Close
// stops it.
func New(inner store.Store, opts ...Option) (*Store, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidOption)
	}
	c := config{slice: DefaultSlice, ttl: DefaultTTL, clock: time.Now}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	switch {
	case c.slice < 2:
		return nil, fmt.Errorf("%w: slice %d: must be at least 2", ErrInvalidOption, c.slice)
	case c.ttl <= 0:
		return nil, fmt.Errorf("%w: ttl %v: must be positive", ErrInvalidOption, c.ttl)
	case c.clock == nil:
		return nil, fmt.Errorf("%w: nil clock", ErrInvalidOption)
	}
	s := &Store{
		inner: inner, slice: c.slice, ttl: c.ttl, clock: c.clock, seed: maphash.MakeSeed(),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	s.life, s.endLife = context.WithCancel(context.Background())
	for i := range s.shards {
		s.shards[i].m = make(map[string]*entry)
	}
	go s.janitor(max(c.ttl/2, 10*time.Millisecond))
	return s, nil
}

// Unwrap returns the shared store.
func (s *Store) Unwrap() store.Store { return s.inner }

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	st := Stats{Local: s.local.Load(), Takes: s.takes.Load(), Returned: s.returned.Load()}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += len(sh.m)
		sh.mu.Unlock()
	}
	return st
}

// leasable reports whether r is decided from slices (see the package
// documentation).
func (s *Store) leasable(r *store.Request) bool {
	if r.Limit == nil || r.Key == "" || r.Lease != 0 || r.Cost < 1 || r.Cost > s.slice {
		return false
	}
	switch r.Limit.Algorithm() {
	case algo.TokenBucket, algo.GCRA, algo.FixedWindow, algo.SlidingWindow:
		return true
	}
	return false
}

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))]
}

// entry returns key's entry, creating it.
func (s *Store) entry(key string) *entry {
	sh := s.shard(key)
	sh.mu.Lock()
	e := sh.m[key]
	if e == nil {
		e = &entry{lock: make(chan struct{}, 1)}
		sh.m[key] = e
	}
	sh.mu.Unlock()
	return e
}

// lookup returns key's entry or nil.
func (s *Store) lookup(key string) *entry {
	sh := s.shard(key)
	sh.mu.Lock()
	e := sh.m[key]
	sh.mu.Unlock()
	return e
}

// Take decides reqs; a single leasable request is decided from its key's
// slice (see the package documentation), anything else by the shared
// store.
//
// A leased request that finds its key's slice expired, too small for its
// cost or taken under another limit first gives the slice's unused units
// back, holding the key, within ctx (its deadline or its cancellation,
// and the TTL, at least a second, at the latest): the other requests on
// the key wait for it, and a shared store that hangs must not hold them
// longer than the request itself waits. When ctx ends first,
// Take returns ctx's error rather than go on, since the shared store's
// call that would follow could only fail with it; the units, which may or
// may not have reached the shared store, are counted lost (a failed
// give-back's under-admission), never given back twice.
func (s *Store) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	if len(reqs) != 1 || len(out) != 1 || !s.leasable(&reqs[0]) {
		res, err := s.inner.Take(ctx, reqs, out)
		if err == nil && res.Allowed && !res.Fallback {
			s.notePassed(ctx, reqs, res.At)
		}
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return store.Result{}, err
	}
	r := &reqs[0]
	for {
		e := s.entry(r.Key)
		select {
		case e.lock <- struct{}{}:
		case <-ctx.Done():
			return store.Result{}, ctx.Err()
		}
		if e.dead { // swept meanwhile
			<-e.lock
			continue
		}
		if s.closed.Load() {
			<-e.lock
			return store.Result{}, errClosed
		}
		res, err := s.take(ctx, e, r, &out[0])
		<-e.lock
		return res, err
	}
}

// fromEntry decides r from what e holds at now, when it can: from the
// slice's units (an expired slice's included: the caller gives those back
// first when it may call the shared store), or by the remembered refusal.
// It reports false, with nothing changed, when the decision needs the
// shared store. e's lock is held, and e.limit is r.Limit.
func (s *Store) fromEntry(e *entry, r *store.Request, d *algo.Decision, now time.Time) (store.Result, bool) {
	if e.units >= r.Cost {
		e.units -= r.Cost
		s.local.Add(1)
		*d = e.dec
		d.Remaining = min(e.dec.Remaining+e.units, e.dec.Limit)
		return store.Result{Allowed: true, At: e.at}, true
	}
	// A remembered refusal answers a cost as large or larger, but not one
	// beyond the capacity for a refusal that was not "never": its wait is
	// the smaller cost's, and the shared store's answer is "never".
	if now.Before(e.refusedUntil) && r.Cost >= e.refusedCost && (r.Cost <= r.Limit.Capacity() || e.refused.IsNever()) {
		s.local.Add(1)
		*d = e.refused
		if !d.IsNever() { // a cost beyond the capacity stays "never"
			d.RetryAfter = max(e.refusedRetry.Sub(now), time.Microsecond)
		}
		d.Remaining = min(d.Remaining+e.units, d.Limit)
		return store.Result{At: e.at}, true
	}
	return store.Result{}, false
}

// TakeLocal implements store.LocalTaker: it decides a single leasable
// request from its key's slice, or by a remembered refusal, when its key
// has one in force and no other caller is deciding it. It declines (ok
// false) whenever Take would call the shared store: a key without a slice,
// a slice too small for the cost or expired (whose units go back first),
// a reconfigured limit, anything not leased, and once Close has begun.
func (s *Store) TakeLocal(reqs []store.Request, out []algo.Decision) (store.Result, bool) {
	if len(reqs) != 1 || len(out) != 1 || !s.leasable(&reqs[0]) || s.closed.Load() {
		return store.Result{}, false
	}
	r := &reqs[0]
	e := s.lookup(r.Key)
	if e == nil {
		return store.Result{}, false
	}
	select {
	case e.lock <- struct{}{}:
	default: // another caller is deciding the key, perhaps with a store call
		return store.Result{}, false
	}
	defer func() { <-e.lock }()
	if e.dead || s.closed.Load() || e.limit != r.Limit {
		return store.Result{}, false
	}
	now := s.clock()
	if e.units > 0 && !now.Before(e.expires) {
		return store.Result{}, false // its units go back: Take's to do
	}
	return s.fromEntry(e, r, &out[0], now)
}

// Held returns how many unused units of key's slice under l this Store
// holds now: 0 when it holds none (no slice, another limit's, or one
// whose TTL has ended), and -1 when another caller is deciding the key,
// so that the number is not known without waiting. It charges and changes
// nothing. (store/region reads it to borrow a slice ahead, in the
// background, before the one it holds runs out.)
func (s *Store) Held(key string, l *algo.Limit) int64 {
	e := s.lookup(key)
	if e == nil {
		return 0
	}
	select {
	case e.lock <- struct{}{}:
	default:
		return -1
	}
	defer func() { <-e.lock }()
	if e.dead || e.limit != l || !s.clock().Before(e.expires) {
		return 0
	}
	return e.units
}

// take decides r from e, refilling the slice from the shared store when
// it holds too few units. e's lock is held.
func (s *Store) take(ctx context.Context, e *entry, r *store.Request, d *algo.Decision) (store.Result, error) {
	now := s.clock()
	if e.limit != r.Limit {
		// A new key, or its limit was reconfigured: what the entry holds
		// belongs to the old limit.
		if err := s.giveBackFor(ctx, r.Key, e); err != nil {
			return store.Result{}, err
		}
		e.limit, e.units, e.charged, e.at, e.dec = r.Limit, 0, 0, 0, algo.Decision{}
		e.refusedUntil, e.refusedCost = time.Time{}, 0
	}
	if e.units > 0 && !now.Before(e.expires) {
		if err := s.giveBackFor(ctx, r.Key, e); err != nil {
			return store.Result{}, err
		}
	}
	if res, ok := s.fromEntry(e, r, d, now); ok {
		return res, nil
	}
	// Too few units for this cost: they go back before a new slice is
	// taken, since units charged at different times cannot be given back
	// as one.
	if err := s.giveBackFor(ctx, r.Key, e); err != nil {
		return store.Result{}, err
	}
	// A slice's worth (no more than the capacity), or the request's cost
	// if that is more: a cost beyond the capacity is asked for as it is,
	// for the shared store's "never".
	want := max(r.Cost, min(s.slice, r.Limit.Capacity()))
	res, err := s.takeInner(ctx, r, want, d)
	if err != nil {
		return res, err
	}
	if !res.Allowed && want > r.Cost {
		// The shared store has less than a slice left: take what is left,
		// or only this request's cost, for its own decision (and its
		// exact RetryAfter).
		want = r.Cost
		if d.Remaining > r.Cost {
			want = min(d.Remaining, s.slice)
		}
		if res, err = s.takeInner(ctx, r, want, d); err != nil {
			return res, err
		}
		if !res.Allowed && want > r.Cost {
			// What was left went meanwhile (to another instance): this
			// request's cost alone, so that its refusal is the shared
			// store's for that cost, not for what was left.
			want = r.Cost
			if res, err = s.takeInner(ctx, r, want, d); err != nil {
				return res, err
			}
		}
	}
	if res.Fallback {
		// A failure policy answered for the shared store (a wrapper such
		// as store/resilient placed below this Store, against the
		// package documentation): it charged nothing there, so nothing
		// is kept to be admitted later or given back to the store.
		return res, nil
	}
	if !res.Allowed {
		e.refused, e.refusedCost = *d, r.Cost
		// Repeated for a TTL at most, not the whole RetryAfter: the
		// shared store may have units again before then without this
		// instance knowing (units another instance gives back, a key
		// reset through another instance), and the end of a window's
		// budget would otherwise refuse them until the window ends.
		e.refusedUntil = now.Add(min(d.RetryAfter, s.ttl))
		if !d.IsNever() {
			e.refusedRetry = now.Add(d.RetryAfter)
		}
		return res, nil
	}
	e.refusedUntil = time.Time{}
	if res.At != e.at {
		// A refund stamped with an earlier slice's instant goes to the
		// shared store; one stamped with this instant may be of a unit
		// an earlier slice taken at it admitted, which the store holds
		// charged as well: it goes back into this slice.
		e.charged = 0
	}
	moved := res.At != e.at
	e.at, e.units, e.charged = res.At, want-r.Cost, e.charged+want
	if moved {
		s.adoptPassed(r.Key, e, res.At)
	}
	e.expires = now.Add(s.ttl)
	e.dec = *d
	d.Remaining = min(d.Remaining+e.units, d.Limit)
	return res, nil
}

// notePassed records, for each key of reqs, the units a Take that went
// to the shared store as it was charged there at the store's instant at,
// so that a refund of them goes back to the shared store rather than into
// a slice of the key taken at that same instant (a store clock that
// stands still, or one coarser than the round trips), before the Take or
// after it (see Refund). A key with an entry keeps the notes itself; the
// notes of a key without one wait in its shard for a slice it may take
// at that instant (adoptPassed).
func (s *Store) notePassed(ctx context.Context, reqs []store.Request, at int64) {
	for i := range reqs {
		r := &reqs[i]
		if r.Cost <= 0 || r.Key == "" || at == 0 {
			continue
		}
		sh := s.shard(r.Key)
		sh.mu.Lock()
		e := sh.m[r.Key]
		if e == nil {
			if sh.pendAt != at {
				clear(sh.pend)
				sh.pendAt = at
			}
			if sh.pend == nil {
				sh.pend = make(map[string][]pass)
			}
			ps := sh.pend[r.Key]
			if len(ps) < 4 { // limits sharing the key: bounded
				found := false
				for j := range ps {
					if ps[j].limit == r.Limit {
						ps[j].n += min(r.Cost, math.MaxInt64-ps[j].n)
						found = true
					}
				}
				if !found {
					sh.pend[r.Key] = append(ps, pass{at: at, limit: r.Limit, n: r.Cost})
				}
			}
			sh.mu.Unlock()
			continue
		}
		sh.mu.Unlock()
		select {
		case e.lock <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if !e.dead {
			e.notePass(at, r.Limit, r.Cost)
		}
		<-e.lock
	}
}

// adoptPassed moves into e the notes its key's shard holds of pass-through
// Takes at at, the instant of the slice e is taking. e's lock is held.
func (s *Store) adoptPassed(key string, e *entry, at int64) {
	sh := s.shard(key)
	sh.mu.Lock()
	if sh.pendAt == at {
		if ps := sh.pend[key]; ps != nil {
			delete(sh.pend, key)
			sh.mu.Unlock()
			for _, p := range ps {
				e.notePass(p.at, p.limit, p.n)
			}
			return
		}
	}
	sh.mu.Unlock()
}

// notePass adds cost units charged under l at at to e.passes. It keeps
// those of the slice's instant and of the latest instant after it, at
// which a slice may yet be taken (the store's time moves on), and forgets
// the others. e's lock is held.
func (e *entry) notePass(at int64, l *algo.Limit, cost int64) {
	if n := e.passed(at, l); n != nil {
		*n += min(cost, math.MaxInt64-*n)
		return
	}
	e.passes = slices.DeleteFunc(e.passes, func(p pass) bool {
		return p.at < e.at || p.at > e.at && p.at < at
	})
	if len(e.passes) < 4 { // a store whose time stepped back: bounded
		e.passes = append(e.passes, pass{at: at, limit: l, n: cost})
	}
}

// takeInner takes want units of r's key from the shared store.
func (s *Store) takeInner(ctx context.Context, r *store.Request, want int64, d *algo.Decision) (store.Result, error) {
	s.takes.Add(1)
	req := [1]store.Request{{Key: r.Key, Limit: r.Limit, Cost: want}}
	out := [1]algo.Decision{}
	res, err := s.inner.Take(ctx, req[:], out[:])
	*d = out[0]
	return res, err
}

// empty reports whether e holds no units to give back, and then sets its
// count to 0 (a negative count, or units of no limit, are none). e's lock
// is held.
func (e *entry) empty() bool {
	if e.units <= 0 || e.limit == nil {
		e.units = 0
		return true
	}
	return false
}

// giveBack returns e's unused units to the shared store, at the time they
// were charged, within ctx, and the shared store's error. A failure loses
// them for the rest of the window (the bounded under-admission of the
// package documentation). e's lock is held.
func (s *Store) giveBack(ctx context.Context, key string, e *entry) error {
	if e.empty() {
		return nil
	}
	n := e.units
	e.units = 0
	e.charged -= n
	err := s.inner.Refund(ctx, []store.Request{{Key: key, Limit: e.limit, Cost: n, At: e.at}})
	if err == nil {
		s.returned.Add(n)
	}
	return err
}

// giveBackFor is giveBack for a Take, under its context ctx, that finds
// e's slice expired, too small for its cost or of another limit. The
// key's lock is held, and every other request on the key waits behind
// it: the give-back ends with ctx (its deadline, or its cancellation),
// and at giveBackTimeout at the latest. It returns ctx's error when ctx
// has ended, for the Take to return, since no store call can be made for
// it any more: ended before the give-back, the units stay in the slice
// (an expired one's go back with the janitor, or the next Take); ended
// during it, they are lost as a failed give-back's are (giveBack counted
// them out before the call, so they are never given back twice). A
// failure of the shared store with time left is giveBack's loss, and the
// Take goes on.
func (s *Store) giveBackFor(ctx context.Context, key string, e *entry) error {
	if e.empty() {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	_ = s.giveBackWithin(ctx, key, e)
	return ctx.Err()
}

// giveBackWithin is giveBack bounded as a request's, under parent.
func (s *Store) giveBackWithin(parent context.Context, key string, e *entry) error {
	if e.empty() {
		return nil
	}
	ctx, cancel := context.WithTimeout(parent, s.giveBackTimeout())
	defer cancel()
	return s.giveBack(ctx, key, e)
}

// giveBackTimeout bounds a call to the shared store that no caller's
// context bounds: a give-back of units that nobody waits for.
func (s *Store) giveBackTimeout() time.Duration { return max(s.ttl, time.Second) }

// Peek reports the shared store's decisions, with the units this instance
// holds added to Remaining.
func (s *Store) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	if err := s.inner.Peek(ctx, reqs, out); err != nil {
		return err
	}
	now := s.clock()
	for i := range reqs {
		e := s.lookup(reqs[i].Key)
		if e == nil {
			continue
		}
		select {
		case e.lock <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if e.limit == reqs[i].Limit && e.units > 0 && now.Before(e.expires) {
			d := &out[i]
			if !d.Allowed && reqs[i].Cost <= e.units {
				d.Allowed, d.RetryAfter = true, 0
			}
			d.Remaining = min(d.Remaining+e.units, d.Limit)
		}
		<-e.lock
	}
	return nil
}

// Refund gives units back: to the key's slice when they came from it (the
// request's At is the slice's), at most the units admitted from it, or to
// the shared store otherwise. Beyond what the slice admitted, a refund
// stamped with its instant goes to the shared store up to what Takes of
// several requests, which go there as they are, charged on the key at
// that same instant: the refund may be of one of those. Either way a
// remembered refusal of the key is forgotten.
//
// The requests are refunded in order, each after its key's lock, for
// which Refund waits as Take does. When ctx ends before a request's lock
// is had (or has ended when Refund is called), that request and those
// after it are not refunded, and the error wraps ctx's and says how many
// they are and which keys (the first few by name). What the requests
// before it gave back stays given back: units put back into slices stay
// there, and those bound for the shared store still go to it, in one
// call no longer cancelled with ctx but bounded as a give-back (the TTL,
// at least a second); should that call fail too, the error says so and
// wraps the shared store's. Otherwise the shared store is called under
// ctx and its error returned as it is.
func (s *Store) Refund(ctx context.Context, reqs []store.Request) error {
	var rest []store.Request
	// stop is the index of the first request not refunded, for ctx
	// having ended first; len(reqs) when every one was.
	stop := len(reqs)
	if ctx.Err() != nil {
		stop = 0
	}
loop:
	for i := range reqs[:stop] {
		r := &reqs[i]
		e := s.lookup(r.Key)
		if e == nil {
			rest = append(rest, *r)
			continue
		}
		select {
		case e.lock <- struct{}{}:
		case <-ctx.Done():
			stop = i
			break loop
		}
		if e.dead {
			// Removed (by Close or the janitor) while this call waited:
			// its slice went back to the shared store, and so do these.
			<-e.lock
			rest = append(rest, *r)
			continue
		}
		e.refusedUntil = time.Time{}
		// What pass-through Takes charged at r.At and no refund gave
		// back: a refund stamped with the slice's instant may be of it.
		var passed int64
		pn := e.passed(r.At, r.Limit)
		if pn != nil {
			passed = *pn
		}
		if e.limit == r.Limit && r.At == e.at && r.At != 0 && r.Cost > 0 && s.clock().Before(e.expires) {
			// What was admitted from the slice goes back into it, the
			// rest to the shared store up to what pass-through Takes
			// charged there at this instant (the refund may be of one of
			// those), and nothing beyond: more would be units the shared
			// store never charged (a cost near math.MaxInt64 would
			// overflow the count, and given to the shared store it would
			// refill the units the slice still holds). A store never
			// gives back more than a key holds, either.
			back := min(r.Cost, e.charged-e.units)
			e.units += back
			if n := min(r.Cost-back, passed); n > 0 {
				*pn -= n
				q := *r
				q.Cost = n
				rest = append(rest, q)
			}
		} else {
			if e.limit == r.Limit && r.At == e.at && r.At != 0 && r.Cost > 0 {
				// Units of this instant given back to the shared store
				// (the slice has expired) are no longer the slice's to
				// take back, should a slice be taken at this instant
				// again, nor, beyond the slice's, a pass-through's.
				back := min(r.Cost, e.charged-e.units)
				e.charged -= back
				if pn != nil {
					*pn -= min(r.Cost-back, passed)
				}
			} else if pn != nil && r.Cost > 0 {
				*pn -= min(r.Cost, passed)
			}
			rest = append(rest, *r)
		}
		<-e.lock
	}
	var err error
	if len(rest) > 0 {
		gctx := ctx
		if ctx.Err() != nil {
			// Decided, and perhaps partly done into slices: what goes
			// back to the shared store goes all the same, bounded since
			// nobody waits for it.
			var cancel context.CancelFunc
			gctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.giveBackTimeout())
			defer cancel()
		}
		err = s.inner.Refund(gctx, rest)
	}
	if stop == len(reqs) {
		return err
	}
	left := reqs[stop:]
	cerr := fmt.Errorf("lease: refund: %w: %d of %d requests not refunded, %s", ctx.Err(), len(left), len(reqs), keyNames(left))
	if err != nil {
		return fmt.Errorf("%w; nor the %d before them bound for the shared store: %w", cerr, len(rest), err)
	}
	return cerr
}

// namedKeys is how many keys an error names before it counts the rest.
const namedKeys = 3

// keyNames names the keys of reqs, each once, for an error: `key "a"`,
// `keys "a", "b"`, or the first namedKeys and how many more.
func keyNames(reqs []store.Request) string {
	var keys []string
	seen := make(map[string]bool, min(len(reqs), 4*namedKeys))
	for i := range reqs {
		if k := reqs[i].Key; !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	var b strings.Builder
	b.WriteString("key")
	if len(keys) > 1 {
		b.WriteString("s")
	}
	for i, k := range keys[:min(len(keys), namedKeys)] {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %q", k)
	}
	if more := len(keys) - namedKeys; more > 0 {
		fmt.Fprintf(&b, " and %d more", more)
	}
	return b.String()
}

// Release passes Concurrency leases, which are never leased here, to the
// shared store.
func (s *Store) Release(ctx context.Context, reqs []store.Request) error {
	return s.inner.Release(ctx, reqs)
}

// Renew passes Concurrency leases, which are never leased here, to the
// shared store (store.Renewer); it does nothing when the shared store is not
// a store.Renewer.
func (s *Store) Renew(ctx context.Context, reqs []store.Request) error {
	if rn, ok := s.inner.(store.Renewer); ok {
		return rn.Renew(ctx, reqs)
	}
	return nil
}

// Reset forgets the keys here (their unused units are dropped, not given
// back: the shared store forgets them too) and in the shared store. Each
// key is held from before its slice is dropped until the shared store has
// forgotten it: a request on it meanwhile waits, and then takes from the
// reset state, rather than taking a slice that the shared store would
// then forget and admitting its units uncharged.
func (s *Store) Reset(ctx context.Context, keys ...string) error {
	held := make([]*entry, 0, len(keys))
	defer func() {
		for _, e := range held {
			<-e.lock
		}
	}()
	// In one order, each key once: two Resets never wait for each other's
	// keys crosswise, nor one for itself.
	sorted := slices.Compact(slices.Sorted(slices.Values(keys)))
	for _, k := range sorted {
		for {
			e := s.entry(k)
			select {
			case e.lock <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			if e.dead { // swept meanwhile
				<-e.lock
				continue
			}
			e.limit, e.units, e.charged, e.at, e.dec = nil, 0, 0, 0, algo.Decision{}
			e.refusedUntil, e.refusedCost = time.Time{}, 0
			e.passes = nil
			held = append(held, e)
			break
		}
	}
	return s.inner.Reset(ctx, keys...)
}

// Close gives every unused unit back to the shared store (within 5
// seconds, and the give-back then in flight: units not given back by
// then, the shared store hanging, stay charged there until they lapse),
// stops the janitor and closes the shared store. A leased Take (see the
// package documentation) that runs once Close has begun returns an error
// matching store.ErrClosed, without a slice, so that no unit stays
// charged and unused; the other calls go to the shared store, as before.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// The 5 seconds include the janitor's give-back in flight.
		context.AfterFunc(ctx, s.endLife)
		defer s.endLife()
		close(s.stop)
		<-s.done
		s.sweep(ctx, time.Time{}, true)
	})
	return s.inner.Close()
}

func (s *Store) janitor(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if s.sweep(s.life, s.clock(), false) {
				// A give-back failed: the next sweep comes a whole
				// interval after this one, not at once, so that a
				// shared store that does not answer gets one give-back
				// per store timeout and interval, and the keys a rest.
				t.Reset(every)
			}
		}
	}
}

// sweep gives back the units of slices expired at now (all of them when
// all) and forgets keys that hold nothing. It skips keys busy deciding.
// With all (Close), ctx bounds the whole sweep: it stops when ctx ends.
// Without (the janitor), each key's give-back has a time limit of its
// own under ctx, and the sweep stops when Close begins, and at the first
// give-back that fails (the shared store down, slow or refusing), which
// it reports: the slices it has not reached keep their units for the
// next sweep, rather than each waiting out a store timeout in turn, its
// key held meanwhile.
func (s *Store) sweep(ctx context.Context, now time.Time, all bool) (failed bool) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		keys := make([]string, 0, len(sh.m))
		for k := range sh.m {
			keys = append(keys, k)
		}
		sh.mu.Unlock()
		for _, k := range keys {
			sh.mu.Lock()
			e := sh.m[k]
			sh.mu.Unlock()
			if e == nil {
				continue
			}
			if s.sweepOver(ctx, all) {
				return false
			}
			if all {
				select {
				case e.lock <- struct{}{}:
				case <-ctx.Done():
					return false
				}
			} else {
				select {
				case e.lock <- struct{}{}:
				default:
					continue
				}
			}
			var err error
			switch {
			case all && ctx.Err() != nil:
				<-e.lock
				return false
			case all:
				// Close's bound is ctx's: a failure moves on to the
				// next key while time is left.
				_ = s.giveBack(ctx, k, e)
			case !now.Before(e.expires):
				err = s.giveBackWithin(ctx, k, e)
			}
			if e.units == 0 && (all || !now.Before(e.refusedUntil)) {
				sh.mu.Lock()
				if sh.m[k] == e {
					delete(sh.m, k)
				}
				sh.mu.Unlock()
				e.dead = true
			}
			<-e.lock
			if err != nil {
				return true
			}
		}
	}
	return false
}

// sweepOver reports whether a sweep must stop before its next key: Close's
// (all) when its time is up, the janitor's when Close has begun, so that
// Close does not wait for it to go through every expired slice of a
// shared store that hangs.
func (s *Store) sweepOver(ctx context.Context, all bool) bool {
	if all {
		return ctx.Err() != nil
	}
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// Inspect reports the shared store's state of key (store.Inspector); the
// units this instance holds are not in it. It fails with an error wrapping
// errors.ErrUnsupported when the shared store cannot inspect.
func (s *Store) Inspect(ctx context.Context, key string) (algo.State, bool, error) {
	in, ok := s.inner.(store.Inspector)
	if !ok {
		return algo.State{}, false, fmt.Errorf("lease: inspect: %w by the shared store", errors.ErrUnsupported)
	}
	return in.Inspect(ctx, key)
}

// Ping checks the shared store with its own Ping, or a Peek of a probe key
// when it has none.
func (s *Store) Ping(ctx context.Context) error {
	if p, ok := s.inner.(interface{ Ping(context.Context) error }); ok {
		return p.Ping(ctx)
	}
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Second})
	if err != nil {
		return err
	}
	return s.inner.Peek(ctx, []store.Request{{Key: "floodgate:lease:ping", Limit: l}}, make([]algo.Decision, 1))
}

var (
	_ store.Store     = (*Store)(nil)
	_ store.Inspector = (*Store)(nil)
)
