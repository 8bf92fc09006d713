package limiter

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// DefaultKeyPrefix starts every store key of a Limiter unless
// WithKeyPrefix says otherwise: the prefix of the policy engine's keys
// (policy.DefaultKeyPrefix) and of docs/STORES.md's Redis ACL (~fg:*), so
// that the limiter's keys stay out of the application's in a shared store.
const DefaultKeyPrefix = "fg:"

// DefaultSeparator joins a limiter's name and a key into the store key.
const DefaultSeparator = ":"

// Option configures a Limiter; see New for the defaults.
type Option func(*config)

type config struct {
	keyPrefix  string
	sep        string
	leaseID    func() uint64
	timeout    time.Duration
	maxWaiters int
}

// DefaultMaxWaiters is how many Waits may queue on one key of a Limiter
// (and on a Local) unless WithMaxWaiters (WithLocalMaxWaiters) says
// otherwise: the default bound of the server's wait strategy (a rule's
// max_waiters) and of package queue. golang.org/x/time/rate and Guava's
// RateLimiter let any number of callers wait, bounded by their deadlines
// only; nginx's limit_req queues up to burst requests and rejects the
// rest. Here the deadline still refuses at once a waiter it could not
// serve in time, and the bound turns away a crowd that has no deadline,
// or a long one, before it piles up: the 1025th waiter on a key gets a
// *RetryError matching ErrQueueFull at once.
const DefaultMaxWaiters = 1024

// WithMaxWaiters bounds how many Waits may queue on each key at once
// (default DefaultMaxWaiters, 1024; at least 1). A Wait that finds its
// key's queue full returns at once a *RetryError matching ErrQueueFull
// and ErrLimited, whose After is the queue's estimate of when it would
// have been served. A Wait whose first take is admitted does not queue
// and is never refused by the bound. math.MaxInt gives
// golang.org/x/time/rate's behaviour: no bound but the deadlines.
func WithMaxWaiters(n int) Option { return func(c *config) { c.maxWaiters = n } }

// WithKeyPrefix sets the string that starts every store key of the
// limiter, before its name (default DefaultKeyPrefix, "fg:"): the store
// key of key is prefix + name + separator + key. "" gives the keys of
// Floodgate before the prefix (name + separator + key, e.g. "user:42"),
// for a store whose state must carry over; such keys can collide with an
// application's own in a shared Redis.
func WithKeyPrefix(p string) Option { return func(c *config) { c.keyPrefix = p } }

// WithSeparator sets the string between the limiter's name and each key
// (default DefaultSeparator, ":").
func WithSeparator(sep string) Option { return func(c *config) { c.sep = sep } }

// WithLeaseIDs sets how Reserve, Acquire and AllowAll name Concurrency
// leases (default, and with nil: random non-zero 64-bit numbers). IDs must
// be unique among the leases of a key; 0 is not a valid ID: a call that
// gets one returns an error wrapping store.ErrBadRequest.
func WithLeaseIDs(next func() uint64) Option { return func(c *config) { c.leaseID = next } }

// WithStoreTimeout bounds each store call (default 0: only the caller's
// context bounds it): the decisions of Allow, AllowN, Reserve, Acquire
// and Wait, and Peek, Reset, Cancel, Release and Renew, whose store calls
// would otherwise wait on a hung store for as long as their context lets
// them (a deferred Release with context.Background, for ever); in
// AllowAll, its Take and peeks of a store's hits, under the shortest
// timeout among their limiters, and its roll-back and Result.Cancel hit
// by hit, under the hit's limiter's own (a roll-back runs without the
// caller's cancellation: for a limiter without a timeout nothing bounds
// it). A call that runs out returns the store's error, typically wrapping
// context.DeadlineExceeded or store.ErrUnavailable.
func WithStoreTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// Limiter applies one compiled limit to many keys in a store. It is safe
// for concurrent use. Make it with New: on the zero Limiter and a nil
// *Limiter, every method that returns an error returns "limiter: Limiter
// not made by New" (with the zero Decision, a nil Reservation or Lease),
// as AllowAll does for a hit with such a Limiter; Name, Limit and Store
// return zero values.
type Limiter struct {
	st      store.Store
	mem     *memory.Store // st, when it is the memory store: the allocation-free path
	name    string
	prefix  string // key prefix + name + separator
	limit   *algo.Limit
	leaseID func() uint64
	timeout time.Duration
	waits   *waitQueues // Wait's queues, one per key with waiters
}

// New returns a limiter applying p to keys in st under name. The store key
// of key is the key prefix, the name, the separator and key ("fg:" +
// "user" + ":" + "42" = "fg:user:42" by default): the prefix keeps the
// limiter's keys apart from an application's in a shared store (and within
// a Redis ACL's ~fg:*), the name keeps limiters sharing a store from
// sharing state. WithKeyPrefix("") gives the keys without the prefix
// ("user:42") that Floodgate used before. The name must not be empty, and
// two limiters of a store with different parameters must not share it
// (nothing checks: the second reads the first's state as its own, or, of
// another algorithm, overwrites it as fresh). A fixed window's windows are
// aligned on the Unix epoch, as calendar minutes and hours are, not on a
// key's first request: a one-minute window opened by a request at :50
// resets at the next :00, ten seconds later. Options and their defaults:
//
//   - WithKeyPrefix: DefaultKeyPrefix, "fg:".
//   - WithSeparator: ":".
//   - WithLeaseIDs: random non-zero IDs.
//   - WithStoreTimeout: 0, no timeout of its own.
//   - WithMaxWaiters: DefaultMaxWaiters (1024) Waits queued per key.
//
// A nil Option is ignored. It returns an error wrapping algo.ErrInvalid
// when p is invalid.
func New(st store.Store, name string, p algo.Params, opts ...Option) (*Limiter, error) {
	if st == nil {
		return nil, errors.New("limiter: nil store")
	}
	if name == "" {
		return nil, errors.New("limiter: empty name")
	}
	l, err := algo.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("limiter %q: %w", name, err)
	}
	c := config{keyPrefix: DefaultKeyPrefix, sep: DefaultSeparator, leaseID: randomLeaseID, maxWaiters: DefaultMaxWaiters}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.leaseID == nil {
		c.leaseID = randomLeaseID
	}
	if c.timeout < 0 {
		return nil, fmt.Errorf("limiter %q: store timeout must be >= 0, got %v", name, c.timeout)
	}
	if c.maxWaiters < 1 {
		return nil, fmt.Errorf("limiter %q: max waiters must be at least 1, got %d", name, c.maxWaiters)
	}
	lim := &Limiter{st: st, name: name, prefix: c.keyPrefix + name + c.sep, limit: l, leaseID: c.leaseID, timeout: c.timeout,
		waits: &waitQueues{size: c.maxWaiters}}
	lim.mem, _ = st.(*memory.Store)
	return lim, nil
}

// errNotMade is the error of a Limiter that New did not make: the zero
// Limiter or a nil *Limiter, which have no store and no limit.
var errNotMade = errors.New("limiter: Limiter not made by New (zero or nil *Limiter): no store, no limit")

// made reports whether l was made by New.
func (l *Limiter) made() bool { return l != nil && l.limit != nil }

func randomLeaseID() uint64 {
	for {
		if id := rand.Uint64(); id != 0 {
			return id
		}
	}
}

// Name returns the limiter's name.
func (l *Limiter) Name() string {
	if l == nil {
		return ""
	}
	return l.name
}

// Limit returns the compiled limit.
func (l *Limiter) Limit() *algo.Limit {
	if l == nil {
		return nil
	}
	return l.limit
}

// Store returns the store the limiter decides in.
func (l *Limiter) Store() store.Store {
	if l == nil {
		return nil
	}
	return l.st
}

// StoreKey returns the store key of key: the key prefix (WithKeyPrefix,
// "fg:" by default), the name, the separator and key, e.g. "fg:user:42".
func (l *Limiter) StoreKey(key string) string {
	if l == nil {
		return key
	}
	return l.prefix + key
}

func (l *Limiter) wrap(err error) error {
	if err == nil {
		return nil
	}
	return wrapName(l.name, err)
}

func (l *Limiter) checkCost(n int64) error {
	if n < 0 {
		return fmt.Errorf("limiter %q: %w: cost %d is negative", l.name, store.ErrBadRequest, n)
	}
	return nil
}

// take decides n units for key and returns the store's Result: the store
// time of the decision, and whether a failure policy answered for the
// store (Result.Fallback; its Allowed is not read). With an error the
// decision is the zero Decision, whatever the store wrote: a store that
// fails may leave a placeholder there (store/resilient reports keys it
// does not know as allowed), and a caller that reads Allowed before the
// error must not proceed.
func (l *Limiter) take(ctx context.Context, key string, n int64, lease uint64) (algo.Decision, store.Result, error) {
	if !l.made() {
		return algo.Decision{}, store.Result{}, errNotMade
	}
	if err := l.checkCost(n); err != nil {
		return algo.Decision{}, store.Result{}, err
	}
	if l.timeout > 0 {
		return l.takeWithTimeout(ctx, key, n, lease)
	}
	if l.mem != nil {
		var d algo.Decision
		at, err := l.mem.TakeKey(ctx, &d, l.prefix, key, l.limit, n, lease)
		if err != nil {
			return algo.Decision{}, store.Result{}, l.wrap(err)
		}
		return d, store.Result{At: at}, nil
	}
	reqs := []store.Request{{Key: l.prefix + key, Limit: l.limit, Cost: n, Lease: lease}}
	out := make([]algo.Decision, 1)
	res, err := l.st.Take(ctx, reqs, out)
	if err != nil {
		return algo.Decision{}, store.Result{}, l.wrap(err)
	}
	return out[0], res, nil
}

// bound returns ctx bounded by WithStoreTimeout, for one store call, and
// the function that releases its timer; ctx itself without a timeout.
func (l *Limiter) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.timeout)
}

// takeWithTimeout is take under WithStoreTimeout, kept apart so that the
// common path has no deferred call.
func (l *Limiter) takeWithTimeout(ctx context.Context, key string, n int64, lease uint64) (algo.Decision, store.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	c := *l
	c.timeout = 0
	return c.take(ctx, key, n, lease)
}

// Allow is AllowN(ctx, key, 1). Any key is valid, "" included: the store
// key is the key prefix, the limiter's name, the separator and key (see
// StoreKey), so "" is one key of its own (a limiter-wide limit).
func (l *Limiter) Allow(ctx context.Context, key string) (algo.Decision, error) {
	var d algo.Decision // see AllowN
	err := l.allowN(ctx, &d, key, 1)
	return d, err
}

// AllowN decides whether n units may be taken for key now and, if so,
// takes them. The decision carries what the HTTP headers need; with an
// error it is the zero Decision (not Allowed). For a Concurrency limit the
// units are held under an anonymous lease that only expires; use Acquire
// to be able to release it. A negative n is an error wrapping
// store.ErrBadRequest. An n of 0 takes nothing, and its Remaining reports
// the state (Peek asks whether n units would pass without taking them). It
// is allowed, as x/time/rate's AllowN(now, 0) is, except by a SmoothBursty
// or SmoothWarmup limit whose next free ticket is further away than
// MaxWait: that refuses it, with the ticket's RetryAfter, as Guava's
// tryAcquire(0) does. AllowAll's Hit, by contrast, reads a Cost of 0 as 1.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (algo.Decision, error) {
	// Small enough to be inlined: the decision is then written straight
	// into the caller's variable instead of being copied through memory
	// on its way back (see algo.Limit.TakeLeaseTo).
	var d algo.Decision
	err := l.allowN(ctx, &d, key, n)
	return d, err
}

func (l *Limiter) allowN(ctx context.Context, d *algo.Decision, key string, n int64) error {
	if l == nil {
		*d = algo.Decision{}
		return errNotMade
	}
	if l.mem != nil && l.timeout == 0 && n >= 0 {
		// The common case, straight to the memory store.
		if _, err := l.mem.TakeKey(ctx, d, l.prefix, key, l.limit, n, 0); err != nil {
			*d = algo.Decision{} // see take
			return l.wrap(err)
		}
		return nil
	}
	var err error
	*d, _, err = l.take(ctx, key, n, 0)
	return err
}

// Peek returns the decision AllowN(ctx, key, n) would make, taking nothing;
// with an error, the zero Decision.
func (l *Limiter) Peek(ctx context.Context, key string, n int64) (algo.Decision, error) {
	if !l.made() {
		return algo.Decision{}, errNotMade
	}
	if err := l.checkCost(n); err != nil {
		return algo.Decision{}, err
	}
	out := make([]algo.Decision, 1)
	ctx, cancel := l.bound(ctx)
	defer cancel()
	if err := l.st.Peek(ctx, []store.Request{{Key: l.prefix + key, Limit: l.limit, Cost: n}}, out); err != nil {
		return algo.Decision{}, l.wrap(err)
	}
	return out[0], nil
}

// Reset forgets key's state, as if it had never been used.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if !l.made() {
		return errNotMade
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	return l.wrap(l.st.Reset(ctx, l.prefix+key))
}

// Reservation is the outcome of Reserve: units taken that can be given
// back with Cancel.
type Reservation struct {
	lim   *Limiter
	key   string
	cost  int64
	at    int64
	lease uint64
	// fallback: a failure policy admitted it, charging nothing on the
	// store (store.Result.Fallback).
	fallback  bool
	d         algo.Decision
	cancelled atomic.Bool
}

// Reserve takes n units for key like AllowN and returns a Reservation that
// can give them back with Cancel — the reserve-then-roll-back step of an
// all-or-nothing acquisition across stores (inexact for the Smooth
// algorithms: see Cancel). A refused reservation holds nothing: OK is
// false, Delay is algo.Never (not the retry time: x/time/rate's
// `time.Sleep(r.Delay()); act()` must not act on units it does not hold)
// and Decision().RetryAfter says when to try again. For a Concurrency
// limit the units are held under
// a lease of their own that Cancel releases. With an error the Reservation
// is nil, and its methods are safe to call on nil (Cancel does nothing and
// returns nil, OK is false): a roll-back deferred right after Reserve,
// before the error is checked, does not crash when the store fails.
func (l *Limiter) Reserve(ctx context.Context, key string, n int64) (*Reservation, error) {
	if !l.made() {
		return nil, errNotMade
	}
	var lease uint64
	if l.limit.Algorithm() == algo.Concurrency {
		var err error
		if lease, err = l.newLeaseID(); err != nil {
			return nil, err
		}
	}
	d, res, err := l.take(ctx, key, n, lease)
	if err != nil {
		return nil, err
	}
	return &Reservation{lim: l, key: key, cost: n, at: res.At, lease: lease, fallback: res.Fallback, d: d}, nil
}

// OK reports whether the units were taken; false for a nil Reservation.
func (r *Reservation) OK() bool { return r != nil && r.d.Allowed }

// Delay is how long to wait before acting on the reservation: when OK,
// the decision's Delay (a shaper's queueing, a smooth limiter's pacing; 0
// for the other algorithms), counted from the decision: it does not count
// down as x/time/rate's Delay does, so read it right after Reserve. When
// refused it is algo.Never, as
// x/time/rate's InfDuration for a reservation that is not OK: the
// reservation holds no units, and waiting does not give it any, so
// `time.Sleep(r.Delay()); act()` never acts on a refusal. The time to try
// again with a new Reserve is Decision().RetryAfter. 0 for a nil
// Reservation (that of an error, which says what went wrong).
func (r *Reservation) Delay() time.Duration {
	if r == nil {
		return 0
	}
	if r.d.Allowed {
		return r.d.Delay
	}
	return algo.Never
}

// Decision returns the store's decision; the zero Decision (not Allowed)
// for a nil Reservation.
func (r *Reservation) Decision() algo.Decision {
	if r == nil {
		return algo.Decision{}
	}
	return r.d
}

// Cancel gives the units back (store.Refund, or store.Release for a
// Concurrency lease), as far as the algorithm can tell them apart; see
// algo.Limit.Refund. A bucket takes them back whenever Cancel comes (all
// of them while nothing else was taken from the key; after other takes,
// less what refilled since the reservation), a window or log only while
// the window they were counted in lasts. For
// SmoothBursty and SmoothWarmup the give-back is inexact: the ticket moves
// back by what the units are worth at the stable rate, never before the
// store's now, and the stored permits the take spent are not restored, so
// the limit is left stricter than if the units had never been taken (a
// SmoothBursty key lets fewer requests through without waiting; a
// SmoothWarmup key's next admission can wait up to about its warm-up
// period). It does nothing for a refused reservation, after a first
// Cancel, or on a nil Reservation (that of an error), and refunds nothing
// for a reservation a store's failure policy admitted while the store was
// down (store.Result.Fallback): that charged nothing on the store, and a
// refund there would hand the key units others spent. The store does not
// tell the key's states apart: after a Reset of the key (or, in the memory
// store, its eviction), Cancel gives the units back to the state that
// followed, which holds others' units (a window's count, a log's stamps,
// a bucket's level at the same instant), and the key admits them again.
// Drop the reservations of a key you reset; Local's do nothing after its
// Reset.
func (r *Reservation) Cancel(ctx context.Context) error {
	if r == nil || !r.d.Allowed || r.cost == 0 || r.cancelled.Swap(true) {
		return nil
	}
	return r.lim.giveBack(ctx, r.key, r.cost, r.at, r.lease, r.fallback)
}

// Renew extends the Concurrency slots the reservation holds to the limit's
// LeaseTTL from the store's now (store.Renewer), for a holder that keeps
// them longer than LeaseTTL (a long request, a stream): renew every third
// of it or so. A slot whose lease has already expired, or that Cancel gave
// back, is not revived. Renew does nothing for a refused reservation, after
// Cancel, for another algorithm than Concurrency, or on a nil Reservation;
// on a store that cannot renew leases (it does not implement
// store.Renewer) it returns an error matching errors.ErrUnsupported.
func (r *Reservation) Renew(ctx context.Context) error {
	if r == nil || !r.d.Allowed || r.cost == 0 || r.cancelled.Load() || r.lim.limit.Algorithm() != algo.Concurrency {
		return nil
	}
	return r.lim.renew(ctx, r.key, r.lease)
}

// Renew extends the lease to the limit's LeaseTTL from the store's now, as
// Reservation.Renew does. It does nothing after Release or on a nil Lease.
func (ls *Lease) Renew(ctx context.Context) error {
	if ls == nil || ls.released.Load() {
		return nil
	}
	return ls.lim.renew(ctx, ls.key, ls.id)
}

// renew extends lease on key (store.Renewer).
func (l *Limiter) renew(ctx context.Context, key string, lease uint64) error {
	rn, ok := l.st.(store.Renewer)
	if !ok {
		return fmt.Errorf("limiter %q: store %T cannot renew leases: %w", l.name, l.st, errors.ErrUnsupported)
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	return l.wrap(rn.Renew(ctx, []store.Request{{Key: l.prefix + key, Limit: l.limit, Lease: lease}}))
}

// giveBack refunds cost units taken at at, or releases lease. Units a
// failure policy admitted (store.Result.Fallback: store/resilient answered
// while the store was down) were never charged on the store: refunded
// there once it is back, they would be units others spent, and the key
// would admit more than its limit. They are not refunded, as the policy
// Engine does not refund them (FailLocal's local store keeps them until
// its window passes, which errs towards refusing); a lease is released
// all the same, wherever it is held.
func (l *Limiter) giveBack(ctx context.Context, key string, cost, at int64, lease uint64, fallback bool) error {
	req := []store.Request{{Key: l.prefix + key, Limit: l.limit, Cost: cost, At: at, Lease: lease}}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	if l.limit.Algorithm() == algo.Concurrency {
		return l.wrap(l.st.Release(ctx, req))
	}
	if fallback {
		return nil
	}
	return l.wrap(l.st.Refund(ctx, req))
}

// Lease is a Concurrency slot held until Release or until the limit's
// LeaseTTL passes.
type Lease struct {
	lim      *Limiter
	key      string
	id       uint64
	d        algo.Decision
	released atomic.Bool
}

// Acquire takes one Concurrency slot for key under a new lease. When no
// slot is free it returns a *RetryError (matching ErrLimited) whose Slots
// is the limit's number of slots and whose After is when the oldest lease
// expires at the latest (a release may come sooner): `limiter "db": all 5
// concurrency slots in use; the oldest lease expires in 1m0s at the
// latest`. A refusal by a store's failure policy (store/resilient's
// FailClosed) is a *RetryError without Slots. It returns an
// error wrapping ErrNotConcurrency for other algorithms. With an error the
// Lease is nil, whose methods are safe to call (Release does nothing).
func (l *Limiter) Acquire(ctx context.Context, key string) (*Lease, error) {
	if !l.made() {
		return nil, errNotMade
	}
	if l.limit.Algorithm() != algo.Concurrency {
		return nil, l.wrap(fmt.Errorf("%w: Acquire needs a concurrency limit, not %s", ErrNotConcurrency, l.limit.Algorithm()))
	}
	id, err := l.newLeaseID()
	if err != nil {
		return nil, err
	}
	d, res, err := l.take(ctx, key, 1, id)
	if err != nil {
		return nil, err
	}
	if !d.Allowed {
		re := &RetryError{Limiter: l.name, After: d.RetryAfter}
		if !res.Fallback { // a failure policy's refusal says nothing of the slots
			re.Slots = l.limit.Params().Limit
		}
		return nil, re
	}
	return &Lease{lim: l, key: key, id: id, d: d}, nil
}

// newLeaseID names a new Concurrency lease, refusing the invalid ID 0 a
// WithLeaseIDs function may return (a lease 0 could never be released).
func (l *Limiter) newLeaseID() (uint64, error) {
	id := l.leaseID()
	if id == 0 {
		return 0, fmt.Errorf("limiter %q: %w: the WithLeaseIDs function returned 0, which is not a valid lease ID", l.name, store.ErrBadRequest)
	}
	return id, nil
}

// Decision returns the store's decision on the lease: Remaining is the
// number of slots left when it was taken.
func (ls *Lease) Decision() algo.Decision {
	if ls == nil {
		return algo.Decision{}
	}
	return ls.d
}

// ID returns the lease's ID.
func (ls *Lease) ID() uint64 {
	if ls == nil {
		return 0
	}
	return ls.id
}

// Release gives the slot back. Releasing twice, after the lease expired,
// or a nil Lease (that of an error), does nothing.
func (ls *Lease) Release(ctx context.Context) error {
	if ls == nil || ls.released.Swap(true) {
		return nil
	}
	return ls.lim.giveBack(ctx, ls.key, 1, 0, ls.id, false)
}
