package metrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
)

const priorityYAML = `
domain: api
priorities: [high, low]
default_priority: low
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: second, requests_per_unit: 100}
---
domain: batch
priorities: [urgent, bulk]
descriptors:
  - key: job
    rate_limit: {name: per-job, unit: second, requests_per_unit: 100}
---
domain: plain
descriptors:
  - key: client
    rate_limit: {name: plain-client, unit: second, requests_per_unit: 100}
`

// A request whose priority names no class of its domain is decided in the
// default class (policy.Response.PriorityUnknown); nothing counted it, so
// a client's typo, or classes renamed in the configuration, read only as
// lowest-priority traffic. priority_unknown_total{domain} counts them, once
// per request whatever its descriptors, at 0 from the start for each
// domain that declares classes, and a reload that removes the domain
// removes its series.
func TestPriorityUnknownTotal(t *testing.T) {
	e := frozenEngine(t, priorityYAML)
	m := metrics.New()
	m.SetConfigSource(e.Config)
	text := scrape(t, m)
	for _, want := range []string{
		`floodgate_priority_unknown_total{domain="api"} 0`,
		`floodgate_priority_unknown_total{domain="batch"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s before any request", want)
		}
	}
	if strings.Contains(text, `floodgate_priority_unknown_total{domain="plain"}`) {
		t.Error("a domain without priority classes has a priority_unknown_total series")
	}

	ctx := context.Background()
	client := []policy.Entry{{Key: "client", Value: "a"}}
	decide := func(prio string, descs int) {
		t.Helper()
		req := policy.Request{Domain: "api", Priority: prio}
		for range descs {
			req.Descriptors = append(req.Descriptors, policy.Descriptor{Entries: client})
		}
		resp, err := e.Decide(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		m.Decided("api", &resp)
	}
	decide("hgih", 2) // unknown, two descriptors: one request
	decide(" High ", 1)
	decide("", 1)
	decide("urgent", 1) // batch's class, not api's
	text = scrape(t, m)
	for _, want := range []string{
		`floodgate_priority_unknown_total{domain="api"} 2`,
		`floodgate_priority_unknown_total{domain="batch"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	if err := e.SetConfig(mustParse(t, `
domain: api
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: second, requests_per_unit: 100}
`)); err != nil {
		t.Fatal(err)
	}
	m.ConfigReloaded(true)
	text = scrape(t, m)
	if strings.Contains(text, `floodgate_priority_unknown_total{domain="batch"}`) {
		t.Error("a removed domain's priority_unknown_total stays")
	}
	// The domain stays (its series too, at what it counted): only its
	// classes went.
	if !strings.Contains(text, `floodgate_priority_unknown_total{domain="api"} 2`) {
		t.Errorf("api's priority_unknown_total went back:\n%s", grepLines(text, "priority_unknown"))
	}
}

// Counting a request of an unknown class allocates nothing once its
// series exists, and a request of a known class costs one field test.
func TestPriorityUnknownDoesNotAllocate(t *testing.T) {
	cfg, err := policy.Parse("srv.yaml", []byte(priorityYAML))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	m.SetConfigSource(func() *policy.Config { return cfg })
	st := []policy.Status{{Code: policy.CodeOK, Matched: true, Rule: "per-client", Decision: algo.Decision{Allowed: true, Limit: 100, Remaining: 50}}}
	unknown := policy.Response{Code: policy.CodeOK, Priority: "low", PriorityUnknown: true, Statuses: st}
	known := policy.Response{Code: policy.CodeOK, Priority: "high", Statuses: st}
	m.Decided("api", &unknown)
	m.Decided("api", &known)
	if n := testing.AllocsPerRun(200, func() { m.Decided("api", &unknown); m.Decided("api", &known) }); n != 0 {
		t.Errorf("Decided: %v allocations, want 0", n)
	}
	// One before, AllocsPerRun's warm-up run and its 200.
	if text := scrape(t, m); !strings.Contains(text, `floodgate_priority_unknown_total{domain="api"} 202`) {
		t.Errorf("after 202 requests of an unknown class:\n%s", grepLines(text, "priority_unknown"))
	}
}
