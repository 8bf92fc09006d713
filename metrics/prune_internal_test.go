package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/policy"
)

// A decision that looked its rule's series up just before a reload removed
// the rule, and resolves a counter of it just after, must not make the
// series again: it would stay, frozen, for the life of the process, which
// is what the reload's pruning is for. The same for a domain's no_rule
// series.
func TestStaleSeriesNotMadeAgain(t *testing.T) {
	parse := func(yaml string) *policy.Config {
		t.Helper()
		cfg, err := policy.Parse("srv.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	a := parse("domain: api\ndescriptors:\n  - {key: a, rate_limit: {name: r1, unit: second, requests_per_unit: 1}}\n" +
		"  - {key: b, rate_limit: {name: r2, unit: second, requests_per_unit: 1}}\n---\ndomain: old\n")
	b := parse("domain: api\ndescriptors:\n  - {key: a, rate_limit: {name: r1, unit: second, requests_per_unit: 1}}\n")
	cur := a
	m := New()
	m.SetConfigSource(func() *policy.Config { return cur })
	rs := m.ruleSeries("api", "r2")
	shared := m.ruleSeries("old", "old_L1") // a request's limit in domain old
	cur = b
	m.ConfigReloaded(true)
	m.counter(rs, outOK, m.decisions, "api").Inc()
	m.counter(shared, outOK, m.decisions, "old").Inc()
	m.noRuleCounter("old").Inc()
	m.counter(m.ruleSeries("api", "r1"), outOK, m.decisions, "api").Inc()

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	if strings.Contains(text, `rule="r2"`) || strings.Contains(text, `domain="old"`) {
		t.Errorf("a removed rule's or domain's series was made again after the reload:\n%s", text)
	}
	if !strings.Contains(text, `floodgate_decisions_total{domain="api",outcome="ok",rule="r1"} 1`) {
		t.Errorf("r1's decision not counted")
	}
}

// Two reloads in a row, A → B → C, where rule r2 is in A and C but not B:
// a caller that read B before the pruning against C ran must not prune
// against B after it (r2's series would be deleted while C has it: a
// counter reset). It prunes against the configuration in force when it
// holds the lock.
func TestStaleConfigNotPrunedAfterItsSuccessor(t *testing.T) {
	parse := func(yaml string) *policy.Config {
		t.Helper()
		cfg, err := policy.Parse("srv.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	r1 := "  - {key: a, rate_limit: {name: r1, unit: second, requests_per_unit: 1}}\n"
	r2 := "  - {key: b, rate_limit: {name: r2, unit: second, requests_per_unit: 1}}\n"
	a := parse("domain: api\ndescriptors:\n" + r1 + r2)
	b := parse("domain: api\ndescriptors:\n" + r1)
	c := parse("domain: api\ndescriptors:\n" + r1 + r2 + "  - {key: c, rate_limit: {name: r3, unit: second, requests_per_unit: 1}}\n")
	cur := a
	stale := false // the next read returns b once, as read before a reload to c
	m := New()
	m.SetConfigSource(func() *policy.Config {
		if stale {
			stale = false
			return b
		}
		return cur
	})
	m.counter(m.ruleSeries("api", "r2"), outOK, m.decisions, "api").Inc()
	cur = c
	m.ConfigReloaded(true) // pruned against c: r2 stays
	stale = true
	m.ruleNames() // read b, then took the lock after c's pruning
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if !strings.Contains(string(body), `floodgate_decisions_total{domain="api",outcome="ok",rule="r2"} 1`) {
		t.Errorf("r2's count, kept by c, was deleted by a late prune against b:\n%s", body)
	}
}
