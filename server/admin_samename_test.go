package server_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/floodgate/floodgate/server"
)

// TestAdminConfigEffectiveOfSameNamedRules: two rules that share a name
// each show the limit they are decided with in GET /admin/api/config,
// before and after an override of that name (which keeps each rule's
// unit). The second rule showed the first's (10/1m0s, then 3/1m0s)
// where its decisions used 500/1h0m0s, then 3/1h0m0s.
func TestAdminConfigEffectiveOfSameNamedRules(t *testing.T) {
	srv := serverFor(t, `
domain: t
descriptors:
  - key: a
    rate_limit: {name: same, unit: minute, requests_per_unit: 10}
  - key: b
    rate_limit: {name: same, unit: hour, requests_per_unit: 500}
`)
	admin := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(admin.Close)
	effective := func() []string {
		t.Helper()
		code, body, _ := do(t, "GET", admin.URL+"/admin/api/config", "", nil)
		var v server.ConfigView
		if err := json.Unmarshal(body, &v); code != 200 || err != nil || len(v.Domains) != 1 || len(v.Domains[0].Rules) != 2 {
			t.Fatalf("GET config = %d %s", code, body)
		}
		return []string{v.Domains[0].Rules[0].Effective, v.Domains[0].Rules[1].Effective}
	}
	if got := effective(); got[0] != "fixed_window 10/1m0s" || got[1] != "fixed_window 500/1h0m0s" {
		t.Errorf("effective limits %q, want [fixed_window 10/1m0s fixed_window 500/1h0m0s]", got)
	}
	if code, body, _ := do(t, "PUT", admin.URL+"/admin/api/overrides/t/same", "application/json", []byte(`{"requests_per_unit":3}`)); code != 200 {
		t.Fatalf("PUT override = %d %s", code, body)
	}
	if got := effective(); got[0] != "fixed_window 3/1m0s" || got[1] != "fixed_window 3/1h0m0s" {
		t.Errorf("after an override of 3: effective limits %q, want [fixed_window 3/1m0s fixed_window 3/1h0m0s]", got)
	}
}
