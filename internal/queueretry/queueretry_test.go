package queueretry

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
)

// TestAfter: the retry told to a request the wait queue turned away,
// step by step. Every waiter ahead takes a unit and a hand-off (1ms here)
// before it, but only the units the limit hands out before the last of
// them must leave (left): the others leave with nothing.
func TestAfter(t *testing.T) {
	lim := func(p algo.Params) *algo.Limit {
		t.Helper()
		l, err := algo.Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	const ms = time.Millisecond
	bucket := lim(algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Second, Burst: 1})
	window := lim(algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Second})
	month := lim(algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Calendar: algo.CalendarMonth})
	conc := lim(algo.Params{Algorithm: algo.Concurrency, Limit: 5})
	ages := lim(algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: (1<<53 - 1) * time.Microsecond})
	for _, tc := range []struct {
		name  string
		l     *algo.Limit
		retry time.Duration
		ahead int
		left  time.Duration
		want  time.Duration
	}{
		{"bucket, nobody ahead", bucket, time.Second, 0, 10 * time.Second, time.Second + 1*ms},
		{"bucket, 3 ahead, all served", bucket, time.Second, 3, 10 * time.Second, 4*time.Second + 4*ms},
		{"bucket, 3 ahead, no deadline", bucket, time.Second, 3, -1, 4*time.Second + 4*ms},
		{"bucket, 3 ahead, 2 served before they leave", bucket, time.Second, 3, 2500 * ms, 3*time.Second + 3*ms},
		{"bucket, all leave before the unit", bucket, time.Second, 3, 500 * ms, time.Second + 1*ms},
		{"window, 1 ahead: same window", window, time.Second, 1, 5 * time.Second, time.Second + 2*ms},
		{"window, 3 ahead: the next window", window, time.Second, 3, 5 * time.Second, 2*time.Second + 4*ms},
		{"window, 4 ahead: the one after", window, time.Second, 4, 5 * time.Second, 3*time.Second + 5*ms},
		{"window, 4 ahead, 2 served before they leave", window, time.Second, 4, 1500 * ms, 2*time.Second + 3*ms},
		{"month, 200 ahead, gone before the reset", month, time.Hour, 200, 30 * time.Second, time.Hour + 1*ms},
		{"month, 200 ahead, 100 served", month, time.Hour, 200, 2 * time.Hour, time.Hour + 28*24*time.Hour + 101*ms},
		{"concurrency: hand-offs only", conc, 0, 5, -1, 6 * ms},
		{"no limit: hand-offs only", nil, 2 * time.Second, 2, -1, 2*time.Second + 3*ms},
		{"saturates below Never", ages, time.Second, 1 << 20, -1, algo.Never - 1},
	} {
		if got := After(tc.l, tc.retry, tc.ahead, tc.left, ms); got != tc.want {
			t.Errorf("%s: After(retry %v, ahead %d, left %v) = %v, want %v", tc.name, tc.retry, tc.ahead, tc.left, got, tc.want)
		}
	}
}
