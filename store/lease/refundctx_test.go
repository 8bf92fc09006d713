package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
)

// holdKey holds the first Take of one key in the shared store until
// released: the lease Store meanwhile holds that key's lock.
type holdKey struct {
	store.Store
	key            string
	once           sync.Once
	enter, release chan struct{}
}

func (h *holdKey) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	if len(reqs) == 1 && reqs[0].Key == h.key {
		h.once.Do(func() { close(h.enter); <-h.release })
	}
	return h.Store.Take(ctx, reqs, out)
}

// TestRefundContextEndsWhileWaiting: a Refund of four requests whose
// context ends while it waits for the lock of the third one's key (a Take
// on it is in the shared store) still gives the first one, bound for the
// shared store, back there, keeps the second one's unit in its slice, and
// fails with an error that wraps the context's and names the two keys it
// did not refund. It returned the context's error alone, dropping the
// first request: the shared store kept its 5 units charged.
func TestRefundContextEndsWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		clk := newClock()
		m := shared(t, clk)
		h := &holdKey{Store: m, key: "b", enter: make(chan struct{}), release: make(chan struct{})}
		s, err := lease.New(noClose{h}, lease.WithClock(clk.Now), lease.WithSlice(10))
		if err != nil {
			t.Fatal(err)
		}
		l := quota(t, algo.TokenBucket, 100)
		// "a": charged on the shared store by a Take that went there as it
		// was; this Store has no entry for it.
		out := make([]algo.Decision, 1)
		resA, err := m.Take(ctx, []store.Request{{Key: "a", Limit: l, Cost: 5}}, out)
		if err != nil || !out[0].Allowed {
			t.Fatalf("take of a: %+v, %v", out[0], err)
		}
		// "c": one unit admitted from a slice.
		resC, err := s.Take(ctx, []store.Request{{Key: "c", Limit: l, Cost: 1}}, out)
		if err != nil || !out[0].Allowed {
			t.Fatalf("take of c: %+v, %v", out[0], err)
		}
		// "b": its first Take holds its lock, inside the shared store.
		taken := make(chan error, 1)
		go func() {
			_, err := s.Take(ctx, []store.Request{{Key: "b", Limit: l, Cost: 1}}, make([]algo.Decision, 1))
			taken <- err
		}()
		<-h.enter

		rctx, cancel := context.WithTimeout(ctx, time.Second)
		err = s.Refund(rctx, []store.Request{
			{Key: "a", Limit: l, Cost: 5, At: resA.At},
			{Key: "c", Limit: l, Cost: 1, At: resC.At},
			{Key: "b", Limit: l, Cost: 1},
			{Key: "d", Limit: l, Cost: 1},
		})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Refund whose context ended waiting for key b: %v, want an error wrapping context.DeadlineExceeded", err)
		}
		msg := err.Error()
		for _, want := range []string{`"b"`, `"d"`, "2 of 4"} {
			if !strings.Contains(msg, want) {
				t.Errorf("Refund's error %q does not say %s (the requests not refunded)", msg, want)
			}
		}
		for _, done := range []string{`"a"`, `"c"`} {
			if strings.Contains(msg, done) {
				t.Errorf("Refund's error %q names %s, which was refunded", msg, done)
			}
		}
		if got := remaining(t, m, "a", l); got != 100 {
			t.Errorf("the shared store has %d of a's 100 left after its refund, want 100 (the refund was dropped)", got)
		}

		close(h.release)
		if err := <-taken; err != nil {
			t.Fatalf("take of b: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// c's admitted unit went back into its slice, which Close gave
		// back; b's unit was not refunded.
		if got := remaining(t, m, "c", l); got != 100 {
			t.Errorf("after Close the shared store has %d of c's 100 left, want 100", got)
		}
		if got := remaining(t, m, "b", l); got != 99 {
			t.Errorf("after Close the shared store has %d of b's 100 left, want 99 (its unit not refunded)", got)
		}
	})
}

// TestRefundContextEndedNamesFewKeys: a Refund called with its context
// ended refunds nothing and names the first three keys of its requests,
// each once, and counts the others.
func TestRefundContextEndedNamesFewKeys(t *testing.T) {
	clk := newClock()
	m := shared(t, clk)
	s := instance(t, m, clk)
	l := quota(t, algo.TokenBucket, 100)
	var reqs []store.Request
	for i := range 10 {
		out := make([]algo.Decision, 1)
		key := fmt.Sprint("k", i)
		res, err := m.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out)
		if err != nil || !out[0].Allowed {
			t.Fatalf("take of %s: %+v, %v", key, out[0], err)
		}
		// k0 twice: named once.
		reqs = append(reqs, store.Request{Key: key, Limit: l, Cost: 1, At: res.At})
		if i == 0 {
			reqs = append(reqs, reqs[0])
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Refund(ctx, reqs)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Refund with its context ended: %v, want an error wrapping context.Canceled", err)
	}
	if want := `11 of 11 requests not refunded, keys "k0", "k1", "k2" and 7 more`; !strings.Contains(err.Error(), want) {
		t.Errorf("Refund's error %q, want it to say %q", err, want)
	}
	if got := remaining(t, m, "k0", l); got != 99 {
		t.Errorf("the shared store has %d of k0's 100 left, want 99: nothing refunded", got)
	}
}

// TestRefundContextEndsAndStoreHangs: when the give-back to the shared
// store of what a Refund cut short by its context had decided fails too
// (the store does not answer), the error says so as well.
func TestRefundContextEndsAndStoreHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		clk := newClock()
		m := shared(t, clk)
		hung := &hangable{Store: m}
		h := &holdKey{Store: hung, key: "b", enter: make(chan struct{}), release: make(chan struct{})}
		s, err := lease.New(noClose{h}, lease.WithClock(clk.Now))
		if err != nil {
			t.Fatal(err)
		}
		l := quota(t, algo.TokenBucket, 100)
		taken := make(chan error, 1)
		go func() {
			_, err := s.Take(ctx, []store.Request{{Key: "b", Limit: l, Cost: 1}}, make([]algo.Decision, 1))
			taken <- err
		}()
		<-h.enter
		hung.hung.Store(true)
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		start := time.Now()
		err = s.Refund(rctx, []store.Request{{Key: "a", Limit: l, Cost: 1, At: 1}, {Key: "b", Limit: l, Cost: 1}})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Refund: %v, want an error wrapping context.DeadlineExceeded", err)
		}
		if want := `1 of 2 requests not refunded, key "b"; nor the 1 before them bound for the shared store: `; !strings.Contains(err.Error(), want) {
			t.Errorf("Refund's error %q, want it to say %q", err, want)
		}
		// The context's second, and the give-back's bound (a second).
		if took := time.Since(start); took != 2*time.Second {
			t.Errorf("Refund took %v, want 2s", took)
		}
		hung.hung.Store(false)
		close(h.release)
		if err := <-taken; err != nil {
			t.Fatalf("take of b: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
