package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/resilient"
)

// mcAdminConfig's fixed window is a day long: the instances read the real
// clock, and a window's end between A's first decision and B's inspect
// would admit A's fourth, or show B a fresh window.
const mcAdminConfig = `domain: mc
descriptors:
  - key: fw
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 3}
  - key: sw
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window, sub_windows: 6}
  - key: tb
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: token_bucket}
`

// mcInstance is one floodgate server on the shared memcached, as serve
// builds it (store/resilient around the store), with its admin API.
type mcInstance struct {
	eng   *policy.Engine
	admin *httptest.Server
}

func newMCInstance(t *testing.T, addr string) *mcInstance {
	t.Helper()
	inner, err := memcached.Open("memcached://"+addr, memcached.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	st, err := resilient.New(inner, resilient.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg, err := policy.Parse("mc.yaml", []byte(mcAdminConfig))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, st, server.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	admin := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(admin.Close)
	return &mcInstance{eng: eng, admin: admin}
}

func (m *mcInstance) decide(t *testing.T, key, value string) bool {
	t.Helper()
	resp, err := m.eng.Decide(context.Background(), policy.Request{Domain: "mc",
		Descriptors: []policy.Descriptor{{Entries: []policy.Entry{{Key: key, Value: value}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Code == policy.CodeOK
}

// TestMemcachedAdminReachesOtherInstancesCounters: two servers share one
// memcached; A spends a limit, B (which has never used it) inspects and
// resets it through its admin API, by descriptors or by raw key, and A
// admits again. Window counters (fixed window, calendar month, sliding
// window) are named after their window, which B finds from the key's limit
// (it used to answer "exists": false and a reset that left them). A raw
// key that names no limit is answered with a warning, not a bare success.
func TestMemcachedAdminReachesOtherInstancesCounters(t *testing.T) {
	addr := testserver.Memcached(t)
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	for _, key := range []string{"fw", "month", "sw", "tb"} {
		for _, how := range []string{"descriptors", "raw key"} {
			t.Run(key+"/"+how, func(t *testing.T) {
				a, b := newMCInstance(t, addr), newMCInstance(t, addr)
				value := run + "-" + strings.ReplaceAll(how, " ", "-")
				for i := range 3 {
					if !a.decide(t, key, value) {
						t.Fatalf("A: request %d refused, want admitted", i+1)
					}
				}
				if a.decide(t, key, value) {
					t.Fatal("A: request 4 admitted, want refused")
				}
				body := fmt.Sprintf(`{"domain":"mc","descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, key, value)
				code, resp, _ := do(t, "POST", b.admin.URL+"/admin/api/inspect", "application/json", []byte(body))
				var insp struct {
					Decision struct{ Code string }
					Keys     []server.KeyState
				}
				if err := json.Unmarshal(resp, &insp); err != nil || code != 200 || len(insp.Keys) != 1 {
					t.Fatalf("B: inspect: %d %s", code, resp)
				}
				if !insp.Keys[0].Exists || insp.Decision.Code != "OVER_LIMIT" || insp.Keys[0].Warning != "" {
					t.Fatalf("B: inspect of A's spent key: %s, want it found, OVER_LIMIT, no warning", resp)
				}
				rawKey := insp.Keys[0].Key
				keyURL := b.admin.URL + "/admin/api/keys/" + url.PathEscape(rawKey)
				if code, resp, _ := do(t, "GET", keyURL, "", nil); code != 200 {
					t.Fatalf("B: GET %s: %d %s, want 200", rawKey, code, resp)
				}
				if how == "descriptors" {
					code, resp, _ = do(t, "POST", b.admin.URL+"/admin/api/reset", "application/json", []byte(body))
					if code != 200 || strings.Contains(string(resp), "warning") {
						t.Fatalf("B: reset: %d %s, want 200 without a warning", code, resp)
					}
				} else if code, resp, _ = do(t, "DELETE", keyURL, "", nil); code != 204 {
					t.Fatalf("B: DELETE %s: %d %s, want 204", rawKey, code, resp)
				}
				if code, resp, _ := do(t, "GET", keyURL, "", nil); code != 404 {
					t.Errorf("B: GET %s after the reset: %d %s, want 404", rawKey, code, resp)
				}
				// A's over-limit cache trusts its refusal for up to 1 s.
				deadline := time.Now().Add(5 * time.Second)
				for !a.decide(t, key, value) {
					if time.Now().After(deadline) {
						t.Fatal("A still refuses 5s after B's reset")
					}
					time.Sleep(50 * time.Millisecond) // A's over-limit cache TTL, a real process's timing
				}
			})
		}
	}

	t.Run("a key without a limit", func(t *testing.T) {
		b := newMCInstance(t, addr)
		keyURL := b.admin.URL + "/admin/api/keys/" + url.PathEscape("fg:mc|fw="+run)
		code, resp, _ := do(t, "DELETE", keyURL, "", nil)
		if code != 200 || !strings.Contains(string(resp), `"warning":"the store (memcached) names window counters after their window`) {
			t.Errorf("DELETE of a key naming no limit: %d %s, want 200 with a warning", code, resp)
		}
		code, resp, _ = do(t, "GET", keyURL, "", nil)
		if code != 404 || !strings.Contains(string(resp), `"warning":"the store (memcached)`) {
			t.Errorf("GET of a key naming no limit: %d %s, want 404 with a warning", code, resp)
		}
	})
}

// An override that raises a sliding log's limit past what one memcached
// item holds is set, with a warning in the answer and a WARN event (the
// keys would fail once their state outgrows an item); one that fits has
// none.
func TestOverrideWarnsOfMemcachedItemSize(t *testing.T) {
	addr := testserver.Memcached(t)
	if addr == "" {
		return
	}
	inner, err := memcached.Open("memcached://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	cfg, err := policy.Parse("mc.yaml", []byte("domain: mc\ndescriptors:\n  - key: log\n    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_log}\n"))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.NewEngine(cfg, inner)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, inner, server.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	admin := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(admin.Close)
	put := func(n int) []string {
		code, body, _ := do(t, "PUT", admin.URL+"/admin/api/overrides/mc/log", "application/json", []byte(fmt.Sprintf(`{"requests_per_unit":%d}`, n)))
		if code != 200 {
			t.Fatalf("override to %d: %d %s", n, code, body)
		}
		var out struct {
			Warnings []string `json:"warnings"`
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatal(err)
		}
		return out.Warnings
	}
	if ws := put(1000); len(ws) != 0 {
		t.Errorf("an override of 1000 (8 KB of log) warned: %q", ws)
	}
	want := fmt.Sprintf("over the servers' item size limit of %d bytes", inner.MaxItemSize())
	ws := put(1_000_000)
	if len(ws) != 1 || !strings.Contains(ws[0], "override mc/log: sliding_log with a limit of 1000000") || !strings.Contains(ws[0], want) {
		t.Fatalf("an override of 1000000 (8 MB of log): warnings %q, want one naming the rule, its limit and %q", ws, want)
	}
	var warned bool
	for _, e := range srv.Events() {
		warned = warned || e.Level == "WARN" && e.Message == ws[0]
	}
	if !warned {
		t.Errorf("no WARN event with the warning: %+v", srv.Events())
	}
	if l := eng.EffectiveLimit("mc", "log"); l == nil || l.Params().Limit != 1_000_000 {
		t.Errorf("the override is not in force: %v", l)
	}
}
