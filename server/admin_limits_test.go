package server_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/server"
)

// TestAdminRefusesLimitsThatDoNotCompile: a scale, override or override
// removal whose resulting limit does not compile answers 400 saying why,
// and the limit in force stays.
func TestAdminRefusesLimitsThatDoNotCompile(t *testing.T) {
	srv := serverFor(t, `
domain: t
descriptors:
  - key: k
    rate_limit: {name: daily, algorithm: token_bucket, unit: day, requests_per_unit: 100000}
`)
	admin := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(admin.Close)

	effective := func() string {
		t.Helper()
		code, body, _ := do(t, "GET", admin.URL+"/admin/api/config", "", nil)
		var v server.ConfigView
		if err := json.Unmarshal(body, &v); code != 200 || err != nil {
			t.Fatalf("GET config = %d %s", code, body)
		}
		return v.Domains[0].Rules[0].Effective
	}
	for _, step := range []struct {
		method, path, body string
		code               int
		says               []string
		effective          string
	}{
		{"PUT", "scales/t/daily", `{"factor":1.05}`, 400, []string{"t/daily", "105000", "2^53"}, "token_bucket 100000/24h0m0s"},
		{"PUT", "scales/t/daily", `{"factor":0.5}`, 200, nil, "token_bucket 50000/24h0m0s"},
		{"PUT", "overrides/t/daily", `{"requests_per_unit":150000,"period":"24h"}`, 200, nil, "token_bucket 75000/24h0m0s"},
		{"PUT", "scales/t/daily", `{"factor":1}`, 400, []string{"t/daily", "150000", "2^53"}, "token_bucket 75000/24h0m0s"},
		{"PUT", "overrides/t/daily", `{"requests_per_unit":1000}`, 200, nil, "token_bucket 500/24h0m0s"},
		{"PUT", "scales/t/daily", `{"factor":5}`, 200, nil, "token_bucket 5000/24h0m0s"},
		{"DELETE", "overrides/t/daily", "", 400, []string{"t/daily", "500000", "2^53"}, "token_bucket 5000/24h0m0s"},
	} {
		code, body, _ := do(t, step.method, admin.URL+"/admin/api/"+step.path, "application/json", []byte(step.body))
		if code != step.code {
			t.Fatalf("%s %s %s = %d %s, want %d", step.method, step.path, step.body, code, body, step.code)
		}
		for _, s := range step.says {
			if !strings.Contains(string(body), s) {
				t.Errorf("%s %s %s: %s does not say %q", step.method, step.path, step.body, body, s)
			}
		}
		if got := effective(); got != step.effective {
			t.Errorf("after %s %s %s: effective %q, want %q", step.method, step.path, step.body, got, step.effective)
		}
	}
	code, body, _ := do(t, "GET", admin.URL+"/admin/api/adaptive", "", nil)
	if code != 200 || !strings.Contains(string(body), `"factor":5`) {
		t.Errorf("GET adaptive = %d %s, want the scale 5 in force", code, body)
	}
}
