package server_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// releaseConfig has an in-flight limit of 2 per job and a rate limit.
const releaseConfig = `
domain: jobs
descriptors:
  - key: job
    rate_limit: {name: inflight, algorithm: concurrency, requests_per_unit: 2, lease_ttl: 30s}
  - key: user
    rate_limit: {name: per-user, unit: minute, requests_per_unit: 100}
`

// v1Answer is the part of a /v1/decide answer these tests read.
type v1Answer struct {
	Code       string `json:"code"`
	Lease      string `json:"lease"`
	LeaseTTLMS int64  `json:"lease_ttl_ms"`
	Error      string `json:"error"`
}

// decideJob decides one request on job and returns the status and answer.
func decideJob(t *testing.T, base, job string) (int, v1Answer) {
	t.Helper()
	code, body, _ := postJSON(t, base+"/v1/decide", map[string]any{"domain": "jobs", "descriptors": []any{desc("job", job)}})
	var a v1Answer
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("decide: %v in %s", err, body)
	}
	return code, a
}

// release posts {"lease": tok} and fails the test unless it answers 204.
func release(t *testing.T, base, tok string) {
	t.Helper()
	if code, body, _ := postJSON(t, base+"/v1/release", map[string]string{"lease": tok}); code != 204 || len(body) != 0 {
		t.Fatalf("release: %d %s, want 204 with no body", code, body)
	}
}

// wantCodes decides on job once per wanted status, in order.
func wantCodes(t *testing.T, base, job, when string, want ...int) []v1Answer {
	t.Helper()
	var out []v1Answer
	for i, w := range want {
		code, a := decideJob(t, base, job)
		if code != w {
			t.Fatalf("%s, decide %d: %d %+v, want %d", when, i+1, code, a, w)
		}
		if (code == 200) != (a.Lease != "") {
			t.Fatalf("%s, decide %d: status %d with lease %q: want a lease exactly when admitted", when, i+1, code, a.Lease)
		}
		out = append(out, a)
	}
	return out
}

// TestReleaseGivesTheSlotBack: through /v1 on the memory store, a
// concurrency limit of 2 admits two decides with leases and refuses the
// third; releasing a lease admits one more, and releasing it again is a
// success that frees nothing.
func TestReleaseGivesTheSlotBack(t *testing.T) {
	ts := httptest.NewServer(serverFor(t, releaseConfig).HTTPHandler())
	defer ts.Close()
	held := wantCodes(t, ts.URL, "export", "at first", 200, 200, 429)
	if held[0].LeaseTTLMS != 30_000 || held[0].Lease == held[1].Lease {
		t.Fatalf("leases %+v, %+v: want two different tokens with lease_ttl_ms 30000", held[0], held[1])
	}
	release(t, ts.URL, held[0].Lease)
	wantCodes(t, ts.URL, "export", "after the release", 200, 429)
	release(t, ts.URL, held[0].Lease)
	wantCodes(t, ts.URL, "export", "after releasing the same lease again", 429)

	// Another job's limit is its own; a rate limit and a peek hold nothing.
	wantCodes(t, ts.URL, "import", "another job", 200)
	code, body, _ := postJSON(t, ts.URL+"/v1/decide", map[string]any{"domain": "jobs", "descriptors": []any{desc("user", "u")}})
	if code != 200 || strings.Contains(string(body), `"lease"`) {
		t.Fatalf("a rate limit's decide: %d %s, want 200 without a lease", code, body)
	}
	code, body, _ = postJSON(t, ts.URL+"/v1/peek", map[string]any{"domain": "jobs", "descriptors": []any{desc("job", "import")}})
	if code != 200 || strings.Contains(string(body), `"lease"`) {
		t.Fatalf("a peek: %d %s, want 200 without a lease", code, body)
	}
}

// TestReleaseBatch: each admitted element of a batch decide has its own
// lease; {"leases": [...]} releases several at once.
func TestReleaseBatch(t *testing.T) {
	ts := httptest.NewServer(serverFor(t, releaseConfig).HTTPHandler())
	defer ts.Close()
	one := map[string]any{"domain": "jobs", "descriptors": []any{desc("job", "b")}}
	code, body, _ := postJSON(t, ts.URL+"/v1/decide", map[string]any{"requests": []any{one, one, one}})
	var out struct{ Results []v1Answer }
	if err := json.Unmarshal(body, &out); err != nil || code != 200 || len(out.Results) != 3 {
		t.Fatalf("batch: %d %s (%v), want 200 with 3 results", code, body, err)
	}
	r := out.Results
	if r[0].Lease == "" || r[1].Lease == "" || r[0].Lease == r[1].Lease || r[2].Code != "OVER_LIMIT" || r[2].Lease != "" {
		t.Fatalf("batch results %+v: want two admitted elements with their own leases, then a refusal without one", r)
	}
	code, body, _ = postJSON(t, ts.URL+"/v1/release", map[string]any{"leases": []string{r[0].Lease, r[1].Lease, r[0].Lease}})
	if code != 204 {
		t.Fatalf("batch release: %d %s, want 204", code, body)
	}
	wantCodes(t, ts.URL, "b", "after the batch release", 200, 200, 429)
}

// leaseSlot is one slot of a hand-built lease token.
type leaseSlot struct {
	key         string
	cost        uint64
	id          uint64
	limit       uint64
	ttlUS       uint64
	keyLenDelta int // added to the encoded key length (to cut a token short)
}

// leaseToken builds a token as docs/SERVER.md describes it, so that these
// tests also hold the documented format.
func leaseToken(version byte, slots ...leaseSlot) string {
	b := []byte{version}
	b = binary.AppendUvarint(b, uint64(len(slots)))
	for _, s := range slots {
		b = binary.AppendUvarint(b, uint64(len(s.key)+s.keyLenDelta))
		b = append(b, s.key...)
		b = binary.AppendUvarint(b, s.cost)
		b = binary.BigEndian.AppendUint64(b, s.id)
		b = binary.AppendUvarint(b, s.limit)
		b = binary.AppendUvarint(b, s.ttlUS)
	}
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestReleaseRefusesBadTokens: a token that is not one, or names what a
// release must not touch, is a 400 saying what is wrong, and nothing is
// released; the method and content type are checked as on every /v1 call.
func TestReleaseRefusesBadTokens(t *testing.T) {
	ts := httptest.NewServer(serverFor(t, releaseConfig).HTTPHandler())
	defer ts.Close()
	held := wantCodes(t, ts.URL, "x", "at first", 200, 200, 429)
	real, err := base64.RawURLEncoding.DecodeString(held[0].Lease)
	if err != nil {
		t.Fatalf("the decide's lease %q is not unpadded URL-safe base64: %v", held[0].Lease, err)
	}
	// The real token, rebuilt from its documented fields, reads the same.
	key := string(real[3 : 3+int(real[2])])
	id := binary.BigEndian.Uint64(real[3+len(key)+1:])
	ttl := uint64(30 * time.Second / time.Microsecond)
	good := leaseSlot{key: key, cost: 1, id: id, limit: 2, ttlUS: ttl}
	if rebuilt := leaseToken(1, good); rebuilt != held[0].Lease {
		t.Fatalf("token %q does not follow the documented format (rebuilt %q)", held[0].Lease, rebuilt)
	}
	rateKey := strings.Replace(key, "job=x#concurrency:0", "user=u#fixed_window:60000000", 1)
	tampered := []byte(held[0].Lease)
	tampered[len(tampered)-8] ^= 1
	with := func(edit func(*leaseSlot)) leaseSlot { s := good; edit(&s); return s }

	for _, tc := range []struct {
		name, body, want string
	}{
		{"garbage", `{"lease":"not a token!"}`, "lease: lease token is not unpadded URL-safe base64"},
		{"base64 of garbage", `{"lease":"` + base64.RawURLEncoding.EncodeToString([]byte("\x01garbage garbage")) + `"}`, "lease: lease token checksum mismatch"},
		{"too short", `{"lease":"AQ"}`, "too short"},
		{"tampered", `{"lease":"` + string(tampered) + `"}`, "checksum mismatch"},
		{"wrong version", `{"lease":"` + leaseToken(2, good) + `"}`, "lease token version 2 is not supported (this server reads version 1)"},
		{"cut short", `{"lease":"` + leaseToken(1, with(func(s *leaseSlot) { s.keyLenDelta = 500 })) + `"}`, "malformed lease token: slot 0: key of"},
		{"no slots", `{"lease":"` + leaseToken(1) + `"}`, "holds 0 slots"},
		{"key outside the prefix", `{"lease":"` + leaseToken(1, with(func(s *leaseSlot) { s.key = "other:" + key })) + `"}`, "lease: slot 0: key \"other:"},
		{"a rate limit's key", `{"lease":"` + leaseToken(1, with(func(s *leaseSlot) { s.key = rateKey })) + `"}`, "is not a concurrency limit's key"},
		{"limit 0", `{"lease":"` + leaseToken(1, with(func(s *leaseSlot) { s.limit = 0 })) + `"}`, "limit: must be > 0"},
		{"id 0", `{"lease":"` + leaseToken(1, with(func(s *leaseSlot) { s.id = 0 })) + `"}`, "anonymous lease"},
		{"the second token", `{"leases":["` + held[0].Lease + `","x"]}`, "leases[1]: lease token"},
		{"both forms", `{"lease":"` + held[0].Lease + `","leases":["` + held[0].Lease + `"]}`, `give "lease" or "leases", not both`},
		{"no lease", `{}`, "no lease"},
		{"unknown field", `{"token":"x"}`, `unknown field "token"`},
	} {
		code, body, _ := do(t, "POST", ts.URL+"/v1/release", "application/json", []byte(tc.body))
		var e struct{ Error string }
		json.Unmarshal(body, &e)
		if code != 400 || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s: %d %s, want 400 saying %q", tc.name, code, body, tc.want)
		}
	}
	if code, body, h := do(t, "GET", ts.URL+"/v1/release", "", nil); code != 405 || h.Get("Allow") != "POST" {
		t.Errorf("GET: %d %s (Allow %q), want 405 with Allow: POST", code, body, h.Get("Allow"))
	}
	if code, body, _ := do(t, "POST", ts.URL+"/v1/release", "application/xml", []byte(`{"lease":"`+held[0].Lease+`"}`)); code != 415 {
		t.Errorf("XML content type: %d %s, want 415", code, body)
	}
	wantCodes(t, ts.URL, "x", "after the refused releases", 429)
	if code, body, _ := do(t, "POST", ts.URL+"/v1/nope", "application/json", []byte(`{}`)); code != 404 || !strings.Contains(string(body), "POST /v1/release") {
		t.Errorf("an unknown /v1 path: %d %s, want 404 listing POST /v1/release", code, body)
	}
}

// TestReleaseWhenTheStoreIsDown: with the Redis holding the slots stopped,
// POST /v1/release cannot give them back; it answers 503 saying the slots
// come back at their lease TTL (not 204, which would tell the caller they
// are free) and the store error is counted.
func TestReleaseWhenTheStoreIsDown(t *testing.T) {
	rs := testserver.NewRedis(t)
	if rs == nil {
		t.Skip("no redis-server")
	}
	inner, err := redis.Open("redis://"+rs.Addr, redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	st, err := resilient.New(inner, resilient.WithHooks(m.StoreHooks()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg, err := policy.Parse("test.yaml", []byte(releaseConfig))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, st, server.WithMetrics(m))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.HTTPHandler())
	defer ts.Close()
	admin := httptest.NewServer(srv.AdminHandler())
	defer admin.Close()

	held := wantCodes(t, ts.URL, "down", "with the store up", 200)
	if err := rs.Stop(); err != nil {
		t.Fatal(err)
	}
	code, body, _ := postJSON(t, ts.URL+"/v1/release", map[string]string{"lease": held[0].Lease})
	var e struct{ Error string }
	json.Unmarshal(body, &e)
	if code != 503 || !strings.Contains(e.Error, "could not release") || !strings.Contains(e.Error, "lease TTL") {
		t.Fatalf("release with the store down: %d %s, want 503 saying the store could not release and the slots come back at their lease TTL", code, body)
	}
	if strings.Contains(e.Error, "127.0.0.1") || strings.Contains(e.Error, "redis") || strings.Contains(e.Error, "resilient") {
		t.Errorf("the 503 shows the store's address or error to the client: %s", e.Error)
	}
	_, mbody, _ := do(t, "GET", admin.URL+"/metrics", "", nil)
	if !strings.Contains(string(mbody), `floodgate_store_errors_total{op="release"} 1`) ||
		!strings.Contains(string(mbody), `floodgate_requests_total{code="error",transport="v1-release"} 1`) {
		t.Fatalf("/metrics does not count the failed release as a store error and an errored request:\n%s", grepLines(string(mbody), "release"))
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}

// TestRenewKeepsTheSlot: POST /v1/renew extends a lease by its TTL from
// now, so a holder whose work outlives lease_ttl keeps its slot; a lease
// that expired is not revived (204 all the same); bad tokens are 400 as
// for /v1/release.
func TestRenewKeepsTheSlot(t *testing.T) {
	cfg, err := policy.Parse("jobs.yaml", []byte(releaseConfig))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvFor(t, cfg)
	c, ts := e.clock, e.http
	renew := func(tok string) (int, string) {
		code, body, _ := postJSON(t, ts.URL+"/v1/renew", map[string]string{"lease": tok})
		return code, string(body)
	}
	held := wantCodes(t, ts.URL, "j", "at 0s", 200, 200, 429)
	c.Advance(20 * time.Second)
	if code, body := renew(held[0].Lease); code != 204 || body != "" {
		t.Fatalf("renew at 20s: %d %s, want 204", code, body)
	}
	// At 40 s the second lease (30 s TTL) has expired; the first, renewed
	// at 20 s, holds until 50 s: one slot is free, not two.
	c.Advance(20 * time.Second)
	wantCodes(t, ts.URL, "j", "at 40s", 200, 429)
	// At 55 s the renewed lease has expired too: renewing it now revives
	// nothing (the slot taken at 40 s holds until 70 s).
	c.Advance(15 * time.Second)
	if code, body := renew(held[0].Lease); code != 204 {
		t.Fatalf("renew of an expired lease: %d %s, want 204", code, body)
	}
	wantCodes(t, ts.URL, "j", "at 55s", 200, 429)
	if code, body := renew("not a token"); code != 400 || !strings.Contains(body, "lease") {
		t.Errorf("renew with a bad token: %d %s, want 400", code, body)
	}
}
