package lease_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
)

// TestTakeGiveBackBoundedByRequest: a Take that finds its key's slice
// expired gives its units back within its own context, not the give-back
// timeout (the TTL, 2 s here): on a shared store whose Refunds hang, a
// Take with a 50 ms deadline (store/resilient's default store timeout)
// returns the context's error at its deadline, one whose context is
// cancelled returns at the cancel, and a Take on the same key behind
// either gets the key's lock then and takes a new slice. The expired
// slice's 9 units are lost (their give-back was cut short, and the
// shared store may have had them or not), never given back twice: the
// shared store's count stays exact. The give-back ignored the request's
// context and held the key for the whole timeout: the first Take
// returned after 2 s, and the second waited as long.
func TestTakeGiveBackBoundedByRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func(context.Context) (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 50*time.Millisecond)
		}, context.DeadlineExceeded},
		{"cancel", func(ctx context.Context) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := newClock()
				m := shared(t, clk)
				h := &hangable{Store: m}
				// Slices live 2 s by clk, and so long may a give-back
				// that no request bounds take.
				s, err := lease.New(noClose{h}, lease.WithClock(clk.Now), lease.WithSlice(10), lease.WithTTL(2*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				l := quota(t, algo.FixedWindow, 100)
				if d, _ := take(t, s, "k", l, 1); !d.Allowed {
					t.Fatalf("first take refused: %+v", d)
				}
				h.hung.Store(true)
				clk.Add(2 * time.Second) // the slice, 9 units left, has expired

				start := time.Now()
				var (
					firstErr, secondErr   error
					firstTook, secondTook time.Duration
					second                algo.Decision
				)
				done := make(chan struct{})
				go func() {
					defer close(done)
					ctx, cancel := tc.ctx(context.Background())
					defer cancel()
					out := make([]algo.Decision, 1)
					_, firstErr = s.Take(ctx, []store.Request{{Key: "k", Limit: l, Cost: 1}}, out)
					firstTook = time.Since(start)
				}()
				time.Sleep(10 * time.Millisecond) // the first Take holds the key, its give-back hung
				h.hung.Store(false)               // the next call answers; the one in flight still hangs
				out := make([]algo.Decision, 1)
				_, secondErr = s.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}, out)
				secondTook, second = time.Since(start), out[0]
				<-done

				if !errors.Is(firstErr, tc.want) {
					t.Errorf("the Take whose give-back hung returned %v, want %v", firstErr, tc.want)
				}
				if firstTook > 50*time.Millisecond {
					t.Errorf("the Take whose give-back hung returned after %v, want at its context's end (50ms), not the give-back timeout (2s)", firstTook)
				}
				if secondErr != nil || !second.Allowed {
					t.Fatalf("the Take behind it: %+v, %v", second, secondErr)
				}
				if secondTook > 50*time.Millisecond {
					t.Errorf("the Take behind it returned after %v, want when the first let the key go (50ms)", secondTook)
				}
				// 2 admitted, 9 lost with the give-back cut short, 9 held
				// in the second slice and given back by Close.
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if got := remaining(t, m, "k", l); got != 89 {
					t.Errorf("the shared store has %d left, want 89 (2 admitted, the expired slice's 9 lost, the new slice's 9 given back)", got)
				}
				if st := s.Stats(); st.Returned != 9 {
					t.Errorf("Stats().Returned = %d, want 9 (the second slice's, at Close)", st.Returned)
				}
			})
		})
	}
}
