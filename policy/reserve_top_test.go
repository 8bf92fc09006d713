package policy

import (
	"testing"
)

// A reserve keeps its share from the class it names and every class
// below: on the highest class it keeps it from everyone, so it is an error
// at its line. It used to load and shrink the limit for all (critical was
// refused after 1 of 2).
func TestReserveOnTheHighestClass(t *testing.T) {
	for yaml, want := range map[string]string{
		"domain: d\npriorities: [critical, low]\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 2\n      reserve:\n        low: 0.5\n        critical: 0.5\n": "r.yaml:10: reserve: critical is the highest priority class: a reserve keeps its share of the limit from that class and every class below it, " +
			"so no request could use this 0.5 of the limit; reserve for a lower class (low), or lower requests_per_unit to lower the limit for everyone",
		"domain: d\npriorities: [only]\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2, reserve: {only: 0.25}}\n": "r.yaml:5: reserve: only is the highest priority class: a reserve keeps its share of the limit from that class and every class below it, " +
			"so no request could use this 0.25 of the limit; reserve for a lower class (the domain has no class below it), or lower requests_per_unit to lower the limit for everyone",
	} {
		_, err := Parse("r.yaml", []byte(yaml))
		if err == nil || err.Error() != want {
			t.Errorf("got  %v\nwant %s", err, want)
		}
	}
	// A share of 0 keeps nothing from anyone; a lower class's reserve
	// keeps room for the top one.
	mustParse(t, "domain: d\npriorities: [critical, low]\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2, reserve: {critical: 0, low: 0.5}}\n")
}
