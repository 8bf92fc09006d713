// Package store defines where Floodgate keeps per-key algorithm state and
// how a decision over one or several keys is made atomically.
//
// A Store runs the algo package's math next to the data: the memory store
// (store/memory) under a lock, Redis (store/redis) in Lua scripts, Memcached
// (store/memcached) under compare-and-swap. Every store passes the
// conformance suite in store/storetest: the same decisions as the pure
// reference on the same traces, exactness under concurrency, and expiry of
// idle keys.
//
// Concurrency slots are held under a lease that expires after the limit's
// LeaseTTL unless its holder releases it (Store.Release) or renews it
// (Renewer, which every store here implements): a holder that lives longer
// than the TTL renews its lease well before it expires, and LeaseTTL is then
// how long the slots of a holder that died stay taken. A lease that has
// expired is not revived by a renewal.
//
// Each store owns its clock: the memory store reads an injectable clock,
// Redis reads the server's TIME, Memcached the caller's clock. The algo
// package's time unit, microseconds since the epoch, is used throughout.
package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate/floodgate/algo"
)

// Request is one key's part in a decision.
type Request struct {
	// Key identifies the state. Callers namespace it (the library prefixes
	// the limit's name); two limits must not share a key.
	Key string
	// Limit is the compiled limit to apply. Required.
	Limit *algo.Limit
	// Cost is the number of units to take (0 only reports the state);
	// negative is a bad request (ErrBadRequest) in every store.
	Cost int64
	// Lease identifies a Concurrency lease for Take, Release and
	// Renewer.Renew.
	Lease uint64
	// At is the store time (µs) of the Take being refunded; Refund only.
	// Pass the Take's Result.At: a sliding log gives back the oldest units
	// stamped at or after it (algo.Limit.Refund), which needs At no later
	// than the Take's own stamp. Zero means the store's now.
	At int64
}

// Result is the outcome of a Take over several requests.
type Result struct {
	// Allowed reports that every request was admitted and charged. When
	// false, nothing was charged.
	Allowed bool
	// At is the store's clock (µs since the epoch) when it decided; pass it
	// back in Request.At to Refund.
	At int64
	// Fallback reports that a failure policy answered instead of the store
	// (store/resilient): nothing was charged on the store, so a Refund of
	// these requests there would give back units others spent.
	Fallback bool
	// Partial reports a Take refused by the part of the store that
	// answered while another part failed (a Redis Cluster node down, or
	// a roll-back that failed): a request the store decided was refused
	// (or the requests it decided together were), which no answer of the
	// failed part could turn into an admission, so the refusal stands.
	// Allowed is false. out holds the decisions of the requests the store
	// decided, as after any refusal, and the zero Decision (Limit 0, which
	// no decision has) for the others, which no store decided. Nothing is
	// charged but what a failed roll-back leaves (see the store's
	// documentation). A store returns it with Take's error, the failure
	// (a *PartitionError naming the part that failed), for the caller's
	// breakers and logs; store/resilient answers it as the refusal it is,
	// without the error, whatever its failure policy, rather than as an
	// outage (FailOpen would admit what a live key refused).
	Partial bool
}

// Store keeps algorithm state per key. Implementations are safe for
// concurrent use.
type Store interface {
	// Take decides reqs as one all-or-nothing acquisition: when every
	// request is admitted, all are charged; when any is refused, none is.
	// out must have len(reqs); out[i] receives request i's decision. After
	// a refusal, out[i].Allowed says whether request i alone would have
	// passed, and out[i].Remaining is what remains with nothing charged.
	// With an error, the Result means nothing unless it is Partial: a
	// refusal that stands although part of the store failed.
	Take(ctx context.Context, reqs []Request, out []algo.Decision) (Result, error)
	// Peek fills out with the decisions Take would make for each request on
	// its own, charging nothing.
	Peek(ctx context.Context, reqs []Request, out []algo.Decision) error
	// Refund gives back units admitted by an earlier Take (see
	// algo.Limit.Refund); it is how a caller cancels a reservation.
	Refund(ctx context.Context, reqs []Request) error
	// Release gives back Concurrency leases (Request.Lease) before they expire.
	Release(ctx context.Context, reqs []Request) error
	// Reset forgets the state of the keys, as if never used.
	Reset(ctx context.Context, keys ...string) error
	// Close releases the store's connections and goroutines. A second
	// Close does nothing and returns nil.
	Close() error
}

// Renewer is implemented by stores that can extend Concurrency leases;
// optional, beside Store.Release. A caller that holds slots for longer than
// the limit's LeaseTTL (a websocket, a long stream) renews them before they
// expire; LeaseTTL is then how long the slots of a holder that died (and
// stopped renewing) stay taken. Every store in this module implements it.
type Renewer interface {
	// Renew moves the slots held under each Request.Lease (Key, Limit and
	// Lease as for Release; Cost and At are ignored) to expire the limit's
	// LeaseTTL from the store's now (algo.Limit.Renew). A lease that has
	// expired or been released is not revived: renewing it does nothing
	// and is not an error, so a holder cannot tell from Renew that it lost
	// its slot. A key holding another algorithm's state is left alone.
	Renew(ctx context.Context, reqs []Request) error
}

// LocalTaker is implemented by stores that can decide some Takes in
// process, from what they hold, without a call that may wait on a network
// or a lock held across one (store/lease: a key's slice); optional. A
// wrapper that bounds store calls with a timeout and a goroutine
// (store/resilient) asks it first, and makes a store call only when it
// declines: an answer from memory needs neither.
type LocalTaker interface {
	// TakeLocal decides reqs as Take would, when it can do so at once
	// from what the store holds, and reports ok. When it cannot (the
	// answer needs the shared store, or another caller is deciding the
	// key), it returns ok false having charged nothing and changed
	// nothing: the caller then calls Take.
	TakeLocal(reqs []Request, out []algo.Decision) (res Result, ok bool)
}

// Partitioner is implemented by stores whose keys live on several failure
// domains — a Redis Cluster's masters, a memcached ring's servers — that
// fail one at a time; optional. A wrapper that stops calling a failing
// store (store/resilient's circuit breaker) keeps one breaker per
// partition, so that a dead node stops the calls for its keys only, not
// for every key.
//
// Partitions are small numbers, fixed for the store's life: a key is in
// the same partition at every call (a partition need not follow a key's
// node through a failover or a resharding). A store with one failure
// domain (a standalone Redis, a single memcached server) reports 1
// partition, or does not implement Partitioner.
type Partitioner interface {
	// Partitions returns the number of partitions, at least 1 and the same
	// at every call.
	Partitions() int
	// Partition returns the partition of key, in [0, Partitions()). It is
	// called on every decision: it must be cheap, allocation-free in the
	// common case, and safe for concurrent use.
	Partition(key string) int
	// PartitionName describes partition p for an operator's log ("slots
	// 0-255", "server 10.0.0.8:11211"); "" when the store has one
	// partition.
	PartitionName(p int) string
}

// PartitionError is the error of a Partitioner's call over keys of
// several partitions whose failure it can place: it names the partitions
// whose part of the call failed, so that a wrapper with a breaker per
// partition counts the failure against those only and not against the
// live nodes the call also reached (a hierarchy's global key, say, on a
// live node, beside a user's key on a dead one). Err is the failure, as
// the store would return it otherwise (wrapping ErrUnavailable and the
// like), and is both its text and what Unwrap returns; find a
// PartitionError with errors.As.
//
// Of the partitions of the call's keys, those in Failed failed, those in
// Skipped were not reached (the call stopped at an earlier failure: they
// neither failed nor succeeded), and the others succeeded — including a
// partition that admitted a reservation later rolled back, unless the
// roll-back failed there, which is that partition's failure. A store
// returns a plain error when it cannot tell (a failure before any key's
// node was reached, or a deadline that passed between keys).
type PartitionError struct {
	// Err is the call's failure. Never nil.
	Err error
	// Failed lists the partitions (Partitioner.Partition's numbers) whose
	// part of the call failed, each once. Never empty.
	Failed []int
	// Skipped lists the partitions of the call's keys whose part was not
	// run, each once and none in Failed; nil when every part ran.
	Skipped []int
}

// Error returns Err's text.
func (e *PartitionError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *PartitionError) Unwrap() error { return e.Err }

// Under returns the first store that is a T in st and down its chain of
// wrappers (each one's Unwrap() Store: store/resilient, store/lease,
// storeurl's Retrying), which pass keys unchanged. whole is false when a
// link of the chain is not there yet (an Unwrap returned nil: a store
// still being opened in the background), so that a T may appear later.
func Under[T any](st Store) (t T, found, whole bool) {
	for st != nil {
		if v, ok := st.(T); ok {
			return v, true, true
		}
		u, ok := st.(interface{ Unwrap() Store })
		if !ok {
			return t, false, true
		}
		st = u.Unwrap()
	}
	return t, false, false
}

// Inspector is implemented by stores that can report a key's raw state for
// introspection (the admin API); optional.
type Inspector interface {
	// Inspect returns the key's state and whether it exists.
	Inspect(ctx context.Context, key string) (algo.State, bool, error)
}

// RequestInspector is implemented by stores that keep some of a key's
// state under names derived from its limit, which Store.Reset and
// Inspector.Inspect, given the key alone, find only for limits the store
// has used since it started: memcached names each window counter after
// its window's start and cannot list keys. Given each key's limit, these
// methods reach all of its state. Optional; a caller that knows the limits
// (the admin API reads them from its keys' rules) uses it, and one that
// does not should say that a reset or an inspection may miss state.
type RequestInspector interface {
	// ResetRequests forgets the state of each request's Key, as Reset
	// does, including what is kept under names derived from its Limit
	// (Cost, Lease and At are ignored).
	ResetRequests(ctx context.Context, reqs []Request) error
	// InspectRequest returns the state of req.Key under req.Limit, laid
	// out as algo.State for that limit, and whether it exists.
	InspectRequest(ctx context.Context, req Request) (algo.State, bool, error)
}

// Errors common to stores. Implementations wrap them with detail so that
// errors.Is works across stores.
var (
	// ErrClosed is returned by every method but Close after Close.
	ErrClosed = errors.New("store: closed")
	// ErrUnavailable means the store could not be reached or answered too
	// late; the caller's failure policy decides what to do.
	ErrUnavailable = errors.New("store: unavailable")
	// ErrContention means optimistic concurrency gave up after its retries
	// (Memcached); nothing was charged.
	ErrContention = errors.New("store: too much contention")
	// ErrBadRequest reports an invalid request (nil Limit, empty key,
	// mismatched lengths).
	ErrBadRequest = errors.New("store: bad request")
)

// Failure names the kind of failure err is, in words fit for a client:
// a store's errors carry addresses and server messages that belong in
// the operator's log, not in a response. The server's APIs and the
// middleware answer with it.
func Failure(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "the store did not answer in time"
	case errors.Is(err, ErrContention):
		return "too much contention on the key; retry"
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrClosed):
		return "the store is unavailable"
	case errors.Is(err, context.Canceled):
		return "the request was cancelled"
	}
	return "the store failed"
}

// Check validates reqs and out as every Store method expects them.
func Check(reqs []Request, out []algo.Decision) error {
	if out != nil && len(out) != len(reqs) {
		return errors.Join(ErrBadRequest, errors.New("len(out) != len(reqs)"))
	}
	for i := range reqs {
		if reqs[i].Limit == nil {
			return errors.Join(ErrBadRequest, errors.New("request has no limit"))
		}
		if reqs[i].Key == "" {
			return errors.Join(ErrBadRequest, errors.New("request has an empty key"))
		}
		if reqs[i].Cost < 0 {
			return NegativeCost(i, reqs[i].Key, reqs[i].Cost)
		}
	}
	return nil
}

// NegativeCost is the error of request i, whose cost is negative: a
// refund is Refund's, not a Take of less than nothing.
func NegativeCost(i int, key string, cost int64) error {
	return fmt.Errorf("%w: request %d (key %q): negative cost %d", ErrBadRequest, i, key, cost)
}

// Unwind applies the after-refusal rule of Take to d, the decision of a
// request of cost that would have passed alone (a refused decision is
// returned as is): Remaining is reported with nothing charged and Delay is
// zero. When cost > 0 and that puts Remaining back at Limit, nothing is
// held and ResetAfter is zero, as algo.Decision has it for a key at full
// capacity. Otherwise ResetAfter stays that of the charged state, an upper
// bound of the uncharged one: exact for FixedWindow, whose reset is the
// window's end either way; for the others a decision alone does not tell
// how much of it the cost accounts for. (For the Smooth algorithms, whose
// Remaining counts unit requests that pass without waiting, Remaining =
// Limit does not mean that the stored permits are full.)
func Unwind(d algo.Decision, cost int64) algo.Decision {
	if d.Allowed && cost > 0 {
		d.Remaining += cost
		if d.Remaining >= d.Limit {
			d.Remaining = d.Limit
			d.ResetAfter = 0
		}
	}
	if d.Allowed {
		d.Delay = 0
	}
	return d
}
