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
