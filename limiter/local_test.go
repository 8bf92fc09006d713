package limiter_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/storetest"
)

func TestNewLocalErrors(t *testing.T) {
	if _, err := limiter.NewLocal(algo.Params{Algorithm: algo.GCRA, Limit: -1, Period: time.Second}); !errors.Is(err, algo.ErrInvalid) {
		t.Errorf("NewLocal with a bad limit: %v, want ErrInvalid", err)
	}
	if _, err := limiter.NewLocal(algo.Params{Algorithm: algo.Concurrency, Limit: 1}); !errors.Is(err, algo.ErrInvalid) {
		t.Errorf("NewLocal for concurrency: %v, want algo.ErrInvalid", err)
	}
}

// TestLocalSteps: a sliding log of 3 per second, burst at the boundary.
func TestLocalSteps(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	l, err := limiter.NewLocal(algo.Params{Algorithm: algo.SlidingLog, Limit: 3, Period: time.Second}, limiter.WithLocalClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		at      time.Duration
		n       int64
		allowed bool
		retry   time.Duration
	}{
		{0, 2, true, 0},
		{500 * time.Millisecond, 1, true, 0},
		{600 * time.Millisecond, 1, false, 400 * time.Millisecond},
		{time.Second, 2, true, 0},
		{time.Second, 1, false, 500 * time.Millisecond},
		{2 * time.Second, 4, false, algo.Never},
	}
	for i, s := range steps {
		clock.Set(storetest.Epoch.Add(s.at))
		if p := l.Peek(s.n); p.Allowed != s.allowed {
			t.Errorf("step %d: Peek(t+%v, %d) = %v, want %v", i, s.at, s.n, p.Allowed, s.allowed)
		}
		d := l.Take(s.n)
		if d.Allowed != s.allowed || d.RetryAfter != s.retry {
			t.Errorf("step %d: Take(t+%v, %d) = allowed %v retry %v; want %v %v", i, s.at, s.n, d.Allowed, d.RetryAfter, s.allowed, s.retry)
		}
	}
	l.Reset()
	if !l.AllowN(3) {
		t.Error("after Reset, AllowN(3) refused")
	}
	if l.Allow() {
		t.Error("Allow after AllowN(3) of 3: admitted")
	}
}

// TestLocalExact: 64 goroutines, 1200 attempts, a budget of 1000 that
// cannot refill: exactly 1000 admitted.
func TestLocalExact(t *testing.T) {
	for _, k := range []algo.Kind{algo.TokenBucket, algo.GCRA, algo.FixedWindow, algo.SlidingLog, algo.SlidingWindow} {
		t.Run(k.String(), func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch)
			l, err := limiter.NewLocal(algo.Params{Algorithm: k, Limit: 1000, Period: time.Hour}, limiter.WithLocalClock(clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			var attempts, admitted atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for attempts.Add(1) <= 1200 {
						if l.Allow() {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got := admitted.Load(); got != 1000 {
				t.Errorf("admitted %d of 1200 on a budget of 1000", got)
			}
		})
	}
}

func TestLocalWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := limiter.NewLocal(algo.Params{Algorithm: algo.TokenBucket, Limit: 4, Period: time.Second, Burst: 2})
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		start := time.Now()
		for range 4 {
			if err := l.Wait(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
		if got := time.Since(start); got != 500*time.Millisecond {
			t.Errorf("four Waits at 4/s with burst 2 took %v, want 500ms", got)
		}
		short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		if err := l.Wait(short, 1); !errors.Is(err, limiter.ErrLimited) {
			t.Errorf("Wait with 10ms left for a 250ms wait: %v, want ErrLimited", err)
		}
		if err := l.Wait(ctx, 3); !errors.Is(err, limiter.ErrNever) {
			t.Errorf("Wait(3) over a burst of 2: %v, want ErrNever", err)
		}
	})
}

// TestLocalWaitSmooth: Guava's SmoothBursty paces the permits it admits;
// Wait waits the pacing out, and gives the permit back if it cannot.
func TestLocalWaitSmooth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := limiter.NewLocal(algo.Params{Algorithm: algo.SmoothBursty, Limit: 5, Period: time.Second, MaxWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		start := time.Now()
		for range 3 {
			if err := l.Wait(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
		if got := time.Since(start); got != 400*time.Millisecond {
			t.Errorf("three paced Waits at 5/s took %v, want 400ms", got)
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		before := l.Peek(1)
		if err := l.Wait(short, 1); !errors.Is(err, limiter.ErrLimited) {
			t.Fatalf("paced Wait with a near deadline: %v, want ErrLimited", err)
		}
		if after := l.Peek(1); after.Delay != before.Delay {
			t.Errorf("after the paced Wait gave up: next Delay %v, want %v as before", after.Delay, before.Delay)
		}
	})
}

// localOps drives a Local with a fake clock and a plain algo state side by
// side, from a byte string (a fuzz input), and reports the first
// difference. Every byte pair is one operation.
func localOps(t *testing.T, p algo.Params, ops []byte) {
	t.Helper()
	clock := storetest.NewClock(storetest.Epoch)
	loc, err := limiter.NewLocal(p, limiter.WithLocalClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := algo.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	var st algo.State
	for i := 0; i+1 < len(ops); i += 2 {
		op, arg := ops[i], int64(ops[i+1])
		now := clock.Now().UnixMicro()
		switch op % 8 {
		case 0, 1, 2: // AllowN of a small cost, sometimes beyond the capacity or negative
			n := arg%7 - 1
			want := false // a negative cost is refused and touches nothing
			if n >= 0 {
				want = ref.Take(&st, now, n).Allowed
			}
			if got := loc.AllowN(n); got != want {
				t.Fatalf("op %d at %v: AllowN(%d) = %v, algo %v", i/2, clock.Now().Sub(storetest.Epoch), n, got, want)
			}
		case 3:
			want := ref.Take(&st, now, arg%4)
			if got := loc.Take(arg % 4); got != want {
				t.Fatalf("op %d: Take(%d) = %+v, algo %+v", i/2, arg%4, got, want)
			}
		case 4:
			clock.Advance(time.Duration(arg) * time.Duration(arg) * 37 * time.Microsecond)
		case 5:
			clock.Advance(-time.Duration(arg) * time.Millisecond) // the clock steps back
		case 6:
			clock.Advance(time.Duration(arg) * time.Second)
		case 7:
			if arg == 0 {
				loc.Reset()
				st = algo.State{}
			}
		}
		if got, want := loc.Peek(1), ref.Peek(&st, clock.Now().UnixMicro(), 1); got != want {
			t.Fatalf("op %d: state differs: Peek = %+v, algo %+v", i/2, got, want)
		}
	}
}

var localParams = []algo.Params{
	{Algorithm: algo.TokenBucket, Limit: 3, Period: time.Second, Burst: 5},
	{Algorithm: algo.TokenBucket, Limit: 7, Period: 1500 * time.Millisecond, Burst: 2, InitialTokens: new(int64)},
	{Algorithm: algo.GCRA, Limit: 1000, Period: time.Millisecond, Burst: 3},
	{Algorithm: algo.GCRA, Limit: 1, Period: time.Hour},
}

// TestLocalMatchesAlgo holds Local's allocation-free bucket path to algo's
// decisions and state on random operation sequences.
func TestLocalMatchesAlgo(t *testing.T) {
	for _, p := range localParams {
		rng := rand.New(rand.NewPCG(1, uint64(p.Limit)))
		for range 50 {
			ops := make([]byte, 400)
			for i := range ops {
				ops[i] = byte(rng.IntN(256))
			}
			localOps(t, p, ops)
		}
	}
}

func FuzzLocalMatchesAlgo(f *testing.F) {
	f.Add(byte(0), []byte{0, 1, 0, 1, 4, 9, 0, 6, 3, 2, 5, 1, 0, 1})
	f.Fuzz(func(t *testing.T, which byte, ops []byte) {
		localOps(t, localParams[int(which)%len(localParams)], ops)
	})
}

// TestLocalNegative: a negative cost is refused by every verb and takes
// nothing, as Limiter refuses it.
func TestLocalNegative(t *testing.T) {
	for _, k := range []algo.Kind{algo.TokenBucket, algo.FixedWindow, algo.SlidingLog} {
		t.Run(k.String(), func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch)
			l, err := limiter.NewLocal(algo.Params{Algorithm: k, Limit: 2, Period: time.Second}, limiter.WithLocalClock(clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			if !l.Allow() {
				t.Fatal("Allow on a fresh limiter: false")
			}
			before := l.Peek(0)
			if l.AllowN(-1) {
				t.Error("AllowN(-1) = true, want false")
			}
			if d := l.Take(-1); d.Allowed || d.RetryAfter != algo.Never {
				t.Errorf("Take(-1) = %+v, want refused, RetryAfter Never", d)
			}
			if d := l.Peek(-1); d.Allowed || d.RetryAfter != algo.Never || d.Remaining != before.Remaining {
				t.Errorf("Peek(-1) = %+v, want refused, RetryAfter Never, Remaining %d", d, before.Remaining)
			}
			if err := l.Wait(t.Context(), -1); !errors.Is(err, store.ErrBadRequest) {
				t.Errorf("Wait(-1) = %v, want ErrBadRequest", err)
			}
			if after := l.Peek(0); after != before {
				t.Errorf("after the negative calls Peek(0) = %+v, want %+v: something was taken or given", after, before)
			}
		})
	}
}

// TestLocalWaitShaperDeadline is TestWaitShaperDeadline for Local.
func TestLocalWaitShaperDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := limiter.NewLocal(algo.Params{Algorithm: algo.Shaper, Limit: 5, Period: time.Second, Burst: 3})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			if !l.Allow() {
				t.Fatalf("Allow %d = false", i)
			}
		}
		short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		before := time.Now()
		var re *limiter.RetryError
		if err := l.Wait(short, 1); !errors.As(err, &re) || re.After != 200*time.Millisecond {
			t.Errorf("Wait with 300ms left for 200ms + a 600ms queue: %v, want RetryError{200ms}", err)
		}
		if got := time.Since(before); got != 0 {
			t.Errorf("the refused Wait slept %v, want 0", got)
		}
	})
}

// TestZeroLocal: the zero Local has no limit to apply; it refuses
// everything, as a cost beyond any capacity, instead of panicking.
func TestZeroLocal(t *testing.T) {
	var l limiter.Local
	if l.Allow() || l.AllowN(1) || l.AllowN(0) {
		t.Error("the zero Local admitted")
	}
	if d := l.Take(1); d.Allowed || !d.IsNever() {
		t.Errorf("Take(1) = %+v; want a refusal with RetryAfter Never", d)
	}
	if d := l.Peek(1); d.Allowed || !d.IsNever() {
		t.Errorf("Peek(1) = %+v; want a refusal with RetryAfter Never", d)
	}
	r := l.Reserve(1)
	if r.OK() || r.Delay() != algo.Never {
		t.Errorf("Reserve(1): OK %v, Delay %v; want refused, Never", r.OK(), r.Delay())
	}
	r.Cancel()
	if err := l.Wait(t.Context(), 1); !errors.Is(err, limiter.ErrNever) {
		t.Errorf("Wait = %v; want ErrNever", err)
	}
	if err := l.SetParams(algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Second}); err == nil {
		t.Error("SetParams on the zero Local succeeded")
	}
	l.Reset()
	if l.Limit() != nil {
		t.Errorf("Limit() = %v; want nil", l.Limit())
	}
}
