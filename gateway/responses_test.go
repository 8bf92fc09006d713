package gateway_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/gateway"
)

// WithResponses hears of every request once, after it is answered: its
// route ("" for none), the status the client got, and whether the upstream
// answered it — the gateway's own refusals, bad requests and upstream
// failures are the gateway's — with and without a client timeout.
func TestWithResponses(t *testing.T) {
	cfg := `
domain: edge
gateway:
  routes:
    - name: api
      path_prefix: /api
      descriptors: [{entries: [{source: remote_address}]}]
    - name: byheader
      path_prefix: /h
      descriptors: [{entries: [{source: "header:X-Key"}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: api, unit: minute, requests_per_unit: 1}
  - key: X-Key
    rate_limit: {name: keyed, unit: minute, requests_per_unit: 5}
`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/gone" {
			http.Error(w, "gone", http.StatusGone)
			return
		}
		if r.Header.Get("Upgrade") == "websocket" {
			echoUpgraded(w)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer up.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()

	// Without an upstream timeout too: the upstream's answers were all
	// reported as the gateway's then (the header was noted only to stop
	// the upstream timer).
	for _, tc := range []struct{ client, upstream time.Duration }{
		{gateway.DefaultClientTimeout, gateway.DefaultUpstreamTimeout},
		{0, gateway.DefaultUpstreamTimeout},
		{gateway.DefaultClientTimeout, 0},
	} {
		client := tc.client
		t.Run(fmt.Sprintf("client-timeout=%v,upstream-timeout=%v", client, tc.upstream), func(t *testing.T) {
			var mu sync.Mutex
			var got []string
			hook := gateway.WithResponses(func(route string, status int, upstream bool) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, fmt.Sprintf("%s %d %v", route, status, upstream))
			})
			ut := gateway.WithUpstreamTimeout(tc.upstream)
			srv := front(t, engine(t, cfg, newClock(t0)), up.URL, hook, gateway.WithClientTimeout(client), ut)
			deadSrv := front(t, engine(t, cfg, newClock(t0)), "http://"+dead, hook, gateway.WithClientTimeout(client), ut)

			do(t, "GET", srv.URL+"/api/x")                                       // proxied
			do(t, "GET", srv.URL+"/api/x")                                       // over the limit of 1
			do(t, "GET", srv.URL+"/gone")                                        // no route, the upstream's 410
			do(t, "GET", srv.URL+"/h", "X-Key", strings.Repeat("k", 5000))       // too long a value: 400
			do(t, "GET", deadSrv.URL+"/other")                                   // upstream down: 502
			conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://")) // an upgrade, no route
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			buf := make([]byte, 12)
			if _, err := conn.Read(buf); err != nil || !strings.HasPrefix(string(buf), "HTTP/1.1 101") {
				t.Fatalf("upgrade: %q %v", buf, err)
			}
			conn.Close()

			want := []string{"api 200 true", "api 429 false", " 410 true", "byheader 400 false", " 502 false", " 101 true"}
			deadline := time.Now().Add(5 * time.Second)
			for {
				mu.Lock()
				n := len(got)
				have := slices.Clone(got)
				mu.Unlock()
				if n >= len(want) || time.Now().After(deadline) {
					slices.Sort(have)
					slices.Sort(want)
					if !slices.Equal(have, want) {
						t.Fatalf("responses heard:\n%q\nwant\n%q", have, want)
					}
					return
				}
				time.Sleep(10 * time.Millisecond) // the upgrade's report comes when its copy ends
			}
		})
	}
}
