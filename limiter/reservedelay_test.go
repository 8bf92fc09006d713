package limiter_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/storetest"
)

// TestRefusedReservationDelay: a refused reservation holds no units, so
// its Delay is algo.Never, as x/time/rate's InfDuration for a reservation
// that is not OK, and `time.Sleep(r.Delay()); act()` never acts on it; the
// time to try again is its Decision's RetryAfter. An admitted
// reservation's Delay is the decision's: 0 for a bucket, the queue's wait
// for a shaper.
func TestRefusedReservationDelay(t *testing.T) {
	bucket := algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 2}
	shaper := algo.Params{Algorithm: algo.Shaper, Limit: 10, Period: time.Second, Burst: 2}
	steps := []struct {
		name  string
		p     algo.Params
		n     int64
		ok    bool
		delay time.Duration
		retry time.Duration
	}{
		// A bucket of 2, one unit back every 100ms.
		{"bucket take 2", bucket, 2, true, 0, 0},
		{"bucket empty", bucket, 1, false, algo.Never, 100 * time.Millisecond},
		{"bucket cost 2 on empty", bucket, 2, false, algo.Never, 200 * time.Millisecond},
		{"bucket cost beyond capacity", bucket, 3, false, algo.Never, algo.Never},
		// A shaper of 10/s with burst 2 queues up to 2 units after the one
		// it lets through: the second waits 100ms, the third 200ms.
		{"shaper first", shaper, 1, true, 0, 0},
		{"shaper second", shaper, 1, true, 100 * time.Millisecond, 0},
		{"shaper third", shaper, 1, true, 200 * time.Millisecond, 0},
		{"shaper full", shaper, 1, false, algo.Never, 100 * time.Millisecond},
	}
	t.Run("Limiter", func(t *testing.T) {
		both(t, func(t *testing.T, st store.Store, _ *storetest.Clock) {
			b := newLimiter(t, st, "b", bucket)
			s := newLimiter(t, st, "s", shaper)
			for _, c := range steps {
				l := b
				if c.p.Algorithm == algo.Shaper {
					l = s
				}
				r, err := l.Reserve(t.Context(), "k", c.n)
				if err != nil {
					t.Fatal(err)
				}
				if r.OK() != c.ok || r.Delay() != c.delay || r.Decision().RetryAfter != c.retry {
					t.Errorf("%s: Reserve(%d) = OK %v Delay %v RetryAfter %v; want %v %v %v",
						c.name, c.n, r.OK(), r.Delay(), r.Decision().RetryAfter, c.ok, c.delay, c.retry)
				}
			}
		})
	})
	t.Run("Local", func(t *testing.T) {
		b, _ := newFakeLocal(t, bucket)
		s, _ := newFakeLocal(t, shaper)
		for _, c := range steps {
			l := b
			if c.p.Algorithm == algo.Shaper {
				l = s
			}
			r := l.Reserve(c.n)
			if r.OK() != c.ok || r.Delay() != c.delay || r.Decision().RetryAfter != c.retry {
				t.Errorf("%s: Reserve(%d) = OK %v Delay %v RetryAfter %v; want %v %v %v",
					c.name, c.n, r.OK(), r.Delay(), r.Decision().RetryAfter, c.ok, c.delay, c.retry)
			}
		}
	})
}
