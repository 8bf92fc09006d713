package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// cancelAfter is a handler around next that cancels each request's
// context after d, as a handler with its own cancel (or an HTTP/2 stream
// reset while the connection lives) does: the response is still written
// to a live connection, so whatever the middleware writes is what the
// client and the access log see.
func cancelAfter(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		time.AfterFunc(d, cancel)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// A request a shaper delays whose context is cancelled during the hold
// is refused as one whose turn comes after its deadline: 503, the
// temporary-reduced-capacity body saying it was cancelled, the fields
// of the delaying limit — not the empty 200 net/http sends for a
// handler that wrote nothing. Its unit is given back once: the next
// request is delayed 900 ms at 100 ms (1.9 s without the refund, none
// had the earlier request's unit been given back too). New's and
// ForLimiter's middlewares alike.
func TestShaperHoldCancelledIsRefused(t *testing.T) {
	const yaml = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: api, algorithm: shaper, unit: second, requests_per_unit: 1, burst: 3}
`
	const want = `{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",` +
		`"title":"Request cannot be satisfied due to temporary server capacity constraints","status":503,` +
		`"detail":"api: the request was cancelled while it waited for its turn; retry in 1 s",` +
		`"instance":"/s","violated-policies":["api"],"retry-after":1}` + "\n"
	for _, path := range []string{"New", "ForLimiter"} {
		t.Run(path, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var m *middleware.Middleware
				var next func() time.Duration // the next request's delay
				var err error
				if path == "New" {
					e, closeStore := bubbleEngine(t, yaml)
					defer closeStore()
					m, err = middleware.New(e, "web", extractor(t, perIP))
					next = func() time.Duration {
						resp, err := e.Peek(context.Background(), policy.Request{Domain: "web",
							Descriptors: []policy.Descriptor{{Entries: []policy.Entry{{Key: "remote_address", Value: "192.0.2.1"}}}}})
						if err != nil || resp.Code != policy.CodeOK {
							t.Fatalf("Peek: %v %v", resp.Code, err)
						}
						return resp.Delay
					}
				} else {
					st, err := memory.New()
					if err != nil {
						t.Fatal(err)
					}
					defer st.Close()
					lim, err := limiter.New(st, "api", ruleParams(t, yaml, "api"))
					if err != nil {
						t.Fatal(err)
					}
					m, err = middleware.ForLimiter(lim, middleware.ClientIPKey())
					if err != nil {
						t.Fatal(err)
					}
					next = func() time.Duration {
						d, err := lim.Peek(context.Background(), "192.0.2.1", 1)
						if err != nil || !d.Allowed {
							t.Fatalf("Peek: %+v %v", d, err)
						}
						return d.Delay
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				reached := 0
				h := cancelAfter(100*time.Millisecond, m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ })))
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // passes at once
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/s", nil)) // held 1 s, cancelled at 100 ms
				if reached != 1 {
					t.Fatalf("%s: %d requests reached the handler, want 1", path, reached)
				}
				if w.Code != http.StatusServiceUnavailable || w.Body.String() != want {
					t.Errorf("%s: cancelled during the hold: %d %q\nwant 503 %s", path, w.Code, w.Body, want)
				}
				if rl := w.Header().Get("RateLimit"); !strings.HasSuffix(rl, ";t=1") {
					t.Errorf("%s: RateLimit %q, want t=1", path, rl)
				}
				wantFields(t, path, w.Header(), map[string]string{
					"Retry-After": "1", "X-RateLimit-Reset": "1", "Content-Type": "application/problem+json",
				})
				if d := next(); d != 900*time.Millisecond {
					t.Errorf("%s: the next request is delayed %v, want 900ms (the cancelled request's unit back, once)", path, d)
				}
			})
		})
	}
}

// A request the wait strategy holds whose context is cancelled while it
// waits is refused as one whose deadline passes in the queue (429, the
// fields and Retry-After), with and without a Waiter, not left to
// net/http's empty 200; it was charged nothing, so the bucket stays
// empty (nothing given back that another request took).
func TestWaitCancelledIsRefused(t *testing.T) {
	const yaml = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: queued, algorithm: token_bucket, unit: second, requests_per_unit: 1, burst: 1,
                 strategy: wait, max_wait: 10s}
`
	for _, waiter := range []bool{true, false} {
		t.Run(fmt.Sprint("waiter=", waiter), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e, closeStore := bubbleEngine(t, yaml)
				defer closeStore()
				var d policy.Decider = e
				if !waiter {
					d = struct{ policy.Decider }{e}
				}
				m, err := middleware.New(d, "web", extractor(t, perIP))
				if err != nil {
					t.Fatal(err)
				}
				reached := 0
				h := cancelAfter(100*time.Millisecond, m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ })))
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // takes the token
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil)) // waits, cancelled at 100 ms
				if reached != 1 {
					t.Fatalf("waiter %v: %d requests reached the handler, want 1", waiter, reached)
				}
				if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `"violated-policies":["queued"]`) {
					t.Errorf("waiter %v: cancelled while waiting: %d %q, want 429 naming queued", waiter, w.Code, w.Body)
				}
				wantFields(t, "cancelled wait", w.Header(), map[string]string{
					"RateLimit": `"queued";r=0;t=1`, "Retry-After": "1", "Content-Type": "application/problem+json",
				})
				resp, err := e.Peek(context.Background(), policy.Request{Domain: "web",
					Descriptors: []policy.Descriptor{{Entries: []policy.Entry{{Key: "remote_address", Value: "192.0.2.1"}}}}})
				if err != nil || resp.Code != policy.CodeOverLimit {
					t.Errorf("waiter %v: after the cancelled wait: %v %v, want the bucket still empty", waiter, resp.Code, err)
				}
			})
		})
	}
}

// waitFailsDecider refuses with the wait strategy, and its wait fails
// with a store error, not the context's.
type waitFailsDecider struct{}

func (waitFailsDecider) Decide(context.Context, policy.Request) (policy.Response, error) {
	return policy.Response{Code: policy.CodeOverLimit, Strategy: policy.StrategyWait, Delay: time.Second}, nil
}
func (waitFailsDecider) Peek(context.Context, policy.Request) (policy.Response, error) {
	return policy.Response{}, nil
}
func (waitFailsDecider) DecideWait(context.Context, policy.Request) (policy.Response, error) {
	return policy.Response{}, fmt.Errorf("%w: connection refused", store.ErrUnavailable)
}

// A wait that fails for another reason than its cancelled context is
// answered as the Decider's error (503, could not decide, logged), not
// refused as a cancelled wait: the limits said nothing.
func TestWaitFailedWhileCancelled(t *testing.T) {
	var logged error
	m, err := middleware.New(waitFailsDecider{}, "web", extractor(t, perIP),
		middleware.WithErrorLog(func(_ *http.Request, err error) { logged = err }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := httptest.NewRecorder()
	m.Handler(http.HandlerFunc(ok)).ServeHTTP(w, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "the rate limiter could not decide") ||
		!errors.Is(logged, store.ErrUnavailable) {
		t.Errorf("a failed wait, context cancelled: %d %q, logged %v; want 503 could not decide, the store error logged", w.Code, w.Body, logged)
	}
}

// A request the wait strategy queued and then admitted with a delay (a
// shaper's), whose context is cancelled during the Waiter's hold for that
// delay, is refused as a delay's failed hold is (503, the fields of the
// delaying limit with Retry-After, the body naming it and saying it was
// cancelled): DecideWait answers it UNKNOWN with the admission's
// statuses, which were written as a 429 stating the limit allowed, with
// no Retry-After, no violated policy and a concurrency limit's detail.
func TestWaitHoldCancelledIsRefused(t *testing.T) {
	const yaml = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {name: shaped, algorithm: shaper, unit: second, requests_per_unit: 1, burst: 1,
                 strategy: wait, max_wait: 10s}
`
	const want = `{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",` +
		`"title":"Request cannot be satisfied due to temporary server capacity constraints","status":503,` +
		`"detail":"shaped: the request was cancelled while it waited for its turn; retry in 1 s",` +
		`"instance":"/w","violated-policies":["shaped"],"retry-after":1}` + "\n"
	synctest.Test(t, func(t *testing.T) {
		e, closeStore := bubbleEngine(t, yaml)
		defer closeStore()
		m, err := middleware.New(e, "web", extractor(t, perIP))
		if err != nil {
			t.Fatal(err)
		}
		reached := 0
		h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // passes at once
		second := make(chan int)
		go func() { // delayed 1 s by the shaper's queue
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			second <- w.Code
		}()
		synctest.Wait()
		// The third is refused by the full queue and waits, admitted at
		// 1 s with a delay of 1 s, and cancelled at 1.5 s during it.
		w := httptest.NewRecorder()
		cancelAfter(1500*time.Millisecond, h).ServeHTTP(w, httptest.NewRequest("GET", "/w", nil))
		if code := <-second; code != 200 {
			t.Fatalf("the second request: %d, want 200", code)
		}
		if reached != 2 {
			t.Fatalf("%d requests reached the handler, want 2", reached)
		}
		if w.Code != http.StatusServiceUnavailable || w.Body.String() != want {
			t.Errorf("cancelled during the hold after its wait: %d %q\nwant 503 %s", w.Code, w.Body, want)
		}
		wantFields(t, "cancelled hold after a wait", w.Header(), map[string]string{
			"RateLimit": `"shaped";r=0;t=1`, "Retry-After": "1", "X-RateLimit-Reset": "1",
		})
	})
}
