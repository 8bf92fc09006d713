package policy

import "testing"

// A ceil under a requests_per_unit: 0 parent can never borrow (the parent
// refuses every request of the child), so it is an error at its line, as
// a ceil without a parent is. A blocking rule between the child and a
// limited ancestor is its parent: unlike an unlimited one it is not
// skipped.
func TestCeilUnderADenyParent(t *testing.T) {
	const yaml = `domain: d
hierarchy: true
rate_limit: {unit: second, requests_per_unit: 100}
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 0}
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1, ceil: 5}
`
	want := `c.yaml:9: ceil lets a rule borrow from its parent, and its parent "tenant" (line 6) has nothing to lend: requests_per_unit 0 blocks every request, this rule's included; remove ceil, or give the parent a rate`
	if _, err := Parse("c.yaml", []byte(yaml)); err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}
