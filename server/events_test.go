package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memory"
)

// TestStoreDownIsAWarning: the store going away is logged at WARN, so an
// operator running with --log-level warn sees it, and its coming back at
// INFO; the admin API's events carry the level.
func TestStoreDownIsAWarning(t *testing.T) {
	cfg, err := policy.Load("testdata/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := server.New(eng, st, server.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := srv.CheckStore(ctx); err != nil {
		t.Fatalf("an open memory store: %v", err)
	}
	if logs.Len() != 0 {
		t.Fatalf("the store answering logged at WARN: %s", logs.String())
	}
	// A probe cut short by its caller (a shutdown) says nothing of the
	// store: no warning, and readiness stays.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	srv.CheckStore(cancelled)
	if logs.Len() != 0 {
		t.Fatalf("a probe under a cancelled context logged: %s", logs.String())
	}
	st.Close()
	// Not ready, and the WARN, at the third failed probe in a row.
	for i := range server.DefaultReadyFailures {
		if err := srv.CheckStore(ctx); err == nil {
			t.Fatal("a closed store answered the probe")
		}
		if i < server.DefaultReadyFailures-1 && logs.Len() != 0 {
			t.Fatalf("failed probe %d logged at WARN: %s", i+1, logs.String())
		}
	}
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "store not answering") {
		t.Fatalf("the store going away logged %q, want a WARN line saying the store is not answering", got)
	}
	ev := srv.Events()
	if len(ev) == 0 || ev[len(ev)-1].Kind != "store" || ev[len(ev)-1].Level != "WARN" {
		t.Fatalf("events %+v, want the last a WARN store event", ev)
	}
}

// TestMemoryStoreMetrics: a server on the memory store exports its keys,
// evictions and expirations, so that a key cap pushing live keys out shows.
func TestMemoryStoreMetrics(t *testing.T) {
	e := newEnv(t)
	resp, err := http.Get(e.admin.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"floodgate_memory_keys ", "floodgate_memory_max_keys ", "floodgate_memory_evictions_total 0", "floodgate_memory_expired_total "} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestV1RefusesDuplicateFields: a field named twice in one object is a 400
// saying which, at any depth, as /json answers; encoding/json alone would
// keep the last silently (a proxy reading the first would see another
// request than the limiter decides). The same name in different objects
// is fine.
func TestV1RefusesDuplicateFields(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ body, want string }{
		{`{"domain":"messaging","domain":"internal","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`, `duplicate field \"domain\"`},
		{`{"domain":"messaging","descriptors":[{"entries":[{"key":"k","key":"j","value":"v"}]}]}`, `duplicate field \"key\"`},
		{`{"requests":[{"domain":"messaging","descriptors":[],"descriptors":[]}]}`, `duplicate field \"descriptors\"`},
	} {
		resp, err := http.Post(e.http.URL+"/v1/decide", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: %d %s, want 400 with %s", tc.body, resp.StatusCode, b, tc.want)
		}
	}
	ok := `{"domain":"messaging","descriptors":[{"entries":[{"key":"message_type","value":"marketing"}]},{"entries":[{"key":"message_type","value":"x"}]}]}`
	resp, err := http.Post(e.http.URL+"/v1/decide", "application/json", strings.NewReader(ok))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == 400 {
		t.Errorf("the same field names in sibling objects: 400 %s", b)
	}
}

// TestV1LimitNeedsRequestsPerUnit: a per-request limit without
// requests_per_unit is a 400, as in the configuration, rather than a limit
// of 0 that refuses everything; an explicit 0 still blocks.
func TestV1LimitNeedsRequestsPerUnit(t *testing.T) {
	e := newEnv(t)
	post := func(limit string) (int, string) {
		body := `{"domain":"messaging","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":` + limit + `}]}`
		resp, err := http.Post(e.http.URL+"/v1/decide", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(`{"unit":"second"}`); code != 400 || !strings.Contains(body, "requests_per_unit is required") {
		t.Errorf("limit without requests_per_unit: %d %s, want 400 saying it is required", code, body)
	}
	if code, body := post(`{"requests_per_unit":0,"unit":"second"}`); code != 429 {
		t.Errorf("requests_per_unit 0: %d %s, want 429 (blocks)", code, body)
	}
	if code, body := post(`{"requests_per_unit":5,"unit":"second","burst":3}`); code != 400 || !strings.Contains(body, "burst") {
		t.Errorf("unknown field in limit: %d %s, want 400 naming it", code, body)
	}
}

// TestV1HitsBound: /v1 refuses a cost above 2^52 as gRPC does, naming the
// bound; no limit could ever admit it.
func TestV1HitsBound(t *testing.T) {
	e := newEnv(t)
	for _, body := range []string{
		`{"domain":"messaging","hits":9223372036854775807,"descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`,
		`{"domain":"messaging","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits":4503599627370497}]}`,
	} {
		resp, err := http.Post(e.http.URL+"/v1/decide", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "too large: at most 2^52") {
			t.Errorf("%s: %d %s, want 400 naming the bound", body, resp.StatusCode, b)
		}
	}
}

// TestAdminEmptyKey: the raw-key endpoints without a key are a 400 that
// says what is missing, not a 503 from the store.
func TestAdminEmptyKey(t *testing.T) {
	e := newEnv(t)
	for _, method := range []string{"GET", "DELETE"} {
		req, _ := http.NewRequest(method, e.admin.URL+"/admin/api/keys/", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "no key") {
			t.Errorf("%s /admin/api/keys/: %d %s, want 400 saying no key", method, resp.StatusCode, b)
		}
	}
}

// TestV1LimitUnits: a per-request limit takes the configuration's unit
// names, week and the calendar month and year included (the env's clock
// is in January 2025: a month's window is 31 days), and a runtime
// override refuses a calendar period, which it cannot keep.
func TestV1LimitUnits(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		unit   string
		window time.Duration
	}{
		{"week", 7 * 24 * time.Hour},
		{"Month", 31 * 24 * time.Hour},
		{"year", 365 * 24 * time.Hour},
		{"90s", 90 * time.Second},
	} {
		body := `{"domain":"messaging","descriptors":[{"entries":[{"key":"k","value":"` + tc.unit + `"}],"limit":{"requests_per_unit":5,"unit":"` + tc.unit + `"}}]}`
		code, b, _ := do(t, "POST", e.http.URL+"/v1/decide", "application/json", []byte(body))
		var out server.V1Response
		if code != 200 || json.Unmarshal(b, &out) != nil || len(out.Statuses) != 1 {
			t.Errorf("unit %s: %d %s", tc.unit, code, b)
			continue
		}
		if got := time.Duration(out.Statuses[0].WindowMS) * time.Millisecond; got != tc.window {
			t.Errorf("unit %s: window %v, want %v", tc.unit, got, tc.window)
		}
	}
	code, b, _ := do(t, "PUT", e.admin.URL+"/admin/api/overrides/quota/hourly", "application/json", []byte(`{"requests_per_unit":5,"period":"month"}`))
	if code != 400 || !strings.Contains(string(b), "calendar") {
		t.Errorf("override with period month: %d %s, want 400 saying a calendar period is not an override's", code, b)
	}
}
