package gateway_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/policy"
)

// corsConfig limits /api to 2 requests a minute per client, with the cors
// block given.
func corsConfig(cors string) string {
	return `
domain: edge
gateway:
` + cors + `
  routes:
    - name: api
      path_prefix: /api
      descriptors: [{entries: [{source: remote_address}]}]
descriptors:
  - key: remote_address
    rate_limit: {name: api, unit: minute, requests_per_unit: 2}
`
}

// corsUpstream answers preflights 204 and, on /api/cors, allows the
// origin with an Access-Control-Expose-Headers of its own.
func corsUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions {
			w.Header().Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/cors") {
			w.Header().Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
			w.Header().Set("Access-Control-Expose-Headers", "X-Request-Id, ratelimit")
		}
		w.Write([]byte("ok\n"))
	}))
	t.Cleanup(up.Close)
	return up
}

func preflightFrom(t *testing.T, url, origin string) result {
	t.Helper()
	return do(t, "OPTIONS", url, "Origin", origin, "Access-Control-Request-Method", "POST")
}

// accessControl lists the response's Access-Control-* fields.
func accessControl(h http.Header) []string {
	var out []string
	for k := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			out = append(out, k+": "+strings.Join(h[k], ", "))
		}
	}
	slices.Sort(out)
	return out
}

// With a cors block, a route without methods proxies preflights from an
// allowed origin unlimited: the budget is intact after them. Without the
// block (as before), and with limit_preflights, they count. Without the
// feature the block was an unknown field, and every preflight counted.
func TestCORSPreflights(t *testing.T) {
	const origin = "https://app.example.com"
	for _, tc := range []struct {
		name, cors string
		counted    bool
	}{
		{"cors", "  cors:\n    allow_origins: [\"https://app.example.com\"]", false},
		{"any origin", "  cors:\n    allow_origins: [\"*\"]", false},
		{"limit_preflights", "  cors:\n    allow_origins: [\"https://app.example.com\"]\n    limit_preflights: true", true},
		{"no cors", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := front(t, engine(t, corsConfig(tc.cors), newClock(t0)), corsUpstream(t).URL)
			for i := range 4 {
				res := preflightFrom(t, srv.URL+"/api/x", origin)
				want := http.StatusNoContent
				if tc.counted && i >= 2 {
					want = http.StatusTooManyRequests
				}
				if res.status != want {
					t.Fatalf("preflight %d: %d, want %d", i, res.status, want)
				}
			}
			got := do(t, "GET", srv.URL+"/api/x", "Origin", origin).status
			if want := map[bool]int{false: http.StatusOK, true: http.StatusTooManyRequests}[tc.counted]; got != want {
				t.Fatalf("GET after 4 preflights: %d, want %d", got, want)
			}
		})
	}
	// A route that lists OPTIONS among its methods asks for them to be
	// limited: its preflights count, the block notwithstanding.
	withOptions := strings.Replace(corsConfig("  cors:\n    allow_origins: [\"https://app.example.com\"]"),
		"      path_prefix: /api\n", "      path_prefix: /api\n      methods: [GET, OPTIONS]\n", 1)
	srvOpt := front(t, engine(t, withOptions, newClock(t0)), corsUpstream(t).URL)
	for i := range 3 {
		res := preflightFrom(t, srvOpt.URL+"/api/x", origin)
		if want := map[bool]int{false: http.StatusNoContent, true: http.StatusTooManyRequests}[i == 2]; res.status != want {
			t.Fatalf("preflight %d on a route listing OPTIONS: %d, want %d", i, res.status, want)
		}
	}
	// A preflight from an origin the block does not allow is limited as
	// any request is.
	srv := front(t, engine(t, corsConfig("  cors:\n    allow_origins: [\"https://app.example.com\"]"), newClock(t0)), corsUpstream(t).URL)
	for i := range 3 {
		res := preflightFrom(t, srv.URL+"/api/x", "https://other.example.com")
		if want := map[bool]int{false: http.StatusNoContent, true: http.StatusTooManyRequests}[i == 2]; res.status != want {
			t.Fatalf("preflight %d from another origin: %d, want %d", i, res.status, want)
		}
	}
}

// The gateway's own refusal of a request from an allowed origin carries
// the CORS fields, Retry-After among the exposed ones, so that browser
// code can read it; a request from another origin gets none. Without the
// feature the refusal had no Access-Control-* field.
func TestCORSOwnAnswers(t *testing.T) {
	block := "  cors:\n    allow_origins: [\"https://app.example.com\", \"https://*.example.org\"]"
	srv := front(t, engine(t, corsConfig(block), newClock(t0)), corsUpstream(t).URL)
	do(t, "GET", srv.URL+"/api/x")
	do(t, "GET", srv.URL+"/api/x")
	wantExpose := "RateLimit, RateLimit-Policy, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, Retry-After"
	for _, origin := range []string{"https://app.example.com", "https://a.b.example.org"} {
		res := do(t, "GET", srv.URL+"/api/x", "Origin", origin)
		if res.status != http.StatusTooManyRequests || res.h.Get("Retry-After") == "" {
			t.Fatalf("from %s: %d, Retry-After %q; want a 429 with it", origin, res.status, res.h.Get("Retry-After"))
		}
		want := []string{"Access-Control-Allow-Origin: " + origin, "Access-Control-Expose-Headers: " + wantExpose}
		if got := accessControl(res.h); !slices.Equal(got, want) {
			t.Errorf("from %s:\n got %q\nwant %q", origin, got, want)
		}
		if !slices.Contains(res.h.Values("Vary"), "Origin") {
			t.Errorf("from %s: Vary %q, want Origin", origin, res.h.Values("Vary"))
		}
	}
	for _, origin := range []string{"https://evil.example.com", "https://example.org", "http://a.example.org", "https://a.example.org:8443", "null", ""} {
		res := do(t, "GET", srv.URL+"/api/x", "Origin", origin)
		if got := accessControl(res.h); res.status != http.StatusTooManyRequests || len(got) > 0 {
			t.Errorf("from %q: %d %q, want a 429 without Access-Control-* fields", origin, res.status, got)
		}
	}
}

// "*" answers "*" and never credentials; allow_credentials with listed
// origins adds Access-Control-Allow-Credentials; the exposed fields are
// the configured names of the fields written; the gateway's other
// answers (a 502 here, on a route and off one) carry the fields too.
func TestCORSOwnAnswerVariants(t *testing.T) {
	const origin = "https://app.example.com"
	exhaust := func(url string) result {
		do(t, "GET", url)
		do(t, "GET", url)
		return do(t, "GET", url, "Origin", origin)
	}
	srv := front(t, engine(t, corsConfig("  cors:\n    allow_origins: [\"*\"]"), newClock(t0)), corsUpstream(t).URL)
	res := exhaust(srv.URL + "/api/x")
	if got := accessControl(res.h); len(got) != 2 || got[0] != "Access-Control-Allow-Origin: *" {
		t.Errorf(`"*": %q, want Allow-Origin * and Expose-Headers, no credentials`, got)
	}

	srv = front(t, engine(t, corsConfig("  cors:\n    allow_origins: [\"https://app.example.com\"]\n    allow_credentials: true"), newClock(t0)), corsUpstream(t).URL,
		gateway.WithHeaders(headers.Options{Set: headers.IETF | headers.RetryAfter, Names: headers.Names{RateLimit: "X-Quota", RetryAfter: "X-Retry-In"}}))
	res = exhaust(srv.URL + "/api/x")
	want := []string{"Access-Control-Allow-Credentials: true", "Access-Control-Allow-Origin: " + origin, "Access-Control-Expose-Headers: X-Quota, RateLimit-Policy, X-Retry-In"}
	if got := accessControl(res.h); res.status != http.StatusTooManyRequests || !slices.Equal(got, want) {
		t.Errorf("credentials, renamed fields: %d\n got %q\nwant %q", res.status, got, want)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	srv = front(t, engine(t, corsConfig("  cors:\n    allow_origins: [\"https://app.example.com\"]"), newClock(t0)), dead)
	for _, path := range []string{"/api/x", "/unrouted"} {
		res := do(t, "GET", srv.URL+path, "Origin", origin)
		if got := res.h.Get("Access-Control-Allow-Origin"); res.status != http.StatusBadGateway || got != origin {
			t.Errorf("%s on a dead upstream: %d, Allow-Origin %q; want 502 with %s", path, res.status, got, origin)
		}
	}
}

// On the upstream's answers the gateway adds no Access-Control-Allow-Origin
// (the upstream owns its CORS policy), and appends its fields to the
// Expose-Headers of one that allows the origin, those it lists already
// left out. Without the feature the upstream's list was passed as it was.
func TestCORSUpstreamAnswers(t *testing.T) {
	const origin = "https://app.example.com"
	srv := front(t, engine(t, corsConfig("  cors:\n    allow_origins: [\"https://app.example.com\"]"), newClock(t0)), corsUpstream(t).URL)
	res := do(t, "GET", srv.URL+"/api/cors", "Origin", origin)
	want := []string{"Access-Control-Allow-Origin: " + origin,
		"Access-Control-Expose-Headers: X-Request-Id, ratelimit, RateLimit-Policy, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, Retry-After"}
	if got := accessControl(res.h); res.status != http.StatusOK || !slices.Equal(got, want) {
		t.Errorf("upstream allowing the origin: %d\n got %q\nwant %q", res.status, got, want)
	}
	if res.h.Get("RateLimit") == "" {
		t.Errorf("no RateLimit field on the admitted answer: %v", res.h)
	}
	res = do(t, "GET", srv.URL+"/api/plain", "Origin", origin)
	if got := accessControl(res.h); res.status != http.StatusOK || len(got) > 0 || slices.Contains(res.h.Values("Vary"), "Origin") {
		t.Errorf("upstream not allowing the origin: %d %q, Vary %q; want no CORS field added", res.status, got, res.h.Values("Vary"))
	}
	srv = front(t, engine(t, corsConfig("  cors:\n    allow_origins: [\"https://other.example.com\"]"), newClock(t0)), corsUpstream(t).URL)
	res = do(t, "GET", srv.URL+"/api/cors", "Origin", origin)
	if got := res.h.Values("Access-Control-Expose-Headers"); !slices.Equal(got, []string{"X-Request-Id, ratelimit"}) {
		t.Errorf("origin the block does not allow: Expose-Headers %q, want the upstream's alone", got)
	}
}

// Problems of a cors block are reported at their lines.
func TestCORSConfigErrors(t *testing.T) {
	head := "domain: edge\ngateway:\n  routes: [{path_prefix: /}]\n  cors:\n"
	for _, tc := range []struct{ name, body, want string }{
		{"unknown field", "    allow_origins: [\"*\"]\n    limit_preflight: true\n",
			`gw.yaml:6: unknown field "limit_preflight" in gateway.cors (did you mean "limit_preflights"?)`},
		{"no origins", "    limit_preflights: true\n",
			"gw.yaml:5: gateway: cors.allow_origins: no origins"},
		{"path", "    allow_origins:\n      - https://a.example.com\n      - https://b.example.com/\n",
			`gw.yaml:7: gateway: cors.allow_origins[1]: "https://b.example.com/" ends with /: an origin has no path; write "https://b.example.com"`},
		{"no scheme", "    allow_origins: [app.example.com]\n",
			`gw.yaml:5: gateway: cors.allow_origins[0]: "app.example.com" is not an origin`},
		{"default port", "    allow_origins: [\"https://app.example.com:443\"]\n",
			`gw.yaml:5: gateway: cors.allow_origins[0]: "https://app.example.com:443" names the default port, which browsers leave out of Origin: write "https://app.example.com"`},
		{"bad port", "    allow_origins: [\"http://localhost:99999\"]\n",
			`gw.yaml:5: gateway: cors.allow_origins[0]: "http://localhost:99999" has a port that is not 1 to 65535`},
		{"wildcard inside", "    allow_origins: [\"https://api.*.example.com\"]\n",
			`gw.yaml:5: gateway: cors.allow_origins[0]: "https://api.*.example.com" has no host name`},
		{"star among others", "    allow_origins: [\"https://a.example.com\", \"*\"]\n",
			`gw.yaml:5: gateway: cors.allow_origins[1]: "*" allows every origin: list it alone`},
		{"star with credentials", "    allow_origins: [\"*\"]\n    allow_credentials: true\n",
			`gw.yaml:5: gateway: cors.allow_origins[0]: "*" with allow_credentials`},
		{"wrong type", "    allow_origins: https://a.example.com\n",
			"gw.yaml:5: gateway: cannot unmarshal !!str"},
	} {
		_, err := policy.Parse("gw.yaml", []byte(head+tc.body))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %s", tc.name, err, tc.want)
		}
	}
	for _, ok := range []string{`["*"]`, `["http://localhost:3000", "https://*.example.org", "http://[::1]:8080", "capacitor://localhost", "HTTPS://App.Example.com"]`} {
		if _, err := policy.Parse("gw.yaml", []byte(head+"    allow_origins: "+ok+"\n")); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
