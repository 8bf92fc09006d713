package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
)

// The failure policy's decisions (Response.StoreFallback) count as
// fallback_ok and fallback_refused, not ok and over_limit, and no
// near-limit or shadow decision; a requests_per_unit: 0 rule's refusal,
// which no store makes, stays over_limit. Recording them allocates
// nothing once their series exist.
func TestFallbackOutcomes(t *testing.T) {
	cfg, err := policy.Parse("srv.yaml", []byte(labelsYAML))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	m.SetConfigSource(func() *policy.Config { return cfg })
	refused := policy.Response{Code: policy.CodeOverLimit, StoreFallback: true, Statuses: []policy.Status{
		{Code: policy.CodeOverLimit, Matched: true, Rule: "per-client", RuleLimit: lim, Decision: algo.Decision{Limit: 100}},
		{Code: policy.CodeOverLimit, Matched: true, Rule: "per-tenant"}, // a deny rule: no RuleLimit
	}}
	admitted := policy.Response{Code: policy.CodeOK, StoreFallback: true, Statuses: []policy.Status{
		{Code: policy.CodeOK, Matched: true, Rule: "per-client", RuleLimit: lim, Shadow: true,
			Decision: algo.Decision{Allowed: true, Limit: 100, Remaining: 1}},
	}}
	m.Decided("api", &refused)
	m.Decided("api", &admitted)
	if n := testing.AllocsPerRun(100, func() { m.Decided("api", &refused); m.Decided("api", &admitted) }); n != 0 {
		t.Errorf("Decided of the failure policy's decisions: %v allocations, want 0", n)
	}
	text := scrape(t, m)
	for _, want := range []string{
		`floodgate_decisions_total{domain="api",outcome="fallback_refused",rule="per-client"} 102`,
		`floodgate_decisions_total{domain="api",outcome="fallback_ok",rule="per-client"} 102`,
		`floodgate_decisions_total{domain="api",outcome="over_limit",rule="per-tenant"} 102`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, no := range []string{`outcome="over_limit",rule="per-client"`, `outcome="ok",rule="per-client"`,
		`floodgate_near_limit_total{domain="api",rule="per-client"} 1`} {
		if strings.Contains(text, no) {
			t.Errorf("metrics have %s: the failure policy's decisions counted as the limit's", no)
		}
	}
	if s := m.Summary(); s.Decisions[metrics.OutcomeFallbackRefused] != 102 || s.Decisions[metrics.OutcomeFallbackOK] != 102 {
		t.Errorf("Summary: %v, want 102 fallback_refused and fallback_ok", s.Decisions)
	}
}
