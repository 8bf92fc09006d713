package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/server"
)

type v1resp struct {
	Code     string            `json:"code"`
	Allowed  bool              `json:"allowed"`
	Headers  map[string]string `json:"headers"`
	Statuses []struct {
		Code         string `json:"code"`
		Rule         string `json:"rule"`
		Limit        int64  `json:"limit"`
		Remaining    int64  `json:"remaining"`
		RetryAfterMS int64  `json:"retry_after_ms"`
	} `json:"statuses"`
	Error string `json:"error"`
}

func TestV1DecideAndPeek(t *testing.T) {
	e := newEnv(t)
	req := map[string]any{"domain": "quota", "descriptors": []any{desc("client", "c1")}}
	for i := 1; i <= 3; i++ {
		code, body, hdr := postJSON(t, e.http.URL+"/v1/decide", req)
		var r v1resp
		json.Unmarshal(body, &r)
		if code != 200 || !r.Allowed || r.Statuses[0].Remaining != int64(1000-i) || r.Statuses[0].Rule != "hourly" {
			t.Fatalf("decide %d: %d %s", i, code, body)
		}
		if hdr.Get("RateLimit-Policy") != `"hourly";q=1000;w=3600` {
			t.Fatalf("decide %d: RateLimit-Policy %q", i, hdr.Get("RateLimit-Policy"))
		}
		// The body's headers are the same fields, under their names.
		if r.Headers["RateLimit-Policy"] != `"hourly";q=1000;w=3600` || r.Headers["X-RateLimit-Remaining"] != fmt.Sprint(1000-i) ||
			r.Headers["RateLimit"] != fmt.Sprintf(`"hourly";r=%d;t=%s`, 1000-i, hdr.Get("X-RateLimit-Reset")) || len(r.Headers) != 5 {
			t.Fatalf("decide %d: body headers %v", i, r.Headers)
		}
	}
	// Peek answers what a decide would: remaining after this request.
	code, body, _ := postJSON(t, e.http.URL+"/v1/peek", req)
	var r v1resp
	json.Unmarshal(body, &r)
	if code != 200 || r.Statuses[0].Remaining != 996 {
		t.Fatalf("peek: %d %s", code, body)
	}
	code, body, _ = postJSON(t, e.http.URL+"/v1/peek", req)
	json.Unmarshal(body, &r)
	if code != 200 || r.Statuses[0].Remaining != 996 {
		t.Fatalf("a second peek: %d, %d left (%s): peek charged", code, r.Statuses[0].Remaining, body)
	}
	// hits: 997 more, then a refusal with 429.
	big := map[string]any{"domain": "quota", "hits": 997, "descriptors": []any{desc("client", "c1")}}
	if code, body, _ := postJSON(t, e.http.URL+"/v1/decide", big); code != 200 {
		t.Fatalf("hits 997: %d %s", code, body)
	}
	code, body, hdr := postJSON(t, e.http.URL+"/v1/decide", req)
	json.Unmarshal(body, &r)
	if code != http.StatusTooManyRequests || r.Code != "OVER_LIMIT" || r.Statuses[0].RetryAfterMS != 3600_000 || hdr.Get("Retry-After") != "3600" ||
		r.Headers["Retry-After"] != "3600" {
		t.Fatalf("over the limit: %d %s Retry-After %q", code, body, hdr.Get("Retry-After"))
	}
	// A refused status states its limit and that nothing remains (0 is
	// not omitted); a descriptor no rule matches has neither.
	var raw struct {
		Statuses []map[string]any `json:"statuses"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	if st := raw.Statuses[0]; st["limit"] != 1000.0 || st["remaining"] != 0.0 {
		t.Fatalf("refused status %v: want limit 1000 and remaining 0", st)
	}
	unmatched := map[string]any{"domain": "quota", "descriptors": []any{desc("nobody", "x")}}
	if code, body, _ = postJSON(t, e.http.URL+"/v1/decide", unmatched); code != 200 || strings.Contains(string(body), "remaining") {
		t.Fatalf("unmatched descriptor: %d %s, want 200 without limit or remaining", code, body)
	}
}

func TestV1Batch(t *testing.T) {
	e := newEnv(t)
	batch := map[string]any{"requests": []any{
		map[string]any{"domain": "quota", "descriptors": []any{desc("client", "b1")}},
		map[string]any{"domain": "nope", "descriptors": []any{desc("client", "b1")}},
		map[string]any{"domain": "quota", "hits": 1001, "descriptors": []any{desc("client", "b2")}},
	}}
	code, body, _ := postJSON(t, e.http.URL+"/v1/decide", batch)
	var out struct{ Results []v1resp }
	if err := json.Unmarshal(body, &out); err != nil || code != 200 || len(out.Results) != 3 {
		t.Fatalf("batch: %d %s", code, body)
	}
	if !out.Results[0].Allowed || !strings.Contains(out.Results[1].Error, `unknown domain "nope"`) ||
		out.Results[2].Allowed || out.Results[2].Statuses[0].RetryAfterMS != -1 {
		t.Fatalf("batch results %s", body)
	}
	// A failed element is {"error": ...} and nothing else.
	var raw struct{ Results []map[string]any }
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	if el := raw.Results[1]; len(el) != 1 || !strings.HasPrefix(fmt.Sprint(el["error"]), `requests[1]: unknown domain "nope"`) {
		t.Fatalf("failed batch element %v, want only an error", el)
	}
}

// TestBadInput sends every kind of bad input to every API: each gets a 4xx
// with a message saying what is wrong, and the server keeps answering.
func TestBadInput(t *testing.T) {
	e := newEnv(t, server.WithAdminToken("s3cret"), server.WithMaxBodyBytes(4096))
	good := `{"domain":"quota","descriptors":[{"entries":[{"key":"client","value":"x"}]}]}`
	huge := `{"domain":"quota","descriptors":[` + strings.Repeat(`{"entries":[{"key":"client","value":"x"}]},`, 65) + `{"entries":[{"key":"client","value":"x"}]}]}`
	many := `{"domain":"quota","descriptors":[{"entries":[` + strings.Repeat(`{"key":"k","value":"v"},`, 16) + `{"key":"k","value":"v"}]}]}`
	// Only /v1 bounds these; /json decides them (an Envoy client fails
	// open on an error, escaping every limit of its request).
	v1Only := map[string]bool{"empty descriptor": true, "too many descriptors": true, "too many entries": true}
	for _, path := range []string{"/json", "/v1/decide", "/v1/peek"} {
		for _, r := range []struct {
			name, ct, body string
			code           int
			want           string
		}{
			{"malformed", "application/json", `{"domain":`, 400, ""},
			{"not an object", "application/json", `[1,2]`, 400, ""},
			{"empty body", "application/json", ``, 400, "empty body"},
			{"empty domain", "application/json", `{"descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`, 400, "domain must not be empty"},
			{"no descriptors", "application/json", `{"domain":"quota","descriptors":[]}`, 400, "descriptors must not be empty"},
			{"empty descriptor", "application/json", `{"domain":"quota","descriptors":[{"entries":[]}]}`, 400, "no entries"},
			{"too many descriptors", "application/json", huge, 400, "over the limit"},
			{"too many entries", "application/json", many, 400, "entries, over the limit"},
			{"invalid UTF-8", "application/json", "{\"domain\":\"quota\xff\",\"descriptors\":[]}", 400, "UTF-8"},
			{"wrong content type", "application/xml", good, 415, "Content-Type"},
			{"oversized body", "application/json", `{"domain":"` + strings.Repeat("x", 5000) + `"}`, 413, "byte limit"},
		} {
			code, body, _ := do(t, "POST", e.http.URL+path, r.ct, []byte(r.body))
			if v1Only[r.name] && path == "/json" {
				if code != http.StatusOK {
					t.Errorf("%s %s: %d %s, want 200: no per-item bounds on the Envoy APIs", path, r.name, code, body)
				}
				continue
			}
			if code != r.code || !strings.Contains(errMsg(body), r.want) || !strings.Contains(string(body), `"error"`) {
				t.Errorf("%s %s: %d %s, want %d with an error saying %q", path, r.name, code, body, r.code, r.want)
			}
		}
		if code, _, _ := do(t, "GET", e.http.URL+path, "", nil); code != http.StatusMethodNotAllowed {
			t.Errorf("GET %s: %d, want 405", path, code)
		}
	}
	for _, r := range []struct {
		path, body string
		code       int
		want       string
	}{
		{"/v1/decide", `{"domain":"nope","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`, 404, `unknown domain "nope"`},
		{"/v1/decide", `{"domain":"quota","descriptors":[{"entries":[{"key":"k","value":"v"}]}],"colour":1}`, 400, `unknown field "colour"`},
		{"/v1/decide", `{"domain":"quota","hits":"two","descriptors":[]}`, 400, `field "hits"`},
		{"/v1/decide", `{"domain":"quota","hits":-1,"descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`, 400, "negative"},
		{"/v1/decide", good + good, 400, "after the JSON object"},
		{"/v1/decide", `{"requests":[]}`, 400, "must not be empty"},
		{"/v1/decide", `{"domain":"quota","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1,"unit":"fortnight"}}]}`, 400, "fortnight"},
		{"/v1/observe", `{}`, 400, "no sample"},
		{"/v1/observe", `{"domain":"quota","rule":"nope","latency_ms":5}`, 404, `unknown rule: no rule "nope" in domain "quota" (no rule has an adaptive block)`},
		{"/v1/observe", `{"domain":"nope","rule":"hourly","latency_ms":5}`, 404, `no domain "nope"`},
		{"/v1/observe", `{"samples":[{"domain":"quota","rule":"hourly","latency_ms":5},{"domain":"quota","rule":"nope","latency_ms":5}]}`, 404,
			`samples[1]: policy: unknown rule: no rule "nope" in domain "quota" (no rule has an adaptive block); the other 1 sample(s) were recorded`},
		{"/json", `{"domain":"quota","descriptors":[{"entries":[{"key":"k","value":"v"}]}],"hits_addend":-3}`, 400, "RateLimitRequest"},
		{"/v1/nothing", good, 404, "no such endpoint"},
	} {
		// /v1/observe takes the admin token when no observe token is set.
		code, body, _ := do(t, "POST", e.http.URL+r.path, "application/json", []byte(r.body), "Authorization", "Bearer s3cret")
		if code != r.code || !strings.Contains(errMsg(body), r.want) {
			t.Errorf("%s %s: %d %s, want %d saying %q", r.path, r.body, code, body, r.code, r.want)
		}
	}
	// Admin: no token, a wrong token, bad bodies.
	for _, r := range []struct {
		method, path, body string
		auth               string
		code               int
		want               string
	}{
		{"GET", "/admin/api/config", "", "", 401, "missing Authorization"},
		{"GET", "/admin/api/config", "", "Bearer wrong", 401, "wrong admin token"},
		{"GET", "/admin/api/config", "", "Basic czNjcmV0", 401, "does not use the Bearer scheme"},
		{"PUT", "/admin/api/overrides/quota/hourly", `{"requests_per_unit":0}`, "Bearer s3cret", 400, "must be > 0"},
		{"PUT", "/admin/api/overrides/quota/nope", `{"requests_per_unit":5}`, "Bearer s3cret", 404, "nope"},
		{"PUT", "/admin/api/overrides/quota/hourly", `{"requests_per_unit":5,"period":"soon"}`, "Bearer s3cret", 400, "period"},
		{"DELETE", "/admin/api/overrides/quota/hourly", "", "Bearer s3cret", 404, "no override"},
		{"PUT", "/admin/api/scales/quota/hourly", `{"factor":-1}`, "Bearer s3cret", 400, "rate scale"},
		{"POST", "/admin/api/reset", `{"domain":"nope","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`, "Bearer s3cret", 404, "unknown domain"},
		{"POST", "/admin/api/inspect", `{"domain":`, "Bearer s3cret", 400, "JSON"},
		{"GET", "/admin/api/nothing", "", "Bearer s3cret", 404, "no admin endpoint"},
	} {
		code, body, _ := do(t, r.method, e.admin.URL+r.path, "application/json", []byte(r.body), "Authorization", r.auth)
		if code != r.code || !strings.Contains(errMsg(body), r.want) {
			t.Errorf("%s %s (%s): %d %s, want %d saying %q", r.method, r.path, r.auth, code, body, r.code, r.want)
		}
	}
	// Still serving.
	if code, body, _ := do(t, "POST", e.http.URL+"/v1/decide", "application/json", []byte(good)); code != 200 {
		t.Fatalf("after the bad input: %d %s", code, body)
	}
}

func TestAdminAPI(t *testing.T) {
	e := newEnv(t, server.WithAdminToken("tok"))
	auth := []string{"Authorization", "Bearer tok"}
	req := `{"domain":"quota","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`
	for range 3 {
		do(t, "POST", e.http.URL+"/v1/decide", "application/json", []byte(req))
	}
	code, body, _ := do(t, "POST", e.admin.URL+"/admin/api/inspect", "application/json", []byte(req), auth...)
	if code != 200 || !strings.Contains(string(body), `"remaining":996`) || !strings.Contains(string(body), `"exists":true`) {
		t.Fatalf("inspect: %d %s", code, body)
	}
	code, body, _ = do(t, "POST", e.admin.URL+"/admin/api/reset", "application/json", []byte(req), auth...)
	if code != 200 || !strings.Contains(string(body), `fg:quota|client=a#`) {
		t.Fatalf("reset: %d %s", code, body)
	}
	code, body, _ = do(t, "POST", e.http.URL+"/v1/peek", "application/json", []byte(req))
	if !strings.Contains(string(body), `"remaining":999`) {
		t.Fatalf("after reset: %d %s", code, body)
	}
	// Overrides: set, list, in force, remove.
	code, body, _ = do(t, "PUT", e.admin.URL+"/admin/api/overrides/quota/hourly", "application/json", []byte(`{"requests_per_unit":2,"period":"minute"}`), auth...)
	if code != 200 || !strings.Contains(string(body), `"requests_per_unit":2`) {
		t.Fatalf("set override: %d %s", code, body)
	}
	var codes []int
	var hdr http.Header
	for range 3 {
		c, _, h := do(t, "POST", e.http.URL+"/v1/decide", "application/json", []byte(req))
		codes, hdr = append(codes, c), h
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("decisions under the override of 2 per minute: %v", codes)
	}
	// The headers state the limit in force: its quota and its window.
	if p := hdr.Get("RateLimit-Policy"); p != `"hourly";q=2;w=60` {
		t.Fatalf("RateLimit-Policy under the override of 2 per minute: %q", p)
	}
	code, body, _ = do(t, "GET", e.admin.URL+"/admin/api/config", "", nil, auth...)
	if code != 200 || !strings.Contains(string(body), `"effective":"fixed_window 2/1m0s"`) {
		t.Fatalf("config view: %d %s", code, body)
	}
	if code, _, _ := do(t, "DELETE", e.admin.URL+"/admin/api/overrides/quota/hourly", "", nil, auth...); code != 204 {
		t.Fatalf("remove override: %d", code)
	}
	code, body, _ = do(t, "GET", e.admin.URL+"/admin/api/overrides", "", nil, auth...)
	if code != 200 || !strings.Contains(string(body), `"overrides":[]`) {
		t.Fatalf("overrides after removal: %s", body)
	}
	code, body, _ = do(t, "PUT", e.admin.URL+"/admin/api/scales/quota/hourly", "application/json", []byte(`{"factor":0.5,"reason":"incident"}`), auth...)
	if code != 200 || !strings.Contains(string(body), `"reason":"incident"`) {
		t.Fatalf("scale: %d %s", code, body)
	}
	code, body, _ = do(t, "GET", e.admin.URL+"/admin/api/stats", "", nil, auth...)
	if code != 200 || !strings.Contains(string(body), `"over_limit":1`) || !strings.Contains(string(body), `"kind":"override"`) {
		t.Fatalf("stats: %d %s", code, body)
	}
	// Open endpoints.
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/metrics": "floodgate_decisions_total", "/dashboard": "<canvas"} {
		code, body, _ := do(t, "GET", e.admin.URL+path, "", nil)
		if code != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, body lacks %q", path, code, want)
		}
	}
}

// FuzzJSON feeds arbitrary bodies to /json: never a panic, never a 5xx.
func FuzzJSON(f *testing.F) {
	f.Add([]byte(`{"domain":"quota","descriptors":[{"entries":[{"key":"client","value":"x"}]}],"hits_addend":2}`))
	f.Add([]byte(`{"domain":"messaging","descriptors":[{"entries":[{"key":"to_number"}],"limit":{"requests_per_unit":1,"unit":"SECOND"}}]}`))
	f.Add([]byte(`{"domain":"x","descriptors":[{"hits_addend":"3","entries":[{"key":"a","value":"\u0000"}]}]}`))
	fuzzHandler(f, "/json")
}

// FuzzV1 feeds arbitrary bodies to /v1/decide.
func FuzzV1(f *testing.F) {
	f.Add([]byte(`{"domain":"quota","descriptors":[{"entries":[{"key":"client","value":"x"}],"hits":3}]}`))
	f.Add([]byte(`{"requests":[{"domain":"quota","descriptors":[{"entries":[{"key":"bucket","value":"x"}],"limit":{"requests_per_unit":5,"unit":"30s"}}]}]}`))
	f.Add([]byte(`{"domain":"quota","wait":true,"priority":"high","descriptors":[{"entries":[{"key":"client","value":""}]}]}`))
	fuzzHandler(f, "/v1/decide")
}

func fuzzHandler(f *testing.F, path string) {
	e := newEnv(&testing.T{})
	h := e.srv.HTTPHandler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("POST", path, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, r)
		if rec.Code >= 500 || rec.Code < 200 {
			t.Fatalf("%s answered %d to %q: %s", path, rec.Code, body, rec.Body)
		}
	})
}

// errMsg returns the "error" of a JSON error body, or the body.
func errMsg(body []byte) string {
	var e struct{ Error string }
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return string(body)
}

// TestV1ObserveKnownRule: samples for a rule the configuration has are
// accepted with 204 (a rule without an adaptive block ignores them).
func TestV1ObserveKnownRule(t *testing.T) {
	e := newEnv(t)
	for _, body := range []string{`{"domain":"quota","rule":"hourly","latency_ms":5}`,
		`{"samples":[{"domain":"quota","rule":"hourly","latency_ms":5,"failed":true},{"domain":"quota","rule":"per-bucket","latency_ms":1}]}`} {
		if code, out, _ := do(t, "POST", e.http.URL+"/v1/observe", "application/json", []byte(body)); code != http.StatusNoContent {
			t.Errorf("observe %s: %d %s, want 204", body, code, out)
		}
	}
}
