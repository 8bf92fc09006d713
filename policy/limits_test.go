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

// A rule's retain is its limit's Retain; the ceil derived from a token
// bucket that starts empty starts full, and so retains nothing (rather
// than failing to compile).
func TestRetainWithCeil(t *testing.T) {
	cfg := mustParse(t, `
domain: d
hierarchy: true
rate_limit: {unit: second, requests_per_unit: 100}
descriptors:
  - key: user
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 10, initial_tokens: 0, retain: 2h, ceil: 20}
  - key: app
    rate_limit: {algorithm: smooth_bursty, unit: second, requests_per_unit: 10, retain: 5m, ceil: 20}
`)
	want := map[string]time.Duration{"user": 2 * time.Hour, "app": 5 * time.Minute}
	for _, r := range cfg.Rules() {
		if w, ok := want[r.Name]; ok {
			if got := r.Limit().Params().Retain; got != w {
				t.Errorf("rule %s: Retain = %v, want %v", r.Name, got, w)
			}
			delete(want, r.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("rules not found: %v", want)
	}
}
