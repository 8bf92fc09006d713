package memory_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// TestVariableStateAllocs holds the package doc's count for the
// variable-state algorithms on a key that exists: a Take whose state does
// not grow allocates nothing, and a Peek allocates once, for the copy of
// the state's variable part it decides on (the doc said Peek allocated
// only when the state grew).
func TestVariableStateAllocs(t *testing.T) {
	st := mustStore(t)
	ctx := t.Context()
	for _, p := range []algo.Params{
		{Algorithm: algo.SlidingLog, Limit: 4, Period: time.Hour},
		{Algorithm: algo.SlidingWindow, Limit: 4, Period: time.Hour, SubWindows: 4},
		{Algorithm: algo.Concurrency, Limit: 4, LeaseTTL: time.Hour},
	} {
		l := mustLimit(t, p)
		reqs := []store.Request{{Key: "ext:" + p.Algorithm.String(), Limit: l, Cost: 4}}
		out := make([]algo.Decision, 1)
		if _, err := st.Take(ctx, reqs, out); err != nil || !out[0].Allowed {
			t.Fatalf("%s: Take(4) of 4 = %+v, %v", p.Algorithm, out[0], err)
		}
		// Refused from now on: the state stays as it is.
		if n := testing.AllocsPerRun(100, func() { _, _ = st.Take(ctx, reqs, out) }); n != 0 {
			t.Errorf("%s: a refused Take allocates %v times per call, want 0", p.Algorithm, n)
		}
		if n := testing.AllocsPerRun(100, func() { _ = st.Peek(ctx, reqs, out) }); n != 1 {
			t.Errorf("%s: Peek allocates %v times per call, want 1 (the copy it decides on)", p.Algorithm, n)
		}
	}
}
