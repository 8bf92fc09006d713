package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
)

const renewConfig = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: in-flight, algorithm: concurrency, requests_per_unit: 1, lease_ttl: 1m}
`

// noRenew hides the Engine's Renew: the middleware then lets the lease
// expire at its TTL, as it did before renewal existed.
type noRenew struct{ e *policy.Engine }

func (n noRenew) Decide(ctx context.Context, r policy.Request) (policy.Response, error) {
	return n.e.Decide(ctx, r)
}
func (n noRenew) Peek(ctx context.Context, r policy.Request) (policy.Response, error) {
	return n.e.Peek(ctx, r)
}
func (n noRenew) Release(ctx context.Context, r policy.Response) error { return n.e.Release(ctx, r) }

// A handler that runs 3× the lease TTL keeps its slot: its lease is
// renewed every TTL/3, so a second request is refused until it ends, then
// admitted. Without a Renewer the slot is lost after one TTL.
func TestLongRequestKeepsItsSlot(t *testing.T) {
	for _, renew := range []bool{true, false} {
		name := map[bool]string{true: "renewed", false: "not_renewed"}[renew]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e, closeStore := bubbleEngine(t, renewConfig)
				defer closeStore()
				var d policy.Decider = e
				if !renew {
					d = noRenew{e}
				}
				var mu sync.Mutex
				var logged []error
				m, err := middleware.New(d, "web", extractor(t, perIP), middleware.WithErrorLog(func(_ *http.Request, err error) {
					mu.Lock()
					logged = append(logged, err)
					mu.Unlock()
				}))
				if err != nil {
					t.Fatal(err)
				}
				h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/slow" {
						time.Sleep(3 * time.Minute)
					}
				}))
				get := func(path string) int {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
					return w.Code
				}
				slow := make(chan int, 1)
				go func() { slow <- get("/slow") }()
				synctest.Wait() // the slow request holds the slot
				if got := get("/fast"); got != http.StatusTooManyRequests {
					t.Fatalf("second request at 0s: %d, want 429", got)
				}
				time.Sleep(63 * time.Second) // past one lease TTL
				want := http.StatusTooManyRequests
				if !renew {
					want = http.StatusOK // the gap renewal closes
				}
				if got := get("/fast"); got != want {
					t.Fatalf("second request at 63s: %d, want %d", got, want)
				}
				if !renew {
					<-slow
					return
				}
				time.Sleep(time.Minute + 50*time.Second) // 2m53s: near the end, past 2 TTLs
				if got := get("/fast"); got != http.StatusTooManyRequests {
					t.Fatalf("second request at 2m53s: %d, want 429", got)
				}
				if got := <-slow; got != http.StatusOK {
					t.Fatalf("slow request: %d, want 200", got)
				}
				if got := get("/fast"); got != http.StatusOK {
					t.Fatalf("second request after the slow one ended: %d, want 200", got)
				}
				time.Sleep(2 * time.Minute) // no renewal timer is left to fire
				mu.Lock()
				defer mu.Unlock()
				if len(logged) > 0 {
					t.Fatalf("errors logged: %v", logged)
				}
			})
		})
	}
}
