package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/resilient"
)

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestDecisionsByOutcome(t *testing.T) {
	m := metrics.New()
	resp := policy.Response{Code: policy.CodeOverLimit, Statuses: []policy.Status{
		{Code: policy.CodeOK, Matched: true, Rule: "per-user", Decision: algo.Decision{Allowed: true, Limit: 100, Remaining: 10}},
		{Code: policy.CodeOverLimit, Matched: true, Rule: "per-ip", Decision: algo.Decision{Limit: 5}},
		{Code: policy.CodeOK, Matched: true, Rule: "beta", Shadow: true, Decision: algo.Decision{Limit: 5}},
		{Code: policy.CodeOK, Matched: true, Rule: "internal", Unlimited: true},
		{Code: policy.CodeOK},
	}}
	m.Decided("api", &resp)
	m.Request("grpc", "OVER_LIMIT", time.Millisecond)
	text := scrape(t, m)
	for _, want := range []string{
		`floodgate_decisions_total{domain="api",outcome="ok",rule="per-user"} 1`,
		`floodgate_decisions_total{domain="api",outcome="over_limit",rule="per-ip"} 1`,
		`floodgate_decisions_total{domain="api",outcome="shadow_over_limit",rule="beta"} 1`,
		`floodgate_decisions_total{domain="api",outcome="unlimited",rule="internal"} 1`,
		`floodgate_decisions_total{domain="api",outcome="no_rule",rule=""} 1`,
		`floodgate_shadow_decisions_total{domain="api",rule="beta"} 1`,
		`floodgate_near_limit_total{domain="api",rule="per-user"} 1`,
		`floodgate_requests_total{code="OVER_LIMIT",transport="grpc"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	s := m.Summary()
	if s.Decisions["ok"] != 1 || s.Decisions["over_limit"] != 1 || len(s.Rules) != 4 {
		t.Errorf("summary %+v", s)
	}
}

func TestStoreHooks(t *testing.T) {
	m := metrics.New()
	h := m.StoreHooks()
	h.Call("take", 2*time.Millisecond, nil)
	h.Call("take", 60*time.Millisecond, errors.New("down"))
	h.State(resilient.Closed, resilient.Open)
	h.PartitionState(resilient.PartitionChange{Partition: 3, Name: "slots 768-1023", From: resilient.Closed, To: resilient.Open, Open: 2, Partitions: 64})
	h.Fallback("take", resilient.FailLocal, errors.New("down"))
	h.CacheHit()
	m.SetQueueDepth(func() int { return 7 })
	m.ConfigReloaded(true)
	m.ConfigReloaded(false)
	text := scrape(t, m)
	for _, want := range []string{
		`floodgate_store_errors_total{op="take"} 1`,
		`floodgate_store_duration_seconds_count{op="take"} 2`,
		`floodgate_circuit_state 1`,
		`floodgate_circuit_open_partitions 2`,
		`floodgate_store_fallbacks_total{op="take",policy="local"} 1`,
		`floodgate_over_limit_cache_hits_total 1`,
		`floodgate_queue_depth 7`,
		`floodgate_config_reloads_total{result="failure"} 1`,
		`floodgate_config_reloads_total{result="success"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	s := m.Summary()
	if s.Circuit != "open" || s.OpenPartitions != 2 || s.StoreCalls != 2 || s.StoreErrors != 1 || s.QueueDepth != 7 || s.StoreP99 <= s.StoreP50 {
		t.Errorf("summary %+v", s)
	}
}

func TestRuleLabelsAreBounded(t *testing.T) {
	m := metrics.New()
	for i := range metrics.MaxSeries + 10 {
		resp := policy.Response{Statuses: []policy.Status{{Code: policy.CodeOK, Matched: true, Rule: "r" + string(rune('a'+i%26)) + strings.Repeat("x", i)}}}
		m.Decided("d", &resp)
	}
	s := m.Summary()
	var other float64
	for _, r := range s.Rules {
		if r.Rule == "_other" {
			other = r.Outcomes["ok"]
		}
	}
	if len(s.Rules) != metrics.MaxSeries+1 || other != 10 {
		t.Fatalf("%d rule series with %v under _other, want %d and 10", len(s.Rules), other, metrics.MaxSeries+1)
	}
}

// TestShadowInHierarchy decides with an Engine on a memory store and a
// frozen clock. A shadow rule under an enforced root (its status's
// Decision is the root's, which admits) reports its would-be refusals —
// its rate's and its priority pool's, once per request, under its own
// name — and an enforced child under it keeps its own outcomes: the
// parent's refusals of the child's admitted requests count for the parent,
// and a request the child itself refused counts no shadow refusal.
func TestShadowInHierarchy(t *testing.T) {
	const yaml = `
domain: srv
hierarchy: true
priorities: [high, low]
rate_limit: {name: global, unit: minute, requests_per_unit: 100}
descriptors:
  - key: sh
    shadow_mode: true
    rate_limit: {name: shadowed, unit: minute, requests_per_unit: 4, reserve: {low: 0.5}}
    descriptors:
      - key: child
        shadow_mode: false
        rate_limit: {name: enforced-child, unit: minute, requests_per_unit: 5}
`
	e := frozenEngine(t, yaml)
	m := metrics.New()
	decide := func(entries ...policy.Entry) policy.Response {
		t.Helper()
		resp, err := e.Decide(context.Background(), policy.Request{Domain: "srv", Descriptors: []policy.Descriptor{{Entries: entries}}})
		if err != nil {
			t.Fatal(err)
		}
		m.Decided("srv", &resp)
		return resp
	}
	// The shadow rule on its own (low class: its pool admits 2, its rate
	// 4): requests 3 and 4 are refused by the pool, 5 by both.
	for i := 1; i <= 5; i++ {
		if resp := decide(policy.Entry{Key: "sh", Value: "x"}); resp.Code != policy.CodeOK {
			t.Fatalf("shadow request %d: %v, want OK", i, resp.Code)
		}
	}
	// The enforced child under another shadow parent (sh=y): its 3rd to
	// 5th requests pass though the parent's pool refuses; its 6th is
	// refused by its own rate.
	for i := 1; i <= 6; i++ {
		resp := decide(policy.Entry{Key: "sh", Value: "y"}, policy.Entry{Key: "child", Value: "c"})
		if want := i <= 5; (resp.Code == policy.CodeOK) != want {
			t.Fatalf("child request %d: %v", i, resp.Code)
		}
	}
	text := scrape(t, m)
	for _, want := range []string{
		`floodgate_decisions_total{domain="srv",outcome="ok",rule="shadowed"} 2`,
		`floodgate_decisions_total{domain="srv",outcome="shadow_over_limit",rule="shadowed"} 3`,
		`floodgate_decisions_total{domain="srv",outcome="ok",rule="enforced-child"} 5`,
		`floodgate_decisions_total{domain="srv",outcome="over_limit",rule="enforced-child"} 1`,
		`floodgate_shadow_decisions_total{domain="srv",rule="shadowed"} 6`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, unwanted := range []string{`rule="shadowed/low"`, `outcome="shadow_over_limit",rule="enforced-child"`,
		`floodgate_shadow_decisions_total{domain="srv",rule="enforced-child"}`, `rule="global"`} {
		if strings.Contains(text, unwanted) {
			t.Errorf("metrics have %s", unwanted)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

// A limit's refusal counts for the rule it belongs to (LimitStatus.Rule),
// whatever the names look like: a shadow parent named "plan/gold" above an
// enforced rule "plan" is its own rule, not a derived limit of "plan" (a
// name's "plan/…" was read as plan's ceil or pool, and the parent's
// would-be refusals were counted for the child).
func TestShadowCountsForTheLimitsRule(t *testing.T) {
	const yaml = `
domain: srv
hierarchy: true
descriptors:
  - key: plan
    shadow_mode: true
    rate_limit: {name: plan/gold, unit: minute, requests_per_unit: 1}
    descriptors:
      - key: user
        shadow_mode: false
        rate_limit: {name: plan, unit: minute, requests_per_unit: 10}
`
	e := frozenEngine(t, yaml)
	m := metrics.New()
	for range 3 {
		resp, err := e.Decide(context.Background(), policy.Request{Domain: "srv", Descriptors: []policy.Descriptor{{
			Entries: []policy.Entry{{Key: "plan", Value: "p"}, {Key: "user", Value: "u"}}}}})
		if err != nil || resp.Code != policy.CodeOK {
			t.Fatalf("%v %v, want OK", resp.Code, err)
		}
		if ls := resp.Statuses[0].Limits; len(ls) != 2 || ls[0].Rule != "plan" || ls[1].Rule != "plan/gold" {
			t.Fatalf("limits %+v: want plan's, then plan/gold's", ls)
		}
		m.Decided("srv", &resp)
	}
	text := scrape(t, m)
	if want := `floodgate_shadow_decisions_total{domain="srv",rule="plan/gold"} 2`; !strings.Contains(text, want) {
		t.Errorf("metrics lack %s", want)
	}
	if unwanted := `floodgate_shadow_decisions_total{domain="srv",rule="plan"}`; strings.Contains(text, unwanted) {
		t.Errorf("metrics have %s", unwanted)
	}
	if t.Failed() {
		t.Log(text)
	}
}

// frozenEngine is an Engine over the configuration yaml (file srv.yaml) on
// a memory store, both on a clock frozen 10 s into a minute.
func frozenEngine(t *testing.T, yaml string) *policy.Engine {
	t.Helper()
	cfg, err := policy.Parse("srv.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC) }
	st, err := memory.New(memory.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e, err := policy.NewEngine(cfg, st, policy.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// The gateway's upstream failures are counted by its fixed reasons, every
// series there from the start, any other reason as "other".
func TestGatewayUpstreamErrors(t *testing.T) {
	m := metrics.New()
	if strings.Contains(scrape(t, m), "floodgate_gateway_upstream_errors_total{") {
		t.Error("series without a gateway")
	}
	count := m.GatewayUpstreamErrors()
	count(gateway.ReasonReset)
	count(gateway.ReasonReset)
	count(gateway.ReasonConnect)
	count("something new")
	text := scrape(t, m)
	for _, want := range []string{
		`floodgate_gateway_upstream_errors_total{reason="connect"} 1`,
		`floodgate_gateway_upstream_errors_total{reason="timeout"} 0`,
		`floodgate_gateway_upstream_errors_total{reason="reset"} 2`,
		`floodgate_gateway_upstream_errors_total{reason="other"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %s", want)
		}
	}
	if strings.Count(text, "floodgate_gateway_upstream_errors_total{") != 4 {
		t.Errorf("want 4 series:\n%s", text)
	}
}
