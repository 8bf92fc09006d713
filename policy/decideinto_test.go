package policy

import (
	"context"
	"reflect"
	"testing"
	"time"
)

const decideIntoConfig = `
domain: d
descriptors:
  - key: ip
    rate_limit: {name: per-ip, unit: second, requests_per_unit: 2}
  - key: tenant
    hierarchy: true
    rate_limit: {name: tenant, unit: minute, requests_per_unit: 5}
    descriptors:
      - key: user
        rate_limit: {name: user, unit: minute, requests_per_unit: 3}
        descriptors:
          - key: path
            rate_limit: {name: endpoint, unit: minute, requests_per_unit: 2}
`

// DecideInto answers as Decide does, decision after decision with one
// buffer: admitted and refused, one limit and a hierarchy of three (more
// limit statuses than the buffer holds), one descriptor and two, an
// unmatched one.
func TestDecideIntoMatchesDecide(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	cfg := mustParse(t, decideIntoConfig)
	a, b := newMemEngine(t, cfg, clock), newMemEngine(t, cfg, clock)
	ctx := context.Background()
	reqs := []Request{
		req("d", ent("ip", "192.0.2.1")),
		req("d", ent("tenant", "t", "user", "u", "path", "/x")),
		req("d", ent("ip", "192.0.2.1"), ent("tenant", "t", "user", "u", "path", "/y")),
		req("d", ent("nothing", "x")),
	}
	var buf StatusBuffer
	for round := range 4 {
		for i, r := range reqs {
			want, werr := a.Decide(ctx, r)
			got, gerr := b.DecideInto(ctx, r, &buf)
			if !reflect.DeepEqual(got, want) || (gerr == nil) != (werr == nil) {
				t.Fatalf("round %d, request %d: DecideInto = %+v, %v\nDecide = %+v, %v", round, i, got, gerr, want, werr)
			}
		}
		now = now.Add(100 * time.Millisecond)
	}
}

// On the memory store a one-descriptor decision with a buffer allocates
// nothing.
func TestDecideIntoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts do not hold under the race detector (sync.Pool)")
	}
	e := newMemEngine(t, mustParse(t, benchConfig), nil)
	ctx := context.Background()
	r := req("bench", ent("ip", "10.0.0.1"))
	var buf StatusBuffer
	if _, err := e.DecideInto(ctx, r, &buf); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { e.DecideInto(ctx, r, &buf) }); n != 0 {
		t.Errorf("DecideInto on one descriptor: %v allocations, want 0", n)
	}
}
