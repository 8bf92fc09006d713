package resilient_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestShareSmoothBurstyCapacity: the FailLocal share of a SmoothBursty
// limit has capacity max(1, ⌊Capacity ÷ n⌋) (stored permits plus the free
// ticket), and an idle share admits exactly that many unit requests at
// once, so n shares admit no more at once than the limit does (or n, at a
// capacity below n). The stored permits were ⌊Limit ÷ n⌋, and each share's
// free ticket came on top: 16 shares of 17 per second, capacity 18,
// admitted 32 at once.
func TestShareSmoothBurstyCapacity(t *testing.T) {
	for _, r := range []struct {
		p                 algo.Params
		n                 int
		wantLimit, wantCp int64
	}{
		{algo.Params{Algorithm: algo.SmoothBursty, Limit: 17, Period: time.Second}, 16, 1, 1},
		{algo.Params{Algorithm: algo.SmoothBursty, Limit: 16, Period: time.Second}, 16, 1, 1},
		{algo.Params{Algorithm: algo.SmoothBursty, Limit: 100, Period: time.Second}, 4, 25, 25},
		{algo.Params{Algorithm: algo.SmoothBursty, Limit: 100, Period: time.Second, MaxBurstSeconds: 2}, 3, 33, 67},
		{algo.Params{Algorithm: algo.SmoothBursty, Limit: 1000, Period: time.Minute, MaxBurstSeconds: 30}, 7, 142, 71},
		{algo.Params{Algorithm: algo.SmoothBursty, Limit: 10, Period: time.Minute}, 4, 2, 1},
		{algo.Params{Algorithm: algo.SmoothBursty, Limit: 3, Period: time.Second}, 8, 1, 1},
		{algo.Params{Algorithm: algo.SmoothBursty, Limit: 5, Period: time.Second, MaxWait: 300 * time.Millisecond}, 2, 2, 3},
	} {
		l := compile(t, r.p)
		d := resilient.Share(l, r.n)
		if d.Params().Limit != r.wantLimit || d.Capacity() != r.wantCp {
			t.Errorf("Share(%v, %d) = limit %d capacity %d, want %d %d", l, r.n, d.Params().Limit, d.Capacity(), r.wantLimit, r.wantCp)
			continue
		}
		if all := int64(r.n) * d.Capacity(); all > max(l.Capacity(), int64(r.n)) {
			t.Errorf("Share(%v, %d): %d shares of capacity %d hold %d, more than the limit's capacity %d", l, r.n, r.n, d.Capacity(), all, l.Capacity())
		}
		// An idle share: a Take starts its clock, and an hour stores
		// every permit it can.
		var s algo.State
		t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
		d.Take(&s, t0, 0)
		t1 := t0 + time.Hour.Microseconds()
		n := int64(0)
		for range 1000 {
			if got := d.Take(&s, t1, 1); !got.Allowed || got.Delay > 0 {
				break
			}
			n++
		}
		if n != r.wantCp {
			t.Errorf("Share(%v, %d): an idle share admits %d unit requests at once, want its capacity %d", l, r.n, n, r.wantCp)
		}
	}
}
