package policy

import (
	"context"
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

// A rule's retain is its limit's Retain, and that of the limits derived
// from it: the ceil and the lend pool of a token bucket that starts short
// start short in proportion (the ceil rounded up, the lend pool down) and
// keep a full state as long; a smooth_bursty ceil or lend pool, which
// starts with no permits, keeps the rule's retain. They used to start
// full, dropping retain and initial_tokens without a word.
func TestRetainWithCeil(t *testing.T) {
	cfg := mustParse(t, `
domain: d
hierarchy: true
rate_limit: {unit: second, requests_per_unit: 100}
descriptors:
  - key: user
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 10, initial_tokens: 3, retain: 2h, ceil: 25, lendable: 0.5}
    descriptors:
      - key: app
        rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 2, initial_tokens: 0, ceil: 4}
  - key: bursty
    rate_limit: {algorithm: smooth_bursty, unit: second, requests_per_unit: 10, retain: 5m, ceil: 20, lendable: 0.5}
    descriptors:
      - key: app
        rate_limit: {algorithm: smooth_bursty, unit: second, requests_per_unit: 2, ceil: 4}
  - key: full
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 10, initial_tokens: 10, ceil: 20}
`)
	type want struct {
		retain              time.Duration
		ceilInit, lendInit  int64 // -1: none
		ceilRetain, lendRet time.Duration
	}
	wants := map[string]want{
		// ⌈3 × 25 ÷ 10⌉ = 8 of 25; ⌊3 × 0.5⌋ = 1 of 5.
		"user": {2 * time.Hour, 8, 1, 2 * time.Hour, 2 * time.Hour},
		// retain's default, an hour, for a bucket starting empty.
		"user.app": {time.Hour, 0, -1, time.Hour, 0},
		"bursty":   {5 * time.Minute, -1, -1, 5 * time.Minute, 5 * time.Minute},
		// smooth_bursty's default.
		"bursty.app": {time.Hour, -1, -1, time.Hour, 0},
		// Initial tokens at the capacity: all start full, nothing to retain.
		"full": {0, 20, -1, 0, 0},
	}
	initOf := func(l *algo.Limit) int64 {
		if l == nil || l.Params().InitialTokens == nil {
			return -1
		}
		return *l.Params().InitialTokens
	}
	retainOf := func(l *algo.Limit) time.Duration {
		if l == nil {
			return 0
		}
		return l.Params().Retain
	}
	for _, r := range cfg.Rules() {
		w, ok := wants[r.Name]
		if !ok {
			continue
		}
		delete(wants, r.Name)
		rl, err := deriveLimits(cfg.Domain(r.Domain), r, r.Params)
		if err != nil {
			t.Fatalf("rule %s: %v", r.Name, err)
		}
		if got := r.Limit().Params().Retain; got != w.retain {
			t.Errorf("rule %s: Retain = %v, want %v", r.Name, got, w.retain)
		}
		if got := retainOf(rl.ceil); got != w.ceilRetain {
			t.Errorf("rule %s: ceil Retain = %v, want %v", r.Name, got, w.ceilRetain)
		}
		if got := retainOf(rl.lend); got != w.lendRet {
			t.Errorf("rule %s: lend pool Retain = %v, want %v", r.Name, got, w.lendRet)
		}
		if got := initOf(rl.ceil); got != w.ceilInit {
			t.Errorf("rule %s: ceil initial tokens %d, want %d", r.Name, got, w.ceilInit)
		}
		if got := initOf(rl.lend); got != w.lendInit {
			t.Errorf("rule %s: lend pool initial tokens %d, want %d", r.Name, got, w.lendInit)
		}
	}
	if len(wants) > 0 {
		t.Errorf("rules not found: %v", wants)
	}
}

// A fresh key of a rule with initial_tokens: 0 and a ceil starts with
// nothing, borrowed or not; once it has earned its rate and its ceil, it
// keeps both while idle for less than retain, and starts with nothing
// again after. The ceil started full: a fresh key borrowed its whole ceil
// at once (20 here), and one idle past retain did again.
func TestCeilKeepsRetainAndInitialTokens(t *testing.T) {
	cfg := mustParse(t, `
domain: d
hierarchy: true
rate_limit: {name: global, algorithm: token_bucket, unit: second, requests_per_unit: 1000}
descriptors:
  - key: user
    rate_limit: {name: per-user, algorithm: token_bucket, unit: second, requests_per_unit: 10, initial_tokens: 0, retain: 1h, ceil: 20}
`)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	e := newMemEngine(t, cfg, func() time.Time { return now })
	ctx := context.Background()
	r := req("d", ent("user", "u1"))
	burst := func(when string) (admitted, borrowed int) {
		t.Helper()
		for range 30 {
			resp, err := e.Decide(ctx, r)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if resp.Code != CodeOK {
				break
			}
			admitted++
			if resp.Statuses[0].Borrowed {
				borrowed++
			}
		}
		return admitted, borrowed
	}
	if a, b := burst("fresh"); a != 0 {
		t.Errorf("a fresh key admitted %d (%d borrowed), want 0: initial_tokens 0 holds for its ceil too", a, b)
	}
	now = now.Add(2 * time.Second) // rate and ceil refilled
	if a, b := burst("earned"); a != 20 || b != 10 {
		t.Errorf("after 2s: %d admitted, %d borrowed; want 20 and 10", a, b)
	}
	now = now.Add(2*time.Second + 59*time.Minute) // full for just under an hour
	if a, b := burst("idle under retain"); a != 20 || b != 10 {
		t.Errorf("idle for less than retain: %d admitted, %d borrowed; want 20 and 10 (kept)", a, b)
	}
	now = now.Add(2*time.Second + time.Hour + time.Second) // full for over an hour: forgotten
	if a, b := burst("idle past retain"); a != 0 {
		t.Errorf("idle past retain: %d admitted (%d borrowed), want 0 (the key starts empty again)", a, b)
	}
}
