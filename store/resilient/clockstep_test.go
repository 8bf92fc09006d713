package resilient_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestCachedRefusalAfterClockStepsBack: the over-limit cache reads the
// wall clock; when it steps back an hour (an NTP correction), a refusal
// cached before the step must not be trusted for the hour.
func TestCachedRefusalAfterClockStepsBack(t *testing.T) {
	c := newClock()
	inner := &counting{Store: memStore(t, c)}
	s, err := resilient.New(inner, resilient.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute})
	take(t, s, "k", l, 1)
	if d := take(t, s, "k", l, 1); d.Allowed {
		t.Fatal("second take admitted")
	}
	c.Advance(-time.Hour)
	before := inner.takes.Load()
	d := take(t, s, "k", l, 1)
	if inner.takes.Load() == before {
		t.Fatalf("take after the clock stepped back an hour answered from the cache: %+v", d)
	}
}
