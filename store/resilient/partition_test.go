package resilient_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/resilient"
)

// nodes is the number of partitions of partitioned.
const nodes = 3

// partitioned is a real memory store split into partitions by the key's
// first byte ('a' is 0, 'b' 1, 'c' 2), as a Cluster's keys are by slot.
// Like store/memcached, it visits the keys of a call in order and stops at
// the first whose partition is marked down (store.ErrUnavailable, as a
// dead server's refused connection) or slow (no answer until the call's
// context ends, as a paused Redis master under rueidis); a call over
// several partitions then fails with a *store.PartitionError naming the
// partition that failed and those not reached, unless vague is set (a
// store that cannot tell). It counts the calls that reach each partition.
type partitioned struct {
	store.Store
	down  [nodes]atomic.Bool
	slow  [nodes]atomic.Bool
	vague atomic.Bool
	calls [nodes]atomic.Int64
}

func (p *partitioned) Partitions() int { return nodes }

func (p *partitioned) Partition(key string) int { return int(key[0]-'a') % nodes }

func (p *partitioned) PartitionName(n int) string { return fmt.Sprintf("node %c", 'a'+n) }

// reach counts a call on reqs' partitions, in order, and fails it at the
// first that is down or slow.
func (p *partitioned) reach(ctx context.Context, reqs []store.Request) error {
	var seen []int
	for i := range reqs {
		n := p.Partition(reqs[i].Key)
		p.calls[n].Add(1)
		var err error
		switch {
		case p.down[n].Load():
			err = fmt.Errorf("test: %s: %w: connection refused", p.PartitionName(n), store.ErrUnavailable)
		case p.slow[n].Load():
			<-ctx.Done()
			err = fmt.Errorf("test: %s: %w: %w", p.PartitionName(n), store.ErrUnavailable, ctx.Err())
		}
		if !slices.Contains(seen, n) {
			seen = append(seen, n)
		}
		if err == nil {
			continue
		}
		var skipped []int
		for _, r := range reqs[i+1:] {
			if m := p.Partition(r.Key); !slices.Contains(seen, m) && !slices.Contains(skipped, m) {
				skipped = append(skipped, m)
			}
		}
		if p.vague.Load() || len(seen)+len(skipped) == 1 {
			return err
		}
		return &store.PartitionError{Err: err, Failed: []int{n}, Skipped: skipped}
	}
	return nil
}

func (p *partitioned) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	if err := p.reach(ctx, reqs); err != nil {
		return store.Result{}, err
	}
	return p.Store.Take(ctx, reqs, out)
}

func (p *partitioned) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	if err := p.reach(ctx, reqs); err != nil {
		return err
	}
	return p.Store.Peek(ctx, reqs, out)
}

// onPartitions returns a partitioned store and a FailClosed wrapper of it
// whose breakers open after 3 consecutive failures for 1 s of c.
func onPartitions(t *testing.T, c *clock, opts ...resilient.Option) (*partitioned, *resilient.Store) {
	t.Helper()
	p := &partitioned{Store: memStore(t, c)}
	opts = append([]resilient.Option{resilient.WithPolicy(resilient.FailClosed), resilient.WithClock(c.Now),
		resilient.WithBreaker(3, time.Second), resilient.WithTimeout(time.Minute)}, opts...)
	s, err := resilient.New(p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return p, s
}

// takeAll takes one unit of each key as one multi-key Take and reports
// whether it was admitted and whether the policy answered.
func takeAll(t *testing.T, s store.Store, l *algo.Limit, keys ...string) (allowed, fallback bool) {
	t.Helper()
	reqs := make([]store.Request, len(keys))
	for i, k := range keys {
		reqs[i] = store.Request{Key: k, Limit: l, Cost: 1}
	}
	res, err := s.Take(context.Background(), reqs, make([]algo.Decision, len(keys)))
	if err != nil {
		t.Fatalf("Take(%v): %v", keys, err)
	}
	return res.Allowed, res.Fallback
}

// TestPartitionTripsAlone: with node b down, the keys of b fail until
// b's breaker opens; keys of a and c are still decided by the store
// under FailClosed, before and after, and b's keys are answered by the
// policy without a store call while its breaker is open.
func TestPartitionTripsAlone(t *testing.T) {
	c := newClock()
	p, s := onPartitions(t, c)
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	p.down[1].Store(true)
	for i := range 3 {
		if allowed, fallback := takeAll(t, s, l, "b1"); allowed || !fallback {
			t.Fatalf("take %d of b1 on a dead node: allowed %v fallback %v, want the closed policy's refusal", i, allowed, fallback)
		}
	}
	if s.Breaker() != resilient.Open {
		t.Fatalf("breaker %v after 3 failures on b, want open", s.Breaker())
	}
	before := p.calls[1].Load()
	for i := range 10 {
		for _, k := range []string{"a1", "c1", "a2"} {
			if allowed, fallback := takeAll(t, s, l, k); !allowed || fallback {
				t.Fatalf("round %d: %s on a live node with b's breaker open: allowed %v fallback %v, want the store's admission", i, k, allowed, fallback)
			}
		}
		if allowed, fallback := takeAll(t, s, l, "b2"); allowed || !fallback {
			t.Fatalf("round %d: b2 with its breaker open: allowed %v fallback %v, want the policy's refusal", i, allowed, fallback)
		}
	}
	if n := p.calls[1].Load() - before; n != 0 {
		t.Fatalf("%d calls reached b with its breaker open", n)
	}
	if n := p.calls[0].Load(); n != 20 {
		t.Fatalf("%d calls reached a, want 20", n)
	}
}

// TestPartitionFailuresAreNotDiluted: calls to a live node between the
// failures of a dead one do not reset the dead one's count: b's breaker
// opens after 3 failures of its own, however many successes on a come
// between them.
func TestPartitionFailuresAreNotDiluted(t *testing.T) {
	c := newClock()
	p, s := onPartitions(t, c)
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	p.down[1].Store(true)
	for range 3 {
		takeAll(t, s, l, "a1")
		takeAll(t, s, l, "b1")
		takeAll(t, s, l, "a2")
	}
	if s.Breaker() != resilient.Open {
		t.Fatalf("breaker %v after 3 failures on b between successes on a, want open", s.Breaker())
	}
	before := p.calls[1].Load()
	takeAll(t, s, l, "b1")
	if p.calls[1].Load() != before {
		t.Fatal("a call reached b with its breaker open")
	}
}

// TestMultiKeyTakeAcrossPartitions: a Take over keys of several
// partitions is answered by the policy when any of their breakers is
// open, without a store call; over live partitions only, the store
// decides; and a multi-key Take that fails counts as a failure for the
// partition the store names as failed only, and as a success for the
// others it reached. (Until the stores named the failed partitions, the
// failure counted against every partition the Take touched: the Takes
// below opened a's breaker along with c's, and a hierarchy's shared key on
// a live node had its breaker opened by the users of a dead one.)
func TestMultiKeyTakeAcrossPartitions(t *testing.T) {
	c := newClock()
	p, s := onPartitions(t, c)
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	p.down[1].Store(true)
	for range 3 {
		takeAll(t, s, l, "b1")
	}
	before := p.calls[0].Load() + p.calls[1].Load() + p.calls[2].Load()
	if allowed, fallback := takeAll(t, s, l, "a1", "b1", "c1"); allowed || !fallback {
		t.Fatalf("Take over a, b, c with b open: allowed %v fallback %v, want the policy's refusal", allowed, fallback)
	}
	if after := p.calls[0].Load() + p.calls[1].Load() + p.calls[2].Load(); after != before {
		t.Fatalf("a Take spanning an open partition made %d store calls, want none", after-before)
	}
	if allowed, fallback := takeAll(t, s, l, "a1", "c1"); !allowed || fallback {
		t.Fatalf("Take over a and c: allowed %v fallback %v, want the store's admission", allowed, fallback)
	}

	// c dies: Takes over a and c fail, and open c's breaker only.
	p.down[2].Store(true)
	for range 3 {
		if allowed, fallback := takeAll(t, s, l, "a1", "c1"); allowed || !fallback {
			t.Fatalf("Take over a and dead c: allowed %v fallback %v, want the policy's refusal", allowed, fallback)
		}
	}
	if got := s.Breakers(); got[0] != resilient.Closed || got[2] != resilient.Open {
		t.Fatalf("breakers %v after 3 failed Takes over a and dead c, want a closed and c open", got)
	}
	before = p.calls[0].Load()
	if allowed, fallback := takeAll(t, s, l, "a1"); !allowed || fallback {
		t.Fatalf("a1 after 3 Takes over a and dead c: allowed %v fallback %v; want the store's admission (c's failures are not a's)", allowed, fallback)
	}
	if p.calls[0].Load() != before+1 {
		t.Fatal("a1 did not reach a")
	}
}

// TestSharedKeyOnLiveNode is the review's scenario: a hierarchy's shared
// key (a global bucket) on live node c, the users' keys spread over nodes,
// b dead. The requests of b's users fail until b's breaker opens, then
// are refused by the policy without a store call; c's breaker stays
// closed all along, and a user on a (with the shared key on c) is decided
// by the store, before and after.
func TestSharedKeyOnLiveNode(t *testing.T) {
	c := newClock()
	p, s := onPartitions(t, c)
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	p.down[1].Store(true)
	// The requests of users on b, in a row: as many failures as open a
	// breaker, on b's and, before, on the shared key's c.
	for i := range 3 {
		if allowed, fallback := takeAll(t, s, l, "b-user", "c-global"); allowed || !fallback {
			t.Fatalf("request %d of a user on dead b: allowed %v fallback %v, want the closed policy's refusal", i, allowed, fallback)
		}
	}
	if got := s.Breakers(); got[1] != resilient.Open || got[0] != resilient.Closed || got[2] != resilient.Closed {
		t.Fatalf("breakers %v after 3 failed requests of users on b, want b open and a, c closed", got)
	}
	for i := range 10 {
		if allowed, fallback := takeAll(t, s, l, "a-user", "c-global"); !allowed || fallback {
			t.Fatalf("request %d of a user on live a, breakers %v: allowed %v fallback %v, want the store's admission", i, s.Breakers(), allowed, fallback)
		}
		before := p.calls[1].Load()
		if allowed, fallback := takeAll(t, s, l, "b-user", "c-global"); allowed || !fallback {
			t.Fatalf("request %d of a user on b with its breaker open: allowed %v fallback %v, want the policy's refusal", i, allowed, fallback)
		}
		if p.calls[1].Load() != before {
			t.Fatalf("request %d of a user on b reached b with its breaker open", i)
		}
	}
	// The other order: the shared key first, its node reached before b fails.
	for range 10 {
		takeAll(t, s, l, "c-global", "b-user2")
	}
	if got := s.Breakers(); got[2] != resilient.Closed {
		t.Fatalf("breakers %v after Takes of c's key then b's, want c closed", got)
	}
}

// TestUnplacedFailureCountsForEach: a store that cannot say which
// partition failed (no *store.PartitionError) has a multi-key failure
// counted against every partition the call touched, as before the stores
// placed their failures: counting it for none would keep a dead node's
// breaker closed under a load of multi-key calls.
func TestUnplacedFailureCountsForEach(t *testing.T) {
	c := newClock()
	p, s := onPartitions(t, c)
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	p.down[1].Store(true)
	p.vague.Store(true)
	for range 3 {
		takeAll(t, s, l, "b-user", "c-global")
	}
	if got := s.Breakers(); got[1] != resilient.Open || got[2] != resilient.Open {
		t.Fatalf("breakers %v after 3 unplaced failures over b and c, want both open", got)
	}
}

// TestSkippedPartitionNeitherFailsNorSucceeds: a partition the store did
// not reach because an earlier one failed keeps its count of failures
// (no success resets it) and is not charged one: c has two failures of
// its own; three Takes over dead b then c leave it at two, and one more
// failure of c's own opens it.
func TestSkippedPartitionNeitherFailsNorSucceeds(t *testing.T) {
	c := newClock()
	p, s := onPartitions(t, c)
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	p.down[2].Store(true)
	takeAll(t, s, l, "c1")
	takeAll(t, s, l, "c2")
	p.down[1].Store(true)
	for range 3 {
		takeAll(t, s, l, "b1", "c1") // b fails first: c is not reached
	}
	if got := s.Breakers(); got[1] != resilient.Open || got[2] != resilient.Closed {
		t.Fatalf("breakers %v, want b open and c still closed (not reached: no failure)", got)
	}
	takeAll(t, s, l, "c3")
	if got := s.Breakers(); got[2] != resilient.Open {
		t.Fatalf("breakers %v after c's third failure of its own, want c open (the skipped Takes did not reset its count)", got)
	}
}

// TestSlowPartitionCountedLate: a node that does not answer (a paused
// master) holds a multi-key call past the wrapper's deadline; the caller
// is answered by the policy at the deadline, and the store's answer, which
// comes when the call's context ends and names the slow partition, is
// counted then: b's breaker opens and the shared key's on c stays closed,
// where a timeout counted at the deadline would count against both.
func TestSlowPartitionCountedLate(t *testing.T) {
	c := newClock()
	p, s := onPartitions(t, c, resilient.WithTimeout(20*time.Millisecond))
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	p.slow[1].Store(true)
	for i := range 3 {
		if allowed, fallback := takeAll(t, s, l, "c-global", "b-user"); allowed || !fallback {
			t.Fatalf("request %d over slow b: allowed %v fallback %v, want the closed policy's refusal", i, allowed, fallback)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Breakers()[1] != resilient.Open {
		if time.Now().After(deadline) {
			t.Fatalf("breakers %v 10 s after 3 calls over slow b, want b open", s.Breakers())
		}
		time.Sleep(time.Millisecond) // the late answers are counted on their goroutines
	}
	if got := s.Breakers(); got[2] != resilient.Closed {
		t.Fatalf("breakers %v, want the shared key's c closed", got)
	}
	if allowed, fallback := takeAll(t, s, l, "a-user", "c-global"); !allowed || fallback {
		t.Fatalf("a user on live a: allowed %v fallback %v, want the store's admission", allowed, fallback)
	}
}

// TestPartitionsRecoverApart: a and b are down and their breakers open;
// b comes back. After the cool-down b's probe closes b's breaker and its
// keys go to the store again, while a's probe fails and a stays open.
func TestPartitionsRecoverApart(t *testing.T) {
	c := newClock()
	p, s := onPartitions(t, c)
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	p.down[0].Store(true)
	p.down[1].Store(true)
	for range 3 {
		takeAll(t, s, l, "a1")
		takeAll(t, s, l, "b1")
	}
	p.down[1].Store(false)
	type row struct {
		advance  time.Duration
		key      string
		allowed  bool
		reached  bool // the call reached the store
		breakers resilient.BreakerState
	}
	for i, r := range []row{
		{0, "b1", false, false, resilient.Open},                      // b's breaker is still open
		{time.Second, "b1", true, true, resilient.Open},              // b's probe succeeds; a is still open
		{0, "b2", true, true, resilient.Open},                        // b is closed
		{0, "a1", false, true, resilient.Open},                       // a's probe fails: open again
		{0, "a1", false, false, resilient.Open},                      // for another cool-down
		{0, "c1", true, true, resilient.Open},                        // c was never touched
		{time.Second, "b3", true, true, resilient.Open},              // b stays closed
		{0, "a2", false, true, resilient.Open},                       // a's next probe fails too
		{999 * time.Millisecond, "a2", false, false, resilient.Open}, // still cooling down
	} {
		c.Advance(r.advance)
		n := p.Partition(r.key)
		before := p.calls[n].Load()
		allowed, _ := takeAll(t, s, l, r.key)
		reached := p.calls[n].Load() > before
		if allowed != r.allowed || reached != r.reached || s.Breaker() != r.breakers {
			t.Fatalf("row %d: Take(%s) = allowed %v, reached the store %v, breaker %v; want %v, %v, %v",
				i, r.key, allowed, reached, s.Breaker(), r.allowed, r.reached, r.breakers)
		}
	}
	p.down[0].Store(false)
	c.Advance(time.Second)
	if allowed, fallback := takeAll(t, s, l, "a3"); !allowed || fallback || s.Breaker() != resilient.Closed {
		t.Fatalf("a back: allowed %v fallback %v, breaker %v; want the store's admission and every breaker closed", allowed, fallback, s.Breaker())
	}
}
