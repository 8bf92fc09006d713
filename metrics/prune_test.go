package metrics_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
)

// Configuration A: rules r1 (kept), r2 (removed; shadow, adaptive, so
// that every vector labelled by domain and rule has a series of it), r3
// (kept, loses its adaptive block) and a domain "old" (removed).
const pruneA = `
domain: api
descriptors:
  - key: client
    rate_limit: {name: r1, unit: minute, requests_per_unit: 5}
  - key: tenant
    shadow_mode: true
    rate_limit:
      name: r2
      unit: minute
      requests_per_unit: 2
      adaptive: {latency_threshold: 250ms}
  - key: user
    rate_limit:
      name: r3
      unit: minute
      requests_per_unit: 100
      adaptive: {latency_threshold: 250ms}
---
domain: old
descriptors:
  - key: client
    rate_limit: {name: o1, unit: minute, requests_per_unit: 5}
`

// Configuration B: r1 and r3 only.
const pruneB = `
domain: api
descriptors:
  - key: client
    rate_limit: {name: r1, unit: minute, requests_per_unit: 5}
  - key: user
    rate_limit: {name: r3, unit: minute, requests_per_unit: 100}
`

// A reload that removed a rule or a domain left its series on /metrics
// for the life of the process, frozen at their last values: dashboards
// summing by rule kept counting it and alerts on it never resolved. A
// reload deletes them now, and leaves the series of the rules that stay,
// whose counters go on from where they were.
func TestReloadDeletesRemovedRulesSeries(t *testing.T) {
	e := frozenEngine(t, pruneA)
	m := metrics.New()
	m.SetConfigSource(e.Config)
	ctx := context.Background()
	decide := func(domain string, d policy.Descriptor) {
		t.Helper()
		resp, err := e.Decide(ctx, policy.Request{Domain: domain, Descriptors: []policy.Descriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		m.Decided(domain, &resp)
	}
	entry := func(k, v string) []policy.Entry { return []policy.Entry{{Key: k, Value: v}} }
	for range 6 { // r1: 5 ok (the last ones near the limit), 1 over
		decide("api", policy.Descriptor{Entries: entry("client", "a")})
	}
	for range 3 { // r2: 2 ok, 1 shadow refusal
		decide("api", policy.Descriptor{Entries: entry("tenant", "a")})
	}
	decide("api", policy.Descriptor{Entries: entry("user", "a")})
	decide("old", policy.Descriptor{Entries: entry("client", "a")})
	decide("old", policy.Descriptor{Entries: entry("nothing", "a")}) // no_rule
	decide("old", policy.Descriptor{Entries: entry("client", "b"),
		Limit: &policy.LimitOverride{RequestsPerUnit: 5, Unit: time.Minute}}) // _request_limit
	m.RateFactor("api", "r2", 0.7)
	m.RateFactor("api", "r3", 0.5)

	removed := []string{
		`floodgate_decisions_total{domain="api",outcome="ok",rule="r2"} 2`,
		`floodgate_decisions_total{domain="api",outcome="shadow_over_limit",rule="r2"} 1`,
		`floodgate_shadow_decisions_total{domain="api",rule="r2"} 1`,
		`floodgate_near_limit_total{domain="api",rule="r2"} 1`,
		`floodgate_adaptive_rate_factor{domain="api",rule="r2"} 0.7`,
		`floodgate_adaptive_rate_factor{domain="api",rule="r3"} 0.5`,
		`floodgate_decisions_total{domain="old",outcome="ok",rule="o1"} 1`,
		`floodgate_decisions_total{domain="old",outcome="no_rule",rule=""} 1`,
		`floodgate_decisions_total{domain="old",outcome="ok",rule="_request_limit"} 1`,
	}
	kept := []string{
		`floodgate_decisions_total{domain="api",outcome="ok",rule="r1"} 5`,
		`floodgate_decisions_total{domain="api",outcome="over_limit",rule="r1"} 1`,
		`floodgate_near_limit_total{domain="api",rule="r1"} 1`,
		`floodgate_decisions_total{domain="api",outcome="ok",rule="r3"} 1`,
	}
	text := scrape(t, m)
	for _, want := range append(removed, kept...) {
		if !strings.Contains(text, want) {
			t.Fatalf("before the reload, metrics lack %s:\n%s", want, grepLines(text, `domain="`))
		}
	}

	b, err := policy.Parse("srv.yaml", []byte(pruneB))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetConfig(b); err != nil {
		t.Fatal(err)
	}
	text = scrape(t, m)
	for _, gone := range removed {
		series, _, _ := strings.Cut(gone, "} ")
		if strings.Contains(text, series+"}") {
			t.Errorf("after the reload, metrics still have %s", gone)
		}
	}
	for _, want := range kept {
		if !strings.Contains(text, want) {
			t.Errorf("after the reload, metrics lack %s", want)
		}
	}
	if strings.Contains(text, `rule="r2"`) || strings.Contains(text, `domain="old"`) {
		t.Errorf("series of r2 or of domain old remain")
	}

	// The kept counters go on; r2 and "old" come back from 0 with a rule
	// of theirs in a later configuration.
	decide("api", policy.Descriptor{Entries: entry("user", "a")})
	if err := e.SetConfig(mustParse(t, pruneA)); err != nil {
		t.Fatal(err)
	}
	decide("api", policy.Descriptor{Entries: entry("tenant", "b")})
	text = scrape(t, m)
	for _, want := range []string{
		`floodgate_decisions_total{domain="api",outcome="ok",rule="r1"} 5`,
		`floodgate_decisions_total{domain="api",outcome="ok",rule="r3"} 2`,
		`floodgate_decisions_total{domain="api",outcome="ok",rule="r2"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("after a second reload, metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Log(grepLines(text, `domain="`))
	}
}

// The reload deletes the series when it happens (ConfigReloaded, or the
// first decision or scrape after it), and the dashboard's summary does not
// list removed rules either.
func TestSummaryAfterReloadLacksRemovedRules(t *testing.T) {
	e := frozenEngine(t, pruneA)
	m := metrics.New()
	m.SetConfigSource(e.Config)
	resp, err := e.Decide(context.Background(), policy.Request{Domain: "api",
		Descriptors: []policy.Descriptor{{Entries: []policy.Entry{{Key: "tenant", Value: "a"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	m.Decided("api", &resp)
	if err := e.SetConfig(mustParse(t, pruneB)); err != nil {
		t.Fatal(err)
	}
	m.ConfigReloaded(true)
	for _, r := range m.Summary().Rules {
		if r.Rule == "r2" {
			t.Errorf("summary after the reload lists %s/%s: %v", r.Domain, r.Rule, r.Outcomes)
		}
	}
}

// Decisions race reloads that remove and restore a rule and a domain
// (under -race: the pruning and the decisions' lock-free paths share the
// caches): once the configuration without them is in force and scraped, no
// series of theirs is left, and the counter of the rule that stays counted
// every decision. The interleaving in which a decision would make a
// removed series again is pinned by TestStaleSeriesNotMadeAgain.
func TestReloadRacingDecisions(t *testing.T) {
	e := frozenEngine(t, pruneA)
	m := metrics.New()
	m.SetConfigSource(e.Config)
	a, b := mustParse(t, pruneA), mustParse(t, pruneB)
	const workers, rounds = 8, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				resp := policy.Response{Statuses: []policy.Status{
					{Code: policy.CodeOK, Matched: true, Rule: "r1"},
					{Code: policy.CodeOK, Matched: true, Rule: "r2"},
					{Code: policy.CodeOK},
				}}
				domain := "api"
				if (w+i)%2 == 0 {
					domain = "old"
					resp.Statuses = resp.Statuses[2:]
				}
				m.Decided(domain, &resp)
			}
		})
	}
	wg.Go(func() {
		for i := range rounds {
			cfg := a
			if i%2 == 0 {
				cfg = b
			}
			if err := e.SetConfig(cfg); err != nil {
				t.Error(err)
				return
			}
			m.ConfigReloaded(true)
		}
	})
	wg.Wait()
	if err := e.SetConfig(b); err != nil {
		t.Fatal(err)
	}
	text := scrape(t, m)
	if strings.Contains(text, `rule="r2"`) || strings.Contains(text, `domain="old"`) {
		t.Errorf("series of a removed rule or domain left after racing reloads:\n%s", grepLines(text, `domain="`))
	}
	want := fmt.Sprintf(`floodgate_decisions_total{domain="api",outcome="ok",rule="r1"} %d`, workers*rounds/2)
	if !strings.Contains(text, want) {
		t.Errorf("metrics lack %s:\n%s", want, grepLines(text, `rule="r1"`))
	}
}

func mustParse(t *testing.T, yaml string) *policy.Config {
	t.Helper()
	cfg, err := policy.Parse("srv.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
