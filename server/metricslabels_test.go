package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memory"
)

// Envoy's per-descriptor limits are named after the descriptor's values,
// and took the rule labels first come: 2500 of them left a configured
// rule first used afterwards, and one a reload added, without a series
// (their decisions read rule="_other"). The server tells the metrics the
// configuration in force, whose rules are always labelled.
func TestConfiguredRuleLabelsSurviveRequestLimits(t *testing.T) {
	const yaml = `
domain: api
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: second, requests_per_unit: 100}
  - key: tenant
    rate_limit: {name: per-tenant, unit: second, requests_per_unit: 100}
`
	cfg, err := policy.Parse("r.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	st, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, st)
	if err != nil {
		t.Fatal(err)
	}
	rls := srv.RLS()
	ctx := context.Background()
	const flood = metrics.MaxSeries + 500
	for i := range flood {
		req := envoyReq("api", 0, []string{"client", fmt.Sprintf("L%d", i)})
		req.Descriptors[0].Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}
		if _, err := rls.ShouldRateLimit(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	reloaded, err := policy.Parse("r.yaml", []byte(yaml+`
  - key: user
    rate_limit: {name: per-user-new, unit: second, requests_per_unit: 100}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.SetConfig(reloaded); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tenant", "user"} {
		if _, err := rls.ShouldRateLimit(ctx, envoyReq("api", 0, []string{k, "a"})); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	srv.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`floodgate_decisions_total{domain="api",outcome="ok",rule="per-tenant"} 1`,
		`floodgate_decisions_total{domain="api",outcome="ok",rule="per-user-new"} 1`,
		fmt.Sprintf(`floodgate_decisions_total{domain="api",outcome="ok",rule=%q} %d`, metrics.RequestLimitLabel, flood),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(text, "client_L") {
		t.Error("a per-descriptor limit's name is a rule label")
	}
}
