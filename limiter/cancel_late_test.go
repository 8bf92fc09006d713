package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/storetest"
)

// A token bucket's reservation cancelled after the bucket was full again
// and spent gave its whole cost back: 5 reserved at t on a burst of 10 at
// 10/s, 10 taken at t+5s, then the Cancel let 5 more through at t+5s, 15
// at one instant. The bucket without the reservation had wasted the refill
// the charged one kept, and nothing of the 5 was still held. Local's
// AllowN, which decides without algo's Take, marks its takes for the
// refund as Take does.
func TestCancelLateTokenBucket(t *testing.T) {
	p := algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second}
	t.Run("limiter", func(t *testing.T) {
		clock := storetest.NewClock(storetest.Epoch)
		st, err := memory.New(memory.WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		l, err := limiter.New(st, "api", p)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		r, err := l.Reserve(ctx, "k", 5)
		if err != nil || !r.OK() {
			t.Fatalf("Reserve(t, 5) = %+v, %v", r.Decision(), err)
		}
		clock.Advance(5 * time.Second)
		if d, err := l.AllowN(ctx, "k", 10); err != nil || !d.Allowed {
			t.Fatalf("AllowN(t+5s, 10) = %+v, %v; want admitted", d, err)
		}
		if err := r.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if d, err := l.AllowN(ctx, "k", 5); err != nil || d.Allowed {
			t.Fatalf("after the Cancel, AllowN(t+5s, 5) = %+v, %v; want refused: 15 at one instant on a burst of 10", d, err)
		}
	})
	t.Run("local", func(t *testing.T) {
		l, clock := newFakeLocal(t, p)
		r := l.Reserve(5)
		if !r.OK() {
			t.Fatalf("Reserve(t, 5) = %+v", r.Decision())
		}
		clock.Advance(5 * time.Second)
		if !l.AllowN(10) {
			t.Fatal("AllowN(t+5s, 10) refused")
		}
		r.Cancel()
		if l.AllowN(5) {
			t.Fatal("after the Cancel, AllowN(t+5s, 5) admitted: 15 at one instant on a burst of 10")
		}
	})
}
