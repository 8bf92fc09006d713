package server

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
)

// TestKeyWindowLimit reads the layouts the policy engine writes in its
// store keys (docs/STORES.md, "Store keys"), derived keys and overrides
// included, and refuses what names none.
func TestKeyWindowLimit(t *testing.T) {
	type want struct {
		kind     algo.Kind
		period   time.Duration
		calendar algo.Calendar
		sub      int
	}
	windows := map[string]want{
		"fg:api|user=42#fixed_window:60000000":              {algo.FixedWindow, time.Minute, algo.CalendarNone, 0},
		"fg:api|{tenant=a}|user=42#fixed_window:month~ceil": {algo.FixedWindow, 0, algo.CalendarMonth, 0},
		"fg:api|user=42#fixed_window:year~p.gold":           {algo.FixedWindow, 0, algo.CalendarYear, 0},
		"fg:api|user=42#sliding_window:60000000/6":          {algo.SlidingWindow, time.Minute, algo.CalendarNone, 6},
		"fg:api|user=42#sliding_window:1000000~lend":        {algo.SlidingWindow, time.Second, algo.CalendarNone, 1},
		"fg:api|path=%H3q2-_x#override:fixed_window:1000":   {algo.FixedWindow, time.Millisecond, algo.CalendarNone, 0},
	}
	for key, w := range windows {
		l, known := keyWindowLimit(key)
		if !known || l == nil {
			t.Errorf("keyWindowLimit(%q) = %v, %v; want a %v limit", key, l, known, w.kind)
			continue
		}
		p := l.Params()
		if p.Algorithm != w.kind || p.Period != w.period || p.Calendar != w.calendar || p.SubWindows != w.sub {
			t.Errorf("keyWindowLimit(%q) = %+v, want %+v", key, p, w)
		}
	}
	for _, key := range []string{"fg:api|user=42#token_bucket:1000000", "fg:api|user=42#concurrency:0", "fg:a#override:gcra:1000~ceil"} {
		if l, known := keyWindowLimit(key); l != nil || !known {
			t.Errorf("keyWindowLimit(%q) = %v, %v; want no limit, known", key, l, known)
		}
	}
	for _, key := range []string{"fg:api|user=42", "fg:api#", "fg:api#fixed_window", "fg:api#fixed-window:1000", "fg:api#fixed_window:0",
		"fg:api#fixed_window:-5", "fg:api#fixed_window:week", "fg:api#sliding_window:month", "fg:api#fixed_window:60000000/6",
		"fg:api#sliding_window:60000000/x", "fg:api#sliding_window:60000000/7", "fg:api#leaky_bucket:1000", "fg:api#nope:1"} {
		if l, known := keyWindowLimit(key); l != nil || known {
			t.Errorf("keyWindowLimit(%q) = %v, %v; want unknown", key, l, known)
		}
	}
}
