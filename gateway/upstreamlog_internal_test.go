package gateway

import (
	"fmt"
	"testing"
	"time"
)

// A cause is logged once per UpstreamLogInterval, the next line saying how
// many were left out; another cause is logged at once; the causes
// remembered are bounded.
func TestUpstreamLogPerCause(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	l := upstreamLog{now: func() time.Time { return now }}
	for _, s := range []struct {
		at      time.Duration
		cause   string
		pass    bool
		skipped int
	}{
		{0, "reset", true, 0},
		{time.Second, "reset", false, 0},
		{2 * time.Second, "reset", false, 0},
		{3 * time.Second, "connect", true, 0},
		{UpstreamLogInterval, "reset", true, 2},
		{UpstreamLogInterval + time.Second, "reset", false, 0},
	} {
		now = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC).Add(s.at)
		if pass, skipped := l.pass(s.cause); pass != s.pass || skipped != s.skipped {
			t.Errorf("t+%v pass(%q) = %v, %d; want %v, %d", s.at, s.cause, pass, skipped, s.pass, s.skipped)
		}
	}
	for i := range 3 * maxUpstreamCauses {
		l.pass(fmt.Sprint("cause ", i))
	}
	if l.causes.Len() > maxUpstreamCauses {
		t.Errorf("%d causes remembered, want at most %d", l.causes.Len(), maxUpstreamCauses)
	}
}
