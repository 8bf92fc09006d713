package algo

import (
	"testing"
	"time"
)

// Seen is the instant a state's latest decision was made at: a Take given
// an earlier now decides at the later time the state has seen, and Seen
// says so, for every algorithm; 0 for a fresh state.
func TestSeen(t *testing.T) {
	const t1, t2 = int64(1_700_000_000_000_000), int64(1_700_000_000_500_000)
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			p := Params{Algorithm: k, Limit: 10, Period: time.Second, WarmupPeriod: time.Second, LeaseTTL: time.Minute}
			if k == Concurrency {
				p.Period = 0
			}
			if k != SmoothWarmup {
				p.WarmupPeriod = 0
			}
			if k != Concurrency {
				p.LeaseTTL = 0
			}
			l, err := Compile(p)
			if err != nil {
				t.Fatal(err)
			}
			var s State
			if got := l.Seen(&s); got != 0 {
				t.Fatalf("Seen of a fresh state = %d, want 0", got)
			}
			l.Take(&s, t2, 1)
			if got := l.Seen(&s); got != t2 {
				t.Fatalf("after Take at %d: Seen = %d", t2, got)
			}
			l.TakeLease(&s, t1, 1, 7) // an earlier now: decided at t2
			if got := l.Seen(&s); got != t2 {
				t.Fatalf("after Take at the earlier %d: Seen = %d, want %d", t1, got, t2)
			}
		})
	}
}
