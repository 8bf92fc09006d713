package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// A lendable share of less than one unit of the parent's capacity is an
// error at its line, as a reserve that leaves a class nothing is: the lend
// pool of 0.01 × 10 used to be rounded up to 1 (10% of the parent), and
// the child borrowed that unit.
func TestLendableBelowOneUnit(t *testing.T) {
	for _, c := range []struct{ limit, want string }{
		{"unit: hour, requests_per_unit: 10, lendable: 0.01",
			"l.yaml:6: lendable: 0.01 of requests_per_unit 10 is 0.1, less than one unit, so the children could borrow nothing; set lendable to at least 0.1 (one unit), or raise requests_per_unit"},
		{"unit: hour, requests_per_unit: 3, lendable: 0.3",
			"l.yaml:6: lendable: 0.3 of requests_per_unit 3 is 0.9, less than one unit, so the children could borrow nothing; set lendable to at least 0.334 (one unit), or raise requests_per_unit"},
		// A bucket's burst is scaled too: its share must be a unit as well.
		{"algorithm: token_bucket, unit: second, requests_per_unit: 100, burst: 4, lendable: 0.2",
			"l.yaml:6: lendable: 0.2 of burst 4 is 0.8, less than one unit, so the children could borrow nothing; set lendable to at least 0.25 (one unit), or raise burst"},
	} {
		yaml := "domain: d\nhierarchy: true\ndescriptors:\n  - key: tenant\n    rate_limit:\n      {" + c.limit + "}\n" +
			"    descriptors:\n      - key: user\n        rate_limit: {unit: hour, requests_per_unit: 1, ceil: 5}\n"
		_, err := Parse("l.yaml", []byte(yaml))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s:\ngot  %v\nwant %s", c.limit, err, c.want)
		}
	}
	// One unit exactly loads, and lends that unit.
	e := newMemEngine(t, mustParse(t, `
domain: d
hierarchy: true
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 10, lendable: 0.1}
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 1, ceil: 5}
`), nil)
	ctx := context.Background()
	r := req("d", ent("tenant", "a", "user", "u"))
	for i, want := range []Code{CodeOK, CodeOK, CodeOverLimit} {
		if resp, err := e.Decide(ctx, r); err != nil || resp.Code != want {
			t.Fatalf("request %d: %v %v, want %v (rate 1, then 1 borrowed of a pool of 1)", i+1, resp.Code, err, want)
		}
	}
}

// An override or a rate scale that shrinks a parent so that its lend pool
// would be less than one unit is refused, as one leaving a reserved class
// nothing is; the limit in force stays.
func TestOverrideShrinkingTheLendPool(t *testing.T) {
	e := newMemEngine(t, mustParse(t, `
domain: d
hierarchy: true
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: hour, requests_per_unit: 10, lendable: 0.1}
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 1, ceil: 5}
`), nil)
	err := e.SetOverride("d", "tenant", Override{RequestsPerUnit: 5})
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "lendable: 0.1 of requests_per_unit 5 is 0.5, less than one unit") {
		t.Errorf("override to 5: %v, want ErrBadRequest naming the lend pool", err)
	}
	err = e.SetRateScale("d", "tenant", 0.5, "test")
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "lendable: 0.1 of requests_per_unit 5 is 0.5") {
		t.Errorf("scale 0.5: %v, want ErrBadRequest naming the lend pool", err)
	}
	if l := e.EffectiveLimit("d", "tenant"); l.Params().Limit != 10 {
		t.Errorf("limit in force %d, want 10 (the refused changes change nothing)", l.Params().Limit)
	}
	if err := e.SetOverride("d", "tenant", Override{RequestsPerUnit: 20}); err != nil {
		t.Errorf("override to 20: %v", err)
	}
}
