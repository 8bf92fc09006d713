package queue

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestWaitProjected: the projection is the caller's, asked under the lock
// with the waiters ahead as Ahead describes them. A window of two units a
// second, spent: two waiters ahead take the next window's units, so a
// newcomer's comes in the window after (2 s); with a 1.5 s deadline it is
// refused at once with that projection, with 2.5 s it is served at 2 s.
func TestWaitProjected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		taken := 0
		try := func(context.Context) (bool, time.Duration, error) {
			w := int(time.Since(start) / time.Second) // window number
			if taken < 2*w {
				taken++
				return true, 0, nil
			}
			return false, time.Duration(w+1)*time.Second - time.Since(start), nil
		}
		q := mustNew(t, try, WithOrder(FIFO))
		window := func(ahead int, last time.Time, handoff time.Duration) time.Duration {
			return time.Second + time.Duration(ahead/2)*time.Second + time.Duration(ahead+1)*handoff
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		tl := newTimeline()
		for id := range 2 {
			tl.wg.Go(func() {
				err := q.WaitProjected(ctx, 0, window)
				tl.mu.Lock()
				tl.got = append(tl.got, admission{id: id, at: time.Since(tl.start), err: err})
				tl.mu.Unlock()
			})
			synctest.Wait()
		}
		var gotAhead int
		var gotLast time.Time
		short, cancelShort := context.WithTimeout(t.Context(), 1500*time.Millisecond)
		defer cancelShort()
		err := q.WaitProjected(short, 0, func(ahead int, last time.Time, handoff time.Duration) time.Duration {
			gotAhead, gotLast = ahead, last
			return window(ahead, last, handoff)
		})
		var te *TimeoutError
		if !errors.As(err, &te) || te.RetryAfter != 2003*time.Millisecond || time.Since(start) != 0 {
			t.Errorf("newcomer with 1.5s: %v after %v; want a *TimeoutError at once, RetryAfter 2.003s", err, time.Since(start))
		}
		if gotAhead != 2 || !gotLast.Equal(start.Add(time.Minute)) {
			t.Errorf("projection asked with %d ahead, last %v; want 2, %v", gotAhead, gotLast, start.Add(time.Minute))
		}
		roomy, cancelRoomy := context.WithTimeout(t.Context(), 2500*time.Millisecond)
		defer cancelRoomy()
		if err := q.WaitProjected(roomy, 0, window); err != nil || time.Since(start) != 2*time.Second {
			t.Errorf("newcomer with 2.5s: %v at %v; want served at 2s", err, time.Since(start))
		}
		checkTimeline(t, tl.done(), []admission{{0, time.Second, nil}, {1, time.Second, nil}})
	})
}
