package gateway_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

// shapedGateway is a gateway in a synctest bubble whose one route shapes
// by client address, and the times its requests reached the upstream
// (since start; -1: not reached), by the request path's number.
func shapedGateway(t *testing.T, rule string, n int) (gw *gateway.Gateway, got func() []time.Duration) {
	t.Helper()
	cfg, err := policy.Parse("gw.yaml", []byte(`
domain: edge
gateway:
  routes: [{path_prefix: /, descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: `+rule+`
`))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := memory.New()
	t.Cleanup(func() { st.Close() })
	e, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var mu sync.Mutex
	reached := make([]time.Duration, n)
	for i := range reached {
		reached[i] = -1
	}
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var i int
		fmt.Sscanf(r.URL.Path, "/%d", &i)
		mu.Lock()
		reached[i] = time.Since(start)
		mu.Unlock()
	})
	gw, err = gateway.New(cfg, e, "http://upstream.test", gateway.WithTransport(inProcess{upstream}))
	if err != nil {
		t.Fatal(err)
	}
	return gw, func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(reached)
	}
}

// A request the shaper queued whose client goes away gives its place in
// the queue back: the requests queued behind it move up. At 10/s, burst
// 5, delay 0: the first passes at once, five are queued 100 ms apart;
// the second of them is cancelled at 50 ms, and the third to fifth reach
// the upstream 100 ms earlier each (300, 400, 500 ms before: the cancelled
// one's unit was given back, but its turn kept). A request arriving after
// the cancellation is queued behind them, at 500 ms: the unit was given
// back once, and the queue never goes faster than the rate.
func TestShaperCancelledWaiterGivesPlaceBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gw, got := shapedGateway(t, `{name: shaped, algorithm: shaper, unit: second, requests_per_unit: 10, burst: 5}`, 7)
		var wg sync.WaitGroup
		status := make([]int, 7)
		for i := range 7 {
			if i == 6 {
				time.Sleep(60 * time.Millisecond) // after the cancellation
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i == 2 {
				time.AfterFunc(50*time.Millisecond, cancel)
			}
			wg.Go(func() {
				w := httptest.NewRecorder()
				gw.ServeHTTP(w, httptest.NewRequest("GET", fmt.Sprintf("/%d", i), nil).WithContext(ctx))
				status[i] = w.Code
			})
			synctest.Wait() // each request is decided before the next arrives
		}
		wg.Wait()
		ms := time.Millisecond
		if want := []time.Duration{0, 100 * ms, -1, 200 * ms, 300 * ms, 400 * ms, 500 * ms}; !slices.Equal(got(), want) {
			t.Errorf("the requests reached the upstream at %v, want %v (-1: never)", got(), want)
		}
		if want := []int{200, 200, 503, 200, 200, 200, 200}; !slices.Equal(status, want) {
			t.Errorf("statuses %v, want %v", status, want)
		}
	})
}

// A storm of cancellations never lets the shaper's queue out faster than
// its rate: 400 requests of one client over 4 s (about 3 times the rate
// of 30/s, with burst 8 and delay 2), a third of them cancelled at a
// random time while they wait. In any span of time τ, at most delay+1 +
// rate × τ requests reached the upstream.
func TestShaperCancelStormKeepsRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, rate, delay = 400, 30, 2
		gw, got := shapedGateway(t, fmt.Sprintf(`{name: shaped, algorithm: shaper, unit: second, requests_per_unit: %d, burst: 8, delay: %d}`, rate, delay), n)
		rng := rand.New(rand.NewPCG(1, 2))
		var wg sync.WaitGroup
		for i := range n {
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if rng.IntN(3) == 0 {
				time.AfterFunc(time.Duration(rng.IntN(400))*time.Millisecond, cancel)
			}
			wg.Go(func() {
				gw.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", fmt.Sprintf("/%d", i), nil).WithContext(ctx))
			})
		}
		wg.Wait()
		var out []time.Duration
		for _, d := range got() {
			if d >= 0 {
				out = append(out, d)
			}
		}
		slices.Sort(out)
		if len(out) < 100 {
			t.Fatalf("only %d requests reached the upstream", len(out))
		}
		// In any span of τ, at most delay+1 + rate × τ (the store's delays
		// are whole microseconds, rounded up: 1 µs of slack per span).
		for j := range out {
			for k := j + delay + 1; k < len(out); k++ {
				if tau := out[k] - out[j]; time.Duration(k-j-delay)*time.Second > rate*(tau+time.Microsecond) {
					t.Fatalf("%d requests reached the upstream in %v (from %v to %v), more than delay+1 + rate × τ = %d + %.2f",
						k-j+1, tau, out[j], out[k], delay+1, rate*tau.Seconds())
				}
			}
		}
	})
}
