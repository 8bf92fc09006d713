package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// randomParams are the limits of the randomized traces: small budgets so
// that refusals, refills and expiry all happen within a few hundred steps.
func randomParams(k algo.Kind) []algo.Params {
	sec := time.Second
	switch k {
	case algo.FixedWindow:
		return []algo.Params{{Algorithm: k, Limit: 5, Period: sec}, {Algorithm: k, Limit: 3, Period: 700 * time.Millisecond}}
	case algo.SlidingLog:
		return []algo.Params{{Algorithm: k, Limit: 5, Period: sec}}
	case algo.SlidingWindow:
		return []algo.Params{{Algorithm: k, Limit: 7, Period: sec}, {Algorithm: k, Limit: 10, Period: sec, SubWindows: 4}}
	case algo.TokenBucket:
		three, zero := int64(3), int64(0)
		return []algo.Params{{Algorithm: k, Limit: 5, Period: sec}, {Algorithm: k, Limit: 3, Period: sec, Burst: 6, InitialTokens: &three},
			{Algorithm: k, Limit: 4, Period: sec, Burst: 3, InitialTokens: &zero, Retain: 700 * time.Millisecond}}
	case algo.GCRA:
		return []algo.Params{{Algorithm: k, Limit: 4, Period: sec, Burst: 2}}
	case algo.Shaper:
		return []algo.Params{{Algorithm: k, Limit: 5, Period: sec, Burst: 3, Delay: 1}}
	case algo.SmoothBursty:
		return []algo.Params{{Algorithm: k, Limit: 5, Period: sec, MaxWait: 300 * time.Millisecond},
			{Algorithm: k, Limit: 4, Period: sec, MaxBurstSeconds: 0.5, Retain: 400 * time.Millisecond}}
	case algo.SmoothWarmup:
		return []algo.Params{{Algorithm: k, Limit: 5, Period: sec, WarmupPeriod: 2 * sec, MaxWait: 500 * time.Millisecond}}
	case algo.Concurrency:
		return []algo.Params{{Algorithm: k, Limit: 3, LeaseTTL: 800 * time.Millisecond}}
	}
	return nil
}

// testRandom runs randomized traces of takes (on one key or several, some
// repeated), peeks, refunds, releases, resets and clock steps through the
// store and the reference, and compares every decision.
func testRandom(t *testing.T, h *Harness) {
	for _, k := range h.Kinds {
		for pi, p := range randomParams(k) {
			t.Run(fmt.Sprintf("%s/%d", k, pi), func(t *testing.T) {
				if h.Parallel {
					t.Parallel()
				}
				seed := uint64(time.Now().UnixNano())
				t.Logf("seed %d", seed)
				l := compile(t, p)
				clock := NewClock(Epoch.Add(time.Duration(seed%1000) * time.Millisecond))
				runRandom(t, l, h.open(t, clock.Now), clock, rand.New(rand.NewPCG(seed, uint64(k))), h.RandomOps)
			})
		}
	}
}

// chooser is where runRandom takes its choices from: a seeded generator,
// or a fuzzer's bytes.
type chooser interface {
	IntN(n int) int
	Int64N(n int64) int64
}

// byteChooser reads choices from a fuzz input; once it is spent every
// choice is 0.
type byteChooser struct{ b []byte }

func (c *byteChooser) Int64N(n int64) int64 {
	var v uint64
	for i := 0; i < 4 && len(c.b) > 0; i++ {
		v = v<<8 | uint64(c.b[0])
		c.b = c.b[1:]
	}
	return int64(v % uint64(n))
}

func (c *byteChooser) IntN(n int) int { return int(c.Int64N(int64(n))) }

// Fuzz is the randomized trace test with the fuzzer choosing the
// algorithm, its parameters and every operation: a store's FuzzXxx calls
// it. Any difference from the reference fails.
func Fuzz(f *testing.F, h Harness) {
	h.defaults(f)
	f.Add(uint8(0), uint8(0), []byte("take take peek time take two refund reset"))
	f.Add(uint8(8), uint8(0), []byte{1, 2, 3, 90, 5, 200, 7, 8, 9, 70, 11, 12, 13, 99, 0, 0, 255, 81})
	f.Fuzz(func(t *testing.T, kind, param uint8, ops []byte) {
		k := h.Kinds[int(kind)%len(h.Kinds)]
		ps := randomParams(k)
		p := ps[int(param)%len(ps)]
		clock := NewClock(Epoch)
		runRandom(t, compile(t, p), h.open(t, clock.Now), clock, &byteChooser{b: ops}, len(ops)/2)
	})
}

func runRandom(t *testing.T, l *algo.Limit, st store.Store, clock *Clock, rng chooser, ops int) {
	ns := namespace(t)
	keys := []string{ns + "a", ns + "b", ns + "c"}
	ref := NewReference()
	lastAt := make(map[string]int64)
	capacity := l.Capacity()
	cost := func() int64 {
		switch n := rng.IntN(20); {
		case n == 0:
			return 0
		case n == 1:
			return capacity + 1 // never
		case n < 14:
			return 1
		default:
			return 1 + rng.Int64N(max(capacity, 1))
		}
	}
	lease := func() uint64 { return uint64(rng.IntN(4)) }
	period := l.Window(clock.micros())
	for i := 0; i < ops; i++ {
		now := clock.micros()
		where := fmt.Sprintf("op %d at %v", i, clock.Now().Sub(Epoch))
		switch n := rng.IntN(100); {
		case n < 45: // take one key
			q := store.Request{Key: keys[rng.IntN(len(keys))], Limit: l, Cost: cost(), Lease: lease()}
			ok, want := ref.Take([]store.Request{q}, now)
			got, res := takeOne(t, st, q)
			if res.At != now {
				t.Fatalf("%s: Take: Result.At = %d, want the injected clock's %d", where, res.At, now)
			}
			if got != want[0] || res.Allowed != ok {
				t.Fatalf("%s: Take(%s, cost %d): store %s, reference %s", where, q.Key, q.Cost, formatDecision(got), formatDecision(want[0]))
			}
			if ok {
				lastAt[q.Key] = now
			}
		case n < 60: // take several keys, perhaps one twice
			m := 2 + rng.IntN(2)
			reqs := make([]store.Request, m)
			for j := range reqs {
				reqs[j] = store.Request{Key: keys[rng.IntN(len(keys))], Limit: l, Cost: cost() % (capacity + 1), Lease: lease()}
			}
			ok, want := ref.Take(reqs, now)
			out := make([]algo.Decision, m)
			res, err := st.Take(t.Context(), reqs, out)
			if err != nil {
				t.Fatalf("%s: Take: %v", where, err)
			}
			if res.Allowed != ok {
				t.Fatalf("%s: Take over %d keys: store Allowed = %v, reference %v", where, m, res.Allowed, ok)
			}
			for j := range out {
				if out[j] != want[j] {
					t.Fatalf("%s: Take over %d keys, request %d (%s, cost %d): store %s, reference %s", where, m, j, reqs[j].Key, reqs[j].Cost, formatDecision(out[j]), formatDecision(want[j]))
				}
			}
			if ok {
				for _, q := range reqs {
					lastAt[q.Key] = now
				}
			}
		case n < 70:
			q := store.Request{Key: keys[rng.IntN(len(keys))], Limit: l, Cost: cost()}
			want := ref.Peek(q, now)
			if got := peekOne(t, st, q); got != want {
				t.Fatalf("%s: Peek(%s, cost %d): store %s, reference %s", where, q.Key, q.Cost, formatDecision(got), formatDecision(want))
			}
		case n < 76:
			key := keys[rng.IntN(len(keys))]
			if lastAt[key] == 0 {
				continue
			}
			q := store.Request{Key: key, Limit: l, Cost: 1 + rng.Int64N(2), At: lastAt[key]}
			ref.Refund(q, now)
			if err := st.Refund(t.Context(), []store.Request{q}); err != nil {
				t.Fatalf("%s: Refund: %v", where, err)
			}
		case n < 80:
			q := store.Request{Key: keys[rng.IntN(len(keys))], Limit: l, Lease: 1 + uint64(rng.IntN(3))}
			ref.Release(q, now)
			if err := st.Release(t.Context(), []store.Request{q}); err != nil {
				t.Fatalf("%s: Release: %v", where, err)
			}
		case n < 82:
			key := keys[rng.IntN(len(keys))]
			ref.Reset(key)
			delete(lastAt, key)
			if err := st.Reset(t.Context(), key); err != nil {
				t.Fatalf("%s: Reset: %v", where, err)
			}
		default: // let time pass: mostly a little, sometimes past expiry
			var d time.Duration
			switch rng.IntN(10) {
			case 0:
				d = period + time.Duration(rng.Int64N(int64(period)))
			case 1, 2:
				d = 0
			default:
				d = time.Duration(rng.Int64N(int64(period)/4)) / time.Microsecond * time.Microsecond
			}
			clock.Advance(d)
		}
	}
}
