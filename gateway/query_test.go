package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A query parameter or header a route keys on that another parser could
// read as another value gets 400 and never reaches the upstream: sent
// twice, PHP would serve "?user=fresh&user=victim" as victim while the
// descriptor counted fresh. Everything else is limited on the value the
// upstream receives, the query passed as received (or, holding ";" or a
// malformed escape, without those pairs, which the descriptor skips too).
func TestAmbiguousQueryAndHeaders(t *testing.T) {
	const cfg = `
domain: edge
gateway:
  api_key: {header: X-Api-Key, query: api_key}
  routes:
    - descriptors:
        - entries: [{source: "query:user"}]
        - entries: [{source: "header:X-Plan"}]
        - entries: [{source: api_key}]
descriptors:
  - {key: user, rate_limit: {name: per-user, unit: minute, requests_per_unit: 1}}
  - {key: X-Plan, rate_limit: {name: per-plan, unit: minute, requests_per_unit: 1}}
  - {key: api_key, rate_limit: {name: per-key, unit: minute, requests_per_unit: 1}}
`
	type seen struct {
		query string
		plan  []string
	}
	got := make(chan seen, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.RawQuery, r.Header["X-Plan"]}
	}))
	t.Cleanup(up.Close)
	srv := front(t, engine(t, cfg, newClock(t0)), up.URL)

	send := func(query string, hdr ...string) (int, string, *seen) {
		t.Helper()
		req, err := http.NewRequest("GET", srv.URL+"/p", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.RawQuery = query // sent as written
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Add(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		select {
		case s := <-got:
			return resp.StatusCode, string(b), &s
		default:
			return resp.StatusCode, string(b), nil
		}
	}

	for _, tc := range []struct {
		query  string
		hdr    []string
		detail string // of the 400
	}{
		{"user=fresh&user=victim", nil, `query parameter "user" sent 2 times`},
		{"user=fresh&us%65r=victim", nil, `query parameter "user" sent 2 times`},
		{"user=%E9", nil, `query parameter "user" is not valid UTF-8 once decoded`},
		{"user=victim%00x", nil, `query parameter "user" holds a control character once decoded`},
		{"user=u1", []string{"X-Plan", "fresh", "X-Plan", "gold"}, `header X-Plan sent 2 times`},
		{"user=u2", []string{"X-Api-Key", "fresh", "X-Api-Key", "k"}, `header X-Api-Key sent 2 times`},
		{"user=u3&api_key=k", []string{"X-Api-Key", "fresh"}, `API key sent in both the X-Api-Key header and the "api_key" query parameter`},
	} {
		status, body, s := send(tc.query, tc.hdr...)
		var p struct {
			Status int    `json:"status"`
			Detail string `json:"detail"`
		}
		_ = json.Unmarshal([]byte(body), &p)
		if status != http.StatusBadRequest || p.Status != 400 || !strings.Contains(p.Detail, "ambiguous: "+tc.detail) || s != nil {
			t.Errorf("?%s %v: %d %q, upstream saw %v; want 400 with %q, nothing proxied", tc.query, tc.hdr, status, body, s, tc.detail)
		}
	}

	// Ordinary requests: proxied as received, each value counted once.
	for _, tc := range []struct {
		query     string
		hdr       []string
		want      int
		upstream  string
		upstreamH []string
	}{
		{"user=victim", nil, 200, "user=victim", nil},
		{"user=victim", nil, 429, "", nil},                              // nothing above got counted
		{"user=a+b&tag=1&tag=2", nil, 200, "user=a+b&tag=1&tag=2", nil}, // tag is not keyed on
		{"user=a%20b", nil, 429, "", nil},                               // the same "a b"
		{"user=%C3%A9", nil, 200, "user=%C3%A9", nil},
		// Go's parser, and so ReverseProxy before the upstream, drop a pair
		// holding ";" or a malformed escape: the upstream reads "c".
		{"user=fresh;user=x&user=c", nil, 200, "user=c", nil},
		{"user=%zz&user=c", nil, 429, "", nil},
		{"user=u4", []string{"X-Plan", "gold"}, 200, "user=u4", []string{"gold"}},
		{"user=u5", []string{"X-Plan", "gold"}, 429, "", nil},
		{"user=u6&api_key=k", []string{"X-Api-Key", "k"}, 200, "user=u6&api_key=k", nil}, // the same key twice
		{"user=u7", []string{"X-Api-Key", "k"}, 429, "", nil},
	} {
		status, body, s := send(tc.query, tc.hdr...)
		switch {
		case status != tc.want:
			t.Errorf("?%s %v: %d %q, want %d", tc.query, tc.hdr, status, body, tc.want)
		case tc.want == 200 && (s == nil || s.query != tc.upstream || strings.Join(s.plan, ",") != strings.Join(tc.upstreamH, ",")):
			t.Errorf("?%s %v: upstream saw %+v, want query %q, X-Plan %q", tc.query, tc.hdr, s, tc.upstream, tc.upstreamH)
		case tc.want != 200 && s != nil:
			t.Errorf("?%s %v: %d, yet the upstream saw %+v", tc.query, tc.hdr, status, s)
		}
	}
}
