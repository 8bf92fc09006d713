package policy

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A request DecideWait holds for a shaper whose context ends gives its
// turn back to the requests held behind it on its key, and to those only.
// At 10/s, burst 3, keys a and b each pass one request at once and hold
// three (100, 200, 300 ms). a's first held one is cancelled at 50 ms: a's
// others move up to 100 and 200 ms, and a request on a decided at 60 ms
// (after the refund) leaves at 300 ms, behind them, not with the last.
// b's leave at 100, 200 and 300 ms as before. Before, a's held ones kept
// 200 and 300 ms and the request decided at 60 ms left at 300 ms with the
// last of them: two at once, faster than the rate.
func TestDecideWaitGivenUpTurnMovesOnlyItsKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newMemEngine(t, mustParse(t, `
domain: d
descriptors:
  - key: ip
    rate_limit: {name: shaped, algorithm: shaper, unit: second, requests_per_unit: 10, burst: 3}
`), nil)
		start := time.Now()
		var mu sync.Mutex
		passed := map[string][]time.Duration{}
		var wg sync.WaitGroup
		send := func(ctx context.Context, key string) {
			wg.Go(func() {
				resp, err := e.DecideWait(ctx, req("d", ent("ip", key)))
				switch {
				case err == nil && resp.Code == CodeOK:
					mu.Lock()
					passed[key] = append(passed[key], time.Since(start))
					mu.Unlock()
				case errors.Is(err, context.Canceled) && resp.Code == CodeUnknown:
				default:
					t.Errorf("%s at %v: %v %v", key, time.Since(start), resp.Code, err)
				}
			})
			synctest.Wait()
		}
		for i := range 8 {
			key := "a"
			if i%2 == 1 {
				key = "b"
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i == 2 { // a's first held request
				time.AfterFunc(50*time.Millisecond, cancel)
			}
			send(ctx, key)
		}
		time.Sleep(60 * time.Millisecond)
		send(context.Background(), "a")
		wg.Wait()
		ms := time.Millisecond
		if got, want := passed["a"], []time.Duration{0, 100 * ms, 200 * ms, 300 * ms}; !slices.Equal(got, want) {
			t.Errorf("a's requests passed at %v, want %v (the last decided at 60ms)", got, want)
		}
		if got, want := passed["b"], []time.Duration{0, 100 * ms, 200 * ms, 300 * ms}; !slices.Equal(got, want) {
			t.Errorf("b's requests passed at %v, want %v (another key's turn given up moves none of b's)", got, want)
		}
	})
}
