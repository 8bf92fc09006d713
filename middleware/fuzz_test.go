package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/middleware"
)

// FuzzHandler: whatever a request carries — proxy headers, keys, paths,
// queries, peers — the middleware answers 200, 400 or 429 and never panics.
func FuzzHandler(f *testing.F) {
	f.Add("203.0.113.9:1234", "198.51.100.1, 10.0.0.1", "k-1", "/v1/search/x", "q=1&api_key=z")
	f.Add("[2001:db8::1]:80", "unknown, [2001:db8::2]:5", "", "//..//a", "%zz")
	f.Add("@", `for="[::1]";proto=http`, "Bearer x", "", ";;")
	const cfg = `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: api_key
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 2}
`
	m, err := middleware.New(engine(f, cfg, newClock(t0)), "web", extractor(f, dimension.Spec{
		TrustedProxies: []string{"10.0.0.0/8", "2001:db8::/32"},
		APIKey:         dimension.APIKeySpec{Header: "Authorization", Scheme: "Bearer", Query: "api_key"},
		Descriptors: []dimension.DescriptorSpec{
			{Entries: []dimension.EntrySpec{{Source: "remote_address"}}},
			{Entries: []dimension.EntrySpec{{Source: "api_key"}, {Source: "path", Routes: []string{"/v1/search", "/v1/"}}}},
		},
	}, dimension.WithMaxValueLen(64)))
	if err != nil {
		f.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(ok))
	f.Fuzz(func(t *testing.T, peer, xff, auth, path, query string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer
		r.Header["X-Forwarded-For"] = []string{xff}
		r.Header["Authorization"] = []string{"Bearer " + auth}
		r.URL = &url.URL{Path: path, RawQuery: query}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case 200, 400, 429, 500:
		default:
			t.Fatalf("status %d for peer %q xff %q path %q", w.Code, peer, xff, path)
		}
	})
}
