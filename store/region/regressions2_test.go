package region_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/region"
	"github.com/floodgate/floodgate/store/resilient"
)

// killable fails every call with store.ErrUnavailable once dead is set.
type killable struct {
	store.Store
	dead    atomic.Bool
	takes   atomic.Int64
	refunds atomic.Int64
}

func (k *killable) err() error {
	if k.dead.Load() {
		return errors.Join(store.ErrUnavailable, errors.New("dead"))
	}
	return nil
}

func (k *killable) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	k.takes.Add(1)
	if err := k.err(); err != nil {
		return store.Result{}, err
	}
	return k.Store.Take(ctx, reqs, out)
}

func (k *killable) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	if err := k.err(); err != nil {
		return err
	}
	return k.Store.Peek(ctx, reqs, out)
}

func (k *killable) Refund(ctx context.Context, reqs []store.Request) error {
	k.refunds.Add(1)
	if err := k.err(); err != nil {
		return err
	}
	return k.Store.Refund(ctx, reqs)
}

// Refunds of borrowed admissions to a lender that died are not the region
// Store's errors: under store/resilient (serve's stack) they counted
// against the region's own breaker, which opened, and the failure policy
// answered for a region whose own store was fine (under FailOpen, a limit
// spent in both regions admitted again).
func TestRefundToADeadLenderIsNotThisRegionsFailure(t *testing.T) {
	clk := newClock()
	peer := &killable{Store: memStore(t, clk)}
	s := regionA(t, noClose{memStore(t, clk)}, noClose{peer}, region.WithClock(clk.Now), region.WithBackoff(time.Hour))
	rs, err := resilient.New(s, resilient.WithPolicy(resilient.FailOpen), resilient.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 20, Period: time.Hour}) // 10 a region
	var lent []int64
	for i := range 20 {
		out := make([]algo.Decision, 1)
		res, err := rs.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}, out)
		if err != nil || !res.Allowed {
			t.Fatalf("Take %d: %v %+v", i, err, res)
		}
		if i >= 10 {
			lent = append(lent, res.At)
		}
	}
	peer.dead.Store(true)
	// The limit is spent: a borrowing fails and leaves the peer out.
	if ok, _ := take(t, rs, "k2", l, 11); ok {
		t.Fatal("admitted")
	}
	for _, at := range lent[:6] {
		_ = rs.Refund(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1, At: at}})
	}
	// 20 admitted, 6 refunded to a dead lender (stay charged there): the
	// region's own share is spent, so no more than 0 should pass here.
	n := 0
	var fb bool
	for range 10 {
		out := make([]algo.Decision, 1)
		res, err := rs.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}, out)
		if err == nil && res.Allowed {
			n++
			fb = fb || res.Fallback
		}
	}
	if n > 0 {
		t.Fatalf("own store healthy, share spent, lender dead: %d of 10 admitted (fallback %v): refunds to the dead lender opened the region's own breaker (peer refunds %d)", n, fb, peer.refunds.Load())
	}
}

// A Refund of a loan skips a lender that is left out (down), and waits on
// none beyond the region's timeout (it went to the hung lender, for the
// caller's whole context).
func TestRefundSkipsALenderLeftOut(t *testing.T) {
	clk := newClock()
	peer := &hangable{Store: memStore(t, clk)}
	s := regionA(t, noClose{memStore(t, clk)}, noClose{peer}, region.WithClock(clk.Now),
		region.WithTimeout(50*time.Millisecond), region.WithBackoff(time.Hour))
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Hour}) // 1 a region
	take(t, s, "k", l, 1)
	out := make([]algo.Decision, 1)
	res, err := s.Take(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}, out)
	if err != nil || !res.Allowed {
		t.Fatalf("borrow: %v %+v", err, res)
	}
	peer.hang.Store(true)
	take(t, s, "k3", l, 1)
	take(t, s, "k3", l, 1) // a borrowing that times out: the peer is left out
	if st := s.Stats(); !st.Peers[0].Down {
		t.Fatalf("peer not left out: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err = s.Refund(ctx, []store.Request{{Key: "k", Limit: l, Cost: 1, At: res.At}})
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Fatalf("Refund took %v (err %v) waiting on a peer left out; the region's timeout is 50ms", took, err)
	}
}

type hangable struct {
	store.Store
	hang atomic.Bool
}

func (h *hangable) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	if h.hang.Load() {
		<-ctx.Done()
		return store.Result{}, ctx.Err()
	}
	return h.Store.Take(ctx, reqs, out)
}

func (h *hangable) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	if h.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return h.Store.Peek(ctx, reqs, out)
}

func (h *hangable) Refund(ctx context.Context, reqs []store.Request) error {
	if h.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return h.Store.Refund(ctx, reqs)
}

// A Take that starts after a Refund's first forget and is refused before
// the refund lands leaves no memo once the Refund returns (the key went to
// the spent peers for up to a second, though the share had the unit).
func TestTakeBetweenForgetAndRefundLeavesNoMemo(t *testing.T) {
	own, s, l := spentGated(t)
	own.holdRefund.Store(true)
	done := make(chan error)
	go func() { done <- s.Refund(context.Background(), []store.Request{{Key: "k", Limit: l, Cost: 1}}) }()
	<-own.reached // forgotten, generation bumped; the unit not back yet
	if ok, _ := take(t, s, "k", l, 1); ok {
		t.Fatal("admitted before the refund landed")
	}
	close(own.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ok, d := take(t, s, "k", l, 1); !ok {
		t.Fatalf("after the Refund returned, refused (%+v): a refusal read before the refund landed was remembered", d)
	}
}

// flaky fails Takes with store.ErrUnavailable while fail is set, and
// answers Ping (held once, when hold is set, until release).
type flaky struct {
	store.Store
	fail, hold       atomic.Bool
	takes            atomic.Int64
	reached, release chan struct{}
}

func (f *flaky) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	f.takes.Add(1)
	if f.fail.Load() {
		return store.Result{}, errors.Join(store.ErrUnavailable, errors.New("flaky"))
	}
	return f.Store.Take(ctx, reqs, out)
}

func (f *flaky) Ping(ctx context.Context) error {
	if f.hold.CompareAndSwap(true, false) {
		f.reached <- struct{}{}
		<-f.release
	}
	return nil
}

// A probe's answer to a ping sent before a borrowing failed leaves that
// newer failure standing: the peer stays Down and is not asked before its
// backoff passes (the answer cleared it).
func TestProbeAnswerKeepsANewerFailure(t *testing.T) {
	clk := newClock()
	peer := &flaky{Store: memStore(t, clk), reached: make(chan struct{}), release: make(chan struct{})}
	s := regionA(t, noClose{memStore(t, clk)}, peer, region.WithClock(clk.Now),
		region.WithTimeout(100*time.Millisecond), region.WithBackoff(time.Minute))
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Hour}) // 1 a region
	take(t, s, "k", l, 1)
	peer.fail.Store(true)
	peer.hold.Store(true)
	take(t, s, "k", l, 1) // fails: left out, probed
	<-peer.reached        // a probe's ping is in flight (a second later)
	clk.Add(2 * time.Minute)
	take(t, s, "k", l, 1) // past the backoff: asked again, fails again: left out
	before := peer.takes.Load()
	if st := s.Stats(); !st.Peers[0].Down || st.PeerFailures != 2 {
		t.Fatalf("after the second failure: %+v", st)
	}
	close(peer.release) // the ping sent before that failure answers
	time.Sleep(100 * time.Millisecond)
	st := s.Stats()
	take(t, s, "k", l, 1)
	if asked := peer.takes.Load() - before; asked != 0 || !st.Peers[0].Down {
		t.Fatalf("a peer that failed a moment ago (backoff 1m, not passed): Down %v, asked again %d times", st.Peers[0].Down, asked)
	}
}

// refundCount counts the Refunds of the wrapped store.
type refundCount struct {
	store.Store
	n atomic.Int64
}

func (r *refundCount) Refund(ctx context.Context, reqs []store.Request) error {
	r.n.Add(1)
	return r.Store.Refund(ctx, reqs)
}

// The loan book's ring keeps a slot for every loan, repaid or not; the
// eviction of a repaid loan's slot must not drop a live loan of the same
// (key, At) — every admission from one borrowed slice has the slice's At
// (after 4100 borrow-and-refund rounds, live loans were forgotten and
// their Refunds went to this region's own store).
func TestRepaidLoansEvictNoLiveLoan(t *testing.T) {
	clk := newClock()
	own := &refundCount{Store: memStore(t, clk)}
	s := regionA(t, noClose{own}, noClose{memStore(t, clk)}, region.WithClock(clk.Now),
		region.WithSlice(10), region.WithSliceTTL(time.Hour))
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 200, Period: time.Hour}) // 100 a region
	for range 100 {
		take(t, s, "k", l, 1)
	}
	borrow := func() int64 { return takeAt(t, s, "k", l) }
	refund := func(at int64) { refundAt(t, s, "k", l, at) }
	for range 4100 {
		refund(borrow())
	}
	a1, a2 := borrow(), borrow()
	refund(a1)
	refund(a2)
	if n := own.n.Load(); n != 0 {
		t.Fatalf("%d Refunds of borrowed admissions (the last two live, 4102 loans in all) went to this region's own store, not the lender", n)
	}
}

// Two admissions of a key at one instant lent by two peers (a store clock
// that stands still, or is coarser than the calls) are each refunded to
// their lender (both were booked to the second).
func TestSameAtLentByTwoPeers(t *testing.T) {
	clk := newClock()
	own, b, c := memStore(t, clk), memStore(t, clk), memStore(t, clk)
	s, err := region.New("a", noClose{own}, []region.Peer{{Name: "b", Store: noClose{b}}, {Name: "c", Store: noClose{c}}}, region.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Hour}) // 1 a region
	take(t, s, "k", l, 1)
	var ats []int64
	for range 2 {
		ats = append(ats, takeAt(t, s, "k", l))
	}
	for _, at := range ats {
		refundAt(t, s, "k", l, at)
	}
	n := admitted(t, s, "k", l, 3)
	if n != 2 {
		t.Fatalf("3 taken, the 2 borrowed refunded: %d more admitted, want 2", n)
	}
}

// A hierarchy borrowed through slices (pass-through in store/lease)
// and refunded goes back to the lender.
func TestHierarchyRefundWithSlices(t *testing.T) {
	clk := newClock()
	s := regionA(t, noClose{memStore(t, clk)}, noClose{memStore(t, clk)}, region.WithClock(clk.Now),
		region.WithSlice(2), region.WithSliceTTL(time.Hour))
	lu := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 4, Period: time.Hour})   // 2 a region
	lg := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Hour}) // 50
	reqs := []store.Request{{Key: "u", Limit: lu, Cost: 1}, {Key: "g", Limit: lg, Cost: 1}}
	var ats []int64
	for i := range 4 {
		res, err := s.Take(context.Background(), reqs, make([]algo.Decision, 2))
		if err != nil || !res.Allowed {
			t.Fatalf("Take %d: %v %+v", i, err, res)
		}
		if i >= 2 {
			ats = append(ats, res.At)
		}
	}
	if res, _ := s.Take(context.Background(), reqs, make([]algo.Decision, 2)); res.Allowed {
		t.Fatal("admitted past the limit")
	}
	for _, at := range ats {
		rr := []store.Request{{Key: "u", Limit: lu, Cost: 1, At: at}, {Key: "g", Limit: lg, Cost: 1, At: at}}
		if err := s.Refund(context.Background(), rr); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for range 3 {
		if res, _ := s.Take(context.Background(), reqs, make([]algo.Decision, 2)); res.Allowed {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("after refunding the 2 borrowed hierarchies, %d admitted, want 2", n)
	}
}

// A peer noted Unreached (its store still being opened) reads Down until
// a probe answers, then up; a name that is no peer's is refused.
func TestUnreachedPeerIsDownUntilItAnswers(t *testing.T) {
	clk := newClock()
	peer := &killable{Store: memStore(t, clk)}
	peer.dead.Store(true)
	s := regionA(t, noClose{memStore(t, clk)}, noClose{peer}, region.WithClock(clk.Now), region.WithBackoff(100*time.Millisecond))
	if s.Unreached("nope") {
		t.Error("Unreached of a region that is no peer: true")
	}
	if !s.Unreached("b") || !s.Stats().Peers[0].Down {
		t.Fatalf("a peer noted unreached: %+v, want it Down", s.Stats())
	}
	time.Sleep(300 * time.Millisecond) // probes of a peer still dead
	if !s.Stats().Peers[0].Down {
		t.Fatal("a peer that never answered reads up")
	}
	peer.dead.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Peers[0].Down {
		if time.Now().After(deadline) {
			t.Fatalf("the peer answers, and still reads Down 5s later: %+v", s.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := s.Stats(); st.PeerFailures != 0 {
		t.Errorf("%d peer failures from probes, want 0", st.PeerFailures)
	}
}
