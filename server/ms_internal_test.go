package server

import (
	"math"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
)

// TestMsRoundsUpWithoutOverflow: ms, the /v1 API's *_ms fields, rounds up
// to whole milliseconds and never overflows: a duration within a
// millisecond of the largest (algo.Never, which is -1) gave a negative
// retry_after_ms (it added before dividing).
func TestMsRoundsUpWithoutOverflow(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0},
		{-time.Second, 0},
		{1, 1},
		{time.Millisecond, 1},
		{time.Millisecond + 1, 2},
		{algo.Never, -1},
		{algo.Never - 1, math.MaxInt64/int64(time.Millisecond) + 1},
	} {
		if got := ms(c.d); got != c.want {
			t.Errorf("ms(%d) = %d, want %d", c.d, got, c.want)
		}
	}
}
