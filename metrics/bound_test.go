package metrics

import (
	"strconv"
	"sync"
	"testing"

	"github.com/floodgate/floodgate/policy"
)

// syncMapLen counts the entries of m.
func syncMapLen(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}

// Rules named after request values (per-request limits are named after
// the descriptor's path and values) and domains no rule knows come in
// without end: past MaxSeries their decisions count under "_other" and
// nothing is kept per new name. The cache of series kept every pair it was
// asked for before, one entry per distinct value, for good.
func TestSeriesCachesAreBounded(t *testing.T) {
	m := New()
	const n = 100_000
	for i := range n {
		v := strconv.Itoa(i)
		resp := policy.Response{Statuses: []policy.Status{
			{Code: policy.CodeOK, Matched: true, Rule: "remote_address_" + v},
		}}
		m.Decided("d", &resp)
		unknown := policy.Response{Statuses: []policy.Status{{Code: policy.CodeOK}}}
		m.Decided("unknown-"+v, &unknown)
	}
	if got := syncMapLen(&m.rules) + syncMapLen(&m.others) + syncMapLen(&m.noRule); got > MaxSeries+2 {
		t.Errorf("%d series cached after %d distinct rules and %d distinct domains, want at most %d", got, n, n, MaxSeries+2)
	}
	s := m.Summary()
	total := 0.0
	for _, r := range s.Rules {
		total += r.Outcomes[OutcomeOK]
	}
	if total != n || s.Decisions[OutcomeNoRule] != n {
		t.Errorf("counted %v ok decisions and %v no_rule ones, want %d each", total, s.Decisions[OutcomeNoRule], n)
	}
}

// Once the configuration is known, rules named after requests share one
// series per domain, and nothing is kept per name either.
func TestRequestLimitSeriesAreBounded(t *testing.T) {
	cfg, err := policy.Parse("d.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: per-k, unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	m := New()
	m.SetConfigSource(func() *policy.Config { return cfg })
	const n = 100_000
	for i := range n {
		resp := policy.Response{Statuses: []policy.Status{
			{Code: policy.CodeOK, Matched: true, Rule: "k_" + strconv.Itoa(i)},
			{Code: policy.CodeOK, Matched: true, Rule: "per-k"},
		}}
		m.Decided("d", &resp)
	}
	if got := syncMapLen(&m.rules) + syncMapLen(&m.requested) + syncMapLen(&m.others) + len(m.series); got != 2 {
		t.Errorf("%d series cached after %d distinct request limits and one rule, want 2", got, n)
	}
	s := m.Summary()
	if len(s.Rules) != 2 || s.Rules[0].Rule != RequestLimitLabel || s.Rules[0].Outcomes[OutcomeOK] != n ||
		s.Rules[1].Rule != "per-k" || s.Rules[1].Outcomes[OutcomeOK] != n {
		t.Errorf("rules %+v, want %s and per-k with %d ok decisions each", s.Rules, RequestLimitLabel, n)
	}
}
