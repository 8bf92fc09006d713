package region_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/region"
	"github.com/floodgate/floodgate/store/resilient"
)

// A borrowed unit of a sliding log refunded goes back to the lender's
// share: this region's store would free nothing (the refund carries the
// lender's At, later than every stamp of the spent share).
func TestRefundOfABorrowedUnitGoesToTheLender(t *testing.T) {
	clk := newClock()
	a, b := memStore(t, clk), memStore(t, clk)
	s := regionA(t, noClose{a}, noClose{b}, region.WithClock(clk.Now))
	l := compile(t, algo.Params{Algorithm: algo.SlidingLog, Limit: 4, Period: time.Hour}) // 2 a region
	for range 2 {
		if ok, _ := take(t, s, "k", l, 1); !ok {
			t.Fatal("share refused")
		}
	}
	clk.Add(time.Second)
	at := takeAt(t, s, "k", l) // borrowed
	clk.Add(time.Second)
	refundAt(t, s, "k", l, at)
	// 3 taken, 1 refunded: 2 charged of 4, so 2 more must pass.
	n := admitted(t, s, "k", l, 5)
	if n != 2 {
		t.Fatalf("after 3 Takes and 1 Refund of a limit of 4, %d more admitted, want 2: the refund was lost", n)
	}
}

// A region whose share is nothing borrows every unit; its refunds go to
// the lender (they were dropped: it has no share to refund to).
func TestNothingShareRefundGoesToTheLender(t *testing.T) {
	clk := newClock()
	a, b := memStore(t, clk), memStore(t, clk)
	rb, err := region.New("b", noClose{b}, []region.Peer{{Name: "a", Store: noClose{a}}}, region.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rb.Close() })
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute})
	out := make([]algo.Decision, 1)
	res, err := rb.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}, out)
	if err != nil || !res.Allowed {
		t.Fatalf("borrow: %v %+v", err, res)
	}
	if err := rb.Refund(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1, At: res.At}}); err != nil {
		t.Fatal(err)
	}
	if ok, d := take(t, rb, "k", l, 1); !ok {
		t.Fatalf("after the only Take was refunded, refused (%+v): the refund went nowhere", d)
	}
}

// gated holds the wrapped store's next Take (once it decided) or next
// Refund (before it is applied), as holdTake or holdRefund says, until
// release is closed.
type gated struct {
	store.Store
	holdTake, holdRefund atomic.Bool
	reached, release     chan struct{}
}

func (g *gated) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	res, err := g.Store.Take(ctx, reqs, out)
	if g.holdTake.CompareAndSwap(true, false) {
		g.reached <- struct{}{}
		<-g.release
	}
	return res, err
}

func (g *gated) Refund(ctx context.Context, reqs []store.Request) error {
	if g.holdRefund.CompareAndSwap(true, false) {
		g.reached <- struct{}{}
		<-g.release
	}
	return g.Store.Refund(ctx, reqs)
}

// spentGated returns two regions' store whose own store is gated, with a
// limit of 4 (2 a region) spent on key k, and the remembered refusal of
// the share past (the same window).
func spentGated(t *testing.T) (*gated, *region.Store, *algo.Limit) {
	t.Helper()
	clk := newClock()
	own := &gated{Store: memStore(t, clk), reached: make(chan struct{}), release: make(chan struct{})}
	s := regionA(t, noClose{own}, noClose{memStore(t, clk)}, region.WithClock(clk.Now))
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 4, Period: time.Minute})
	if n := admitted(t, s, "k", l, 4); n != 4 {
		t.Fatalf("%d of 4 admitted within the limit", n)
	}
	clk.Add(1500 * time.Millisecond)
	return own, s, l
}

// A Take whose share refused before a Refund through the same Store does
// not remember the refusal after it: the Refund freed a unit, and the key
// must not go straight to the (spent) peers for the next second.
func TestRefundDuringATakeForgetsTheRefusal(t *testing.T) {
	own, s, l := spentGated(t)
	own.holdTake.Store(true)
	done := make(chan bool)
	go func() {
		out := make([]algo.Decision, 1)
		res, _ := s.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}, out)
		done <- res.Allowed
	}()
	<-own.reached // the share refused; the Take has not remembered it yet
	if err := s.Refund(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	close(own.release)
	if <-done {
		t.Fatal("the racing Take was admitted")
	}
	// The share has the refunded unit: a Take must get it.
	if ok, d := take(t, s, "k", l, 1); !ok {
		t.Fatalf("after a Refund through this Store, refused (%+v): a stale memo sent it to the spent peer", d)
	}
}

// A cost above every region's share, though within the limit, is refused
// as never (the package documentation): no share can take it, and a wait
// would not change that; the decision reports the whole limit.
func TestCostAboveEveryShareIsNever(t *testing.T) {
	clk := newClock()
	s := regionA(t, noClose{memStore(t, clk)}, noClose{memStore(t, clk)}, region.WithClock(clk.Now))
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute}) // 5 a region
	if ok, d := take(t, s, "fresh", l, 6); ok || !d.IsNever() || d.Limit != 10 {
		t.Fatalf("a cost of 6 on a fresh key of a limit of 10 over shares of 5: %+v, want a refusal as never of the limit of 10", d)
	}
	if ok, _ := take(t, s, "fresh", l, 5); !ok {
		t.Fatal("a cost of 5, a share's, refused")
	}
}

// With serve's stack (resilient over region over a leased own store),
// decisions come through TakeLocal, which must start the borrowing ahead
// as Take does (it did not: the share's refusal waited on the peer).
func TestPrefetchThroughTakeLocal(t *testing.T) {
	clk := newClock()
	ls, err := lease.New(noClose{memStore(t, clk)}, lease.WithSlice(10), lease.WithTTL(time.Hour), lease.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	lender := &counting{Store: memStore(t, clk)}
	s := regionA(t, ls, noClose{lender}, region.WithSlice(5), region.WithPrefetch(), region.WithSliceTTL(time.Hour), region.WithClock(clk.Now))
	rs, err := resilient.New(s)
	if err != nil {
		t.Fatal(err)
	}
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 40, Period: time.Minute}) // 20 a region
	for i := range 20 {
		if ok, _ := take(t, rs, "k", l, 1); !ok {
			t.Fatalf("Take %d on the share refused", i)
		}
	}
	idle(t, s)
	if st := s.Stats(); st.Prefetches < 1 || lender.takes.Load() < 1 {
		t.Fatalf("share spent, nothing borrowed ahead: %+v, lender asked %d times", st, lender.takes.Load())
	}
}

// hung never answers a Take or a Peek: it returns when ctx ends.
type hung struct{ store.Store }

func (hung) Take(ctx context.Context, _ []store.Request, _ []algo.Decision) (store.Result, error) {
	<-ctx.Done()
	return store.Result{}, ctx.Err()
}

func (hung) Peek(ctx context.Context, _ []store.Request, _ []algo.Decision) error {
	<-ctx.Done()
	return ctx.Err()
}

// A caller's deadline that trims the borrowing budget by a hair (here
// 110ms left, timeout 100ms: budget 99ms) still leaves a hung peer out
// (it exempted it: every borrowing Take waited the whole budget on it).
func TestHungPeerLeftOutUnderACallersDeadline(t *testing.T) {
	clk := newClock()
	s := regionA(t, noClose{memStore(t, clk)}, hung{memStore(t, clk)},
		region.WithTimeout(100*time.Millisecond), region.WithBackoff(time.Hour), region.WithClock(clk.Now))
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute}) // 1 a region
	take(t, s, "k", l, 1)
	start := time.Now()
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 110*time.Millisecond)
		res, err := s.Take(ctx, []store.Request{{Key: "k", Limit: l, Cost: 1}}, make([]algo.Decision, 1)) // the share is spent
		cancel()
		if err != nil || res.Allowed {
			t.Fatalf("Take %d: %v %+v", i, err, res)
		}
	}
	took := time.Since(start)
	st := s.Stats()
	if st.PeerFailures == 0 || took > 300*time.Millisecond {
		t.Fatalf("5 Takes borrowing from a hung peer took %v, peer failures %d, down %v: want it left out after the first",
			took, st.PeerFailures, st.Peers[0].Down)
	}
}

func fmtKey(i int) string { return "k" + string(rune('a'+i)) }

// A Peek of several requests asks the peers within one budget, not one
// per request (n timeouts on a hung peer).
func TestPeekHasOneBudget(t *testing.T) {
	clk := newClock()
	s := regionA(t, noClose{memStore(t, clk)}, hung{memStore(t, clk)},
		region.WithTimeout(100*time.Millisecond), region.WithClock(clk.Now))
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute}) // 1 a region
	var reqs []store.Request
	for i := range 5 {
		reqs = append(reqs, store.Request{Key: fmtKey(i), Limit: l, Cost: 2}) // 2 > the share: asks the peer
	}
	start := time.Now()
	if err := s.Peek(context.Background(), reqs, make([]algo.Decision, len(reqs))); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Fatalf("Peek of %d requests with a hung peer took %v; the timeout is 100ms", len(reqs), took)
	}
}

// The same in floodgate serve's stack: resilient (store-timeout 50ms +
// region-timeout 250ms, as serve sets it) over a region whose own store
// answers in 30ms, and a peer that hangs: it is left out.
func TestHungPeerLeftOutUnderServesStack(t *testing.T) {
	clk := newClock()
	s := regionA(t, noClose{slowAll{memStore(t, clk), 30 * time.Millisecond}}, hung{memStore(t, clk)},
		region.WithBackoff(time.Hour), region.WithClock(clk.Now))
	rs, err := resilient.New(s, resilient.WithTimeout(50*time.Millisecond+region.DefaultTimeout))
	if err != nil {
		t.Fatal(err)
	}
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute}) // 1 a region
	start := time.Now()
	for i := range 4 { // distinct keys: resilient caches a refusal per key
		take(t, rs, fmtKey(i), l, 1) // the share's unit
		if ok, _ := take(t, rs, fmtKey(i), l, 1); ok {
			t.Fatal("admitted")
		}
	}
	if st := s.Stats(); st.PeerFailures == 0 {
		t.Fatalf("4 borrowing Takes took %v with a hung peer; peer failures %d: never left out", time.Since(start), st.PeerFailures)
	}
}

type slowAll struct {
	store.Store
	by time.Duration
}

func (s slowAll) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	time.Sleep(s.by)
	return s.Store.Take(ctx, reqs, out)
}

// After Close, a Take on a key whose share refused a moment ago (the
// spent memo) is store.ErrClosed, as every call is (it was a refusal with
// a nil error, and the closed peers counted as failures).
func TestTakeAfterCloseIsErrClosed(t *testing.T) {
	clk := newClock()
	own, _ := memory.New(memory.WithClock(clk.Now))
	peer, _ := memory.New(memory.WithClock(clk.Now))
	s, err := region.New("a", own, []region.Peer{{Name: "b", Store: peer}}, region.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute}) // 1 a region
	take(t, s, "k", l, 1)
	take(t, s, "k", l, 1) // borrowed: the share's refusal is remembered
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := s.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}, make([]algo.Decision, 1))
	if !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Take after Close: %v, %+v (stats %+v); want store.ErrClosed", err, res, s.Stats())
	}
	if st := s.Stats(); st.PeerFailures != 0 {
		t.Errorf("%d peer failures after Close, want 0", st.PeerFailures)
	}
	reqs := []store.Request{{Key: "k", Limit: l, Cost: 1}}
	for name, err := range map[string]error{
		"Peek":   s.Peek(context.Background(), reqs, make([]algo.Decision, 1)),
		"Refund": s.Refund(context.Background(), reqs),
		"Reset":  s.Reset(context.Background(), "k"),
	} {
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: %v, want store.ErrClosed", name, err)
		}
	}
	if _, ok := s.TakeLocal(reqs, make([]algo.Decision, 1)); ok {
		t.Error("TakeLocal after Close decided")
	}
}
