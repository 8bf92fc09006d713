package server_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/policy"
)

const adaptiveAdminYAML = `
domain: d
descriptors:
  - key: k
    rate_limit:
      name: db
      unit: second
      requests_per_unit: 1000
      adaptive: {initial: 0.5, latency_threshold: 250ms}
  - key: p
    rate_limit: {name: plain, unit: second, requests_per_unit: 10}
`

func factorGauge(t *testing.T, e *env) string {
	t.Helper()
	_, body, _ := do(t, "GET", e.admin.URL+"/metrics", "", nil)
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "floodgate_adaptive_rate_factor{") {
			return l
		}
	}
	return ""
}

// TestAdaptiveFactorGauge: floodgate_adaptive_rate_factor states the
// factor in force from the start, after a manual scale and its removal,
// and after a reload; it leaves with the adaptive block.
func TestAdaptiveFactorGauge(t *testing.T) {
	e := newEnvFor(t, mustParseCfg(t, adaptiveAdminYAML))
	want := func(step, line string) {
		t.Helper()
		if got := factorGauge(t, e); got != line {
			t.Errorf("%s: gauge %q, want %q", step, got, line)
		}
	}
	want("start", `floodgate_adaptive_rate_factor{domain="d",rule="db"} 0.5`)
	if code, body, _ := do(t, "PUT", e.admin.URL+"/admin/api/scales/d/db", "application/json", []byte(`{"factor":0.05,"reason":"incident 42"}`)); code != 200 {
		t.Fatalf("PUT scale = %d %s", code, body)
	}
	want("manual scale", `floodgate_adaptive_rate_factor{domain="d",rule="db"} 0.05`)
	if code, body, _ := do(t, "DELETE", e.admin.URL+"/admin/api/scales/d/db", "", nil); code != 204 {
		t.Fatalf("DELETE scale = %d %s", code, body)
	}
	want("scale removed", `floodgate_adaptive_rate_factor{domain="d",rule="db"} 0.1`)
	if code, _, _ := do(t, "DELETE", e.admin.URL+"/admin/api/scales/d/db", "", nil); code != 404 {
		t.Errorf("DELETE again = %d, want 404", code)
	}
	reload := func(yaml string) {
		t.Helper()
		err := e.eng.SetConfig(mustParseCfg(t, yaml))
		e.srv.ConfigReloaded(err)
		if err != nil {
			t.Fatal(err)
		}
	}
	// A rule renamed is a new rule: its gauge starts at its initial factor.
	reload(strings.Replace(adaptiveAdminYAML, "name: db", "name: db2", 1))
	want("reload", `floodgate_adaptive_rate_factor{domain="d",rule="db2"} 0.5`)
	reload(strings.Replace(adaptiveAdminYAML, "adaptive: {initial: 0.5, latency_threshold: 250ms}", "", 1))
	want("block removed", "")
}

// TestAdminAdaptiveView: GET /admin/api/adaptive states each adaptive
// rule's effective settings, its last step (with its reason when nothing
// moved), the samples so far and whether a manual scale pauses it.
func TestAdminAdaptiveView(t *testing.T) {
	e := newEnvFor(t, mustParseCfg(t, adaptiveAdminYAML))
	for range 3 {
		if err := e.eng.Observe("d", "db", time.Millisecond, false); err != nil {
			t.Fatal(err)
		}
	}
	e.eng.StepAdaptive(time.Date(2025, 1, 1, 0, 0, 1, 0, time.UTC))
	e.eng.Observe("d", "db", time.Millisecond, false)
	get := func() map[string]any {
		t.Helper()
		code, body, _ := do(t, "GET", e.admin.URL+"/admin/api/adaptive", "", nil)
		if code != 200 {
			t.Fatalf("GET adaptive = %d %s", code, body)
		}
		var out struct {
			Adaptive []map[string]any `json:"adaptive"`
		}
		if err := json.Unmarshal(body, &out); err != nil || len(out.Adaptive) != 1 {
			t.Fatalf("GET adaptive: %s (%v)", body, err)
		}
		return out.Adaptive[0]
	}
	v := get()
	b, _ := json.Marshal(v)
	for _, s := range []string{`"status":"active"`, `"samples_in_window":1`, `"interval":"1s"`, `"decrease":0.7`, `"min_samples":10`,
		`"latency_threshold":"250ms"`, `"reason":"too few samples: 3 \u003c 10"`, `"factor":0.5`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("adaptive view %s does not say %s", b, s)
		}
	}
	if code, body, _ := do(t, "PUT", e.admin.URL+"/admin/api/scales/d/db", "application/json", []byte(`{"factor":0.25,"reason":"incident 42"}`)); code != 200 {
		t.Fatalf("PUT scale = %d %s", code, body)
	}
	if v := get(); v["status"] != "paused by a manual scale: incident 42" || v["manual"] != true || v["factor"] != 0.25 {
		t.Errorf("after a manual scale: %v", v)
	}
	// Factor 1 removes the manual scale: the controller resumes at 0.25.
	if code, body, _ := do(t, "PUT", e.admin.URL+"/admin/api/scales/d/db", "application/json", []byte(`{"factor":1}`)); code != 200 {
		t.Fatalf("PUT scale 1 = %d %s", code, body)
	}
	if v := get(); v["status"] != "active" || v["factor"] != 0.25 {
		t.Errorf("after removing the scale: %v", v)
	}
}

func mustParseCfg(t *testing.T, yaml string) *policy.Config {
	t.Helper()
	cfg, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestObserveLatencyRequired: a sample without latency_ms is refused (it
// would count as 0ms and pull the quantile down), and a mistyped field is
// named as the client wrote it.
func TestObserveLatencyRequired(t *testing.T) {
	e := newEnvFor(t, mustParseCfg(t, adaptiveAdminYAML))
	for _, tc := range []struct{ body, want string }{
		{`{"domain":"d","rule":"db"}`, `the sample: latency_ms: required`},
		{`{"domain":"d","rule":"db","failed":true}`, `the sample: latency_ms: required`},
		{`{"samples":[{"domain":"d","rule":"db","latency_ms":1},{"domain":"d","rule":"db","failed":true}]}`, `samples[1]: latency_ms: required`},
		{`{"domain":"d","rule":"db","latency_ms":"5"}`, `field \"latency_ms\": want a number`},
	} {
		code, body, _ := do(t, "POST", e.http.URL+"/v1/observe", "application/json", []byte(tc.body))
		if code != 400 || !strings.Contains(string(body), tc.want) || strings.Contains(string(body), "V1Sample") {
			t.Errorf("POST %s = %d %s, want 400 saying %q", tc.body, code, body, tc.want)
		}
	}
	if st := e.eng.AdaptiveStates(); st[0].Pending != 0 {
		t.Errorf("%d samples recorded, want none", st[0].Pending)
	}
	if code, body, _ := do(t, "POST", e.http.URL+"/v1/observe", "application/json", []byte(`{"domain":"d","rule":"db","latency_ms":0}`)); code != 204 {
		t.Errorf("latency_ms 0: %d %s, want 204", code, body)
	}
}

// TestDashboardShowsOverrides: the dashboard's poll lists the runtime
// overrides, and the page shows them and does not claim every rule is at
// its configured limit when no rate is scaled.
func TestDashboardShowsOverrides(t *testing.T) {
	e := newEnvFor(t, mustParseCfg(t, adaptiveAdminYAML))
	for _, rule := range []string{"db", "plain"} {
		if code, body, _ := do(t, "PUT", e.admin.URL+"/admin/api/overrides/d/"+rule, "application/json", []byte(`{"requests_per_unit":5}`)); code != 200 {
			t.Fatalf("PUT override: %d %s", code, body)
		}
	}
	_, body, _ := do(t, "GET", e.admin.URL+"/admin/api/stats", "", nil)
	var st struct {
		Overrides    int `json:"overrides"`
		OverrideList []struct {
			Domain, Rule string
			Active       bool
		} `json:"override_list"`
	}
	if err := json.Unmarshal(body, &st); err != nil || st.Overrides != 2 || len(st.OverrideList) != 2 || st.OverrideList[1].Rule != "plain" || !st.OverrideList[1].Active {
		t.Errorf("stats: %s (%v), want the 2 overrides listed", body, err)
	}
	_, page, _ := do(t, "GET", e.admin.URL+"/dashboard", "", nil)
	if !strings.Contains(string(page), "s.override_list") || strings.Contains(string(page), "every rule at its configured limit") {
		t.Errorf("the page does not show the overrides, or claims every rule is at its configured limit")
	}
}
