package memcached_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestMaxStateSizeBoundary: MaxStateSize is what Take holds a state to.
// On a store keeping to 64 KiB items, the largest sliding log and
// concurrency limits whose MaxStateSize fits are filled to their limit in
// one Take on a key of the longest encoded length (160 bytes), the
// concurrency slots under a lease id of the longest varint (1<<63): the
// item is stored. One unit more, and MaxStateSize is over MaxItemSize, and
// so is the state: Take refuses it with store.ErrBadRequest.
func TestMaxStateSizeBoundary(t *testing.T) {
	const itemSize = 64 << 10
	s := open(t, newClock(t0), memcached.WithMaxItemSize(itemSize))
	if got := s.MaxItemSize(); got != itemSize {
		t.Fatalf("MaxItemSize() = %d, want %d (WithMaxItemSize, under the server's 1 MiB)", got, itemSize)
	}
	c := ctx(t)
	for _, p := range []algo.Params{
		{Algorithm: algo.SlidingLog, Period: time.Hour},
		{Algorithm: algo.Concurrency, LeaseTTL: time.Hour},
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			limit := func(n int64) *algo.Limit {
				q := p
				q.Limit = n
				return compile(t, q)
			}
			// The largest limit that fits: MaxStateSize grows with it.
			lo, hi := int64(1), int64(itemSize) // fits, does not
			if s.MaxStateSize(limit(lo)) > itemSize || s.MaxStateSize(limit(hi)) <= itemSize {
				t.Fatalf("MaxStateSize of limits 1 and %d: %d and %d; want them on each side of %d",
					hi, s.MaxStateSize(limit(lo)), s.MaxStateSize(limit(hi)), itemSize)
			}
			for hi-lo > 1 {
				if mid := (lo + hi) / 2; s.MaxStateSize(limit(mid)) <= itemSize {
					lo = mid
				} else {
					hi = mid
				}
			}
			t.Logf("%s: up to %d fit in %d bytes (MaxStateSize %d; %d for one more)", p.Algorithm, lo, itemSize, s.MaxStateSize(limit(lo)), s.MaxStateSize(limit(hi)))
			longKey := func() string {
				k := uniqueKey(t, "k")
				return k + strings.Repeat("x", 160-len(k))
			}
			out := make([]algo.Decision, 1)
			if _, err := s.Take(c, []store.Request{{Key: longKey(), Limit: limit(lo), Cost: lo, Lease: 1 << 63}}, out); err != nil || !out[0].Allowed {
				t.Fatalf("Take of %d with a limit of %d (MaxStateSize %d <= %d): %+v, %v; want it stored and admitted",
					lo, lo, s.MaxStateSize(limit(lo)), itemSize, out[0], err)
			}
			if _, err := s.Take(c, []store.Request{{Key: longKey(), Limit: limit(hi), Cost: hi, Lease: 1 << 63}}, out); !errors.Is(err, store.ErrBadRequest) || !strings.Contains(err.Error(), "item size limit") {
				t.Fatalf("Take of %d with a limit of %d (MaxStateSize %d > %d): %v; want ErrBadRequest naming the item size limit",
					hi, hi, s.MaxStateSize(limit(hi)), itemSize, err)
			}
		})
	}
}

// TestMaxStateSizeSmall: the algorithms without per-unit state take a few
// hundred bytes whatever their limit; the largest sliding log and
// concurrency limits take 8 and 18 bytes a unit.
func TestMaxStateSizeSmall(t *testing.T) {
	s := open(t, nil)
	for _, p := range []algo.Params{
		{Algorithm: algo.FixedWindow, Limit: 1 << 20, Period: time.Minute},
		{Algorithm: algo.SlidingWindow, Limit: 1 << 20, Period: time.Minute, SubWindows: 60},
		{Algorithm: algo.TokenBucket, Limit: 1 << 20, Period: time.Minute},
		{Algorithm: algo.GCRA, Limit: 1 << 20, Period: time.Minute},
		{Algorithm: algo.SmoothBursty, Limit: 1 << 20, Period: time.Minute},
	} {
		if got := s.MaxStateSize(compile(t, p)); got <= 0 || got > 300 {
			t.Errorf("MaxStateSize(%v) = %d, want a few hundred bytes", p.Algorithm, got)
		}
	}
	for _, p := range []algo.Params{
		{Algorithm: algo.SlidingLog, Limit: 1 << 20, Period: time.Hour},
		{Algorithm: algo.Concurrency, Limit: 1 << 20, LeaseTTL: time.Hour},
	} {
		each := map[algo.Kind]int{algo.SlidingLog: 8, algo.Concurrency: 18}[p.Algorithm]
		if got := s.MaxStateSize(compile(t, p)); got < each<<20 || got > each<<20+300 {
			t.Errorf("MaxStateSize(%v with a limit of %d) = %d, want %d bytes a unit and a few hundred more", p.Algorithm, p.Limit, got, each)
		}
	}
}

// TestMaxItemSizeFromServers: MaxItemSize is the smallest -I of the ring's
// servers.
func TestMaxItemSizeFromServers(t *testing.T) {
	a := testserver.NewMemcached(t, "-I", "2m")
	b := testserver.NewMemcached(t, "-I", "512k")
	s, err := memcached.Open("memcached://"+a.Addr+","+b.Addr, memcached.WithMaxItemSize(4<<20), memcached.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.MaxItemSize(); got != 512<<10 {
		t.Errorf("MaxItemSize() = %d over servers with -I 2m and 512k, want 524288", got)
	}
}
