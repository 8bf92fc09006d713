package limiter_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/storetest"
)

func newFakeLocal(t *testing.T, p algo.Params) (*limiter.Local, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock(storetest.Epoch)
	l, err := limiter.NewLocal(p, limiter.WithLocalClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

func TestLocalSetParamsErrors(t *testing.T) {
	p := algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second}
	l, _ := newFakeLocal(t, p)
	l.AllowN(4)
	lim, before := l.Limit(), l.Peek(0)
	if err := l.SetParams(algo.Params{Algorithm: algo.TokenBucket, Limit: -1, Period: time.Second}); !errors.Is(err, algo.ErrInvalid) {
		t.Errorf("SetParams with a bad limit: %v, want ErrInvalid", err)
	}
	if err := l.SetParams(algo.Params{Algorithm: algo.Concurrency, Limit: 1}); !errors.Is(err, algo.ErrInvalid) {
		t.Errorf("SetParams to concurrency: %v, want algo.ErrInvalid", err)
	}
	if l.Limit() != lim {
		t.Errorf("after failed SetParams the limit is %v, want %v unchanged", l.Limit(), lim)
	}
	if after := l.Peek(0); after != before {
		t.Errorf("after failed SetParams Peek(0) = %+v, want %+v", after, before)
	}
}

// setStep is one row of a SetParams step table: at the instant, either
// switch to p (when set) or take n, then check the decision of Peek(peek).
type setStep struct {
	at        time.Duration
	p         *algo.Params
	take      int64
	peek      int64
	remaining int64
	retry     time.Duration
	delay     time.Duration
}

func runSetSteps(t *testing.T, start algo.Params, steps []setStep) {
	t.Helper()
	l, clock := newFakeLocal(t, start)
	for i, s := range steps {
		clock.Set(storetest.Epoch.Add(s.at))
		switch {
		case s.p != nil:
			if err := l.SetParams(*s.p); err != nil {
				t.Fatalf("step %d: SetParams(%v): %v", i, s.p.Algorithm, err)
			}
		case s.take > 0:
			if d := l.Take(s.take); !d.Allowed {
				t.Fatalf("step %d: Take(t+%v, %d) refused: %+v", i, s.at, s.take, d)
			}
		}
		d := l.Peek(s.peek)
		if d.Remaining != s.remaining || d.RetryAfter != s.retry || d.Delay != s.delay {
			t.Errorf("step %d: Peek(t+%v, %d) = remaining %d retry %v delay %v; want %d %v %v",
				i, s.at, s.peek, d.Remaining, d.RetryAfter, d.Delay, s.remaining, s.retry, s.delay)
		}
	}
}

func params(k algo.Kind, limit int64, period time.Duration, burst int64) *algo.Params {
	return &algo.Params{Algorithm: k, Limit: limit, Period: period, Burst: burst}
}

// TestLocalSetParamsBucket: as with x/time/rate's SetLimit and SetBurst,
// the bucket refills at the old rate up to the change, and its tokens
// (fractions included) carry over, clamped to the new burst.
func TestLocalSetParamsBucket(t *testing.T) {
	ms := time.Millisecond
	runSetSteps(t, *params(algo.TokenBucket, 10, time.Second, 0), []setStep{
		{at: 0, take: 6, peek: 0, remaining: 4},
		{at: 0, p: params(algo.TokenBucket, 10, time.Second, 2), remaining: 2},                      // clamped to the new burst
		{at: 0, p: params(algo.TokenBucket, 10, time.Second, 20), remaining: 2},                     // a larger burst gives nothing
		{at: 0, take: 2, peek: 1, remaining: 0, retry: 100 * ms},                                    // empty
		{at: 50 * ms, peek: 1, remaining: 0, retry: 50 * ms},                                        // half a token at 10/s
		{at: 50 * ms, p: params(algo.TokenBucket, 10, 2*time.Second, 20), peek: 1, retry: 100 * ms}, // the half token carries; 5/s refills the rest
		{at: 150 * ms, peek: 0, remaining: 1},
		{at: 350 * ms, p: params(algo.TokenBucket, 1, time.Minute, 20), peek: 0, remaining: 2}, // refilled at 5/s up to the change
		{at: 350 * ms, p: params(algo.GCRA, 1, time.Minute, 20), peek: 0, remaining: 2},        // GCRA keeps a token bucket's level
		{at: 350 * ms, take: 2, peek: 1, retry: time.Minute},
	})
}

// TestLocalSetParamsShaper: what carries over is the water (the units
// queued), not the room.
func TestLocalSetParamsShaper(t *testing.T) {
	ms := time.Millisecond
	runSetSteps(t, *params(algo.Shaper, 10, time.Second, 4), []setStep{
		{at: 0, take: 3, peek: 1, remaining: 1, delay: 300 * ms}, // capacity 5, 3 queued
		{at: 0, p: params(algo.Shaper, 10, time.Second, 9), peek: 1, remaining: 6, delay: 300 * ms},
		{at: 0, p: params(algo.Shaper, 10, 2*time.Second, 9), peek: 1, remaining: 6, delay: 600 * ms}, // the same 3 drain at 5/s
		{at: 0, p: params(algo.Shaper, 10, time.Second, 1), peek: 1, remaining: 0, retry: 100 * ms},   // clamped: 2 queued of 2
	})
}

// TestLocalSetParamsWindows: counts carry over, within the same window or
// into the new one.
func TestLocalSetParamsWindows(t *testing.T) {
	ms := time.Millisecond
	t.Run("fixed_window", func(t *testing.T) {
		runSetSteps(t, *params(algo.FixedWindow, 10, time.Second, 0), []setStep{
			{at: 200 * ms, take: 6, peek: 0, remaining: 4},
			{at: 300 * ms, p: params(algo.FixedWindow, 8, time.Second, 0), peek: 0, remaining: 2},
			{at: 300 * ms, p: params(algo.FixedWindow, 5, time.Second, 0), peek: 1, remaining: 0, retry: 700 * ms},
			{at: 300 * ms, p: params(algo.FixedWindow, 10, time.Minute, 0), peek: 0, remaining: 4}, // the 6 counted carry whole, above the old limit of 5
			{at: time.Minute, peek: 0, remaining: 10},
		})
	})
	t.Run("sliding_window", func(t *testing.T) {
		runSetSteps(t, *params(algo.SlidingWindow, 10, time.Second, 0), []setStep{
			{at: 0, take: 6, peek: 0, remaining: 4},
			{at: 1500 * ms, peek: 0, remaining: 7}, // estimate 6 × 0.5 = 3
			{at: 1500 * ms, p: &algo.Params{Algorithm: algo.SlidingWindow, Limit: 10, Period: time.Second, SubWindows: 4}, peek: 0, remaining: 7},
			{at: 2500 * ms, peek: 0, remaining: 7},  // counted at 1.5s: in the oldest sub-window, whole
			{at: 2750 * ms, peek: 0, remaining: 10}, // out of the window
		})
	})
	t.Run("sliding_log", func(t *testing.T) {
		runSetSteps(t, *params(algo.SlidingLog, 10, time.Second, 0), []setStep{
			{at: 0, take: 2, peek: 0, remaining: 8},
			{at: 600 * ms, take: 3, peek: 0, remaining: 5},
			{at: 800 * ms, p: params(algo.SlidingLog, 10, 500*ms, 0), peek: 0, remaining: 7}, // the first 2 are older than 500ms
			{at: 800 * ms, p: params(algo.SlidingLog, 2, 500*ms, 0), peek: 1, remaining: 0, retry: 300 * ms},
		})
	})
}

// TestLocalSetParamsSmooth: the next free ticket carries over, as in
// Guava's setRate.
func TestLocalSetParamsSmooth(t *testing.T) {
	ms := time.Millisecond
	bursty := func(limit int64) *algo.Params {
		return &algo.Params{Algorithm: algo.SmoothBursty, Limit: limit, Period: time.Second, MaxWait: time.Second}
	}
	runSetSteps(t, *bursty(5), []setStep{
		{at: 0, take: 1, peek: 1, delay: 200 * ms},
		{at: 0, p: bursty(10), peek: 1, delay: 200 * ms},
		{at: 0, take: 1, peek: 1, delay: 300 * ms}, // the new rate paces the next one
	})
}

// TestLocalSetParamsAlgorithm: another algorithm starts fresh, and what
// was reserved before is not given back to the new state.
func TestLocalSetParamsAlgorithm(t *testing.T) {
	l, _ := newFakeLocal(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Hour})
	r := l.Reserve(4)
	if err := l.SetParams(algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if d := l.Peek(0); d.Remaining != 10 {
		t.Errorf("after a change to fixed_window Peek(0).Remaining = %d, want 10 (fresh)", d.Remaining)
	}
	l.AllowN(7)
	r.Cancel()
	if d := l.Peek(0); d.Remaining != 3 {
		t.Errorf("Cancel of a reservation from before the change: Remaining %d, want 3 (nothing given back)", d.Remaining)
	}
	if err := l.SetParams(algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Hour, InitialTokens: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if d := l.Peek(0); d.Remaining != 0 {
		t.Errorf("a fresh token bucket with InitialTokens 0: Remaining %d, want 0", d.Remaining)
	}
}

// TestLocalSetParamsConcurrent: goroutines spend a budget of 1000 that
// cannot refill while another switches between two spellings of it (a
// token bucket of 1000/h and a GCRA of 2000/2h, burst 1000): every switch
// is atomic, so exactly 1000 are admitted.
func TestLocalSetParamsConcurrent(t *testing.T) {
	a := algo.Params{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Hour}
	b := algo.Params{Algorithm: algo.GCRA, Limit: 2000, Period: 2 * time.Hour, Burst: 1000}
	l, _ := newFakeLocal(t, a)
	var attempts, admitted atomic.Int64
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			p := a
			if i%2 == 0 {
				p = b
			}
			if err := l.SetParams(p); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var workers sync.WaitGroup
	for g := range 8 {
		workers.Go(func() {
			for attempts.Add(1) <= 1200 {
				var ok bool
				switch g % 3 {
				case 0:
					ok = l.Allow()
				case 1:
					ok = l.Take(1).Allowed
				default:
					ok = l.Reserve(1).OK()
				}
				if ok {
					admitted.Add(1)
				}
			}
		})
	}
	workers.Wait()
	close(done)
	wg.Wait()
	if got := admitted.Load(); got != 1000 {
		t.Errorf("admitted %d of 1200 on a budget of 1000 under SetParams", got)
	}
}

// TestLocalReserve: the boundaries of Reserve, Delay and Cancel.
func TestLocalReserve(t *testing.T) {
	l, clock := newFakeLocal(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second})
	r := l.Reserve(4)
	if !r.OK() || r.Delay() != 0 || r.Decision().Remaining != 6 {
		t.Errorf("Reserve(4) of 10 = ok %v delay %v remaining %d; want true 0 6", r.OK(), r.Delay(), r.Decision().Remaining)
	}
	all := l.Reserve(6)
	if !all.OK() {
		t.Fatal("Reserve(6) of the 6 left refused")
	}
	if no := l.Reserve(1); no.OK() || no.Delay() != algo.Never || no.Decision().RetryAfter != 100*time.Millisecond {
		t.Errorf("Reserve(1) on an empty bucket = ok %v delay %v retry %v; want false Never 100ms", no.OK(), no.Delay(), no.Decision().RetryAfter)
	} else {
		no.Cancel() // holds nothing
	}
	r.Cancel()
	r.Cancel()
	if d := l.Peek(0); d.Remaining != 4 {
		t.Errorf("after cancelling 4 twice: Remaining %d, want 4", d.Remaining)
	}
	if big := l.Reserve(11); big.OK() || big.Delay() != algo.Never || !big.Decision().IsNever() {
		t.Errorf("Reserve(11) over a burst of 10 = ok %v delay %v; want false Never", big.OK(), big.Delay())
	}
	if neg := l.Reserve(-1); neg.OK() || neg.Delay() != algo.Never {
		t.Errorf("Reserve(-1) = ok %v delay %v; want false Never", neg.OK(), neg.Delay())
	} else {
		neg.Cancel()
	}
	clock.Advance(time.Hour)
	all.Cancel() // a bucket takes units back whenever: clamped at full
	if d := l.Peek(0); d.Remaining != 10 {
		t.Errorf("after an hour and a late Cancel: Remaining %d, want 10", d.Remaining)
	}
	l.AllowN(5)
	r2 := l.Reserve(5)
	l.Reset()
	l.AllowN(10)
	r2.Cancel()
	if d := l.Peek(0); d.Remaining != 0 {
		t.Errorf("Cancel after Reset gave back: Remaining %d, want 0", d.Remaining)
	}
}

// TestLocalReserveShaper: a shaper's reservation carries the wait before
// its units may be used, x/time/rate's Delay; Cancel frees the place.
func TestLocalReserveShaper(t *testing.T) {
	l, _ := newFakeLocal(t, algo.Params{Algorithm: algo.Shaper, Limit: 10, Period: time.Second, Burst: 3})
	for i, want := range []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond} {
		r := l.Reserve(1)
		if !r.OK() || r.Delay() != want {
			t.Fatalf("Reserve %d = ok %v delay %v; want true %v", i, r.OK(), r.Delay(), want)
		}
		if i == 2 {
			r.Cancel()
		}
	}
	if r := l.Reserve(1); r.Delay() != 200*time.Millisecond {
		t.Errorf("Reserve after a cancelled place: delay %v, want 200ms", r.Delay())
	}
}

// TestLocalReserveMatchesLimiter: Local's Reserve and Cancel decide as
// Limiter's do on the memory store, on random sequences of reservations,
// cancellations and clock steps.
func TestLocalReserveMatchesLimiter(t *testing.T) {
	for _, p := range []algo.Params{
		{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Second, Burst: 3},
		{Algorithm: algo.GCRA, Limit: 2, Period: 300 * time.Millisecond},
		{Algorithm: algo.Shaper, Limit: 5, Period: time.Second, Burst: 4, Delay: 1},
		{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Second},
		{Algorithm: algo.SlidingLog, Limit: 5, Period: time.Second},
		{Algorithm: algo.SlidingWindow, Limit: 5, Period: time.Second, SubWindows: 2},
		// (A long MaxBurstSeconds keeps the store from deleting the key:
		// a forgotten SmoothBursty key restarts with no stored permits,
		// where Local keeps them.)
		{Algorithm: algo.SmoothBursty, Limit: 5, Period: time.Second, MaxWait: 500 * time.Millisecond, MaxBurstSeconds: 1000},
		{Algorithm: algo.SmoothWarmup, Limit: 5, Period: time.Second, WarmupPeriod: time.Second, MaxWait: time.Second},
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch)
			st, err := memory.New(memory.WithClock(clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			lim, err := limiter.New(st, "r", p)
			if err != nil {
				t.Fatal(err)
			}
			loc, err := limiter.NewLocal(p, limiter.WithLocalClock(clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			rng := rand.New(rand.NewPCG(7, uint64(p.Algorithm)))
			var rs []*limiter.Reservation
			var ls []*limiter.LocalReservation
			for i := range 2000 {
				switch op := rng.IntN(10); {
				case op < 5:
					n := rng.Int64N(4)
					r, err := lim.Reserve(ctx, "k", n)
					if err != nil {
						t.Fatal(err)
					}
					lr := loc.Reserve(n)
					if lr.Decision() != r.Decision() || lr.Delay() != r.Delay() || lr.OK() != r.OK() {
						t.Fatalf("op %d: Reserve(%d) = %+v, Limiter's %+v", i, n, lr.Decision(), r.Decision())
					}
					rs, ls = append(rs, r), append(ls, lr)
				case op < 7 && len(rs) > 0:
					j := rng.IntN(len(rs))
					if err := rs[j].Cancel(ctx); err != nil {
						t.Fatal(err)
					}
					ls[j].Cancel()
				default:
					clock.Advance(time.Duration(rng.Int64N(200_000)) * time.Microsecond)
				}
				// The state compared through a Take of 0 on both: a Peek
				// would note the time in Local's state and not in the
				// store's, and the Smooth algorithms' floats then round
				// differently.
				want, err := lim.AllowN(ctx, "k", 0)
				if err != nil {
					t.Fatal(err)
				}
				if got := loc.Take(0); got != want {
					t.Fatalf("op %d: Take(0) = %+v, Limiter's %+v", i, got, want)
				}
			}
		})
	}
}
