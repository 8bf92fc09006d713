package limiter_test

import (
	"testing"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/storetest"
)

// TestAllowAllAllocs bounds AllowAll's allocations over two limits on the
// memory store: what giving a hit back needs (its charge's time, lease and
// whether a failure policy decided it) is one slice, not three (17
// allocations a call with three, 15 with one).
func TestAllowAllAllocs(t *testing.T) {
	st := newStore(t)
	a := newLimiter(t, st, "a", storetest.BenchLimit)
	b := newLimiter(t, st, "b", storetest.BenchLimit)
	ctx := t.Context()
	hits := []limiter.Hit{{Limiter: a, Key: "u", Cost: 1}, {Limiter: b, Key: "u", Cost: 1}}
	if _, err := limiter.AllowAll(ctx, hits); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(200, func() { _, _ = limiter.AllowAll(ctx, hits) }); n > 15 {
		t.Errorf("AllowAll of 2 hits allocates %v times per call, want at most 15", n)
	}
}
