package policy

import (
	"context"
	"strings"
	"testing"
)

// A request's class is matched ignoring case and the spaces around it, as
// the configuration's algorithm names and units are; Response.Priority
// names it as declared. A name the domain does not declare is decided in
// the default class, as documented, and says so (PriorityUnknown). Before,
// "Critical" and " critical" were unknown and counted as the lowest class.
func TestPriorityMatchedIgnoringCase(t *testing.T) {
	e := newMemEngine(t, mustParse(t, `
domain: d
priorities: [critical, low]
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 2, reserve: {LOW: 0.5}}
  - key: p
    rate_limit: {unit: hour, requests_per_unit: 2, priority: Critical}
`), nil)
	ctx := context.Background()
	for _, c := range []struct {
		name, class string
		unknown     bool
	}{
		{"critical", "critical", false},
		{"Critical", "critical", false},
		{" critical\t", "critical", false},
		{"LOW", "low", false},
		{"bogus", "low", true},
		{"", "low", false},
		{"  ", "low", false}, // names none
	} {
		r := req("d", ent("k", "x"))
		r.Priority = c.name
		resp, err := e.Peek(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Priority != c.class || resp.PriorityUnknown != c.unknown {
			t.Errorf("Priority %q: decided in %q, unknown %v; want %q, %v", c.name, resp.Priority, resp.PriorityUnknown, c.class, c.unknown)
		}
	}
	// The reserve written {LOW: 0.5} keeps half of the limit from low:
	// low is refused after 1, critical ("Critical") gets the other.
	r := req("d", ent("k", "y"))
	for i, c := range []struct {
		class string
		want  Code
	}{{"low", CodeOK}, {"Low", CodeOverLimit}, {"Critical", CodeOK}, {"critical", CodeOverLimit}} {
		r.Priority = c.class
		if resp, err := e.Decide(ctx, r); err != nil || resp.Code != c.want {
			t.Errorf("request %d (%s): %v %v, want %v", i+1, c.class, resp.Code, err, c.want)
		}
	}
	// A rule's priority: Critical is the class critical.
	if resp, err := e.Peek(ctx, req("d", ent("p", "x"))); err != nil || resp.Priority != "critical" {
		t.Errorf("rule priority Critical: decided in %q (%v), want critical", resp.Priority, err)
	}
}

// Class names that differ only by case (or by spaces around them) would be
// one class to a request: an error at the second one's line.
func TestPrioritiesUniqueIgnoringCase(t *testing.T) {
	for yaml, want := range map[string]string{
		"domain: d\npriorities:\n  - high\n  - High\n":   `p.yaml:4: priorities: class "High" differs from "high" only by case, and a request's class is matched ignoring case: give the two different names`,
		"domain: d\npriorities:\n  - high\n  - ' low'\n": `p.yaml:4: priorities: class " low" has spaces around it, and a request's class is matched without them: remove them`,
		"domain: d\npriorities: [high, low]\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n      reserve:\n        low: 0.1\n        Low: 0.2\n": `p.yaml:10: reserve: "Low" names class low a second time (class names match ignoring case)`,
	} {
		_, err := Parse("p.yaml", []byte(yaml))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got  %v\nwant %s", err, want)
		}
	}
	cfg := mustParse(t, "domain: d\npriorities: [High, low]\ndefault_priority: HIGH\n")
	if d := cfg.Domain("d"); d.DefaultPriority != "High" {
		t.Errorf("default_priority HIGH is %q, want the class as declared, High", d.DefaultPriority)
	}
}
