package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/middleware"
)

// A request the shaper holds whose context ends gives its turn back to
// the requests queued behind it on its key, and to those only: at 10/s,
// burst 3, clients A and B each pass one request and queue three (100,
// 200, 300 ms); A's first queued one is cancelled at 50 ms, and A's
// others pass at 100 and 200 ms, B's at 100, 200 and 300 ms as before.
func TestShaperGivenUpTurnMovesOnlyItsKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, closeStore := bubbleEngine(t, `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: shaped, algorithm: shaper, unit: second, requests_per_unit: 10, burst: 3}
`)
		defer closeStore()
		m, err := middleware.New(e, "web", extractor(t, perIP))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var mu sync.Mutex
		passed := map[string][]time.Duration{}
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			passed[r.RemoteAddr[:9]] = append(passed[r.RemoteAddr[:9]], time.Since(start))
			mu.Unlock()
		}))
		var wg sync.WaitGroup
		for i := range 8 {
			addr := "192.0.2.1:1"
			if i%2 == 1 {
				addr = "192.0.2.2:1"
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i == 2 { // A's first queued request
				time.AfterFunc(50*time.Millisecond, cancel)
			}
			r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
			r.RemoteAddr = addr
			wg.Go(func() { h.ServeHTTP(httptest.NewRecorder(), r) })
			synctest.Wait()
		}
		wg.Wait()
		ms := time.Millisecond
		if got, want := passed["192.0.2.1"], []time.Duration{0, 100 * ms, 200 * ms}; !slices.Equal(got, want) {
			t.Errorf("A's requests passed at %v, want %v", got, want)
		}
		if got, want := passed["192.0.2.2"], []time.Duration{0, 100 * ms, 200 * ms, 300 * ms}; !slices.Equal(got, want) {
			t.Errorf("B's requests passed at %v, want %v (another key's turn given up moves none of B's)", got, want)
		}
	})
}
