package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// refill is a capacity source for the tests: one unit every `every`,
// starting empty at `start`, holding at most one unit. It counts its tries.
type refill struct {
	mu    sync.Mutex
	start time.Time
	every time.Duration
	taken int
	tries atomic.Int64
}

func newRefill(every time.Duration) *refill {
	return &refill{start: time.Now(), every: every}
}

func (r *refill) try(context.Context) (bool, time.Duration, error) {
	r.tries.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	elapsed := time.Since(r.start)
	earned := int(elapsed / r.every)
	if earned > r.taken {
		r.taken = earned // at most one unit banked: burst 1
		return true, 0, nil
	}
	next := time.Duration(r.taken+1) * r.every
	return false, next - elapsed, nil
}

// admission is one Wait's outcome in a timeline.
type admission struct {
	id  int
	at  time.Duration
	err error
}

// timeline records Wait outcomes with their offsets from start.
type timeline struct {
	mu    sync.Mutex
	start time.Time
	got   []admission
	wg    sync.WaitGroup
}

func newTimeline() *timeline { return &timeline{start: time.Now()} }

// wait starts a waiter and lets the bubble settle so that arrival order is
// the call order.
func (tl *timeline) wait(ctx context.Context, q *Queue, id, prio int) {
	tl.waitFrom(ctx, q, id, prio, 0, 0)
}

// waitFrom is wait through WaitFrom.
func (tl *timeline) waitFrom(ctx context.Context, q *Queue, id, prio int, earliest, each time.Duration) {
	tl.wg.Go(func() {
		err := q.WaitFrom(ctx, prio, earliest, each)
		tl.mu.Lock()
		tl.got = append(tl.got, admission{id: id, at: time.Since(tl.start), err: err})
		tl.mu.Unlock()
	})
	synctest.Wait()
}

func (tl *timeline) done() []admission {
	tl.wg.Wait()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	// Outcomes at one instant come in no defined order: sort by id.
	got := slices.Clone(tl.got)
	slices.SortStableFunc(got, func(a, b admission) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.id - b.id
	})
	return got
}

func mustNew(t *testing.T, try TryFunc, opts ...Option) *Queue {
	t.Helper()
	q, err := New(try, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func checkTimeline(t *testing.T, got []admission, want []admission) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d outcomes %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.id != w.id || g.at != w.at || !errors.Is(g.err, w.err) && g.err != w.err {
			t.Errorf("outcome %d: waiter %d at %v err %v, want waiter %d at %v err %v", i, g.id, g.at, g.err, w.id, w.at, w.err)
		}
	}
}

func TestFIFOOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newRefill(time.Second)
		q := mustNew(t, src.try, WithOrder(FIFO))
		tl := newTimeline()
		for id, prio := range []int{0, 9, 0, 5, 0} { // priorities ignored
			tl.wait(t.Context(), q, id, prio)
		}
		if got := q.Len(); got != 5 {
			t.Fatalf("Len() = %d, want 5", got)
		}
		checkTimeline(t, tl.done(), []admission{
			{0, 1 * time.Second, nil},
			{1, 2 * time.Second, nil},
			{2, 3 * time.Second, nil},
			{3, 4 * time.Second, nil},
			{4, 5 * time.Second, nil},
		})
		// Only the head tries: one failed try per second plus the
		// success, never one per waiter.
		if got := src.tries.Load(); got != 10 {
			t.Errorf("tries = %d, want 10 (the head alone polls)", got)
		}
		if s := q.Stats(); s != (Stats{Admitted: 5}) {
			t.Errorf("Stats() = %+v", s)
		}
	})
}

func TestPriorityOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newRefill(time.Second)
		q := mustNew(t, src.try)
		tl := newTimeline()
		for id, prio := range []int{1, 5, 3, 5, 1, -2} {
			tl.wait(t.Context(), q, id, prio)
		}
		checkTimeline(t, tl.done(), []admission{
			{1, 1 * time.Second, nil}, // priority 5, first
			{3, 2 * time.Second, nil}, // priority 5, second
			{2, 3 * time.Second, nil}, // priority 3
			{0, 4 * time.Second, nil}, // priority 1, first
			{4, 5 * time.Second, nil}, // priority 1, second
			{5, 6 * time.Second, nil}, // priority -2
		})
	})
}

func TestPriorityArrivalPreemptsHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newRefill(time.Second)
		q := mustNew(t, src.try)
		tl := newTimeline()
		tl.wait(t.Context(), q, 0, 0) // head, retrying at 1s
		time.Sleep(500 * time.Millisecond)
		tl.wait(t.Context(), q, 1, 1) // arrives later, served first
		checkTimeline(t, tl.done(), []admission{
			{1, 1 * time.Second, nil},
			{0, 2 * time.Second, nil},
		})
	})
}

// TestPriorityStarvesUntilTTL pins the package doc's rule: priority is
// strict, without aging. A low waiter behind a stream of higher arrivals
// (one a second, each half a second before the next unit) is never
// served, and leaves at 3s, when its next try (4s) would come after its
// 3.5s TTL.
func TestPriorityStarvesUntilTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newRefill(time.Second)
		q := mustNew(t, src.try, WithTTL(3500*time.Millisecond))
		tl := newTimeline()
		tl.wait(t.Context(), q, 0, 0)
		time.Sleep(500 * time.Millisecond)
		for id := 1; id <= 4; id++ {
			tl.wait(t.Context(), q, id, 1)
			time.Sleep(time.Second)
		}
		checkTimeline(t, tl.done(), []admission{
			{1, 1 * time.Second, nil},
			{2, 2 * time.Second, nil},
			{0, 3 * time.Second, ErrTimeout},
			{3, 3 * time.Second, nil},
			{4, 4 * time.Second, nil},
		})
	})
}

func TestTTLExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newRefill(time.Second)
		q := mustNew(t, src.try, WithTTL(2500*time.Millisecond))
		tl := newTimeline()
		for id := range 4 {
			tl.wait(t.Context(), q, id, 0)
		}
		// Waiter 2 becomes head at 2s; its retry at 3s would outlive its
		// deadline (2.5s), so it and waiter 3 leave at once, at 2s.
		got := tl.done()
		checkTimeline(t, got, []admission{
			{0, 1 * time.Second, nil},
			{1, 2 * time.Second, nil},
			{2, 2 * time.Second, ErrTimeout},
			{3, 2 * time.Second, ErrTimeout},
		})
		var te *TimeoutError
		if !errors.As(got[2].err, &te) || te.RetryAfter != time.Second || te.Waited != 2*time.Second || !te.Deadline.Equal(tl.start.Add(2500*time.Millisecond)) {
			t.Errorf("waiter 2 err = %#v, want RetryAfter 1s, Waited 2s, Deadline start+2.5s", got[2].err)
		}
		if s := q.Stats(); s != (Stats{Admitted: 2, TimedOut: 2}) {
			t.Errorf("Stats() = %+v", s)
		}
	})
}

func TestContextDeadlineBehindTheHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var open atomic.Bool
		try := func(context.Context) (bool, time.Duration, error) {
			return open.Load(), 100 * time.Millisecond, nil
		}
		q := mustNew(t, try, WithTTL(time.Hour))
		tl := newTimeline()
		tl.wait(t.Context(), q, 0, 0)
		ctx, cancel := context.WithTimeout(t.Context(), 1050*time.Millisecond)
		defer cancel()
		tl.wait(ctx, q, 1, 0) // not head: its context deadline ends it
		time.Sleep(1950 * time.Millisecond)
		open.Store(true)
		checkTimeline(t, tl.done(), []admission{
			{1, 1050 * time.Millisecond, context.DeadlineExceeded},
			{0, 2000 * time.Millisecond, nil},
		})
		if s := q.Stats(); s != (Stats{Admitted: 1, TimedOut: 1}) {
			t.Errorf("Stats() = %+v", s)
		}
	})
}

func TestRetryHintPastTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		try := func(context.Context) (bool, time.Duration, error) {
			return false, 400 * time.Millisecond, nil
		}
		q := mustNew(t, try, WithTTL(time.Second))
		tl := newTimeline()
		tl.wait(t.Context(), q, 0, 0)
		time.Sleep(300 * time.Millisecond)
		tl.wait(t.Context(), q, 1, 0)
		// Waiter 0 tries at 0, .4 and .8; the retry at 1.2 would pass its
		// deadline (1.0), so it leaves at .8. Waiter 1 (deadline 1.3)
		// then heads the queue, tries at 1.2 and leaves, as the next
		// retry (1.6) would pass its deadline too.
		checkTimeline(t, tl.done(), []admission{
			{0, 800 * time.Millisecond, ErrTimeout},
			{1, 1200 * time.Millisecond, ErrTimeout},
		})
	})
}

func TestTTLTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		try := func(context.Context) (bool, time.Duration, error) {
			return false, 300 * time.Millisecond, nil
		}
		q := mustNew(t, try, WithTTL(time.Second))
		tl := newTimeline()
		tl.wait(t.Context(), q, 0, 0)
		time.Sleep(500 * time.Millisecond)
		tl.wait(t.Context(), q, 1, 1)
		// Waiter 1 heads the queue from .5 and tries at .6, .9 and 1.2,
		// when its next retry (1.5) reaches its deadline. Waiter 0, behind
		// it, is ended by its TTL timer at 1.0.
		got := tl.done()
		checkTimeline(t, got, []admission{
			{0, 1000 * time.Millisecond, ErrTimeout},
			{1, 1200 * time.Millisecond, ErrTimeout},
		})
		var te *TimeoutError
		if !errors.As(got[0].err, &te) || te.RetryAfter != 0 || te.Waited != time.Second {
			t.Errorf("waiter 0 err = %#v, want Waited 1s, no RetryAfter", got[0].err)
		}
		if want := "queue: timed out after 1s"; got[0].err.Error() != want {
			t.Errorf("Error() = %q, want %q", got[0].err, want)
		}
	})
}

func TestCancelRemovesWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newRefill(time.Second)
		q := mustNew(t, src.try)
		tl := newTimeline()
		ctx, cancel := context.WithCancel(t.Context())
		tl.wait(t.Context(), q, 0, 0)
		tl.wait(ctx, q, 1, 0)
		tl.wait(t.Context(), q, 2, 0)
		if got := q.Len(); got != 3 {
			t.Fatalf("Len() = %d, want 3", got)
		}
		time.Sleep(100 * time.Millisecond)
		cancel()
		synctest.Wait()
		if got := q.Len(); got != 2 {
			t.Fatalf("Len() after cancel = %d, want 2", got)
		}
		checkTimeline(t, tl.done(), []admission{
			{1, 100 * time.Millisecond, context.Canceled},
			{0, 1 * time.Second, nil},
			{2, 2 * time.Second, nil},
		})
		if s := q.Stats(); s != (Stats{Admitted: 2, Canceled: 1}) {
			t.Errorf("Stats() = %+v", s)
		}
	})
}

func TestCancelHeadWakesNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newRefill(time.Second)
		q := mustNew(t, src.try)
		tl := newTimeline()
		ctx, cancel := context.WithCancel(t.Context())
		tl.wait(ctx, q, 0, 0)
		tl.wait(t.Context(), q, 1, 0)
		cancel()
		checkTimeline(t, tl.done(), []admission{
			{0, 0, context.Canceled},
			{1, 1 * time.Second, nil},
		})
	})
}

func TestFullRejectsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newRefill(time.Second)
		q := mustNew(t, src.try, WithSize(2), WithOrder(FIFO))
		tl := newTimeline()
		tl.wait(t.Context(), q, 0, 0)
		tl.wait(t.Context(), q, 1, 0)
		tl.wait(t.Context(), q, 2, 9) // FIFO: priority does not evict
		checkTimeline(t, tl.done(), []admission{
			{2, 0, ErrFull},
			{0, 1 * time.Second, nil},
			{1, 2 * time.Second, nil},
		})
		if s := q.Stats(); s != (Stats{Admitted: 2, Rejected: 1}) {
			t.Errorf("Stats() = %+v", s)
		}
	})
}

func TestFullShedsLowestPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newRefill(time.Second)
		q := mustNew(t, src.try, WithSize(3))
		tl := newTimeline()
		tl.wait(t.Context(), q, 0, 1)
		tl.wait(t.Context(), q, 1, 0)
		tl.wait(t.Context(), q, 2, 0)
		tl.wait(t.Context(), q, 3, 0) // full, not higher than the lowest: rejected
		tl.wait(t.Context(), q, 4, 2) // pushes out waiter 2 (lowest, latest)
		tl.wait(t.Context(), q, 5, 1) // pushes out waiter 1
		tl.wait(t.Context(), q, 6, 1) // lowest is now 1: rejected
		checkTimeline(t, tl.done(), []admission{
			{1, 0, ErrFull},
			{2, 0, ErrFull},
			{3, 0, ErrFull},
			{6, 0, ErrFull},
			{4, 1 * time.Second, nil},
			{0, 2 * time.Second, nil},
			{5, 3 * time.Second, nil},
		})
		if s := q.Stats(); s != (Stats{Admitted: 3, Rejected: 4}) {
			t.Errorf("Stats() = %+v", s)
		}
	})
}

func TestNeverAndTryError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("store down")
		var calls atomic.Int64
		try := func(context.Context) (bool, time.Duration, error) {
			switch calls.Add(1) {
			case 1:
				return false, Never, nil
			case 2:
				return false, 0, boom
			case 3:
				return false, 0, nil // retried after the minimum interval
			}
			return true, 0, nil
		}
		q := mustNew(t, try, WithMinRetry(10*time.Millisecond))
		tl := newTimeline()
		for id := range 3 {
			tl.wait(t.Context(), q, id, 0)
		}
		checkTimeline(t, tl.done(), []admission{
			{0, 0, ErrNever},
			{1, 0, boom},
			{2, 10 * time.Millisecond, nil},
		})
		if s := q.Stats(); s != (Stats{Admitted: 1, Failed: 2}) {
			t.Errorf("Stats() = %+v", s)
		}
	})
}

// TestTryPanicFreesTheQueue: a TryFunc that panics (a bug in the store
// code, recovered by net/http for its handler) takes its waiter out of the
// queue and lets the next one try, and the panic reaches the caller as is.
// Before, the panic left the queue marked as trying: nobody tried again,
// and every later waiter waited out its TTL.
func TestTryPanicFreesTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		try := func(context.Context) (bool, time.Duration, error) {
			if calls.Add(1) == 1 {
				panic("store bug")
			}
			return true, 0, nil
		}
		q := mustNew(t, try, WithTTL(time.Second))
		func() {
			defer func() {
				if r := recover(); r != "store bug" {
					t.Errorf("first Wait panicked with %v, want the TryFunc's \"store bug\"", r)
				}
			}()
			_ = q.Wait(t.Context(), 0)
		}()
		if n := q.Len(); n != 0 {
			t.Errorf("Len() after the panic = %d, want 0", n)
		}
		start := time.Now()
		if err := q.Wait(t.Context(), 0); err != nil || time.Since(start) != 0 {
			t.Errorf("Wait after a panicking try = %v after %v, want nil at once", err, time.Since(start))
		}
		if s := q.Stats(); s != (Stats{Admitted: 1, Failed: 1}) {
			t.Errorf("Stats() = %+v, want 1 admitted and 1 failed", s)
		}
	})
}

// TestContextEndsDuringTry: a wait whose context ends during its own try,
// the TryFunc returning the context's error, is counted as a wait its
// context ended (TimedOut for a deadline, Canceled for a cancellation), as
// Stats' doc says, not as a TryFunc failure; the error is returned as is.
func TestContextEndsDuringTry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		try := func(ctx context.Context) (bool, time.Duration, error) {
			<-ctx.Done() // a store call that lasts until the caller gives up
			return false, 0, ctx.Err()
		}
		q := mustNew(t, try)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := q.Wait(ctx, 0); err != context.DeadlineExceeded {
			t.Errorf("Wait past its deadline in the try = %v, want %v", err, context.DeadlineExceeded)
		}
		ctx, cancel = context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		if err := q.Wait(ctx, 0); err != context.Canceled {
			t.Errorf("Wait cancelled in the try = %v, want %v", err, context.Canceled)
		}
		if s := q.Stats(); s != (Stats{TimedOut: 1, Canceled: 1}) {
			t.Errorf("Stats() = %+v, want 1 timed out and 1 canceled, none failed", s)
		}
		boom := errors.New("store down")
		q2 := mustNew(t, func(context.Context) (bool, time.Duration, error) { return false, 0, boom })
		if err := q2.Wait(t.Context(), 0); err != boom {
			t.Errorf("Wait with a failing try = %v, want %v", err, boom)
		}
		if s := q2.Stats(); s != (Stats{Failed: 1}) {
			t.Errorf("Stats() of a failing try = %+v, want 1 failed", s)
		}
	})
}

func TestContextDeadlineBeforeRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		try := func(context.Context) (bool, time.Duration, error) { return false, time.Minute, nil }
		q := mustNew(t, try)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := q.Wait(ctx, 0)
		var te *TimeoutError
		if !errors.As(err, &te) || te.RetryAfter != time.Minute || te.Waited != 0 {
			t.Fatalf("Wait = %v, want a *TimeoutError with RetryAfter 1m at once", err)
		}
		if want := "queue: timed out after 0s (deadline would pass before the retry in 1m0s)"; err.Error() != want {
			t.Errorf("Error() = %q, want %q", err, want)
		}
		if err := q.Wait(ctx, 0); err == nil || q.Len() != 0 {
			t.Errorf("second Wait = %v, Len %d", err, q.Len())
		}
	})
}

func TestCanceledContext(t *testing.T) {
	q := mustNew(t, func(context.Context) (bool, time.Duration, error) { return true, 0, nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.Wait(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait(cancelled) = %v, want context.Canceled", err)
	}
	if s := q.Stats(); s != (Stats{}) {
		t.Errorf("Stats() = %+v, want zero (never queued)", s)
	}
}

func TestCloseWakesEveryWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newRefill(time.Hour)
		q := mustNew(t, src.try)
		tl := newTimeline()
		for id := range 5 {
			tl.wait(t.Context(), q, id, id%2)
		}
		time.Sleep(time.Second)
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		got := tl.done() // every waiter returned: nothing leaks
		if len(got) != 5 {
			t.Fatalf("got %d outcomes, want 5", len(got))
		}
		for _, a := range got {
			if a.err != ErrClosed || a.at != time.Second {
				t.Errorf("waiter %d: %v at %v, want ErrClosed at 1s", a.id, a.err, a.at)
			}
		}
		if err := q.Wait(t.Context(), 0); err != ErrClosed {
			t.Errorf("Wait after Close = %v, want ErrClosed", err)
		}
		if q.Len() != 0 || q.Close() != nil {
			t.Errorf("after Close: Len %d", q.Len())
		}
	})
}

func TestCloseDuringTry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan bool)
		try := func(context.Context) (bool, time.Duration, error) {
			return <-release, time.Second, nil
		}
		q := mustNew(t, try)
		tl := newTimeline()
		tl.wait(t.Context(), q, 0, 0) // inside try
		tl.wait(t.Context(), q, 1, 0)
		q.Close()
		synctest.Wait()
		release <- true // the try in flight obtained capacity
		checkTimeline(t, tl.done(), []admission{
			{0, 0, nil},
			{1, 0, ErrClosed},
		})
	})
}

func TestPushedOutWhileTrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan bool, 1)
		var calls atomic.Int64
		try := func(context.Context) (bool, time.Duration, error) {
			if calls.Add(1) == 1 {
				return <-release, time.Second, nil
			}
			return true, 0, nil
		}
		q := mustNew(t, try, WithSize(1))
		tl := newTimeline()
		tl.wait(t.Context(), q, 0, 0) // head, inside try
		tl.wait(t.Context(), q, 1, 1) // pushes it out
		release <- false
		checkTimeline(t, tl.done(), []admission{
			{0, 0, ErrFull},
			{1, 0, nil}, // woken by the pushed-out trier
		})
	})
}

// A waiter pushed out while its try is in flight keeps what the try
// obtained: it is admitted, and counted once, as admitted (the push-out
// had counted it rejected too, so Stats summed past the waiters).
func TestPushedOutWhileTryingSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan bool, 1)
		var calls atomic.Int64
		try := func(context.Context) (bool, time.Duration, error) {
			if calls.Add(1) == 1 {
				return <-release, time.Second, nil
			}
			return true, 0, nil
		}
		q := mustNew(t, try, WithSize(1))
		tl := newTimeline()
		tl.wait(t.Context(), q, 0, 0) // head, inside try
		tl.wait(t.Context(), q, 1, 1) // pushes it out
		release <- true               // the try in flight obtained capacity
		for _, a := range tl.done() {
			if a.err != nil {
				t.Errorf("waiter %d: %v, want admitted", a.id, a.err)
			}
		}
		if s := q.Stats(); s.Admitted != 2 || s.Rejected != 0 {
			t.Errorf("Stats() = %+v, want 2 admitted, 0 rejected", s)
		}
	})
}

// TestExactUnderConcurrency holds the queue to its budget: 200 goroutines
// wait for 50 units that never refill; exactly 50 are admitted and the rest
// time out, none twice.
func TestExactUnderConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget, callers = 50, 200
		var left atomic.Int64
		left.Store(budget)
		try := func(context.Context) (bool, time.Duration, error) {
			if left.Add(-1) >= 0 {
				return true, 0, nil
			}
			left.Add(1)
			return false, 100 * time.Millisecond, nil
		}
		q := mustNew(t, try, WithSize(callers), WithTTL(time.Second))
		var admitted, timedOut atomic.Int64
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				switch err := q.Wait(t.Context(), i%3); {
				case err == nil:
					admitted.Add(1)
				case errors.Is(err, ErrTimeout):
					timedOut.Add(1)
				default:
					t.Errorf("Wait = %v", err)
				}
			})
		}
		wg.Wait()
		if admitted.Load() != budget || timedOut.Load() != callers-budget || left.Load() != 0 {
			t.Fatalf("admitted %d, timed out %d, left %d; want %d, %d, 0", admitted.Load(), timedOut.Load(), left.Load(), budget, callers-budget)
		}
		if s := q.Stats(); s.Admitted != budget || s.Waiting != 0 {
			t.Errorf("Stats() = %+v", s)
		}
	})
}

// TestRealConcurrency runs the queue on the real clock under -race with
// short, bounded waits.
func TestRealConcurrency(t *testing.T) {
	var left atomic.Int64
	left.Store(64)
	try := func(context.Context) (bool, time.Duration, error) {
		if left.Add(-1) >= 0 {
			return true, 0, nil
		}
		left.Add(1)
		return false, time.Millisecond, nil
	}
	q := mustNew(t, try, WithSize(32), WithTTL(20*time.Millisecond))
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 128 {
		wg.Go(func() {
			switch err := q.Wait(context.Background(), i%4); {
			case err == nil:
				admitted.Add(1)
			case errors.Is(err, ErrFull), errors.Is(err, ErrTimeout):
				refused.Add(1)
			default:
				t.Errorf("Wait = %v", err)
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 64-left.Load() || admitted.Load()+refused.Load() != 128 || q.Len() != 0 {
		t.Fatalf("admitted %d, refused %d, budget left %d, Len %d", admitted.Load(), refused.Load(), left.Load(), q.Len())
	}
	s := q.Stats()
	if s.Admitted != uint64(admitted.Load()) || s.Rejected+s.TimedOut != uint64(refused.Load()) {
		t.Errorf("Stats() = %+v, want %d admitted, %d refused", s, admitted.Load(), refused.Load())
	}
}

func TestNewErrors(t *testing.T) {
	ok := func(context.Context) (bool, time.Duration, error) { return true, 0, nil }
	for _, tc := range []struct {
		name string
		try  TryFunc
		opts []Option
		want string
	}{
		{"nil try", nil, nil, "queue: nil TryFunc"},
		{"size", ok, []Option{WithSize(0)}, "queue: size 0: must be at least 1"},
		{"ttl", ok, []Option{WithTTL(-time.Second)}, "queue: TTL -1s: must not be negative"},
		{"order", ok, []Option{WithOrder(7)}, "queue: unknown order 7"},
		{"retry", ok, []Option{WithMinRetry(0)}, "queue: minimum retry 0s: must be positive"},
	} {
		if _, err := New(tc.try, tc.opts...); err == nil || err.Error() != tc.want {
			t.Errorf("%s: New error %v, want %q", tc.name, err, tc.want)
		}
	}
	if FIFO.String() != "fifo" || ByPriority.String() != "priority" {
		t.Errorf("Order strings: %v %v", FIFO, ByPriority)
	}
}

func (a admission) String() string { return fmt.Sprintf("{%d %v %v}", a.id, a.at, a.err) }

func BenchmarkWaitAdmitted(b *testing.B) {
	q, _ := New(func(context.Context) (bool, time.Duration, error) { return true, 0, nil })
	defer q.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := q.Wait(ctx, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestWaitFromRefusesAtOnce: the reviewer's scenario, one unit every
// 500 ms (burst 1, spent), a TTL of 2 s and six waiters arriving together,
// each knowing it cannot be served before the next unit (earliest 500 ms)
// and that each waiter ahead takes a unit (each 500 ms): waiter k projects
// 500 ms × (k+1) plus a hand-off (1 ms by default) per try, so waiters 3
// (2.004 s: served at the deadline is too late) to 5 are refused on
// arrival instead of being held 2 s; waiters 0 to 2 are admitted at 0.5,
// 1 and 1.5 s, as with Wait.
func TestWaitFromRefusesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newRefill(500 * time.Millisecond)
		q := mustNew(t, src.try, WithTTL(2*time.Second))
		tl := newTimeline()
		for id := range 6 {
			tl.waitFrom(t.Context(), q, id, 0, 500*time.Millisecond, 500*time.Millisecond)
		}
		got := tl.done()
		checkTimeline(t, got, []admission{
			{3, 0, ErrTimeout},
			{4, 0, ErrTimeout},
			{5, 0, ErrTimeout},
			{0, 500 * time.Millisecond, nil},
			{1, 1000 * time.Millisecond, nil},
			{2, 1500 * time.Millisecond, nil},
		})
		var te *TimeoutError
		if !errors.As(got[2].err, &te) || te.RetryAfter != 2004*time.Millisecond || te.Waited != 0 {
			t.Errorf("waiter 5 err = %#v, want RetryAfter 2.004s (500ms + 3 × (500ms + 1ms) + 1ms), Waited 0", got[2].err)
		}
		if s := q.Stats(); s != (Stats{Admitted: 3, TimedOut: 3}) {
			t.Errorf("Stats() = %+v", s)
		}
	})
}

// TestWaitFromCountsOnlyWaitersAhead: under ByPriority a newcomer of a
// higher priority is served before the waiters queued with a lower one,
// so only those of at least its priority count in its projection.
func TestWaitFromCountsOnlyWaitersAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newRefill(time.Second)
		q := mustNew(t, src.try, WithTTL(2500*time.Millisecond))
		tl := newTimeline()
		for id := range 3 {
			tl.wait(t.Context(), q, id, 0)
		}
		// Three low-priority waiters ahead would project 1 s + 3 × 1 s;
		// none of them counts for priority 1: 1 s, within the TTL.
		if err := q.WaitFrom(t.Context(), 1, time.Second, time.Second); err != nil {
			t.Errorf("high-priority newcomer: %v, want admitted", err)
		}
		q.Close()
		tl.done()
	})
}

// slowBucket is a bucket of one unit, one every `every`, whose tries reach
// it lat after they are made. Full, it stops refilling: a unit taken late
// pushes every later one back by as much.
type slowBucket struct {
	mu    sync.Mutex
	full  time.Time // when it holds its unit
	every time.Duration
	lat   time.Duration
}

func (b *slowBucket) try(context.Context) (bool, time.Duration, error) {
	time.Sleep(b.lat)
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if now.Before(b.full) {
		return false, b.full.Sub(now), nil
	}
	b.full = now.Add(b.every)
	return true, 0, nil
}

// TestWaitFromMeasuresHandoffs: tries that take 2 ms, more than the 1 ms
// hand-off WithHandoff allows by default, to a bucket of one unit every
// 500 ms. The first waiter's try is timed; the four that come 5 ms later
// count 2 ms per hand-off, so the fourth waiter (projected 1.999 s with
// the default alone, its unit coming at 2.006 s, past its deadline at
// 2.005 s) and the fifth are refused on arrival, and the three before
// them are admitted within their TTL.
func TestWaitFromMeasuresHandoffs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lat = 2 * time.Millisecond
		src := &slowBucket{full: time.Now().Add(500 * time.Millisecond), every: 500 * time.Millisecond, lat: lat}
		q := mustNew(t, src.try, WithTTL(2*time.Second))
		tl := newTimeline()
		tl.waitFrom(t.Context(), q, 0, 0, 500*time.Millisecond, 500*time.Millisecond)
		time.Sleep(5 * time.Millisecond) // the first try is over
		for id := 1; id < 5; id++ {
			earliest := time.Until(src.full)
			tl.waitFrom(t.Context(), q, id, 0, earliest, 500*time.Millisecond)
		}
		got := tl.done()
		for _, a := range got {
			arrived := time.Duration(0)
			if a.id > 0 {
				arrived = 5 * time.Millisecond
			}
			switch waited := a.at - arrived; {
			case a.err == nil && waited >= 2*time.Second:
				t.Errorf("waiter %d admitted after %v, past its TTL", a.id, waited)
			case a.err != nil && waited != 0:
				t.Errorf("waiter %d refused after %v (%v), want on arrival", a.id, waited, a.err)
			}
		}
		if s := q.Stats(); s.Admitted != 3 || s.TimedOut != 2 {
			t.Errorf("Stats() = %+v, want 3 admitted, 2 refused (timeline %v)", s, got)
		}
	})
}

// TestWaitFromStallFades: one stalled try (10s) does not make WaitFrom
// refuse every later arrival. The measured hand-off fades by an eighth per
// refusal on arrival, as per try: with a 5s TTL the arrivals, a minute
// apart on an idle queue, are refused while it stays at 5s or more (10s,
// 8.75s, 7.66s, 6.70s, 5.86s, 5.13s: six of them) and the seventh is
// admitted. Before, nobody was let in to try again, so the 10s stood and
// every arrival was refused, however long after.
func TestWaitFromStallFades(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		try := func(context.Context) (bool, time.Duration, error) {
			if calls++; calls == 1 {
				time.Sleep(10 * time.Second) // a stalled store call
			}
			return true, 0, nil
		}
		q := mustNew(t, try, WithTTL(5*time.Second))
		if err := q.WaitFrom(t.Context(), 0, time.Millisecond, time.Millisecond); err != nil {
			t.Fatalf("first WaitFrom = %v, want nil", err)
		}
		for i := 1; i <= 7; i++ {
			time.Sleep(time.Minute)
			err := q.WaitFrom(t.Context(), 0, time.Millisecond, time.Millisecond)
			if i < 7 && !errors.Is(err, ErrTimeout) || i == 7 && err != nil {
				t.Errorf("arrival %d a minute apart after the stall: WaitFrom = %v, want %s", i, err, map[bool]string{true: "refused", false: "admitted"}[i < 7])
			}
		}
		if s := q.Stats(); s.Admitted != 2 || s.TimedOut != 6 || calls != 2 {
			t.Errorf("Stats() = %+v after %d tries, want 2 admitted, 6 refused, 2 tries", s, calls)
		}
	})
}

// TestAhead: the waiters an arrival would be served after — of at least
// its priority, all of them under FIFO — the latest of their deadlines
// (zero once one has none) and the hand-off allowed each.
func TestAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Capacity never comes back: every waiter stays until it leaves.
		never := func(context.Context) (bool, time.Duration, error) { return false, 100 * time.Millisecond, nil }
		q := mustNew(t, never, WithTTL(10*time.Second), WithHandoff(2*time.Millisecond))
		start := time.Now()
		tl := newTimeline()
		tl.wait(t.Context(), q, 0, 2)
		time.Sleep(time.Second)
		tl.wait(t.Context(), q, 1, 1)
		time.Sleep(time.Second)
		short, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		tl.wait(short, q, 2, 0)
		for _, tc := range []struct {
			prio int
			n    int
			last time.Time
		}{
			{3, 0, time.Time{}},
			{2, 1, start.Add(10 * time.Second)},
			{1, 2, start.Add(11 * time.Second)},
			{0, 3, start.Add(11 * time.Second)}, // the third's context ends first, at 5s
		} {
			n, last, handoff := q.Ahead(tc.prio)
			if n != tc.n || !last.Equal(tc.last) || handoff != 2*time.Millisecond {
				t.Errorf("Ahead(%d) = %d, %v, %v; want %d, %v, 2ms", tc.prio, n, last.Sub(start), handoff, tc.n, tc.last.Sub(start))
			}
		}
		tl.wait(t.Context(), q, 3, 0)
		if n, last, _ := q.Ahead(0); n != 4 || !last.Equal(start.Add(12*time.Second)) {
			t.Errorf("Ahead(0) after a fourth = %d, %v; want 4, 12s", n, last.Sub(start))
		}
		q.Close()
		tl.done()

		open := mustNew(t, never, WithOrder(FIFO)) // no TTL
		tl = newTimeline()
		tl.wait(short, open, 0, 5)
		tl.wait(t.Context(), open, 1, 0)
		if n, last, handoff := open.Ahead(9); n != 2 || !last.IsZero() || handoff != time.Millisecond {
			t.Errorf("FIFO, one waiter without a deadline: Ahead(9) = %d, %v, %v; want 2 (all), zero, 1ms", n, last, handoff)
		}
		open.Close()
		tl.done()
	})
}
