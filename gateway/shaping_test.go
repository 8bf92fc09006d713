package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

// inProcess carries the gateway's upstream requests to a handler in the
// same process, so that shaping runs on synctest's fake clock (a socket
// would not).
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	t.h.ServeHTTP(w, r)
	res := w.Result()
	res.Request = r
	return res, nil
}

// nginx's limit_req through the gateway: rate 4 per second, burst 3, and
// delay 0, 1 or 3 — the first `delay` excess requests pass at once, the
// rest of the burst are spaced 250 ms apart, the fifth is refused.
func TestShaping(t *testing.T) {
	for _, tc := range []struct {
		delay int
		want  []time.Duration // when each request reached the upstream; -1: refused
	}{
		{0, []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond, -1}},
		{1, []time.Duration{0, 0, 250 * time.Millisecond, 500 * time.Millisecond, -1}},
		{3, []time.Duration{0, 0, 0, 0, -1}},
	} {
		t.Run(fmt.Sprintf("delay=%d", tc.delay), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg, err := policy.Parse("gw.yaml", []byte(fmt.Sprintf(`
domain: edge
gateway:
  routes: [{path_prefix: /, descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: shaped, algorithm: shaper, unit: second, requests_per_unit: 4, burst: 3, delay: %d}
`, tc.delay)))
				if err != nil {
					t.Fatal(err)
				}
				st, _ := memory.New()
				defer st.Close()
				e, err := policy.NewEngine(cfg, st)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				var mu sync.Mutex
				got := make([]time.Duration, len(tc.want))
				upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					var i int
					fmt.Sscanf(r.URL.Path, "/%d", &i)
					mu.Lock()
					got[i] = time.Since(start)
					mu.Unlock()
				})
				gw, err := gateway.New(cfg, e, "http://upstream.test", gateway.WithTransport(inProcess{upstream}))
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				for i := range tc.want {
					got[i] = -1
					wg.Go(func() {
						w := httptest.NewRecorder()
						gw.ServeHTTP(w, httptest.NewRequest("GET", fmt.Sprintf("/%d", i), nil))
						if (w.Code == 429) != (tc.want[i] < 0) {
							t.Errorf("request %d: status %d", i, w.Code)
						}
					})
					synctest.Wait() // each request is decided before the next arrives
				}
				wg.Wait()
				for i := range tc.want {
					if got[i] != tc.want[i] {
						t.Errorf("request %d reached the upstream at %v, want %v (-1: refused)", i, got[i], tc.want[i])
					}
				}
			})
		})
	}
}
