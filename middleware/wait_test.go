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
	"github.com/floodgate/floodgate/store/memory"
)

// bubbleEngine is engine() for a synctest bubble: the store reads the
// bubble's fake time.Now and is closed inside the bubble.
func bubbleEngine(t *testing.T, yaml string) (*policy.Engine, func()) {
	t.Helper()
	cfg, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	st, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	return e, func() { st.Close() }
}

// arrivals fires n requests at h at the same instant, in order, and returns
// their statuses.
func arrivals(ctx context.Context, h http.Handler, n int) []int {
	var mu sync.Mutex
	status := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/", nil).WithContext(context.WithValue(ctx, idKey{}, i))
			h.ServeHTTP(w, r)
			mu.Lock()
			status[i] = w.Code
			mu.Unlock()
		})
		synctest.Wait() // request i is decided before i+1 arrives
	}
	wg.Wait()
	return status
}

type idKey struct{}

// recordArrival is a handler that notes when each request reached it.
func recordArrival(start time.Time, at []time.Duration, mu *sync.Mutex) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		i := r.Context().Value(idKey{}).(int)
		mu.Lock()
		at[i] = time.Since(start)
		mu.Unlock()
	}
}

// The shaper (nginx limit_req rate=4r/s burst=3 delay=1): the first request
// and one excess one pass at once, two more are spaced 250 ms apart, the
// fifth finds the queue full.
func TestShaperTimings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cfg = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: shaped, algorithm: shaper, unit: second, requests_per_unit: 4, burst: 3, delay: 1}
`
		e, closeStore := bubbleEngine(t, cfg)
		defer closeStore()
		m, err := middleware.New(e, "web", extractor(t, perIP))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var mu sync.Mutex
		at := make([]time.Duration, 5)
		status := arrivals(context.Background(), m.Handler(recordArrival(start, at, &mu)), 5)
		wantAt := []time.Duration{0, 0, 250 * time.Millisecond, 500 * time.Millisecond, 0}
		wantStatus := []int{200, 200, 200, 200, 429}
		for i := range 5 {
			if at[i] != wantAt[i] || status[i] != wantStatus[i] {
				t.Errorf("request %d: status %d at %v, want %d at %v", i, status[i], at[i], wantStatus[i], wantAt[i])
			}
		}
	})
}

// The wait strategy holds a request until the bucket has a token again, up
// to the rule's max_wait; beyond it the request is rejected at once.
func TestWaitStrategy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cfg = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: queued, algorithm: token_bucket, unit: second, requests_per_unit: 2, burst: 1,
                 strategy: wait, max_wait: 1200ms, max_waiters: 10, queue_order: fifo}
`
		e, closeStore := bubbleEngine(t, cfg)
		defer closeStore()
		m, err := middleware.New(e, "web", extractor(t, perIP))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var mu sync.Mutex
		at := make([]time.Duration, 4)
		status := arrivals(context.Background(), m.Handler(recordArrival(start, at, &mu)), 4)
		// One token per 500 ms: the first passes, the next two wait 500 ms
		// and 1 s in the queue, the fourth's turn (1.5 s) is past max_wait.
		wantAt := []time.Duration{0, 500 * time.Millisecond, time.Second, 0}
		wantStatus := []int{200, 200, 200, 429}
		for i := range 4 {
			if at[i] != wantAt[i] || status[i] != wantStatus[i] {
				t.Errorf("request %d: status %d at %v, want %d at %v", i, status[i], at[i], wantStatus[i], wantAt[i])
			}
		}
	})
}

// A request whose context ends while it waits is rejected when its deadline
// passed, and dropped when its client went away.
func TestWaitDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cfg = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: queued, algorithm: token_bucket, unit: second, requests_per_unit: 1, burst: 1,
                 strategy: wait, max_wait: 10s}
`
		e, closeStore := bubbleEngine(t, cfg)
		defer closeStore()
		for _, tc := range []struct {
			name string
			mw   []middleware.Option
			ctx  func() (context.Context, context.CancelFunc)
			want int
		}{
			{"request deadline", nil, func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 300*time.Millisecond)
			}, 429},
			{"WithMaxWait", []middleware.Option{middleware.WithMaxWait(200 * time.Millisecond)},
				func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, 429},
		} {
			m, err := middleware.New(e, "web", extractor(t, perIP), tc.mw...)
			if err != nil {
				t.Fatal(err)
			}
			h := m.Handler(http.HandlerFunc(ok))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil)) // takes the token
			ctx, cancel := tc.ctx()
			begin := time.Now()
			w = httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
			cancel()
			if w.Code != tc.want || w.Header().Get("Retry-After") == "" {
				t.Errorf("%s: status %d Retry-After %q after %v, want %d", tc.name, w.Code, w.Header().Get("Retry-After"), time.Since(begin), tc.want)
			}
			time.Sleep(time.Second) // the bucket refills for the next case
		}
	})
}

// A Decider that cannot wait itself (a remote one) is asked again after the
// delay it advised.
func TestWaitWithoutWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cfg = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: queued, algorithm: token_bucket, unit: second, requests_per_unit: 2, burst: 1,
                 strategy: wait, max_wait: 1s}
`
		e, closeStore := bubbleEngine(t, cfg)
		defer closeStore()
		m, err := middleware.New(struct{ policy.Decider }{e}, "web", extractor(t, perIP))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var mu sync.Mutex
		at := make([]time.Duration, 2)
		status := arrivals(context.Background(), m.Handler(recordArrival(start, at, &mu)), 2)
		if status[0] != 200 || status[1] != 200 || at[0] != 0 || at[1] != 500*time.Millisecond {
			t.Errorf("statuses %v at %v, want 200 at 0s and 200 at 500ms", status, at)
		}
	})
}

// A request a shaper delays whose client gives up during the hold gives
// its unit back: the next request is delayed as if it had never come
// (0.9 s at 100 ms, not 1.9 s). Before, the middleware released only
// concurrency slots and the unit stayed spent.
func TestShaperHoldCancelledRefunds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, closeStore := bubbleEngine(t, `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: shaped, algorithm: shaper, unit: second, requests_per_unit: 1, burst: 3}
`)
		defer closeStore()
		m, err := middleware.New(e, "web", extractor(t, perIP))
		if err != nil {
			t.Fatal(err)
		}
		reached := 0
		h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if reached != 1 {
			t.Fatalf("%d requests reached the handler, want 1 (the second's client gave up)", reached)
		}
		next, err := e.Peek(context.Background(), policy.Request{Domain: "web",
			Descriptors: []policy.Descriptor{{Entries: []policy.Entry{{Key: "remote_address", Value: "192.0.2.1"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if next.Code != policy.CodeOK || next.Delay != 900*time.Millisecond {
			t.Fatalf("next request: %v delay %v, want OK delayed 900ms (the given-up request's unit back)", next.Code, next.Delay)
		}
	})
}
