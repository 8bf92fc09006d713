// Package storetest is the conformance suite every store.Store runs: the
// memory store, Redis (standalone, Sentinel, Cluster) and Memcached.
//
// A store's test calls Run with a Harness that creates empty stores reading
// an injected clock:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			New: func(tb testing.TB, clock func() time.Time) store.Store {
//				st, err := memory.New(memory.WithClock(clock))
//				if err != nil {
//					tb.Fatal(err)
//				}
//				tb.Cleanup(func() { st.Close() })
//				return st
//			},
//		})
//	}
//
// # What the suite holds a store to
//
// The reference is the algo package run on local states with the same
// rules a store must follow:
//
//   - A Take that is admitted stores, for each request, the state the
//     algorithm's Take left. A Take that is refused charges nothing: each
//     request that was refused on its own stores the state its (refused)
//     algo Take left — which starts a fresh bucket's clock, so that a
//     bucket with initial tokens below its cost fills up — and each that
//     would have passed alone stores the state algo Peek leaves. With one
//     request this is simply "store what algo Take left". Store.Peek
//     stores nothing.
//   - A state whose algo.Limit.ExpiresAt is at or before now reads as a
//     fresh (zero) state, whether or not the store has deleted it yet.
//   - Refund, Release and Renew on a key with no live state do nothing — a key
//     holding another algorithm's state included: they leave that state
//     as it is.
//   - After a refused Take over several requests, out[i] is
//     store.Unwind(Peek(request i alone)).
//
// The tests, each a subtest of Run:
//
//   - traces: the scenario files in testdata/*.txt (format below), and
//     randomized traces, decided by the store and by the reference; every
//     decision must be equal field by field, and the files' expected
//     decisions must hold.
//   - exact: Goroutines callers (default 64) make Attempts takes (default
//     1200) on one key whose budget cannot refill during the test; exactly
//     the budget the reference admits must be admitted, for every
//     algorithm in Kinds.
//   - all_or_nothing: a Take over three keys whose third refuses charges
//     none; under concurrency, goroutines taking pairs of keys with
//     different budgets never push a key over its budget, and every key's
//     charge equals the admitted takes' costs.
//   - expiry: after a state's ExpiresAt a key reads as fresh (or, with
//     RealTTL, its TTL is ExpiresAt − now); Reset forgets a key; Refund and
//     Release give capacity back.
//   - retain: a key whose fresh state is short (a token bucket with
//     initial tokens below its burst, smooth_bursty) is still full after
//     it idled past the instant it filled up, and is forgotten Retain
//     later (or, with RealTTL, its TTL is at least Retain).
//   - foreign_give_back: a Refund, a Release and a Renew (when the store is
//     a store.Renewer) with a limit of every other algorithm leave a key's
//     state as it was.
//   - renew (stores that are a store.Renewer): a slot taken with lease L
//     at t0 and renewed at t0+0.9·TTL is still held at t0+1.5·TTL and
//     free at t0+1.9·TTL+1µs; renewing a released or an expired lease
//     does not revive it. Decisions match the reference.
//   - peek: Peek charges nothing.
//   - bad_requests: nil limits, empty keys, negative costs and mismatched lengths return
//     errors wrapping store.ErrBadRequest, without a panic.
//   - cancelled: Take and Peek under a cancelled context fail with the
//     context's error, not store.ErrUnavailable, and charge nothing.
//   - closed: every method after Close returns store.ErrClosed.
//
// Keys used by one test share a Redis Cluster hash tag ({…}), so that
// multi-key takes stay in one slot, and carry a random run id, so that
// several runs can share a server.
//
// # Trace files
//
// A trace is a timeline. Lines starting with # are comments. Limits come
// first:
//
//	limit [name:] <algorithm> <N>[/<period>] [burst=N] [initial=N] [sub=N]
//	      [delay=N] [warmup=D] [cold=F] [maxburst=F] [maxwait=D] [lease=D]
//	      [retain=D]
//
// The algorithm is a name algo.ParseKind accepts, or * for "every
// algorithm of the harness" (such a trace carries no expectations and is
// checked against the reference only). The period is a Go duration, or
// month or year for calendar windows. A file with several limits names
// them (api:) and its keys pick one with key@name.
//
// Then steps, at offsets from the trace's start (Epoch), never decreasing:
//
//	at <offset> take <key> <cost> [lease=N] [, <key> <cost> ...] [-> <expect>]
//	at <offset> peek <key> <cost> [-> <expect>]
//	at <offset> refund <key> <cost>   (of the last admitted take of key)
//	at <offset> release <key> lease=N
//	at <offset> reset <key>
//
// where <expect> is allowed or denied followed by any of remaining=N,
// retry=D (or never), reset=D, delay=D. For a take over several keys the
// expectation is the overall outcome and the fields are those of the first
// request.
//
// # Fuzzing
//
// Fuzz(f, h) is the randomized trace test with a fuzzer choosing the
// algorithm, the parameters and every operation; a store exposes it as a
// FuzzXxx function of its own.
//
// # Benchmarks
//
// Bench runs Take on 1, 10 000 and 1 000 000 keys (Harness.BenchKeys)
// in parallel, after populating and checking every key's state.
package storetest
