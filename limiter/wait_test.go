package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// oneEvery50ms is golang.org/x/time/rate's NewLimiter(20, 1).
var oneEvery50ms = algo.Params{Algorithm: algo.TokenBucket, Limit: 20, Period: time.Second, Burst: 1}

// waitOutcome is what one of fifoCrowd's waiters got, and when.
type waitOutcome struct {
	err error
	at  time.Duration // since the crowd began
}

// fifoCrowd drains a 20/s, burst 1 limit with wait, then starts 10
// waiters 1ms apart, each with 300ms to its deadline, and returns what
// each got. In fake time (synctest) the answer is exact.
func fifoCrowd(t *testing.T, wait func(context.Context) error) []waitOutcome {
	t.Helper()
	if err := wait(t.Context()); err != nil {
		t.Fatalf("draining Wait: %v", err)
	}
	start := time.Now()
	out := make([]waitOutcome, 10)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * time.Millisecond)
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			err := wait(ctx)
			out[i] = waitOutcome{err, time.Since(start)}
		})
	}
	wg.Wait()
	return out
}

// checkFIFO holds fifoCrowd's outcome to first-in first-out, fail-fast
// service, as golang.org/x/time/rate serves the same crowd: waiter i
// arrives at i ms and needs the unit that refills at (i+1)×50ms, so 0 to 5
// are served in order at those instants (5 with 5ms to spare) and 6
// onwards are refused on arrival.
func checkFIFO(t *testing.T, out []waitOutcome, name string) {
	t.Helper()
	for i, o := range out {
		arrival := time.Duration(i) * time.Millisecond
		if i < 6 {
			if want := time.Duration(i+1) * 50 * time.Millisecond; o.err != nil || o.at != want {
				t.Errorf("waiter %d (arrived at %v): %v at %v; want admitted at %v", i, arrival, o.err, o.at, want)
			}
			continue
		}
		var re *limiter.RetryError
		if !errors.As(o.err, &re) || !errors.Is(o.err, limiter.ErrLimited) || o.at != arrival {
			t.Errorf("waiter %d (arrived at %v): %v at %v; want a RetryError at once", i, arrival, o.err, o.at)
		} else if !strings.HasPrefix(o.err.Error(), name) {
			t.Errorf("waiter %d: %q does not start with %s", i, o.err, name)
		}
	}
}

// TestWaitFIFO: waiters on one key of one Limiter are served in arrival
// order, each as soon as its unit refills, and the ones whose deadline
// comes first are refused on arrival (the review's reproduction, in fake
// time: the sleep-and-retry loop served [3 1 8 5 2 7] and refused the
// losers near their deadlines).
func TestWaitFIFO(t *testing.T) {
	for _, generic := range []bool{false, true} {
		t.Run(fmt.Sprintf("generic=%v", generic), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var st store.Store = newStore(t, memory.WithSweepInterval(0))
				if generic {
					st = opaque{st}
				}
				l := newLimiter(t, st, "w", oneEvery50ms)
				out := fifoCrowd(t, func(ctx context.Context) error { return l.Wait(ctx, "k", 1) })
				checkFIFO(t, out, `limiter "w": `)
				if keys, waiters := limiter.WaitQueues(l); keys != 0 || waiters != 0 {
					t.Errorf("after the waits: %d queues, %d waiters; want none", keys, waiters)
				}
			})
		})
	}
}

// TestLocalWaitFIFO is TestWaitFIFO for a Local.
func TestLocalWaitFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := limiter.NewLocal(oneEvery50ms)
		if err != nil {
			t.Fatal(err)
		}
		out := fifoCrowd(t, func(ctx context.Context) error { return l.Wait(ctx, 1) })
		checkFIFO(t, out, "limiter: ")
		if keys, waiters := limiter.LocalWaitQueues(l); keys != 0 || waiters != 0 {
			t.Errorf("after the waits: %d queues, %d waiters; want none", keys, waiters)
		}
	})
}

// TestWaitNewcomerQueues: a Wait arriving at the instant a unit refills,
// while another waits for it, lines up behind that waiter instead of
// taking the unit first. In the fake time of synctest the two wake at the
// same instant in either order; many rounds try both.
func TestWaitNewcomerQueues(t *testing.T) {
	for round := range 20 {
		synctest.Test(t, func(t *testing.T) {
			l := newLimiter(t, newStore(t, memory.WithSweepInterval(0)), "w", oneEvery50ms)
			if err := l.Wait(t.Context(), "k", 1); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var first, second time.Duration
			var wg sync.WaitGroup
			wg.Go(func() {
				if err := l.Wait(t.Context(), "k", 1); err != nil {
					t.Error(err)
				}
				first = time.Since(start)
			})
			wg.Go(func() {
				time.Sleep(50 * time.Millisecond)
				if err := l.Wait(t.Context(), "k", 1); err != nil {
					t.Error(err)
				}
				second = time.Since(start)
			})
			wg.Wait()
			if first != 50*time.Millisecond || second != 100*time.Millisecond {
				t.Errorf("round %d: the waiter was admitted at %v, the newcomer at %v; want 50ms, then 100ms", round, first, second)
			}
		})
	}
}

// countingStore counts the Takes and Peeks that reach a store.
type countingStore struct {
	store.Store
	mu           sync.Mutex
	takes, peeks int
}

func (c *countingStore) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	c.mu.Lock()
	c.takes++
	c.mu.Unlock()
	return c.Store.Take(ctx, reqs, out)
}

func (c *countingStore) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	c.mu.Lock()
	c.peeks++
	c.mu.Unlock()
	return c.Store.Peek(ctx, reqs, out)
}

func (c *countingStore) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.takes, c.peeks
}

// TestWaitStoreCalls: a Wait admitted at once is one Take; a refused one
// waits in a queue whose first try reuses the refusal and whose next is
// when the unit is back: two Takes in all, and no queue left after.
func TestWaitStoreCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &countingStore{Store: newStore(t, memory.WithSweepInterval(0))}
		l := newLimiter(t, st, "w", oneEvery50ms)
		if err := l.Wait(t.Context(), "k", 1); err != nil {
			t.Fatal(err)
		}
		if takes, peeks := st.counts(); takes != 1 || peeks != 0 {
			t.Errorf("an admitted Wait made %d Takes and %d Peeks; want 1 Take", takes, peeks)
		}
		start := time.Now()
		if err := l.Wait(t.Context(), "k", 1); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != 50*time.Millisecond {
			t.Errorf("the second Wait took %v, want 50ms", got)
		}
		if takes, peeks := st.counts(); takes != 3 || peeks != 0 {
			t.Errorf("after a Wait refused once: %d Takes and %d Peeks; want 3 Takes", takes, peeks)
		}
		if keys, waiters := limiter.WaitQueues(l); keys != 0 || waiters != 0 {
			t.Errorf("after the waits: %d queues, %d waiters; want none", keys, waiters)
		}
	})
}

// TestWaitCancelInQueue: a waiter cancelled in the queue leaves it with an
// error that names the limiter and matches context.Canceled, and the one
// behind it takes its turn.
func TestWaitCancelInQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, newStore(t, memory.WithSweepInterval(0)), "w", oneEvery50ms)
		if err := l.Wait(t.Context(), "k", 1); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() {
			err := l.Wait(ctx, "k", 1)
			if !errors.Is(err, context.Canceled) || err.Error() != `limiter "w": context canceled` {
				t.Errorf("Wait cancelled in the queue: %v; want `limiter \"w\": context canceled`", err)
			}
		})
		synctest.Wait()
		wg.Go(func() {
			if err := l.Wait(t.Context(), "k", 1); err != nil || time.Since(start) != 50*time.Millisecond {
				t.Errorf("the waiter behind: %v at %v; want admitted at 50ms", err, time.Since(start))
			}
		})
		synctest.Wait()
		time.Sleep(10 * time.Millisecond)
		cancel()
		wg.Wait()
		if keys, waiters := limiter.WaitQueues(l); keys != 0 || waiters != 0 {
			t.Errorf("after the waits: %d queues, %d waiters; want none", keys, waiters)
		}
	})
}

// TestWaitErrorsNameLimiter: every error of Wait starts with the
// limiter's name (Local's with "limiter: ") and still matches what it
// wraps: a context ended before Wait or while it sleeps, and a refusal.
func TestWaitErrorsNameLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, newStore(t, memory.WithSweepInterval(0)), "w", oneEvery50ms)
		loc, err := limiter.NewLocal(oneEvery50ms)
		if err != nil {
			t.Fatal(err)
		}
		waits := []struct {
			prefix string
			wait   func(context.Context) error
		}{
			{`limiter "w": `, func(ctx context.Context) error { return l.Wait(ctx, "k", 1) }},
			{"limiter: ", func(ctx context.Context) error { return loc.Wait(ctx, 1) }},
		}
		for _, w := range waits {
			if err := w.wait(t.Context()); err != nil {
				t.Fatal(err)
			}
			done, cancel := context.WithCancel(t.Context())
			cancel()
			if err := w.wait(done); !errors.Is(err, context.Canceled) || err.Error() != w.prefix+"context canceled" {
				t.Errorf("Wait with a cancelled context: %v; want %scontext canceled", err, w.prefix)
			}
			sleeping, cancel := context.WithCancel(t.Context())
			go func() {
				time.Sleep(10 * time.Millisecond)
				cancel()
			}()
			if err := w.wait(sleeping); !errors.Is(err, context.Canceled) || err.Error() != w.prefix+"context canceled" {
				t.Errorf("Wait cancelled while waiting: %v; want %scontext canceled", err, w.prefix)
			}
			short, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
			err := w.wait(short)
			cancel()
			var re *limiter.RetryError
			if !errors.As(err, &re) || !errors.Is(err, limiter.ErrLimited) || err.Error() != w.prefix+"rate limited, retry after 40ms" {
				t.Errorf("Wait with 10ms left for 40ms: %v; want %srate limited, retry after 40ms", err, w.prefix)
			}
			time.Sleep(time.Second)
		}
	})
}

// TestWaitConcurrency: Wait on a concurrency limit would hold a slot that
// nothing can release; it refuses, pointing to Acquire, and takes nothing.
func TestWaitConcurrency(t *testing.T) {
	l := newLimiter(t, newStore(t), "c", algo.Params{Algorithm: algo.Concurrency, Limit: 1})
	err := l.Wait(t.Context(), "k", 1)
	if !errors.Is(err, store.ErrBadRequest) || !strings.Contains(err.Error(), "Acquire") {
		t.Errorf("Wait on a concurrency limit: %v; want ErrBadRequest naming Acquire", err)
	}
	if d, err := l.Peek(t.Context(), "k", 0); err != nil || d.Remaining != 1 {
		t.Errorf("after the refused Wait: Peek = %+v, %v; want the slot free", d, err)
	}
}

// twoEvery100ms is 20/s with a burst of 2.
var twoEvery100ms = algo.Params{Algorithm: algo.TokenBucket, Limit: 20, Period: time.Second, Burst: 2}

// checkDeadlineRetry holds err to the *RetryError of a Wait whose deadline
// passed: it matches ErrLimited and context.DeadlineExceeded, names the
// limiter, and carries after.
func checkDeadlineRetry(t *testing.T, err error, msg string, after time.Duration) {
	t.Helper()
	var re *limiter.RetryError
	if !errors.As(err, &re) || !errors.Is(err, limiter.ErrLimited) || !errors.Is(err, context.DeadlineExceeded) || err.Error() != msg || re.After != after {
		t.Errorf("got %v; want %q, a *RetryError with After %v matching ErrLimited and context.DeadlineExceeded", err, msg, after)
	}
}

// TestWaitDeadlinePassesBehindWaiter: a waiter that the projection let
// into the queue but whose deadline passes while it is still behind
// another (an AllowN caller takes every unit as it refills) gets a
// *RetryError matching both ErrLimited and context.DeadlineExceeded, not
// the bare deadline error. In fake time, on a 20/s, burst 2 limit drained
// at 0: A waits for 2 units with no deadline; B, arriving behind it at 0,
// waits for 1 with 140ms to its deadline (projected: 50ms, a unit's 50ms
// for A and two hand-offs; it is let in). The AllowN caller, every 1ms
// from 0.5ms, takes each unit at 50.5ms, 100.5ms, ..., so A, trying at
// 100ms with 1 unit there, is refused until 150ms; B's deadline passes at
// 140ms: After is the 10ms to A's try plus 50ms for A, still queued.
func TestWaitDeadlinePassesBehindWaiter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (wait func(context.Context, int64) error, allow func())
		msg   string
	}{
		{"Limiter", func(t *testing.T) (func(context.Context, int64) error, func()) {
			l := newLimiter(t, newStore(t, memory.WithSweepInterval(0)), "w", twoEvery100ms)
			return func(ctx context.Context, n int64) error { return l.Wait(ctx, "k", n) },
				func() { l.AllowN(context.Background(), "k", 1) }
		}, `limiter "w": rate limited, retry after 60ms: context deadline exceeded`},
		{"Local", func(t *testing.T) (func(context.Context, int64) error, func()) {
			l, err := limiter.NewLocal(twoEvery100ms)
			if err != nil {
				t.Fatal(err)
			}
			return l.Wait, func() { l.AllowN(1) }
		}, "limiter: rate limited, retry after 60ms: context deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				wait, allow := tc.setup(t)
				if err := wait(t.Context(), 2); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				stop := make(chan struct{})
				var wg sync.WaitGroup
				wg.Go(func() {
					time.Sleep(500 * time.Microsecond)
					for {
						select {
						case <-stop:
							return
						default:
						}
						allow()
						time.Sleep(time.Millisecond)
					}
				})
				ctxA, cancelA := context.WithCancel(t.Context())
				wg.Go(func() {
					if err := wait(ctxA, 2); !errors.Is(err, context.Canceled) {
						t.Errorf("A, cancelled: %v; want context.Canceled", err)
					}
				})
				synctest.Wait()
				ctx, cancel := context.WithTimeout(t.Context(), 140*time.Millisecond)
				defer cancel()
				err := wait(ctx, 1)
				if got := time.Since(start); got != 140*time.Millisecond {
					t.Errorf("B returned at %v; want at its deadline, 140ms", got)
				}
				checkDeadlineRetry(t, err, tc.msg, 60*time.Millisecond)
				cancelA()
				close(stop)
				wg.Wait()
			})
		})
	}
}

// blockingStore's Take and Peek wait for their context to end.
type blockingStore struct{ store.Store }

func (blockingStore) Take(ctx context.Context, _ []store.Request, _ []algo.Decision) (store.Result, error) {
	<-ctx.Done()
	return store.Result{}, ctx.Err()
}

// TestWaitDeadlineOutsideQueue: a deadline that passes during a store call
// or before Wait is called also ends Wait with a *RetryError matching
// ErrLimited and context.DeadlineExceeded (After 0: nothing was learnt);
// a store timeout of the limiter's own (WithStoreTimeout) and a
// cancellation are not the caller's deadline and stay the errors they are.
func TestWaitDeadlineOutsideQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		blocked := newLimiter(t, blockingStore{newStore(t)}, "w", oneEvery50ms)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		checkDeadlineRetry(t, blocked.Wait(ctx, "k", 1), `limiter "w": rate limited, retry after 0s: context deadline exceeded`, 0)

		checkDeadlineRetry(t, newLimiter(t, newStore(t), "w", oneEvery50ms).Wait(ctx, "k", 1), `limiter "w": rate limited, retry after 0s: context deadline exceeded`, 0)
		loc, err := limiter.NewLocal(oneEvery50ms)
		if err != nil {
			t.Fatal(err)
		}
		checkDeadlineRetry(t, loc.Wait(ctx, 1), "limiter: rate limited, retry after 0s: context deadline exceeded", 0)

		timeout, err := limiter.New(blockingStore{newStore(t)}, "w", oneEvery50ms, limiter.WithStoreTimeout(5*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel = context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		if err := timeout.Wait(ctx, "k", 1); errors.Is(err, limiter.ErrLimited) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait whose store call timed out (WithStoreTimeout): %v; want the store's error, not ErrLimited", err)
		}
		ctx, cancel = context.WithCancel(t.Context())
		go func() {
			time.Sleep(time.Millisecond)
			cancel()
		}()
		if err := blocked.Wait(ctx, "k", 1); errors.Is(err, limiter.ErrLimited) || !errors.Is(err, context.Canceled) {
			t.Errorf("Wait cancelled during a store call: %v; want context.Canceled, not ErrLimited", err)
		}
	})
}

// TestErrorsSayLimiterOnce: an error of the package's own wrapped with a
// limiter's name says "limiter" once — `limiter "w": cost exceeds …`, not
// `limiter "w": limiter: cost exceeds …` — and still matches what it wraps.
func TestErrorsSayLimiterOnce(t *testing.T) {
	l := newLimiter(t, newStore(t), "w", twoEvery100ms)
	loc, err := limiter.NewLocal(twoEvery100ms)
	if err != nil {
		t.Fatal(err)
	}
	_, acqErr := l.Acquire(t.Context(), "k")
	for _, c := range []struct {
		name string
		err  error
		is   error
		want string
	}{
		{"Wait(3) on a burst of 2", l.Wait(t.Context(), "k", 3), limiter.ErrNever, `limiter "w": cost exceeds the limit's capacity: cost 3, capacity 2`},
		{"Local Wait(3) on a burst of 2", loc.Wait(t.Context(), 3), limiter.ErrNever, `limiter: cost exceeds the limit's capacity: cost 3, capacity 2`},
		{"Acquire on a token bucket", acqErr, limiter.ErrNotConcurrency, `limiter "w": not a concurrency limit: Acquire needs a concurrency limit, not token_bucket`},
	} {
		if !errors.Is(c.err, c.is) || c.err.Error() != c.want {
			t.Errorf("%s: %v; want %s (matching %v)", c.name, c.err, c.want, c.is)
		}
	}
}
