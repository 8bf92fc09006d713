package policy

import (
	"context"
	"testing"
)

// A rule that another matched rule replaces picks no priority class: the
// class comes from the rules that remain. Rule a (priority high) is
// replaced by rule b (no priority, half of it reserved from low), so a
// request matching both is decided in the default class, low, and b's
// reserve keeps its second unit from it. Before, the dropped rule a still
// made the request high: Priority "high" and both units taken.
func TestReplacedRulePicksNoPriority(t *testing.T) {
	e := newMemEngine(t, mustParse(t, `
domain: d
priorities: [high, low]
descriptors:
  - key: a
    rate_limit: {name: a, unit: hour, requests_per_unit: 100, priority: high}
  - key: b
    rate_limit:
      unit: hour
      requests_per_unit: 2
      reserve: {low: 0.5}
      replaces:
        - name: a
`), nil)
	ctx := context.Background()
	r := req("d", ent("a", "x"), ent("b", "y"))
	for i, want := range []Code{CodeOK, CodeOverLimit} {
		resp, err := e.Decide(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Priority != "low" || resp.Code != want {
			t.Errorf("request %d: class %q, %v; want low, %v", i+1, resp.Priority, resp.Code, want)
		}
		if resp.Statuses[0].Matched {
			t.Errorf("request %d: the replaced rule a matched", i+1)
		}
	}
	// Alone, a still makes a request high.
	if resp, err := e.Peek(ctx, req("d", ent("a", "x"))); err != nil || resp.Priority != "high" {
		t.Errorf("a alone: class %q (%v), want high", resp.Priority, err)
	}
}
