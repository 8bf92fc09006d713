package policy

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

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
