package metrics_test

import (
	"strings"
	"testing"

	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/resilient"
)

const zeroYAML = `
domain: api
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: second, requests_per_unit: 100}
  - key: tenant
    rate_limit: {name: per-tenant, unit: second, requests_per_unit: 100}
    shadow_mode: true
  - key: ldap
    rate_limit: {name: free, unlimited: true}
`

// The counters an alert takes increase() or rate() of exist at 0 before
// their first event: store_errors_total of every store operation and
// store_fallbacks_total under the configured policy (StoreSeries), and
// near_limit_total and shadow_decisions_total of the configured rules. They
// used to appear with their first increment, which increase() over the
// window that holds it does not see. A reload that removes a rule removes
// its series.
func TestCountersAtZeroFromTheStart(t *testing.T) {
	cfg := mustParse(t, zeroYAML)
	current := cfg
	m := metrics.New()
	m.SetConfigSource(func() *policy.Config { return current })
	m.StoreSeries(resilient.FailClosed)
	text := scrape(t, m)
	for _, want := range []string{
		`floodgate_store_errors_total{op="take"} 0`,
		`floodgate_store_errors_total{op="ping"} 0`,
		`floodgate_store_fallbacks_total{op="take",policy="closed"} 0`,
		`floodgate_near_limit_total{domain="api",rule="per-client"} 0`,
		`floodgate_near_limit_total{domain="api",rule="per-tenant"} 0`,
		`floodgate_shadow_decisions_total{domain="api",rule="per-tenant"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s before any event", want)
		}
	}
	for _, no := range []string{`rule="free"`, `shadow_decisions_total{domain="api",rule="per-client"}`, `policy="open"`} {
		if strings.Contains(text, no) {
			t.Errorf("metrics have a series that cannot count: %s", no)
		}
	}
	current = mustParse(t, `
domain: api
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: second, requests_per_unit: 100}
`)
	m.ConfigReloaded(true)
	text = scrape(t, m)
	if strings.Contains(text, `rule="per-tenant"`) || !strings.Contains(text, `floodgate_near_limit_total{domain="api",rule="per-client"} 0`) {
		t.Errorf("after a reload removing per-tenant:\n%s", grepLines(text, `domain="api"`))
	}
}
