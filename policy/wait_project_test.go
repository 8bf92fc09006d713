package policy

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

const waitProjectConfig = `
domain: w
priorities: [high, low]
default_priority: low
descriptors:
  - key: fixed
    rate_limit: {algorithm: fixed_window, unit: minute, requests_per_unit: 2, strategy: wait, max_wait: 10m}
  - key: log
    rate_limit: {algorithm: sliding_log, unit: minute, requests_per_unit: 2, strategy: wait, max_wait: 10m}
  - key: smooth
    rate_limit: {algorithm: smooth_bursty, unit: minute, requests_per_unit: 6, strategy: wait, max_wait: 1m}
`

// TestDecideWaitProjectsWindowsAndSmooth is the reviewer's scenario for
// the wait strategy, as limiter's TestWaitProjectsWindowsAndSmooth is for
// Limiter.Wait. With the limit used up and four waiters queued with long
// deadlines, a fifth whose deadline comes before its turn is refused on
// arrival, told a retry at which a Decide is admitted, rather than held
// until its deadline and refused then; one whose deadline leaves room is
// served at its projected time. For a window the four take its quota as
// each window opens (2 a minute: at 60 s, 60 s, 120 s, 120 s; the fifth's
// turn is 180 s); for smooth_bursty one unit each at the stable rate (one
// per 10 s, the first at 10 s: the fifth's turn is 50 s), and an admission
// then carries a Delay of max_wait (60 s) that DecideWait holds it for, so
// it is served at 110 s and a deadline before that is as late. A
// high-priority request is behind none of the four low ones.
func TestDecideWaitProjectsWindowsAndSmooth(t *testing.T) {
	const handoff = time.Millisecond // the queue's least, the store being instant
	for _, tc := range []struct {
		key string
		// turn is when the fifth waiter's unit comes, from the start (the
		// retry a refused one is told, less its hand-offs); served is when
		// DecideWait answers it (turn plus an admission's Delay).
		turn, served time.Duration
	}{
		{"fixed", 180 * time.Second, 180 * time.Second},
		{"log", 180 * time.Second, 180 * time.Second},
		{"smooth", 50 * time.Second, 110 * time.Second},
	} {
		for _, mode := range []string{"refused", "roomy", "high"} {
			if mode == "high" && tc.key != "fixed" {
				continue
			}
			t.Run(tc.key+"/"+mode, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					e := newMemEngine(t, mustParse(t, waitProjectConfig), nil)
					ctx, cancel := context.WithCancel(context.Background())
					var wg sync.WaitGroup
					defer wg.Wait()
					// On a failure, the waiters leave before the bubble ends.
					defer cancel()
					time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Minute))) // start of a window
					r := req("w", ent(tc.key, "x"))
					for i := 0; ; i++ {
						resp, err := e.Decide(ctx, r)
						if err != nil {
							t.Fatal(err)
						}
						if resp.Code != CodeOK {
							break
						}
						if i > 100 {
							t.Fatal("the limit never refused")
						}
					}
					start := time.Now()
					long, cancelLong := context.WithTimeout(ctx, 10*time.Minute)
					defer cancelLong()
					for range 4 {
						wg.Go(func() {
							if resp, err := e.DecideWait(long, r); ctx.Err() == nil && (err != nil || resp.Code != CodeOK) {
								t.Errorf("a waiter with 10 minutes: %v %v, want OK", resp.Code, err)
							}
						})
						synctest.Wait() // queued in this order
					}
					if n := e.Waiting(); n != 4 {
						t.Fatalf("%d waiting, want 4", n)
					}

					switch mode {
					case "refused":
						short, cancelShort := context.WithTimeout(ctx, tc.served-15*time.Second)
						defer cancelShort()
						resp, err := e.DecideWait(short, r)
						if err != nil || resp.Code != CodeOverLimit || resp.Strategy != StrategyReject {
							t.Fatalf("fifth with %v: %v %s %v, want rejected", tc.served-15*time.Second, resp.Code, resp.Strategy, err)
						}
						if waited := time.Since(start); waited != 0 || resp.Waited != 0 {
							t.Fatalf("fifth refused after %v (Waited %v), want on arrival", waited, resp.Waited)
						}
						// Its turn: the four's hand-offs and its own.
						want := tc.turn + 5*handoff
						if got := resp.Statuses[0].Decision.RetryAfter; got != want {
							t.Fatalf("fifth told RetryAfter %v, want %v (after the four waiters ahead)", got, want)
						}
						time.Sleep(time.Until(start.Add(want)))
						if d, err := e.Decide(ctx, r); err != nil || d.Code != CodeOK {
							t.Fatalf("at the told %v: %v %v, want admitted", want, d.Code, err)
						}
					case "roomy":
						roomy, cancelRoomy := context.WithTimeout(ctx, tc.served+15*time.Second)
						defer cancelRoomy()
						resp, err := e.DecideWait(roomy, r)
						if err != nil || resp.Code != CodeOK {
							t.Fatalf("fifth with %v: %v %v, want OK", tc.served+15*time.Second, resp.Code, err)
						}
						if got := time.Since(start); got != tc.served || resp.Waited != got {
							t.Fatalf("fifth served at %v (Waited %v), want at %v", got, resp.Waited, tc.served)
						}
					case "high":
						// Behind no waiter of its class or a higher one: its
						// turn is the next window, whatever the low ones.
						rr := r
						rr.Priority = "high"
						soon, cancelSoon := context.WithTimeout(ctx, 75*time.Second)
						defer cancelSoon()
						resp, err := e.DecideWait(soon, rr)
						if err != nil || resp.Code != CodeOK || resp.Waited != time.Minute {
							t.Fatalf("high with 75s: %v %v waited %v, want OK at 1m", resp.Code, err, resp.Waited)
						}
					}
					wg.Wait()
				})
			})
		}
	}
}
