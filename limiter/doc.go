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
//     refunds; Wait blocks until admitted; Acquire holds a Concurrency
//     lease until Release.
//   - AllowAll takes from several limits at once, all or nothing: a
//     request that must pass a global, a tenant and a user limit is charged
//     on all of them or on none. Limits sharing a store are decided in one
//     atomic store call; across stores, AllowAll reserves in turn and rolls
//     back what it took when one refuses.
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
//	                           units are not there (OK false, Delay the
//	                           RetryAfter); an OK Delay comes from Shaper,
//	                           SmoothBursty and SmoothWarmup only
//	r.OK(), r.Delay()          r.OK(), r.Delay(), r.Decision()
//	r.Cancel()                 r.Cancel()
//	Wait(ctx), WaitN(ctx, n)   l.Wait(ctx, n)
//	SetLimit, SetBurst         l.SetParams(p): the tokens carry over
//	Tokens()                   l.Peek(0).Remaining: whole units, never < 0
//	Limit(), Burst()           l.Limit().Params() (Limit per Period),
//	                           l.Limit().Capacity()
//
// # Guarantees
//
// Decisions are the algo package's, made atomically by the store, so a
// Limiter is exact under any number of goroutines and processes sharing a
// store: a budget of K admits exactly K for the exact algorithms. Names
// prefix keys (name + ":" + key by default), so limits in one store never
// share state.
//
// # Time
//
// The store owns the clock of New's limiters; Local reads a monotonic clock
// (or WithLocalClock's). Wait sleeps with time.Timer, so testing/synctest
// runs it in fake time.
//
// # Cost
//
// With the memory store, Allow, AllowN and Reserve's decision allocate
// nothing: the limiter hands the name and the key to the store separately
// and the store never builds their concatenation unless the key is new.
// Other stores receive the concatenated key, one small allocation per call
// next to a network round trip.
package limiter
