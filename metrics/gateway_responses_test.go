package metrics_test

import (
	"strings"
	"testing"

	"github.com/floodgate/floodgate/metrics"
)

// The gateway's responses are counted by status and by who answered; the
// gateway's own statuses have series at 0 from the start, a status outside
// 100–599 is "other", and counting allocates nothing.
func TestGatewayResponses(t *testing.T) {
	m := metrics.New()
	if strings.Contains(scrape(t, m), "floodgate_gateway_responses_total{") {
		t.Error("series without a gateway")
	}
	count := m.GatewayResponses()
	count("api", 200, true)
	count("api", 200, true)
	count("api", 429, false)
	count("", 410, true)
	count("", 42, false)
	text := scrape(t, m)
	for _, want := range []string{
		`floodgate_gateway_responses_total{by="upstream",code="200"} 2`,
		`floodgate_gateway_responses_total{by="floodgate",code="429"} 1`,
		`floodgate_gateway_responses_total{by="upstream",code="410"} 1`,
		`floodgate_gateway_responses_total{by="floodgate",code="other"} 1`,
		`floodgate_gateway_responses_total{by="floodgate",code="400"} 0`,
		`floodgate_gateway_responses_total{by="floodgate",code="502"} 0`,
		`floodgate_gateway_responses_total{by="floodgate",code="503"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %s", want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { count("api", 200, true); count("api", 429, false) }); n != 0 {
		t.Errorf("%v allocations per response, want 0", n)
	}
}
