package metrics_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
)

const labelsYAML = `
domain: api
descriptors:
  - key: client
    rate_limit: {name: per-client, unit: second, requests_per_unit: 100}
  - key: tenant
    rate_limit: {name: per-tenant, unit: second, requests_per_unit: 100}
`

// Limits that requests carry are named after their values ("client_L17"),
// and each took one of the MaxSeries labels given out first come: after
// 2500 of them, a configured rule first used later, or one a reload added,
// had no series of its own (its decisions read "_other"), and alerts on it
// never fired. The configured rules are labelled whatever requests bring;
// the requests' limits share one label.
func TestConfiguredRulesKeepTheirLabels(t *testing.T) {
	e := frozenEngine(t, labelsYAML)
	m := metrics.New()
	m.SetConfigSource(e.Config)
	ctx := context.Background()
	decide := func(d policy.Descriptor) {
		t.Helper()
		resp, err := e.Decide(ctx, policy.Request{Domain: "api", Descriptors: []policy.Descriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		m.Decided("api", &resp)
	}
	entry := func(k, v string) []policy.Entry { return []policy.Entry{{Key: k, Value: v}} }
	decide(policy.Descriptor{Entries: entry("client", "a")})
	const flood = metrics.MaxSeries + 500
	for i := range flood {
		decide(policy.Descriptor{Entries: entry("client", fmt.Sprintf("L%d", i)),
			Limit: &policy.LimitOverride{RequestsPerUnit: 5, Unit: time.Minute}})
	}
	decide(policy.Descriptor{Entries: entry("tenant", "a")})
	cfg, err := policy.Parse("srv.yaml", []byte(labelsYAML+`
  - key: user
    rate_limit: {name: per-user-new, unit: second, requests_per_unit: 100}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	decide(policy.Descriptor{Entries: entry("user", "a")})
	decide(policy.Descriptor{Entries: entry("client", "b")})

	text := scrape(t, m)
	for _, want := range []string{
		`floodgate_decisions_total{domain="api",outcome="ok",rule="per-client"} 2`,
		`floodgate_decisions_total{domain="api",outcome="ok",rule="per-tenant"} 1`,
		`floodgate_decisions_total{domain="api",outcome="ok",rule="per-user-new"} 1`,
		fmt.Sprintf(`floodgate_decisions_total{domain="api",outcome="ok",rule="_request_limit"} %d`, flood),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^floodgate_decisions_total\{`).FindAllString(text, -1)); n != 4 {
		t.Errorf("%d decisions_total series, want 4 (3 configured rules and _request_limit)", n)
	}
	if t.Failed() {
		t.Log(grepLines(text, "floodgate_decisions_total"))
	}
}

// A Metrics without the configuration labels rule names first come, as it
// did: it cannot tell a configured rule from a request's limit.
func TestWithoutConfigSourceRulesAreFirstCome(t *testing.T) {
	m := metrics.New()
	for i := range metrics.MaxSeries + 1 {
		resp := policy.Response{Statuses: []policy.Status{{Code: policy.CodeOK, Matched: true, Rule: fmt.Sprintf("r%d", i)}}}
		m.Decided("d", &resp)
	}
	text := scrape(t, m)
	for _, want := range []string{
		`floodgate_decisions_total{domain="d",outcome="ok",rule="r0"} 1`,
		`floodgate_decisions_total{domain="d",outcome="ok",rule="_other"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// Recording decisions allocates nothing once their series exist, also for
// rules named after requests, which each go through the configured names.
func TestDecidedDoesNotAllocate(t *testing.T) {
	cfg, err := policy.Parse("srv.yaml", []byte(labelsYAML))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	m.SetConfigSource(func() *policy.Config { return cfg })
	resps := make([]policy.Response, 64)
	for i := range resps {
		resps[i] = policy.Response{Statuses: []policy.Status{
			{Code: policy.CodeOK, Matched: true, Rule: "per-client", Decision: algo.Decision{Allowed: true, Limit: 100, Remaining: 10}},
			{Code: policy.CodeOK, Matched: true, Rule: fmt.Sprintf("client_L%d", i), Decision: algo.Decision{Allowed: true, Limit: 5, Remaining: 0}},
			{Code: policy.CodeOK},
		}}
	}
	m.Decided("api", &resps[0])
	i := 0
	if n := testing.AllocsPerRun(200, func() { m.Decided("api", &resps[i%len(resps)]); i++ }); n != 0 {
		t.Errorf("Decided: %v allocations, want 0", n)
	}
}

// Both results of config_reloads_total are there at 0 before any reload:
// the first failure is then an increase (it used to make the series), and
// config_last_reload_successful says whether the last reload took.
func TestReloadSeriesFromTheStart(t *testing.T) {
	m := metrics.New()
	text := scrape(t, m)
	for _, want := range []string{
		`floodgate_config_reloads_total{result="failure"} 0`,
		`floodgate_config_reloads_total{result="success"} 0`,
		`floodgate_config_last_reload_successful 1`,
		`floodgate_config_last_reload_timestamp_seconds 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("before any reload, metrics lack %s", want)
		}
	}
	before := float64(time.Now().Unix())
	m.ConfigReloaded(false)
	text = scrape(t, m)
	for _, want := range []string{
		`floodgate_config_reloads_total{result="failure"} 1`,
		`floodgate_config_reloads_total{result="success"} 0`,
		`floodgate_config_last_reload_successful 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("after a failed reload, metrics lack %s", want)
		}
	}
	var ts float64
	line := regexp.MustCompile(`(?m)^floodgate_config_last_reload_timestamp_seconds .*$`).FindString(text)
	if _, err := fmt.Sscanf(line, "floodgate_config_last_reload_timestamp_seconds %g", &ts); err != nil || ts < before {
		t.Errorf("%q: want a timestamp at least %v (%v)", line, before, err)
	}
	m.ConfigReloaded(true)
	if text = scrape(t, m); !strings.Contains(text, `floodgate_config_last_reload_successful 1`) {
		t.Errorf("after a successful reload:\n%s", grepLines(text, "config_"))
	}
}

// A wait-strategy request is answered up to its max_wait later (seconds):
// the request buckets go to 10 s (they stopped at 1 s, and such requests
// all read +Inf) and keep their sub-millisecond ones.
func TestRequestDurationBuckets(t *testing.T) {
	m := metrics.New()
	m.Request("v1", "OK", 3*time.Second)
	m.Request("v1", "OK", 70*time.Microsecond)
	text := scrape(t, m)
	for _, want := range []string{
		`floodgate_request_duration_seconds_bucket{transport="v1",le="5e-05"} 0`,
		`floodgate_request_duration_seconds_bucket{transport="v1",le="0.0001"} 1`,
		`floodgate_request_duration_seconds_bucket{transport="v1",le="2.5"} 1`,
		`floodgate_request_duration_seconds_bucket{transport="v1",le="5"} 2`,
		`floodgate_request_duration_seconds_bucket{transport="v1",le="10"} 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Log(grepLines(text, "request_duration"))
	}
}

// grepLines returns text's lines that hold s.
func grepLines(text, s string) string {
	var out []string
	for l := range strings.Lines(text) {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
