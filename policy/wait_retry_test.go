package policy

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/algo"
)

// TestQueueRetry: the retry told to a request the wait queue turned away,
// step by step. Every waiter ahead takes a unit and a hand-off (1ms here)
// before it, but only the units the limit hands out before the last of
// them must leave (left): the others leave with nothing.
func TestQueueRetry(t *testing.T) {
	lim := func(p algo.Params) *algo.Limit {
		t.Helper()
		l, err := algo.Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	const ms = time.Millisecond
	bucket := lim(algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Second, Burst: 1})
	window := lim(algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Second})
	month := lim(algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Calendar: algo.CalendarMonth})
	conc := lim(algo.Params{Algorithm: algo.Concurrency, Limit: 5})
	ages := lim(algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: (1<<53 - 1) * time.Microsecond})
	for _, tc := range []struct {
		name  string
		l     *algo.Limit
		retry time.Duration
		ahead int
		left  time.Duration
		want  time.Duration
	}{
		{"bucket, nobody ahead", bucket, time.Second, 0, 10 * time.Second, time.Second + 1*ms},
		{"bucket, 3 ahead, all served", bucket, time.Second, 3, 10 * time.Second, 4*time.Second + 4*ms},
		{"bucket, 3 ahead, no deadline", bucket, time.Second, 3, -1, 4*time.Second + 4*ms},
		{"bucket, 3 ahead, 2 served before they leave", bucket, time.Second, 3, 2500 * ms, 3*time.Second + 3*ms},
		{"bucket, all leave before the unit", bucket, time.Second, 3, 500 * ms, time.Second + 1*ms},
		{"window, 1 ahead: same window", window, time.Second, 1, 5 * time.Second, time.Second + 2*ms},
		{"window, 3 ahead: the next window", window, time.Second, 3, 5 * time.Second, 2*time.Second + 4*ms},
		{"window, 4 ahead: the one after", window, time.Second, 4, 5 * time.Second, 3*time.Second + 5*ms},
		{"window, 4 ahead, 2 served before they leave", window, time.Second, 4, 1500 * ms, 2*time.Second + 3*ms},
		{"month, 200 ahead, gone before the reset", month, time.Hour, 200, 30 * time.Second, time.Hour + 1*ms},
		{"month, 200 ahead, 100 served", month, time.Hour, 200, 2 * time.Hour, time.Hour + 28*24*time.Hour + 101*ms},
		{"concurrency: hand-offs only", conc, 0, 5, -1, 6 * ms},
		{"no limit: hand-offs only", nil, 2 * time.Second, 2, -1, 2*time.Second + 3*ms},
		{"saturates below Never", ages, time.Second, 1 << 20, -1, algo.Never - 1},
	} {
		if got := queueRetry(tc.l, tc.retry, tc.ahead, tc.left, ms); got != tc.want {
			t.Errorf("%s: queueRetry(retry %v, ahead %d, left %v) = %v, want %v", tc.name, tc.retry, tc.ahead, tc.left, got, tc.want)
		}
	}
}

// TestDecideWaitFullQueueRetry: a request refused because the wait queue
// is full is told to retry when the waiters ahead have been served, not
// when the limit's next unit is back (which they take); and retrying then
// is admitted, where retrying at the limit's own retry is refused.
func TestDecideWaitFullQueueRetry(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		// first requests admitted at once, then waiters fill the queue
		first, waiters int
		// limit is the limit's own retry; want the queue's estimate
		// (ahead × a unit or a window, plus a hand-off of 1ms each and
		// one for the request itself)
		limit, want time.Duration
	}{
		{"token bucket", "bucket", 1, 3, time.Second, 4*time.Second + 4*time.Millisecond},
		{"fixed window", "window", 2, 4, time.Second, 3*time.Second + 5*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newMemEngine(t, mustParse(t, `
domain: w
descriptors:
  - key: bucket
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 1, burst: 1, strategy: wait, max_wait: 10s, max_waiters: 3}
  - key: window
    rate_limit: {algorithm: fixed_window, unit: second, requests_per_unit: 2, strategy: wait, max_wait: 5s, max_waiters: 4}
`), nil)
				var wg sync.WaitGroup
				defer wg.Wait()
				ctx, cancel := context.WithCancel(context.Background())
				// On a failure, the waiters leave before the bubble ends.
				defer cancel()
				time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second))) // start of a window
				r := req("w", ent(tc.key, "x"))
				for i := range tc.first {
					if resp, err := e.DecideWait(ctx, r); err != nil || resp.Code != CodeOK {
						t.Fatalf("request %d: %v %v, want OK at once", i, resp.Code, err)
					}
				}
				for range tc.waiters {
					wg.Go(func() {
						if resp, err := e.DecideWait(ctx, r); ctx.Err() == nil && (err != nil || resp.Code != CodeOK) {
							t.Errorf("waiter: %v %v, want OK", resp.Code, err)
						}
					})
					synctest.Wait()
				}
				if n := e.Waiting(); n != tc.waiters {
					t.Fatalf("%d waiting, want %d (the queue full)", n, tc.waiters)
				}
				refused := time.Now()
				resp, err := e.DecideWait(ctx, r)
				if err != nil || resp.Code != CodeOverLimit || resp.Strategy != StrategyReject {
					t.Fatalf("with the queue full: %v %s %v, want rejected", resp.Code, resp.Strategy, err)
				}
				st := resp.Statuses[0]
				if got := st.Decision.RetryAfter; got != tc.want {
					t.Fatalf("with the queue full: RetryAfter %v, want %v (the waiters ahead first; the limit alone says %v)", got, tc.want, tc.limit)
				}
				if got := st.Limits[0].Decision.RetryAfter; got != tc.want {
					t.Fatalf("with the queue full: the limit's RetryAfter %v, want %v", got, tc.want)
				}
				// At the limit's own retry the waiters took the units.
				time.Sleep(time.Until(refused.Add(tc.limit + time.Millisecond)))
				if p, _ := e.Peek(ctx, r); p.Code != CodeOverLimit {
					t.Fatalf("at the limit's retry (%v): %v, want still refused (the waiters' units)", tc.limit, p.Code)
				}
				time.Sleep(time.Until(refused.Add(tc.want)))
				if d, err := e.Decide(ctx, r); err != nil || d.Code != CodeOK {
					t.Fatalf("after the told %v: %v %v, want admitted", tc.want, d.Code, err)
				}
				wg.Wait()
			})
		})
	}
}
