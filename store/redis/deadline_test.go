package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// stallLoad runs 32 goroutines taking on keys of their own, each call
// under ctx(), on a private server that sleeps 2 s (DEBUG SLEEP) 300 ms
// in, and returns the slowest call and its error. The goroutines reuse
// their requests and decisions: a batch that wrote into those of a call
// whose caller left would be a race.
func stallLoad(t *testing.T, timeout time.Duration, ctx func() (context.Context, context.CancelFunc)) (time.Duration, error) {
	t.Helper()
	srv := testserver.NewRedis(t, "--enable-debug-command", "local")
	if srv == nil {
		t.Skip("no redis-server")
	}
	s := openT(t, "redis://"+srv.Addr, WithTimeout(timeout))
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 100_000_000, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	prefix := runKey()
	stop := time.Now().Add(3 * time.Second)
	var mu sync.Mutex
	var slowest time.Duration
	var slowErr error
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			reqs := []store.Request{{Key: fmt.Sprintf("%s:stall:%d", prefix, g), Limit: l, Cost: 1}}
			out := make([]algo.Decision, 1)
			for time.Now().Before(stop) {
				c, cancel := ctx()
				t0 := time.Now()
				_, err := s.Take(c, reqs, out)
				d := time.Since(t0)
				cancel()
				out[0] = algo.Decision{}
				reqs[0].Cost = 1
				mu.Lock()
				if d > slowest {
					slowest, slowErr = d, err
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := testserver.RedisDo(srv.Addr, 5*time.Second, "DEBUG", "SLEEP", "2"); err != nil {
		t.Errorf("DEBUG SLEEP 2: %v", err)
	}
	wg.Wait()
	return slowest, slowErr
}

// TestStallCallerDeadline: 32 callers with 200 ms deadlines, a store
// timeout of 200 ms, a server that stalls 2 s. A call queued behind a
// batch in flight used to wait that batch out (200 ms), then its own:
// the slowest took 401 ms.
func TestStallCallerDeadline(t *testing.T) {
	const dl = 200 * time.Millisecond
	slowest, err := stallLoad(t, dl, func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), dl)
	})
	t.Logf("slowest call %v (%v)", slowest, err)
	if slowest > dl+150*time.Millisecond {
		t.Errorf("the slowest call took %v, want at most its deadline %v + 150 ms", slowest, dl)
	}
}

// TestStallNoDeadline: the same callers under context.Background(): the
// store's timeout bounds every call. They used to wait for replies on a
// connection shared with others until the connection failed: 1.7 s, with
// i/o timeout.
func TestStallNoDeadline(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for _, kind := range []string{"background", "cancel"} {
		t.Run(kind, func(t *testing.T) {
			slowest, err := stallLoad(t, timeout, func() (context.Context, context.CancelFunc) {
				if kind == "cancel" {
					return context.WithCancel(context.Background())
				}
				return context.Background(), func() {}
			})
			t.Logf("slowest call %v (%v)", slowest, err)
			// The store's deadline is shared by the calls of a grain (10 ms).
			if slowest > timeout+10*time.Millisecond+150*time.Millisecond {
				t.Errorf("the slowest call took %v, want at most the store's timeout %v + 10 ms + 150 ms", slowest, timeout)
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("the slowest call failed with %v, want a timeout", err)
			}
		})
	}
}

// TestQueuedCallNotSent: calls whose deadline passes while they wait
// behind a batch in flight return at their deadline with their context's
// error, and are never sent: they charge nothing. They used to be sent
// once the batch ahead returned, and each charged.
func TestQueuedCallNotSent(t *testing.T) {
	srv := testserver.NewRedis(t, "--enable-debug-command", "local")
	if srv == nil {
		t.Skip("no redis-server")
	}
	s := openT(t, "redis://"+srv.Addr, WithTimeout(3*time.Second), WithInflightBatches(1))
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	prefix := runKey()
	sleep := make(chan error, 1)
	go func() {
		_, err := testserver.RedisDo(srv.Addr, 5*time.Second, "DEBUG", "SLEEP", "1")
		sleep <- err
	}()
	time.Sleep(50 * time.Millisecond)
	// The batch in flight: one call, which the stall holds.
	first := make(chan error, 1)
	go func() {
		_, err := s.Take(context.Background(), []store.Request{{Key: prefix + ":first", Limit: l, Cost: 1}}, make([]algo.Decision, 1))
		first <- err
	}()
	time.Sleep(50 * time.Millisecond)
	const n, dl = 10, 100 * time.Millisecond
	var wg sync.WaitGroup
	errs := make([]error, n)
	took := make([]time.Duration, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), dl)
			defer cancel()
			t0 := time.Now()
			_, errs[i] = s.Take(ctx, []store.Request{{Key: prefix + ":queued", Limit: l, Cost: 1}}, make([]algo.Decision, 1))
			took[i] = time.Since(t0)
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] == nil || !errors.Is(errs[i], context.DeadlineExceeded) || !strings.Contains(errs[i].Error(), "not sent") {
			t.Errorf("queued call %d: %v, want its deadline's error saying it was not sent", i, errs[i])
		}
		if took[i] > dl+150*time.Millisecond {
			t.Errorf("queued call %d took %v, want at most its deadline %v + 150 ms", i, took[i], dl)
		}
	}
	if err := <-sleep; err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the call in flight: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // anything sent late is in by now
	out := make([]algo.Decision, 1)
	if err := s.Peek(context.Background(), []store.Request{{Key: prefix + ":queued", Limit: l, Cost: 1}}, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Remaining != 99 { // the peek's own cost of 1 counted
		t.Errorf("after %d queued calls that timed out unsent, a peek of cost 1 leaves %d of 100, want 99: %d were charged", n, out[0].Remaining, 99-out[0].Remaining)
	}
}
