package limiter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
)

// TestNeverTextSmooth: a Smooth limit admits a request larger than its
// Capacity, up to MaxCost (Guava's acquire(n)), so Wait's ErrNever names
// that bound, not the Capacity: "cost 50, capacity 1" said a SmoothWarmup
// limit that admits a cost of 2 could not take 2. A bucket's text, whose
// bound is its Capacity, is TestErrorsSayLimiterOnce's.
func TestNeverTextSmooth(t *testing.T) {
	warm := algo.Params{Algorithm: algo.SmoothWarmup, Limit: 1, Period: time.Second, WarmupPeriod: time.Second}
	l := newLimiter(t, newStore(t), "w", warm)
	loc, err := limiter.NewLocal(warm)
	if err != nil {
		t.Fatal(err)
	}
	if most, capacity := l.Limit().MaxCost(), l.Limit().Capacity(); most != 2 || capacity != 1 {
		t.Fatalf("SmoothWarmup 1/s: MaxCost %d, Capacity %d; the test wants 2 and 1", most, capacity)
	}
	if err := l.Wait(t.Context(), "two", 2); err != nil {
		t.Fatalf("Wait(2) within MaxCost 2: %v", err)
	}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"Wait(50)", l.Wait(t.Context(), "k", 50), `limiter "w": cost exceeds the limit's capacity: cost 50, at most 2 a request (capacity 1)`},
		{"Local Wait(50)", loc.Wait(t.Context(), 50), `limiter: cost exceeds the limit's capacity: cost 50, at most 2 a request (capacity 1)`},
	} {
		if !errors.Is(c.err, limiter.ErrNever) || c.err == nil || c.err.Error() != c.want {
			t.Errorf("%s: %v; want %s (matching ErrNever)", c.name, c.err, c.want)
		}
	}
}
