package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// forKinds runs f as a subtest per supported algorithm.
func forKinds(t *testing.T, h *Harness, kinds []algo.Kind, f func(t *testing.T, k algo.Kind)) {
	for _, k := range kinds {
		if !h.supports(k) {
			continue
		}
		t.Run(k.String(), func(t *testing.T) {
			if h.Parallel {
				t.Parallel()
			}
			f(t, k)
		})
	}
}

// exactBudget is the budget of the exactness test: 1000 per hour, which
// cannot refill while the clock stands still.
const exactBudget = 1000

// testExact has Goroutines callers make Attempts takes of one unit on one
// key. The clock stands still, so the budget cannot refill: the store must
// admit exactly what the reference admits in sequence — one more or one
// fewer is a failure.
func testExact(t *testing.T, h *Harness) {
	forKinds(t, h, algo.Kinds(), func(t *testing.T, k algo.Kind) {
		l := compile(t, kindParams(k, exactBudget, time.Hour))
		clock := NewClock(Epoch)
		now := clock.micros()
		// What a sequence of Attempts takes admits, by the reference.
		ref := NewReference()
		want := 0
		for i := 0; i < h.Attempts; i++ {
			if ok, _ := ref.Take([]store.Request{{Key: "k", Limit: l, Cost: 1}}, now); ok {
				want++
			}
		}
		if want == 0 || want >= h.Attempts {
			t.Fatalf("the reference admits %d of %d: the test cannot tell over-admission", want, h.Attempts)
		}
		st := h.open(t, clock.Now)
		key := namespace(t) + "k"
		var attempts, admitted atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, h.Goroutines)
		for g := 0; g < h.Goroutines; g++ {
			wg.Go(func() {
				out := make([]algo.Decision, 1)
				reqs := []store.Request{{Key: key, Limit: l, Cost: 1, Lease: uint64(g + 1)}}
				for attempts.Add(1) <= int64(h.Attempts) {
					res, err := st.Take(t.Context(), reqs, out)
					if err != nil {
						errs <- err
						return
					}
					if res.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("Take: %v", err)
		}
		if got := admitted.Load(); got != int64(want) {
			t.Errorf("%d goroutines, %d takes of 1 on a budget the reference admits %d of: store admitted %d", h.Goroutines, h.Attempts, want, got)
		}
		if d := peekOne(t, st, store.Request{Key: key, Limit: l, Cost: 1}); d.Allowed {
			t.Errorf("after the budget is spent, Peek = %s, want denied", formatDecision(d))
		}
	})
}

// testAllOrNothing takes three keys whose third refuses: none may be
// charged, and the decisions must say which would have passed alone.
func testAllOrNothing(t *testing.T, h *Harness) {
	forKinds(t, h, algo.Kinds(), func(t *testing.T, k algo.Kind) {
		l := compile(t, kindParams(k, 5, time.Hour))
		clock := NewClock(Epoch)
		st := h.open(t, clock.Now)
		ns := namespace(t)
		a, b, c := ns+"a", ns+"b", ns+"c"
		// Spend c.
		for i := int64(0); ; i++ {
			if i > l.Capacity()+5 {
				t.Fatalf("%s still admits after %d takes", c, i)
			}
			if d, _ := takeOne(t, st, store.Request{Key: c, Limit: l, Cost: 1}); !d.Allowed {
				break
			}
		}
		before := [2]algo.Decision{
			peekOne(t, st, store.Request{Key: a, Limit: l, Cost: 1}),
			peekOne(t, st, store.Request{Key: b, Limit: l, Cost: 1}),
		}
		reqs := []store.Request{{Key: a, Limit: l, Cost: 1}, {Key: b, Limit: l, Cost: 1}, {Key: c, Limit: l, Cost: 1}}
		out := make([]algo.Decision, 3)
		res, err := st.Take(t.Context(), reqs, out)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			t.Fatalf("Take(a, b, spent c) admitted")
		}
		if !out[0].Allowed || !out[1].Allowed || out[2].Allowed {
			t.Errorf("Take(a, b, spent c): decisions allowed = %v, %v, %v; want true, true, false (what each alone would get)", out[0].Allowed, out[1].Allowed, out[2].Allowed)
		}
		for i, key := range []string{a, b} {
			if want := store.Unwind(before[i], 1); out[i] != want {
				t.Errorf("Take(a, b, spent c): decision %d = %s, want %s (nothing charged)", i, formatDecision(out[i]), formatDecision(want))
			}
			if after := peekOne(t, st, store.Request{Key: key, Limit: l, Cost: 1}); after != before[i] {
				t.Errorf("after a refused Take, Peek(%s) = %s, want %s as before: it was charged", key, formatDecision(after), formatDecision(before[i]))
			}
		}
		// Now a and b alone pass and are charged.
		res, err = st.Take(t.Context(), reqs[:2], out[:2])
		if err != nil || !res.Allowed {
			t.Fatalf("Take(a, b) = %v, %v; want admitted", res.Allowed, err)
		}
	})
}

// aonKinds are the algorithms whose Remaining counts units exactly, so
// that a key's charge can be read back.
var aonKinds = []algo.Kind{algo.FixedWindow, algo.SlidingLog, algo.SlidingWindow, algo.TokenBucket, algo.GCRA, algo.Shaper, algo.Concurrency}

// testAllOrNothingConcurrent has Goroutines callers take random pairs of
// keys with different budgets at random costs while the clock stands
// still. No key may be charged beyond its budget, and each key's charge
// (its budget less what Peek reports remaining) must equal the sum of the
// costs of the admitted takes that named it: a partly charged refusal or a
// lost update shows as a difference.
func testAllOrNothingConcurrent(t *testing.T, h *Harness) {
	forKinds(t, h, aonKinds, func(t *testing.T, k algo.Kind) {
		budgets := []int64{40, 70, 100, 130}
		ns := namespace(t)
		keys := make([]string, len(budgets))
		limits := make([]*algo.Limit, len(budgets))
		for i, b := range budgets {
			keys[i] = fmt.Sprintf("%sk%d", ns, i)
			limits[i] = compile(t, kindParams(k, b, time.Hour))
		}
		clock := NewClock(Epoch)
		st := h.open(t, clock.Now)
		charged := make([]atomic.Int64, len(keys))
		var attempts, admitted atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, h.Goroutines)
		total := int64(h.Attempts)
		for g := 0; g < h.Goroutines; g++ {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				out := make([]algo.Decision, 2)
				for attempts.Add(1) <= total {
					i := rng.IntN(len(keys))
					j := (i + 1 + rng.IntN(len(keys)-1)) % len(keys)
					c := 1 + rng.Int64N(3)
					reqs := []store.Request{{Key: keys[i], Limit: limits[i], Cost: c}, {Key: keys[j], Limit: limits[j], Cost: c}}
					res, err := st.Take(t.Context(), reqs, out)
					if err != nil {
						errs <- err
						return
					}
					if res.Allowed {
						admitted.Add(1)
						charged[i].Add(c)
						charged[j].Add(c)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("Take: %v", err)
		}
		if admitted.Load() == 0 {
			t.Fatal("no take was admitted")
		}
		for i, key := range keys {
			c := charged[i].Load()
			if c > budgets[i] {
				t.Errorf("key %d: admitted takes charged %d over a budget of %d", i, c, budgets[i])
			}
			d := peekOne(t, st, store.Request{Key: key, Limit: limits[i], Cost: 0})
			if got := budgets[i] - d.Remaining; got != c {
				t.Errorf("key %d: the store holds a charge of %d (budget %d, remaining %d), but the admitted takes that named it cost %d", i, got, budgets[i], d.Remaining, c)
			}
		}
	})
}

// testExpiry checks that a key reads as fresh once its state's ExpiresAt
// has passed or, for stores that expire keys by their own clock, that the
// key's TTL is ExpiresAt - now.
func testExpiry(t *testing.T, h *Harness) {
	forKinds(t, h, algo.Kinds(), func(t *testing.T, k algo.Kind) {
		l := compile(t, kindParams(k, 5, 10*time.Second))
		clock := NewClock(Epoch)
		st := h.open(t, clock.Now)
		ref := NewReference()
		key := namespace(t) + "k"
		q := store.Request{Key: key, Limit: l, Cost: 2, Lease: 9}
		now := clock.micros()
		ok, _ := ref.Take([]store.Request{q}, now)
		if d, _ := takeOne(t, st, q); !d.Allowed || !ok {
			t.Fatalf("Take(cost 2) on a fresh key = %s, want allowed", formatDecision(d))
		}
		exp := ref.ExpiresAt(key, l)
		if exp <= now {
			t.Fatalf("the reference's state expires at %d, not after now %d", exp, now)
		}
		if h.RealTTL {
			ttl, ok := h.TTL(t, st, key)
			want := time.Duration(exp-now) * time.Microsecond
			slack := time.Second + want/100
			if !ok {
				t.Fatalf("after a Take the key has no TTL; want %v", want)
			}
			if ttl < want-slack || ttl > want+slack {
				t.Errorf("TTL = %v, want %v ± %v (the state's ExpiresAt - now)", ttl, want, slack)
			}
			return
		}
		// Just before expiry the key still holds its state.
		clock.Set(time.UnixMicro(exp - 1))
		if got, want := peekOne(t, st, q), ref.Peek(q, exp-1); got != want {
			t.Errorf("1µs before ExpiresAt: Peek = %s, reference %s", formatDecision(got), formatDecision(want))
		}
		clock.Set(time.UnixMicro(exp))
		fresh := store.Request{Key: namespace(t) + "never-used", Limit: l, Cost: 2}
		if got, want := peekOne(t, st, q), peekOne(t, st, fresh); got != want {
			t.Errorf("at ExpiresAt: Peek = %s, want %s as on a fresh key", formatDecision(got), formatDecision(want))
		}
		if in, ok := st.(store.Inspector); ok {
			if s, found, err := in.Inspect(t.Context(), key); err != nil || found {
				t.Errorf("at ExpiresAt: Inspect = %+v, %v, %v; want not found", s, found, err)
			}
		}
		want, _ := takeOne(t, st, fresh)
		if got, _ := takeOne(t, st, q); got != want {
			t.Errorf("at ExpiresAt: Take = %s, want %s as on a fresh key", formatDecision(got), formatDecision(want))
		}
	})
}

// testRetain checks that a key whose fresh state is short (a token bucket
// starting empty, smooth_bursty storing no permits) is still full after
// idling past the instant it filled up, and is forgotten Retain after it
// is full: on the injected clock, or for stores that expire keys by their
// own clock, by a TTL of at least Retain.
func testRetain(t *testing.T, h *Harness) {
	const retain = time.Minute
	zero := int64(0)
	for _, p := range []algo.Params{
		{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, InitialTokens: &zero, Retain: retain},
		{Algorithm: algo.SmoothBursty, Limit: 5, Period: time.Second, Retain: retain},
	} {
		if !h.supports(p.Algorithm) {
			continue
		}
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			if h.Parallel {
				t.Parallel()
			}
			l := compile(t, p)
			clock := NewClock(Epoch)
			st := h.open(t, clock.Now)
			ref := NewReference()
			ns := namespace(t)
			q := store.Request{Key: ns + "k", Limit: l, Cost: 1}
			look := store.Request{Key: q.Key, Limit: l, Cost: 0}
			take := func(when string) {
				t.Helper()
				_, want := ref.Take([]store.Request{q}, clock.micros())
				if got, _ := takeOne(t, st, q); got != want[0] {
					t.Errorf("%s: Take = %s, reference %s", when, formatDecision(got), formatDecision(want[0]))
				}
			}
			take("on a fresh key")
			// Full after 1s (the bucket) or 1.2s (the ticket at 200ms,
			// then a second of stored permits).
			clock.Advance(2500 * time.Millisecond)
			if d, want := peekOne(t, st, look), ref.Peek(look, clock.micros()); d != want || d.Remaining != l.Capacity() {
				t.Errorf("idle 2.5s: Peek = %s, want full (remaining %d), reference %s", formatDecision(d), l.Capacity(), formatDecision(want))
			}
			take("idle 2.5s")
			now, exp := clock.micros(), ref.ExpiresAt(q.Key, l)
			if h.RealTTL {
				ttl, ok := h.TTL(t, st, q.Key)
				want := time.Duration(exp-now) * time.Microsecond
				if !ok || ttl < retain || ttl > want+time.Second {
					t.Errorf("after a take, TTL = %v (exists %v), want %v: the time until full plus Retain %v", ttl, ok, want, retain)
				}
				return
			}
			clock.Set(time.UnixMicro(exp - 1))
			if got, want := peekOne(t, st, look), ref.Peek(look, exp-1); got != want || got.Remaining != l.Capacity() {
				t.Errorf("1µs before ExpiresAt (full + Retain): Peek = %s, want %s, full", formatDecision(got), formatDecision(want))
			}
			clock.Set(time.UnixMicro(exp))
			fresh := store.Request{Key: ns + "never-used", Limit: l, Cost: 0}
			if got, want := peekOne(t, st, look), peekOne(t, st, fresh); got != want {
				t.Errorf("at ExpiresAt (full + Retain): Peek = %s, want %s as on a fresh key", formatDecision(got), formatDecision(want))
			}
		})
	}
}

// testReset checks that Reset forgets a key.
func testReset(t *testing.T, h *Harness) {
	forKinds(t, h, algo.Kinds(), func(t *testing.T, k algo.Kind) {
		l := compile(t, kindParams(k, 5, time.Hour))
		clock := NewClock(Epoch)
		st := h.open(t, clock.Now)
		ns := namespace(t)
		q := store.Request{Key: ns + "k", Limit: l, Cost: 1}
		fresh := store.Request{Key: ns + "fresh", Limit: l, Cost: 1}
		for i := 0; i < 3; i++ {
			takeOne(t, st, q)
		}
		if err := st.Reset(t.Context(), q.Key, ns+"never-used"); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		if got, want := peekOne(t, st, q), peekOne(t, st, fresh); got != want {
			t.Errorf("after Reset: Peek = %s, want %s as on a fresh key", formatDecision(got), formatDecision(want))
		}
		want, _ := takeOne(t, st, fresh)
		if got, _ := takeOne(t, st, q); got != want {
			t.Errorf("after Reset: Take = %s, want %s as on a fresh key", formatDecision(got), formatDecision(want))
		}
	})
}

// testRefundRelease checks that Refund gives back what a Take charged and
// Release gives back a lease, as the reference does.
func testRefundRelease(t *testing.T, h *Harness) {
	forKinds(t, h, algo.Kinds(), func(t *testing.T, k algo.Kind) {
		l := compile(t, kindParams(k, 5, time.Hour))
		clock := NewClock(Epoch)
		st := h.open(t, clock.Now)
		ref := NewReference()
		q := store.Request{Key: namespace(t) + "k", Limit: l, Cost: 3, Lease: 42}
		if l.Capacity() < 3 {
			q.Cost = l.Capacity()
		}
		now := clock.micros()
		ref.Take([]store.Request{q}, now)
		d, res := takeOne(t, st, q)
		if !d.Allowed {
			t.Fatalf("Take(cost %d) on a fresh key = %s, want allowed", q.Cost, formatDecision(d))
		}
		clock.Advance(time.Millisecond)
		now = clock.micros()
		back := q
		back.At = res.At
		if k == algo.Concurrency {
			ref.Release(back, now)
			if err := st.Release(t.Context(), []store.Request{back}); err != nil {
				t.Fatalf("Release: %v", err)
			}
		} else {
			ref.Refund(back, now)
			if err := st.Refund(t.Context(), []store.Request{back}); err != nil {
				t.Fatalf("Refund: %v", err)
			}
		}
		probe := store.Request{Key: q.Key, Limit: l, Cost: 0}
		got, want := peekOne(t, st, probe), ref.Peek(probe, now)
		if got != want {
			t.Errorf("after giving back: Peek = %s, reference %s", formatDecision(got), formatDecision(want))
		}
		switch k {
		case algo.SmoothBursty, algo.SmoothWarmup:
			// Their Remaining counts stored permits, not capacity.
		default:
			if got.Remaining != l.Capacity() {
				t.Errorf("after giving back all %d units, Remaining = %d, want the capacity %d", q.Cost, got.Remaining, l.Capacity())
			}
		}
	})
}

// testPeek checks that Peek charges nothing.
func testPeek(t *testing.T, h *Harness) {
	forKinds(t, h, algo.Kinds(), func(t *testing.T, k algo.Kind) {
		l := compile(t, kindParams(k, 5, time.Hour))
		clock := NewClock(Epoch)
		st := h.open(t, clock.Now)
		ref := NewReference()
		q := store.Request{Key: namespace(t) + "k", Limit: l, Cost: 1}
		for i := 0; i < int(l.Capacity())+3; i++ {
			for j := 0; j < 3; j++ {
				if got, want := peekOne(t, st, q), ref.Peek(q, clock.micros()); got != want {
					t.Fatalf("Peek %d.%d = %s, reference %s", i, j, formatDecision(got), formatDecision(want))
				}
			}
			_, want := ref.Take([]store.Request{q}, clock.micros())
			if got, _ := takeOne(t, st, q); got != want[0] {
				t.Fatalf("Take %d after peeks = %s, reference (which never peeked) %s", i, formatDecision(got), formatDecision(want[0]))
			}
			clock.Advance(time.Millisecond)
		}
	})
}

// testBadRequests checks that malformed requests are errors wrapping
// store.ErrBadRequest, not panics.
func testBadRequests(t *testing.T, h *Harness) {
	l := compile(t, kindParams(h.Kinds[0], 5, time.Hour))
	st := h.open(t, NewClock(Epoch).Now)
	ctx := t.Context()
	key := namespace(t) + "k"
	cases := []struct {
		name string
		reqs []store.Request
		out  []algo.Decision
	}{
		{"nil limit", []store.Request{{Key: key, Cost: 1}}, make([]algo.Decision, 1)},
		{"empty key", []store.Request{{Limit: l, Cost: 1}}, make([]algo.Decision, 1)},
		{"nil limit among others", []store.Request{{Key: key, Limit: l, Cost: 1}, {Key: key + "2", Cost: 1}}, make([]algo.Decision, 2)},
		{"out too short", []store.Request{{Key: key, Limit: l, Cost: 1}, {Key: key + "2", Limit: l, Cost: 1}}, make([]algo.Decision, 1)},
		{"negative cost", []store.Request{{Key: key, Limit: l, Cost: -3}}, make([]algo.Decision, 1)},
		{"negative cost among others", []store.Request{{Key: key, Limit: l, Cost: 1}, {Key: key + "2", Limit: l, Cost: -3}}, make([]algo.Decision, 2)},
	}
	for _, c := range cases {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s: panic: %v", c.name, p)
				}
			}()
			_, err := st.Take(ctx, c.reqs, c.out)
			checkErr(t, "Take with "+c.name, err, store.ErrBadRequest)
			checkErr(t, "Peek with "+c.name, st.Peek(ctx, c.reqs, c.out), store.ErrBadRequest)
			if c.name != "out too short" {
				checkErr(t, "Refund with "+c.name, st.Refund(ctx, c.reqs), store.ErrBadRequest)
				checkErr(t, "Release with "+c.name, st.Release(ctx, c.reqs), store.ErrBadRequest)
			}
		}()
	}
	checkErr(t, "Reset of an empty key", st.Reset(ctx, ""), store.ErrBadRequest)
	// A bad request charges nothing, even next to a good one.
	good := store.Request{Key: key, Limit: l, Cost: 1}
	if _, err := st.Take(ctx, []store.Request{good, {Key: "", Limit: l, Cost: 1}}, make([]algo.Decision, 2)); err == nil {
		t.Error("Take with an empty key among others: no error")
	}
	fresh := store.Request{Key: key + "-fresh", Limit: l, Cost: 1}
	if got, want := peekOne(t, st, good), peekOne(t, st, fresh); got != want {
		t.Errorf("after a bad Take, Peek = %s, want %s (nothing charged)", formatDecision(got), formatDecision(want))
	}
}

// testClosed checks that every method fails with store.ErrClosed after
// Close.
func testClosed(t *testing.T, h *Harness) {
	l := compile(t, kindParams(h.Kinds[0], 5, time.Hour))
	st := h.New(t, NewClock(Epoch).Now)
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := t.Context()
	reqs := []store.Request{{Key: namespace(t) + "k", Limit: l, Cost: 1}}
	out := make([]algo.Decision, 1)
	_, err := st.Take(ctx, reqs, out)
	checkErr(t, "Take after Close", err, store.ErrClosed)
	checkErr(t, "Peek after Close", st.Peek(ctx, reqs, out), store.ErrClosed)
	checkErr(t, "Refund after Close", st.Refund(ctx, reqs), store.ErrClosed)
	checkErr(t, "Release after Close", st.Release(ctx, reqs), store.ErrClosed)
	checkErr(t, "Reset after Close", st.Reset(ctx, reqs[0].Key), store.ErrClosed)
	if err := st.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
}

// testForeignGiveBack checks that Refund and Release with a limit of
// another algorithm leave a key's state alone: giving back to a key that
// holds no state of that algorithm gives back nothing, and must not wipe
// the state another limit keeps there (a Release naming a rate limit's key
// would otherwise restore that limit's budget).
func testForeignGiveBack(t *testing.T, h *Harness) {
	forKinds(t, h, algo.Kinds(), func(t *testing.T, k algo.Kind) {
		l := compile(t, kindParams(k, 5, time.Hour))
		clock := NewClock(Epoch)
		st := h.open(t, clock.Now)
		q := store.Request{Key: namespace(t) + "k", Limit: l, Cost: min(3, l.Capacity()), Lease: 42}
		d, res := takeOne(t, st, q)
		if !d.Allowed {
			t.Fatalf("Take(cost %d) on a fresh key = %s, want allowed", q.Cost, formatDecision(d))
		}
		probe := store.Request{Key: q.Key, Limit: l, Cost: 0}
		before := peekOne(t, st, probe)
		for _, j := range algo.Kinds() {
			if j == k {
				continue
			}
			other := compile(t, kindParams(j, 5, time.Hour))
			back := store.Request{Key: q.Key, Limit: other, Cost: 1, Lease: 42, At: res.At}
			if err := st.Release(t.Context(), []store.Request{back}); err != nil {
				t.Fatalf("Release with a %s limit: %v", j, err)
			}
			if err := st.Refund(t.Context(), []store.Request{back}); err != nil {
				t.Fatalf("Refund with a %s limit: %v", j, err)
			}
			if rn, ok := st.(store.Renewer); ok {
				if err := rn.Renew(t.Context(), []store.Request{back}); err != nil {
					t.Fatalf("Renew with a %s limit: %v", j, err)
				}
			}
			if got := peekOne(t, st, probe); got != before {
				t.Fatalf("after a Release and a Refund with a %s limit: Peek = %s, want %s as before", j, formatDecision(got), formatDecision(before))
			}
		}
	})
}

// testCancelled checks that a call under a cancelled context fails with
// the context's error, not as an outage (store.ErrUnavailable: callers
// fail open or trip breakers on that), and charges nothing.
func testCancelled(t *testing.T, h *Harness) {
	l := compile(t, kindParams(algo.FixedWindow, 5, time.Hour))
	st := h.open(t, NewClock(Epoch).Now)
	q := store.Request{Key: namespace(t) + "k", Limit: l, Cost: 1}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	out := make([]algo.Decision, 1)
	_, takeErr := st.Take(ctx, []store.Request{q}, out)
	peekErr := st.Peek(ctx, []store.Request{q}, out)
	for name, err := range map[string]error{"Take": takeErr, "Peek": peekErr} {
		if !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s under a cancelled context: %v; want context.Canceled, not store.ErrUnavailable", name, err)
		}
	}
	if d := peekOne(t, st, store.Request{Key: q.Key, Limit: l}); d.Remaining != l.Capacity() {
		t.Errorf("after the cancelled calls: %s, want nothing charged", formatDecision(d))
	}
}

// testRenew checks that Renew keeps a live lease's slots past its first
// expiry and does not revive a lease that was released or has expired.
func testRenew(t *testing.T, h *Harness) {
	if !h.supports(algo.Concurrency) {
		t.Skip("the store does not support concurrency limits")
	}
	const ttl = 100 * time.Second
	l := compile(t, kindParams(algo.Concurrency, 1, ttl))
	clock := NewClock(Epoch)
	st := h.open(t, clock.Now)
	rn, ok := st.(store.Renewer)
	if !ok {
		t.Skip("the store is not a store.Renewer")
	}
	ref := NewReference()
	key := namespace(t) + "k"
	at := func(d time.Duration) int64 {
		clock.Set(Epoch.Add(d))
		return clock.micros()
	}
	renew := func(what string, q store.Request, now int64) {
		t.Helper()
		ref.Renew(q, now)
		if err := rn.Renew(t.Context(), []store.Request{q}); err != nil {
			t.Fatalf("Renew %s: %v", what, err)
		}
	}
	probe := func(what string, wantHeld bool, now int64) {
		t.Helper()
		q := store.Request{Key: key, Limit: l, Cost: 1}
		got, want := peekOne(t, st, q), ref.Peek(q, now)
		if got != want {
			t.Errorf("%s: Peek = %s, reference %s", what, formatDecision(got), formatDecision(want))
		}
		if got.Allowed == wantHeld {
			t.Errorf("%s: Peek = %s, want the slot held = %v", what, formatDecision(got), wantHeld)
		}
	}
	take := func(what string, lease uint64, now int64) {
		t.Helper()
		q := store.Request{Key: key, Limit: l, Cost: 1, Lease: lease}
		ok, want := ref.Take([]store.Request{q}, now)
		got, _ := takeOne(t, st, q)
		if got != want[0] || !ok {
			t.Fatalf("%s: Take = %s, reference %s, want allowed", what, formatDecision(got), formatDecision(want[0]))
		}
	}
	L := store.Request{Key: key, Limit: l, Lease: 7}
	take("t0", L.Lease, at(0))
	renew("at 0.9 TTL", L, at(ttl*9/10))
	probe("at 1.5 TTL, after the renewal", true, at(ttl*3/2))
	probe("at 1.9 TTL - 1µs", true, at(ttl*19/10-time.Microsecond))
	probe("at 1.9 TTL", false, at(ttl*19/10))
	renew("after it expired", L, at(ttl*19/10+time.Microsecond))
	probe("after renewing an expired lease", false, at(ttl*19/10+time.Microsecond))

	M := store.Request{Key: key, Limit: l, Lease: 8}
	take("a second lease", M.Lease, at(2*ttl))
	ref.Release(M, at(2*ttl+time.Second))
	if err := st.Release(t.Context(), []store.Request{M}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	renew("after it was released", M, at(2*ttl+2*time.Second))
	probe("after renewing a released lease", false, at(2*ttl+2*time.Second))
	// On a key with no state, Renew does nothing.
	renew("on a fresh key", store.Request{Key: key + "-fresh", Limit: l, Lease: 9}, at(2*ttl+2*time.Second))
}
