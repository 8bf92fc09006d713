package causelog

import (
	"strconv"
	"testing"
	"time"
)

// One line per cause per interval, the next saying how many were left
// out (Skip's among them); causes apart; at most Max remembered, the
// oldest forgotten first.
func TestLimiter(t *testing.T) {
	l := Limiter{Interval: time.Minute, Max: 2}
	t0 := time.Unix(1000, 0)
	step := func(key string, at time.Duration, wantOK bool, wantSkipped int) {
		t.Helper()
		if ok, skipped := l.Pass(key, t0.Add(at)); ok != wantOK || skipped != wantSkipped {
			t.Fatalf("Pass(%s, +%v) = %v, %d; want %v, %d", key, at, ok, skipped, wantOK, wantSkipped)
		}
	}
	step("a", 0, true, 0)
	step("a", 30*time.Second, false, 0)
	l.Skip("a")
	l.Skip("never seen") // not remembered
	step("b", 40*time.Second, true, 0)
	step("a", 59*time.Second, false, 0)
	step("a", time.Minute, true, 3)
	if l.Len() != 2 {
		t.Fatalf("%d causes remembered, want 2", l.Len())
	}
	step("c", 70*time.Second, true, 0) // forgets b, reported longest ago
	if l.Len() != 2 {
		t.Fatalf("%d causes remembered, want 2", l.Len())
	}
	step("b", 71*time.Second, true, 0) // forgotten: due again
	step("a", 72*time.Second, true, 0) // forgotten for b: due again
	for i := range 10 {
		l.Pass(strconv.Itoa(i), t0)
	}
	if l.Len() > 2 {
		t.Fatalf("%d causes remembered, want at most 2", l.Len())
	}
}
