package gateway_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/gateway"
)

// An upstream's informational responses (103 Early Hints; the 100
// Continue it sends to a body the client asked to send with Expect:
// 100-continue, as curl does for large uploads) are passed on, and the
// final response still carries the gateway's rate limit fields: the
// proxy cleared the response's header after each 1xx, the gateway's
// fields with it, so that a client doing either saw no limit at all.
func TestInformationalKeepsFields(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hints" {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
		}
		io.Copy(io.Discard, r.Body) // asks an Expect: 100-continue body for
		w.Header().Set("RateLimit", `"origin";r=9;t=1`)
		w.Header().Set("X-RateLimit-Limit", "10")
		w.Write([]byte("ok"))
	}))
	defer up.Close()
	cfg := `
domain: edge
gateway:
  routes: [{descriptors: [{entries: [{source: remote_address}]}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: edge, unit: minute, requests_per_unit: 5}
`
	for _, tc := range []struct {
		name string
		opts []gateway.Option
	}{
		{"default", nil},
		{"no client timeout", []gateway.Option{gateway.WithClientTimeout(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := front(t, engine(t, cfg, newClock(t0)), up.URL, tc.opts...)
			for i, c := range []struct {
				path   string
				body   string
				want1x int
			}{
				{"/hints", "", http.StatusEarlyHints},
				{"/upload", strings.Repeat("x", 1000), http.StatusContinue},
			} {
				var got1x []int
				ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
					Got1xxResponse: func(code int, _ textproto.MIMEHeader) error { got1x = append(got1x, code); return nil },
				})
				method := "GET"
				if c.body != "" {
					method = "PUT"
				}
				req, err := http.NewRequestWithContext(ctx, method, srv.URL+c.path, bytes.NewReader([]byte(c.body)))
				if err != nil {
					t.Fatal(err)
				}
				if c.body != "" {
					req.Header.Set("Expect", "100-continue")
				}
				res, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				remaining := []string{"4", "3"}[i]
				if res.StatusCode != 200 || len(got1x) == 0 || got1x[0] != c.want1x {
					t.Errorf("%s: status %d after %v, want 200 after %d", c.path, res.StatusCode, got1x, c.want1x)
				}
				for k, want := range map[string]string{
					"Ratelimit":             `"edge";r=` + remaining + `;t=50|"origin";r=9;t=1`,
					"X-Ratelimit-Limit":     "5",
					"X-Ratelimit-Remaining": remaining,
					"Ratelimit-Policy":      `"edge";q=5;w=60`,
				} {
					if got := strings.Join(res.Header[k], "|"); got != want {
						t.Errorf("%s after a %d: %s = %q, want %q", c.path, c.want1x, k, got, want)
					}
				}
			}
		})
	}
}
