package metrics_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
)

// priority_unknown_total of a domain of the configuration in force is
// labelled as that domain even once the first-come budget of MaxSeries
// pairs is spent (here by no_rule decisions of domains no rule knows, which
// go under "_other" past it); a domain outside the configuration takes
// from that budget and goes under "_other" too. noRuleCounter and
// priorityUnknownCounter share their logic (domainCounter), and only the
// latter exempts configured domains: nothing held that difference.
func TestPriorityUnknownOfConfiguredDomainPastBudget(t *testing.T) {
	cfg, err := policy.Parse("srv.yaml", []byte(priorityYAML))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	m.SetConfigSource(func() *policy.Config { return cfg })
	noRule := policy.Response{Statuses: []policy.Status{{Code: policy.CodeOK}}}
	for i := range metrics.MaxSeries + 1 {
		m.Decided("nowhere-"+strconv.Itoa(i), &noRule)
	}
	unknown := policy.Response{Code: policy.CodeOK, PriorityUnknown: true}
	m.Decided("batch", &unknown)
	m.Decided("batch", &unknown)
	m.Decided("elsewhere", &unknown)
	text := scrape(t, m)
	for _, want := range []string{
		`floodgate_priority_unknown_total{domain="batch"} 2`,
		`floodgate_priority_unknown_total{domain="_other"} 1`,
		`floodgate_decisions_total{domain="_other",outcome="no_rule",rule=""} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(text, "_other\"")+grepLines(text, "priority_unknown"))
		}
	}
	if strings.Contains(text, `floodgate_priority_unknown_total{domain="elsewhere"}`) {
		t.Error("a domain outside the configuration has a priority_unknown_total series past MaxSeries")
	}
}
