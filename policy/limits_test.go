package policy

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
)

// KeyLayout reads back what fingerprint writes in a store key, with the
// "override:" and "~role" an Engine adds around it: the admin API finds
// window counters by it, so the two must not drift apart.
func TestKeyLayoutReadsFingerprint(t *testing.T) {
	for _, p := range []algo.Params{
		{Algorithm: algo.FixedWindow, Period: time.Minute},
		{Algorithm: algo.FixedWindow, Calendar: algo.CalendarMonth},
		{Algorithm: algo.FixedWindow, Calendar: algo.CalendarYear},
		{Algorithm: algo.SlidingWindow, Period: 90 * time.Second, SubWindows: 6},
		{Algorithm: algo.SlidingWindow, Period: time.Hour},
		{Algorithm: algo.TokenBucket, Period: time.Second},
		{Algorithm: algo.Concurrency},
	} {
		fp := fingerprint(p)
		for _, key := range []string{"fg:d|k=v#" + fp, "fg:d|{t=a}|k=v#" + fp + "~ceil", "fg:d|k=v#override:" + fp + "~lend"} {
			got, ok := KeyLayout(key)
			want := algo.Params{Algorithm: p.Algorithm}
			if p.Algorithm == algo.FixedWindow || p.Algorithm == algo.SlidingWindow {
				want.Period, want.Calendar = p.Period, p.Calendar
				if p.SubWindows > 1 {
					want.SubWindows = p.SubWindows
				}
			}
			if !ok || got != want {
				t.Errorf("KeyLayout(%q) = %+v, %v; want %+v", key, got, ok, want)
			}
		}
	}
	for _, key := range []string{"fg:d|k=v", "fg:d#", "fg:d#fixed_window", "fg:d#fixed-window:1000", "fg:d#fixed_window:0",
		"fg:d#fixed_window:week", "fg:d#sliding_window:month", "fg:d#fixed_window:60000000/6", "fg:d#sliding_window:60000000/1"} {
		if p, ok := KeyLayout(key); ok {
			t.Errorf("KeyLayout(%q) = %+v, want no layout", key, p)
		}
	}
}
