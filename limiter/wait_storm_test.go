package limiter_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memory"
)

// TestWaitCancelStorm: 400 goroutines each make 20 Waits on a Limiter's
// four keys and on a Local, with deadlines of up to 30ms, cancellations
// within 5ms, or both, in real time. Every Wait must return an error of
// the documented kinds (a deadline always as a *RetryError), the storm
// must finish, and it must leave no queue and no waiter count behind.
// (The review's storm, with the error kinds added.)
func TestWaitCancelStorm(t *testing.T) {
	for _, p := range []algo.Params{
		{Algorithm: algo.TokenBucket, Limit: 200, Period: time.Second, Burst: 1},
		{Algorithm: algo.SmoothBursty, Limit: 200, Period: time.Second, MaxWait: 20 * time.Millisecond},
		{Algorithm: algo.Shaper, Limit: 200, Period: time.Second, Burst: 2, Delay: 2},
		{Algorithm: algo.FixedWindow, Limit: 5, Period: 50 * time.Millisecond},
	} {
		st, err := memory.New()
		if err != nil {
			t.Fatal(err)
		}
		l, err := limiter.New(st, "storm", p)
		if err != nil {
			t.Fatal(err)
		}
		lc, err := limiter.NewLocal(p)
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu         sync.Mutex
			unexpected []error
		)
		check := func(err error) {
			if err == nil || errors.Is(err, limiter.ErrLimited) || errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				return
			}
			mu.Lock()
			unexpected = append(unexpected, err)
			mu.Unlock()
		}
		var wg sync.WaitGroup
		for g := range 400 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 1))
				for range 20 {
					key := []string{"a", "b", "c", "d"}[r.IntN(4)]
					var ctx context.Context
					var cancel context.CancelFunc
					switch r.IntN(3) {
					case 0:
						ctx, cancel = context.WithTimeout(context.Background(), time.Duration(r.IntN(30))*time.Millisecond)
					case 1:
						ctx, cancel = context.WithCancel(context.Background())
						time.AfterFunc(time.Duration(r.IntN(5000))*time.Microsecond, cancel)
					case 2:
						parent, cancelParent := context.WithCancel(context.Background())
						time.AfterFunc(time.Duration(r.IntN(5000))*time.Microsecond, cancelParent)
						ctx, cancel = context.WithTimeout(parent, time.Duration(r.IntN(30))*time.Millisecond)
					}
					check(l.Wait(ctx, key, 1))
					check(lc.Wait(ctx, 1))
					cancel()
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("%v: the storm did not finish in 60s", p.Algorithm)
		}
		for i, err := range unexpected {
			if i == 5 {
				t.Errorf("%v: and %d more", p.Algorithm, len(unexpected)-i)
				break
			}
			t.Errorf("%v: Wait returned %v; want nil, a *RetryError or context.Canceled", p.Algorithm, err)
		}
		if k, n := limiter.WaitQueues(l); k != 0 || n != 0 {
			t.Errorf("%v: %d queues, %d waiters left after the storm", p.Algorithm, k, n)
		}
		if k, n := limiter.LocalWaitQueues(lc); k != 0 || n != 0 {
			t.Errorf("%v: Local: %d queues, %d waiters left after the storm", p.Algorithm, k, n)
		}
		st.Close()
	}
}
