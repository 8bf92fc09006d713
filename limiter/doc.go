// Package limiter is the Go library facade of Floodgate: named limits over
// any store.Store, with the verbs of golang.org/x/time/rate and a context
// on everything that can block or do I/O.
//
// # Which entry point
//
//   - New(store, name, params) gives a Limiter for many keys (one state per
//     key: a user, an IP, a tenant) in a store that the process owns
//     (store/memory) or shares with others (Redis, Memcached). Allow and
//     AllowN decide at once; Reserve decides and can be cancelled, which
//     refunds; Wait blocks until admitted, first-in first-out among the
//     Waits on a key; Acquire holds a Concurrency lease until Release or
//     its LeaseTTL, which Renew extends for a holder that keeps it longer
//     (Wait refuses Concurrency limits).
//   - AllowAll takes from several limits at once, all or nothing: a
//     request that must pass a global, a tenant and a user limit is charged
//     on all of them or on none. Limits sharing a store are decided in one
//     atomic store call; across stores, AllowAll reserves in turn and rolls
//     back what it took when one refuses (exactly in units, but a Smooth
//     limit rolled back is left stricter: see AllowAll).
//   - NewLocal gives one in-process limiter with no key at all, the
//     replacement for a single x/time/rate or uber-go/ratelimit limiter.
//
// # Coming from golang.org/x/time/rate
//
// A rate.Limiter is a Local with a TokenBucket: r per second with burst b
// is NewLocal(algo.Params{Algorithm: algo.TokenBucket, Limit: n, Period: p,
// Burst: b}) with n per p equal to r. Burst 0 means Limit here, not "admit
// nothing". The methods map as follows (l a *Local, r a reservation):
//
//	x/time/rate                Floodgate
//	rate.Every(d)              Limit: 1, Period: d
//	rate.Limit(100)            Limit: 100, Period: time.Second
//	rate.Inf                   no limiter, or a policy rule's unlimited: true
//	Allow()                    l.Allow()
//	AllowN(t, n)               l.AllowN(n), or l.Take(n) for the Decision;
//	                           the time is the clock's (WithLocalClock)
//	Reserve(), ReserveN(t, n)  l.Reserve(n): refused, not in debt, when the
//	                           units are not there: OK false, Delay
//	                           algo.Never (rate.InfDuration's place), the
//	                           retry time in r.Decision().RetryAfter; an
//	                           OK Delay comes from Shaper, SmoothBursty
//	                           and SmoothWarmup only
//	r.OK(), r.Delay()          r.OK(), r.Delay(), r.Decision()
//	r.Cancel()                 r.Cancel()
//	Wait(ctx), WaitN(ctx, n)   l.Wait(ctx, n): FIFO, refused at once when
//	                           the wait would pass the deadline, or when
//	                           1024 already wait (WithLocalMaxWaiters)
//	SetLimit, SetBurst         l.SetParams(p): the tokens carry over
//	Tokens()                   l.Peek(0).Remaining: whole units, never < 0
//	Limit(), Burst()           l.Limit().Params() (Limit per Period),
//	                           l.Limit().Capacity()
//
// A refused reservation holds no units and its Delay is algo.Never, so
// x/time/rate's pattern
//
//	r := l.Reserve(1); time.Sleep(r.Delay()); act()
//
// never acts without the units. But it is not a way to wait here: where
// x/time/rate's reservation goes into debt and Delay is the wait, a
// Floodgate reservation is refused whenever the units are not there now,
// and the pattern then sleeps for good. Check OK
// (`if r := l.Reserve(1); r.OK() { time.Sleep(r.Delay()); act() }`), or
// call l.Wait(ctx, 1) to block until admitted.
//
// # Guarantees
//
// Decisions are the algo package's, made atomically by the store, so a
// Limiter is exact under any number of goroutines and processes sharing a
// store: a budget of K admits exactly K for the exact algorithms.
//
// # Keys
//
// The store key of a Limiter's key is "fg:" + name + ":" + key by default
// (New's limiter "user" keeps key "42" under "fg:user:42"): the prefix
// (DefaultKeyPrefix, the policy engine's too; WithKeyPrefix changes it)
// keeps the limiter's keys apart from an application's own in a shared
// Redis, and within the ACL key pattern ~fg:* that docs/STORES.md
// recommends; the name keeps limits in one store from sharing state.
// WithKeyPrefix("") gives the keys of Floodgate before the prefix
// ("user:42"), for state that must carry over.
//
// # Waiting
//
// Limiter.Wait and Local.Wait serve their waiters first-in first-out and
// refuse at once, with a *RetryError, a waiter that cannot be served by
// its context's deadline, as x/time/rate does. x/time/rate gets both by
// reserving ahead (its tokens go into debt); a store cannot, so Wait
// lines its waiters up instead: a Wait whose first take is refused joins
// a queue (package queue, as the policy's wait strategy does), one per key
// with waiters, made on demand and dropped when the last leaves. Only the
// queue's head asks the store again, when the refusal's RetryAfter says
// the units are back; a Wait arriving while others wait on its key lines
// up behind them; and an arrival whose projected wait (its own retry after
// the waiters ahead have taken their units — a unit's refill each for the
// buckets and the Smooth algorithms' stable rate, a window's quota as each
// window opens for the windows and logs — and a hand-off per try) reaches
// its deadline is refused on arrival. The projection is exact for
// FixedWindow, TokenBucket, GCRA and Shaper; for SlidingLog,
// SlidingWindow and a SmoothWarmup key still warming up it can be short
// (see Limiter.Wait). A Wait that finds nobody waiting on the limiter
// costs one store call, as AllowN. The order holds within one Limiter (or
// one Local) in one process: waiters in other processes, in other
// Limiters sharing the store, and callers of AllowN, Reserve or AllowAll
// on the same key take units as they come, and can make a queued waiter
// miss the deadline its projection allowed; it then gets the *RetryError
// when that deadline comes instead of on arrival. A key's queue holds at
// most WithMaxWaiters waiters (WithLocalMaxWaiters for a Local; default
// DefaultMaxWaiters, 1024, the server's max_waiters default): one more is
// refused at once with a *RetryError matching ErrQueueFull, so a crowd of
// callers with no deadline cannot pile up without end. x/time/rate has no
// such bound; WithMaxWaiters(math.MaxInt) comes closest.
//
// Which error ends a Wait (Limiter.Wait lists them all): the context's
// deadline always gives a *RetryError (errors.Is ErrLimited) — at once,
// with After the projected wait, when the wait would outlast it; when it
// passes (in the queue, in an admitted Delay, during a store call or
// before Wait), one that also matches context.DeadlineExceeded, with After
// an estimate. A full queue gives a *RetryError matching ErrQueueFull
// (and ErrLimited), at once. A cancellation gives context.Canceled, the
// cost beyond the capacity ErrNever, and a store's failure its error.
//
// # Errors
//
// A call that returns an error returns with it the zero Decision (not
// Allowed), a nil Reservation or Lease, or a Result that is not Allowed
// (the zero Result when a store's Take failed), whatever the store
// reported: a store that fails may leave a placeholder admission
// behind (store/resilient reports keys it does not know as allowed).
// Errors name the limiter (`limiter "api": …`, Local's `limiter: …`) and
// wrap what they come from, for errors.Is and errors.As. A refusal that
// says when to come back is a *RetryError, which matches ErrLimited: from
// Acquire, and from Wait whenever the context's deadline ends it (then
// also matching context.DeadlineExceeded if the deadline has passed; see
// Waiting). A cost beyond the capacity is ErrNever from Wait (a refused
// Decision whose IsNever is true from the others), a bad request
// store.ErrBadRequest; a cancelled context's error and a store's errors
// come wrapped with the limiter's name.
//
// # Time
//
// The store owns the clock of New's limiters; Local reads a monotonic clock
// (or WithLocalClock's). Wait sleeps with time.Timer and its queues read
// time.Now, so testing/synctest runs it in fake time.
//
// # Cost
//
// With the memory store, Allow, AllowN and Reserve's decision allocate
// nothing: the limiter hands its prefix (key prefix, name and separator,
// built once by New) and the key to the store separately, and the store
// never builds their concatenation on the heap unless the key is new.
// Other stores receive the concatenated key, one small allocation per call
// next to a network round trip.
package limiter
