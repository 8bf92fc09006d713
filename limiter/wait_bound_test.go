package limiter_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memory"
)

// oneEvery100ms is 10 a second, burst 1: one queued waiter served every
// 100ms.
var oneEvery100ms = algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 1}

// crowdResult is what a crowd of Waits on one key got.
type crowdResult struct {
	admitted []time.Duration // when each admitted Wait returned, since the crowd began, sorted
	full     []error         // the ErrQueueFull refusals
	other    []error
}

// crowd drains the limit with one wait, then starts n Waits at once with
// no deadline, in a synctest bubble (fake time: the waits take none).
// Once every goroutine has either queued or returned, it checks queued
// (the waiters holding a queue, from the export hook) and lets time run
// until the queue is served.
func crowd(t *testing.T, n int, wait func(context.Context) error, queued func() int64) crowdResult {
	t.Helper()
	if err := wait(context.Background()); err != nil {
		t.Fatalf("draining Wait: %v", err)
	}
	start := time.Now()
	var (
		mu  sync.Mutex
		res crowdResult
		wg  sync.WaitGroup
	)
	for range n {
		wg.Go(func() {
			err := wait(context.Background())
			at := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				res.admitted = append(res.admitted, at)
			case errors.Is(err, limiter.ErrQueueFull):
				if at != 0 {
					t.Errorf("a full queue refused a Wait after %v, want at once", at)
				}
				res.full = append(res.full, err)
			default:
				res.other = append(res.other, err)
			}
		})
	}
	synctest.Wait() // every Wait has queued or returned; no time has passed
	mu.Lock()
	refused := len(res.full)
	mu.Unlock()
	if got := queued(); got+int64(refused) != int64(n) {
		t.Errorf("at the burst: %d queued and %d refused of %d", got, refused, n)
	}
	wg.Wait()
	slices.Sort(res.admitted)
	return res
}

// checkCrowd holds a crowd of n on a queue bounded at bound to: bound
// waiters served in order, one per 100ms (the limit's refill: no time is
// lost to the bound), the n - bound others refused at once with a
// *RetryError matching ErrQueueFull and ErrLimited, whose After says
// when the queue would have served them.
func checkCrowd(t *testing.T, name string, res crowdResult, n, bound int) {
	t.Helper()
	for _, err := range res.other {
		t.Errorf("%s: Wait returned %v; want nil or ErrQueueFull", name, err)
	}
	if len(res.admitted) != bound || len(res.full) != n-bound {
		t.Fatalf("%s: %d admitted, %d refused as full of %d; want %d and %d", name, len(res.admitted), len(res.full), n, bound, n-bound)
	}
	for i, at := range res.admitted {
		if want := time.Duration(i+1) * 100 * time.Millisecond; at != want {
			t.Errorf("%s: waiter %d admitted at %v, want %v", name, i, at, want)
		}
	}
	err := res.full[0]
	var re *limiter.RetryError
	if !errors.As(err, &re) || !errors.Is(err, limiter.ErrLimited) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: %v (%T): want a *RetryError matching ErrLimited and not DeadlineExceeded", name, err, err)
	}
	// The head's retry (100ms), a unit's refill per waiter queued, and
	// the queue's hand-off (100µs) for each of them and for itself.
	if want := time.Duration(bound+1) * (100*time.Millisecond + 100*time.Microsecond); re.After != want {
		t.Errorf("%s: After %v, want %v", name, re.After, want)
	}
	if !strings.Contains(err.Error(), "wait queue full") {
		t.Errorf("%s: %q does not say the queue is full", name, err)
	}
}

// A burst of Waits with no deadline queued without end: 1000 callers made
// 1000 waiters, held for 100s. The queue of a key holds WithMaxWaiters
// (DefaultMaxWaiters) waiters, and the rest are refused at once with an
// error of their own.
func TestWaitQueueBound(t *testing.T) {
	const n, bound = 300, 16
	t.Run("Limiter", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			st, err := memory.New()
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			l, err := limiter.New(st, "bound", oneEvery100ms, limiter.WithMaxWaiters(bound))
			if err != nil {
				t.Fatal(err)
			}
			queued := func() int64 { _, w := limiter.WaitQueues(l); return w }
			res := crowd(t, n, func(ctx context.Context) error { return l.Wait(ctx, "k", 1) }, queued)
			checkCrowd(t, "Limiter", res, n, bound)
			if !strings.HasPrefix(res.full[0].Error(), `limiter "bound": `) {
				t.Errorf("%q does not name the limiter", res.full[0])
			}
			if k, w := limiter.WaitQueues(l); k != 0 || w != 0 {
				t.Errorf("%d queues, %d waiters left", k, w)
			}
		})
	})
	t.Run("Local", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, err := limiter.NewLocal(oneEvery100ms, limiter.WithLocalMaxWaiters(bound))
			if err != nil {
				t.Fatal(err)
			}
			queued := func() int64 { _, w := limiter.LocalWaitQueues(l); return w }
			checkCrowd(t, "Local", crowd(t, n, func(ctx context.Context) error { return l.Wait(ctx, 1) }, queued), n, bound)
		})
	})
}

// Behind a full queue on a window limit, After counts the windows the
// waiters ahead take (2 a window: 16 waiters take 8 windows), not one
// refill each, which a window does not have: a caller that waited the
// head's retry alone came back to a queue as full.
func TestWaitQueueFullWindow(t *testing.T) {
	const n, bound = 40, 16
	synctest.Test(t, func(t *testing.T) {
		st, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		l, err := limiter.New(st, "win", algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Second}, limiter.WithMaxWaiters(bound))
		if err != nil {
			t.Fatal(err)
		}
		// Align with a window's start, then take its 2 units.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		queued := func() int64 { _, w := limiter.WaitQueues(l); return w }
		if err := l.Wait(context.Background(), "k", 1); err != nil {
			t.Fatal(err)
		}
		res := crowd(t, n, func(ctx context.Context) error { return l.Wait(ctx, "k", 1) }, queued)
		if len(res.admitted) != bound || len(res.full) != n-bound || len(res.other) != 0 {
			t.Fatalf("%d admitted, %d full, %v; want %d, %d and none", len(res.admitted), len(res.full), res.other, bound, n-bound)
		}
		var re *limiter.RetryError
		if !errors.As(res.full[0], &re) {
			t.Fatalf("%v: want a *RetryError", res.full[0])
		}
		// The window's end (1s), 8 more windows for the 16 ahead, and 17
		// hand-offs of 100µs.
		if want := 9*time.Second + 17*100*time.Microsecond; re.After != want {
			t.Errorf("After %v, want %v", re.After, want)
		}
		if last := res.admitted[len(res.admitted)-1]; re.After < last {
			t.Errorf("After %v, before the last waiter ahead was served (%v)", re.After, last)
		}
	})
}

// The bound is per key: a full key refuses its own waiters only.
func TestWaitQueueBoundPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		const bound, each = 4, 20
		keys := []string{"a", "b", "c"}
		l, err := limiter.New(st, "perkey", oneEvery100ms, limiter.WithMaxWaiters(bound))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var mu sync.Mutex
		admitted, full := map[string]int{}, map[string]int{}
		var wg sync.WaitGroup
		for _, key := range keys {
			if err := l.Wait(ctx, key, 1); err != nil {
				t.Fatal(err)
			}
			for range each {
				wg.Go(func() {
					err := l.Wait(ctx, key, 1)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						admitted[key]++
					case errors.Is(err, limiter.ErrQueueFull):
						full[key]++
					default:
						t.Errorf("key %s: %v", key, err)
					}
				})
			}
		}
		synctest.Wait()
		if k, w := limiter.WaitQueues(l); k != len(keys) || w != int64(len(keys)*bound) {
			t.Errorf("%d queues, %d waiters at the burst; want %d and %d", k, w, len(keys), len(keys)*bound)
		}
		wg.Wait()
		for _, key := range keys {
			if admitted[key] != bound || full[key] != each-bound {
				t.Errorf("key %s: %d admitted, %d refused as full; want %d and %d", key, admitted[key], full[key], bound, each-bound)
			}
		}
	})
}

// With no option the bound is DefaultMaxWaiters: the documented default.
func TestWaitQueueDefaultBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := limiter.NewLocal(algo.Params{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Second, Burst: 1})
		if err != nil {
			t.Fatal(err)
		}
		const extra = 8
		n := limiter.DefaultMaxWaiters + extra
		res := crowd(t, n, func(ctx context.Context) error { return l.Wait(ctx, 1) },
			func() int64 { _, w := limiter.LocalWaitQueues(l); return w })
		if len(res.admitted) != limiter.DefaultMaxWaiters || len(res.full) != extra || len(res.other) != 0 {
			t.Fatalf("%d admitted, %d refused as full, %d other; want %d, %d, 0", len(res.admitted), len(res.full), len(res.other),
				limiter.DefaultMaxWaiters, extra)
		}
		if got, want := res.admitted[len(res.admitted)-1], time.Duration(limiter.DefaultMaxWaiters)*time.Millisecond; got != want {
			t.Errorf("last waiter served at %v, want %v", got, want)
		}
	})
}

// A waiter that its deadline would refuse is refused on arrival as
// before, with the deadline's *RetryError, full queue or not; one with
// time enough behind a full queue gets ErrQueueFull.
func TestWaitQueueBoundKeepsDeadlineFailFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const bound = 5
		l, err := limiter.NewLocal(oneEvery100ms, limiter.WithLocalMaxWaiters(bound))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := l.Wait(ctx, 1); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range bound {
			wg.Go(func() {
				if err := l.Wait(ctx, 1); err != nil {
					t.Errorf("queued waiter: %v", err)
				}
			})
		}
		synctest.Wait()
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err = l.Wait(short, 1)
		cancel()
		var re *limiter.RetryError
		if !errors.As(err, &re) || errors.Is(err, limiter.ErrQueueFull) || re.After < 600*time.Millisecond {
			t.Errorf("short deadline behind a full queue: %v; want the deadline's *RetryError, After at least 600ms", err)
		}
		long, cancel := context.WithTimeout(ctx, time.Hour)
		err = l.Wait(long, 1)
		cancel()
		if !errors.Is(err, limiter.ErrQueueFull) {
			t.Errorf("long deadline behind a full queue: %v; want ErrQueueFull", err)
		}
		wg.Wait()
		// Served, the queue takes waiters again.
		if err := l.Wait(ctx, 1); err != nil {
			t.Errorf("after the queue drained: %v", err)
		}
	})
}

func TestWaitQueueBoundOption(t *testing.T) {
	st, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, n := range []int{0, -1, math.MinInt} {
		if _, err := limiter.New(st, "x", oneEvery100ms, limiter.WithMaxWaiters(n)); err == nil || !strings.Contains(err.Error(), "max waiters") {
			t.Errorf("WithMaxWaiters(%d): %v, want an error", n, err)
		}
		if _, err := limiter.NewLocal(oneEvery100ms, limiter.WithLocalMaxWaiters(n)); err == nil || !strings.Contains(err.Error(), "max waiters") {
			t.Errorf("WithLocalMaxWaiters(%d): %v, want an error", n, err)
		}
	}
	for _, n := range []int{1, math.MaxInt} {
		if _, err := limiter.New(st, "x", oneEvery100ms, limiter.WithMaxWaiters(n)); err != nil {
			t.Errorf("WithMaxWaiters(%d): %v", n, err)
		}
		if _, err := limiter.NewLocal(oneEvery100ms, limiter.WithLocalMaxWaiters(n)); err != nil {
			t.Errorf("WithLocalMaxWaiters(%d): %v", n, err)
		}
	}
}

// A Wait whose deadline is too close is refused at once; behind other
// waiters its After counts them as the queue's projection does (before,
// it was this request's own retry alone: a client that backed off that
// long met the same queue).
func TestWaitShortDeadlineBehindQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		l, err := limiter.New(st, "short", algo.Params{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Second, Burst: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := l.Wait(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if err := l.Wait(ctx, "k", 1); err != nil {
					t.Errorf("queued Wait: %v", err)
				}
			})
		}
		synctest.Wait() // the three are queued
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		err = l.Wait(short, "k", 1)
		var re *limiter.RetryError
		if !errors.As(err, &re) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v: want a *RetryError at once", err)
		}
		// The head's retry (200ms), then a unit (200ms) for each of the 3.
		if want := 800 * time.Millisecond; re.After < want {
			t.Errorf("After %v, want at least %v: the 3 waiters ahead take the next units", re.After, want)
		}
		wg.Wait()
	})
}
