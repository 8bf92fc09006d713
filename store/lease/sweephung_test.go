package lease_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
)

// hangable is a shared store that, while hung, does not answer Refunds:
// each one sent then waits until its context ends, as with a server that
// stopped answering. It records when each Refund began and ended.
type hangable struct {
	store.Store
	hung  atomic.Bool
	mu    sync.Mutex
	calls []refundCall
}

type refundCall struct {
	start, end time.Time
	err        error
}

func (h *hangable) Refund(ctx context.Context, reqs []store.Request) error {
	c := refundCall{start: time.Now()}
	if h.hung.Load() {
		<-ctx.Done()
		c.err = ctx.Err()
	} else {
		c.err = h.Store.Refund(ctx, reqs)
	}
	c.end = time.Now()
	h.mu.Lock()
	h.calls = append(h.calls, c)
	h.mu.Unlock()
	return c.err
}

// TestSweepStopsOnHungStore: a janitor sweep over 10 expired slices on a
// shared store that has stopped answering ends with its first give-back
// that fails, one store timeout (1 s here) after it began, and leaves the
// other slices, with their units, to a sweep a janitor interval later,
// which gives them back once the store answers again. The sweep went on
// to the next key, one timeout each (10 s for 10 keys, minutes for a few
// hundred on a store that hangs), each key held meanwhile, and a give-back
// sent while the store still hung lost that key's units too.
func TestSweepStopsOnHungStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keys = 10
		clk := newClock()
		m := shared(t, clk)
		h := &hangable{Store: m}
		// Slices live 100 ms by clk; the janitor looks every 50 ms, and
		// each of its give-backs has 1 s.
		s, err := lease.New(noClose{h}, lease.WithClock(clk.Now), lease.WithSlice(10), lease.WithTTL(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		l := quota(t, algo.FixedWindow, 100)
		for i := range keys {
			if d, _ := take(t, s, fmt.Sprint("k", i), l, 1); !d.Allowed {
				t.Fatalf("take of k%d refused: %+v", i, d)
			}
		}
		h.hung.Store(true)
		clk.Add(time.Hour) // every slice has expired
		// The first sweep begins at 50 ms; its first give-back fails at
		// 1.05 s. The store answers again at 1.075 s.
		time.Sleep(1075 * time.Millisecond)
		h.hung.Store(false)
		time.Sleep(2 * time.Second)

		h.mu.Lock()
		calls := slicesClone(h.calls)
		h.mu.Unlock()
		var failed int
		for _, c := range calls {
			if c.err != nil {
				failed++
			}
		}
		if failed != 1 {
			t.Errorf("%d give-backs failed, want 1: the sweep went on to the next key with the store hung", failed)
		}
		if len(calls) >= 2 {
			if gap := calls[1].start.Sub(calls[0].end); gap < 50*time.Millisecond {
				t.Errorf("the next give-back began %v after the first failed, want the next sweep, a janitor interval (50ms) later", gap)
			}
		}
		var left int64
		for i := range keys {
			left += remaining(t, m, fmt.Sprint("k", i), l)
		}
		// Each key admitted 1; the slice whose give-back failed lost its
		// 9 unused units; the others' went back.
		if want := int64(keys*99 - 9); left != want {
			t.Errorf("the shared store has %d of the keys' %d left, want %d (one slice's 9 units lost, the others given back)", left, keys*100, want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func slicesClone(c []refundCall) []refundCall { return append([]refundCall(nil), c...) }
