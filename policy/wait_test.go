package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

const waitConfig = `
domain: w
priorities: [high, low]
default_priority: low
descriptors:
  - key: api
    rate_limit: {unit: second, requests_per_unit: 2, strategy: wait, max_wait: 2s, max_waiters: 2}
  - key: fifo
    rate_limit: {unit: second, requests_per_unit: 1, strategy: wait, max_wait: 5s, queue_order: fifo}
  - key: short
    rate_limit: {unit: second, requests_per_unit: 1, strategy: wait, max_wait: 300ms}
  - key: shaped
    rate_limit: {algorithm: shaper, unit: second, requests_per_unit: 10, queue_size: 5}
  - key: hard
    rate_limit: {unit: second, requests_per_unit: 1}
`

// Every wait test runs in a synctest bubble: the memory store's default
// clock and the queue's timers read the bubble's fake time, so waits take
// no real time.

func TestDecideWaitUntilCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEngine(t, mustParse(t, waitConfig), nil)
		ctx := context.Background()
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second))) // start of a window
		r := req("w", ent("api", "x"))
		for i := 0; i < 2; i++ {
			if resp, err := e.DecideWait(ctx, r); err != nil || resp.Code != CodeOK || resp.Waited != 0 {
				t.Fatalf("request %d: %v %v waited %v, want OK at once", i, resp.Code, err, resp.Waited)
			}
		}
		time.Sleep(400 * time.Millisecond)
		resp, err := e.DecideWait(ctx, r)
		if err != nil || resp.Code != CodeOK {
			t.Fatalf("third: %v %v, want OK after waiting", resp.Code, err)
		}
		if resp.Waited != 600*time.Millisecond {
			t.Fatalf("waited %v, want 600ms (until the next window)", resp.Waited)
		}
		// A refusal by a rule that does not wait is returned at once.
		e.Decide(ctx, req("w", ent("hard", "x")))
		resp, err = e.DecideWait(ctx, req("w", ent("hard", "x")))
		if err != nil || resp.Code != CodeOverLimit || resp.Strategy != StrategyReject || resp.Waited != 0 {
			t.Fatalf("hard: %v %s %v waited %v, want an immediate rejection", resp.Code, resp.Strategy, err, resp.Waited)
		}
	})
}

func TestDecideWaitBeyondMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEngine(t, mustParse(t, waitConfig), nil)
		ctx := context.Background()
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		r := req("w", ent("short", "x"))
		e.Decide(ctx, r)
		// The next window is 1s away, more than max_wait 300ms: rejected now.
		resp, err := e.DecideWait(ctx, r)
		if err != nil || resp.Code != CodeOverLimit || resp.Strategy != StrategyReject || resp.Waited != 0 {
			t.Fatalf("got %v %s %v waited %v, want an immediate rejection", resp.Code, resp.Strategy, err, resp.Waited)
		}
		// 800ms later the window is 200ms away: it waits.
		time.Sleep(800 * time.Millisecond)
		resp, err = e.DecideWait(ctx, r)
		if err != nil || resp.Code != CodeOK || resp.Waited != 200*time.Millisecond {
			t.Fatalf("got %v %v waited %v, want OK after 200ms", resp.Code, err, resp.Waited)
		}
	})
}

func TestDecideWaitQueueBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEngine(t, mustParse(t, waitConfig), nil)
		ctx := context.Background()
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		r := req("w", ent("api", "x"))
		e.Decide(ctx, r)
		e.Decide(ctx, r)
		// Two waiters fill the queue (max_waiters 2); a third is turned away.
		var wg sync.WaitGroup
		results := make([]Response, 2)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], _ = e.DecideWait(ctx, r)
			}()
		}
		synctest.Wait()
		if n := e.Waiting(); n != 2 {
			t.Fatalf("%d waiting, want 2", n)
		}
		resp, err := e.DecideWait(ctx, r)
		if err != nil || resp.Code != CodeOverLimit || resp.Strategy != StrategyReject {
			t.Fatalf("third waiter: %v %s %v, want rejected (queue full)", resp.Code, resp.Strategy, err)
		}
		wg.Wait()
		for i, res := range results {
			if res.Code != CodeOK {
				t.Fatalf("waiter %d: %s, want OK in the next window", i, res.Code)
			}
		}
		if n := e.Waiting(); n != 0 {
			t.Fatalf("%d still waiting", n)
		}
	})
}

func TestDecideWaitCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEngine(t, mustParse(t, waitConfig), nil)
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		r := req("w", ent("fifo", "x"))
		e.Decide(context.Background(), r)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := e.DecideWait(ctx, r)
			done <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait: %v, want context.Canceled", err)
		}
		synctest.Wait()
		if n := e.Waiting(); n != 0 {
			t.Fatalf("%d waiting after cancel, want 0", n)
		}
		// The cancelled waiter took nothing: the next window's unit is free.
		time.Sleep(time.Second)
		if resp, _ := e.Decide(context.Background(), r); resp.Code != CodeOK {
			t.Fatalf("next window: %s", resp.Code)
		}
	})
}

// TestDecideWaitPriority: with one unit per second, the high-priority
// waiter that came last is served first.
func TestDecideWaitPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEngine(t, mustParse(t, `
domain: w
priorities: [high, low]
descriptors:
  - key: api
    rate_limit: {unit: second, requests_per_unit: 1, strategy: wait, max_wait: 10s}
`), nil)
		ctx := context.Background()
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		r := req("w", ent("api", "x"))
		e.Decide(ctx, r)
		var mu sync.Mutex
		var order []string
		var wg sync.WaitGroup
		for _, class := range []string{"low", "low", "high"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rr := r
				rr.Priority = class
				if resp, err := e.DecideWait(ctx, rr); err == nil && resp.Code == CodeOK {
					mu.Lock()
					order = append(order, class)
					mu.Unlock()
				}
			}()
			synctest.Wait()
		}
		wg.Wait()
		if len(order) != 3 || order[0] != "high" {
			t.Fatalf("served %v, want high first", order)
		}
	})
}

func TestDecideWaitHoldsShaperDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEngine(t, mustParse(t, waitConfig), nil)
		ctx := context.Background()
		r := req("w", ent("shaped", "x"))
		for i, want := range []time.Duration{0, 100 * time.Millisecond} {
			start := time.Now()
			resp, err := e.DecideWait(ctx, r)
			if err != nil || resp.Code != CodeOK {
				t.Fatalf("%d: %v %v", i, resp.Code, err)
			}
			if resp.Delay != 0 || resp.Waited != want || time.Since(start) != want {
				t.Fatalf("%d: waited %v (delay %v), want %v", i, resp.Waited, resp.Delay, want)
			}
		}
	})
}

// TestDecideWaitShaperHoldCancelled: a request a shaper admitted with a
// delay, whose context is cancelled during the hold, does not proceed: the
// answer is ctx's error and not OK, and the concurrency slot it took with
// it is free again at once (not held until its lease_ttl).
func TestDecideWaitShaperHoldCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEngine(t, mustParse(t, `
domain: w
descriptors:
  - key: shaped
    rate_limit: {algorithm: shaper, unit: second, requests_per_unit: 10, queue_size: 5}
  - key: job
    rate_limit: {algorithm: concurrency, requests_per_unit: 3, lease_ttl: 1m}
`), nil)
		r := req("w", ent("shaped", "x"), ent("job", "j"))
		first, err := e.DecideWait(context.Background(), r)
		if err != nil || first.Code != CodeOK || first.Waited != 0 {
			t.Fatalf("first: %v %v waited %v, want OK at once", first.Code, err, first.Waited)
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel) // the second is held 100ms
		resp, err := e.DecideWait(ctx, r)
		if !errors.Is(err, context.Canceled) || resp.Code == CodeOK || resp.Holds() {
			t.Fatalf("cancelled during the hold: %v, %v, holds %v; want context.Canceled, not OK, holding nothing",
				resp.Code, err, resp.Holds())
		}
		if resp.Waited != 50*time.Millisecond {
			t.Errorf("waited %v, want 50ms (until the cancel)", resp.Waited)
		}
		peek, err := e.Peek(context.Background(), req("w", ent("job", "j")))
		if err != nil {
			t.Fatal(err)
		}
		// Of 3 slots the first request holds one: a third request would
		// leave one free.
		if d := peek.Statuses[0].Decision; !d.Allowed || d.Remaining != 1 {
			t.Fatalf("after the cancel, another request would leave %d slots free (allowed %v), want 1: the cancelled request's slot is given back",
				d.Remaining, d.Allowed)
		}
	})
}

// TestWatchReload: a valid change is installed, a broken file keeps the
// old limits in force and reports its problems, a fix is installed again.
func TestWatchReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "rules.yaml")
		write := func(s string) {
			if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		limit := func(n string) string {
			return "domain: live\ndescriptors:\n  - key: k\n    rate_limit: {name: r, unit: minute, requests_per_unit: " + n + "}\n"
		}
		write(limit("5"))
		cfg, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		e := newMemEngine(t, cfg, nil)
		ctx, cancel := context.WithCancel(context.Background())
		reports := make(chan error, 10)
		go e.Watch(ctx, path, 100*time.Millisecond, func(_ *Config, err error) { reports <- err })
		synctest.Wait() // the watcher has read its baseline
		quota := func() int64 { return e.EffectiveLimit("live", "r").Params().Limit }
		next := func() error {
			select {
			case err := <-reports:
				return err
			case <-time.After(time.Minute):
				t.Fatal("no report within a minute of fake time")
				return nil
			}
		}

		write(limit("7"))
		time.Sleep(150 * time.Millisecond)
		synctest.Wait()
		if err := next(); err != nil || quota() != 7 {
			t.Fatalf("valid change: %v, quota %d, want 7", err, quota())
		}
		write(limit("-1") + "  - key: k\n")
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		err = next()
		var ps Problems
		if !errors.As(err, &ps) || len(ps) != 2 || ps[0].Line != 4 {
			t.Fatalf("broken file reported %v, want 2 problems from line 4", err)
		}
		if quota() != 7 {
			t.Fatalf("broken file changed the quota to %d", quota())
		}
		resp, _ := e.Decide(context.Background(), req("live", ent("k", "v")))
		if resp.Code != CodeOK || resp.Statuses[0].Decision.Limit != 7 {
			t.Fatalf("decisions after a broken reload: %v limit %d", resp.Code, resp.Statuses[0].Decision.Limit)
		}
		write(limit("9"))
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if err := next(); err != nil || quota() != 9 {
			t.Fatalf("fixed file: %v, quota %d, want 9", err, quota())
		}
		// No change, no report.
		time.Sleep(time.Second)
		synctest.Wait()
		if len(reports) != 0 {
			t.Fatalf("%d reports without a change", len(reports))
		}
		cancel()
	})
}

// TestDecideWaitRefusesWhatCannotFit: a GCRA of 2 per second (burst 1)
// with max_wait 2s and seven requests at once: the first passes, and the
// waiters are served one unit (500 ms) apart, at 0.5, 1, 1.5 and 2 s. The
// waiter that would be served at 2 s (its deadline) and those behind it
// are refused on arrival, knowing that each waiter ahead takes a unit,
// rather than held 2 s and refused then.
func TestDecideWaitRefusesWhatCannotFit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEngine(t, mustParse(t, `
domain: w
descriptors:
  - key: api
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 2, burst: 1, strategy: wait, max_wait: 2s}
`), nil)
		ctx := context.Background()
		r := req("w", ent("api", "x"))
		if resp, err := e.DecideWait(ctx, r); err != nil || resp.Code != CodeOK || resp.Waited != 0 {
			t.Fatalf("first: %v %v waited %v, want OK at once", resp.Code, err, resp.Waited)
		}
		start := time.Now()
		var mu sync.Mutex
		var admitted, refused []time.Duration
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				resp, err := e.DecideWait(ctx, r)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if resp.Code == CodeOK {
					admitted = append(admitted, time.Since(start))
				} else {
					refused = append(refused, time.Since(start))
				}
			})
			synctest.Wait() // arrivals in order
		}
		wg.Wait()
		want := []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond}
		if len(admitted) != len(want) {
			t.Fatalf("admitted at %v, want at %v", admitted, want)
		}
		for i := range want {
			if admitted[i] != want[i] {
				t.Fatalf("admitted at %v, want at %v", admitted, want)
			}
		}
		if len(refused) != 3 {
			t.Fatalf("refused at %v, want 3 refusals", refused)
		}
		for _, at := range refused {
			if at != 0 {
				t.Fatalf("refused at %v, want every refusal on arrival (0s), not after waiting", refused)
			}
		}
	})
}

// slowStore reaches its store after a delay, as a remote store or a busy
// machine does: every decision is made lat after it was asked for.
type slowStore struct {
	store.Store
	lat time.Duration
}

func (s slowStore) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	time.Sleep(s.lat)
	return s.Store.Take(ctx, reqs, out)
}

// TestDecideWaitServedOrRefusedOnArrival is the reviewer's scenario: a
// token bucket of 2 per second with burst 1, max_wait 2s, and six requests
// arriving together (100 µs apart) at a store 2 ms away. A bucket that
// holds one unit stops refilling while it is full, so every hand-off
// between waiters (the trip to the store) pushes the next unit back: the
// waiters are served at about 0.5, 1 and 1.5 s plus 2 ms per hand-off. The
// fourth waiter projected 2 s less its 0.4 ms head start when only the
// units were counted, was held and refused at 1.5 s; counting a trip to
// the store per hand-off refuses it on arrival. Every request is either
// admitted within max_wait or refused without being held.
func TestDecideWaitServedOrRefusedOnArrival(t *testing.T) {
	for _, alg := range []string{"token_bucket", "gcra"} {
		t.Run(alg, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := mustParse(t, `
domain: w
descriptors:
  - key: api
    rate_limit: {algorithm: `+alg+`, unit: second, requests_per_unit: 2, burst: 1, strategy: wait, max_wait: 2s}
`)
				const lat = 2 * time.Millisecond
				mem, err := memory.New(memory.WithSweepInterval(0))
				if err != nil {
					t.Fatal(err)
				}
				defer mem.Close()
				e, err := NewEngine(cfg, slowStore{mem, lat})
				if err != nil {
					t.Fatal(err)
				}
				r := req("w", ent("api", "x"))
				var mu sync.Mutex
				var admitted, refused []time.Duration
				var wg sync.WaitGroup
				for i := range 6 {
					wg.Go(func() {
						time.Sleep(time.Duration(i) * 100 * time.Microsecond)
						resp, err := e.DecideWait(context.Background(), r)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						defer mu.Unlock()
						if resp.Code == CodeOK {
							admitted = append(admitted, resp.Waited)
						} else {
							refused = append(refused, resp.Waited)
						}
					})
				}
				wg.Wait()
				if len(admitted) != 4 || len(refused) != 2 {
					t.Fatalf("admitted after %v, refused after %v: want 4 admitted (one at once, three waiting) and 2 refused", admitted, refused)
				}
				for _, w := range admitted {
					if w >= 2*time.Second {
						t.Errorf("admitted after %v, beyond max_wait 2s", w)
					}
				}
				for _, w := range refused {
					if w > lat {
						t.Errorf("refused after %v (admitted after %v), want refused on arrival (its own decision's %v)", w, admitted, lat)
					}
				}
			})
		})
	}
}
