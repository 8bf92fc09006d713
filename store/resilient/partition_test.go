package resilient_test

import (
	"context"
	"fmt"
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
// first byte ('a' is 0, 'b' 1, 'c' 2), as a Cluster's keys are by slot:
// every call that involves a key of a partition marked down fails with
// store.ErrUnavailable, as it would on a dead master. It counts the calls
// that reach each partition.
type partitioned struct {
	store.Store
	down  [nodes]atomic.Bool
	calls [nodes]atomic.Int64
}

func (p *partitioned) Partitions() int { return nodes }

func (p *partitioned) Partition(key string) int { return int(key[0]-'a') % nodes }

func (p *partitioned) PartitionName(n int) string { return fmt.Sprintf("node %c", 'a'+n) }

// reach counts a call on reqs' partitions and fails it when one is down.
func (p *partitioned) reach(reqs []store.Request) error {
	var err error
	for i := range reqs {
		n := p.Partition(reqs[i].Key)
		p.calls[n].Add(1)
		if p.down[n].Load() && err == nil {
			err = fmt.Errorf("test: %s: %w: connection refused", p.PartitionName(n), store.ErrUnavailable)
		}
	}
	return err
}

func (p *partitioned) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	if err := p.reach(reqs); err != nil {
		return store.Result{}, err
	}
	return p.Store.Take(ctx, reqs, out)
}

func (p *partitioned) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	if err := p.reach(reqs); err != nil {
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
// decides; and a multi-key Take that fails counts as a failure for every
// partition it touched.
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

	// c dies: Takes over a and c fail, and open both breakers.
	p.down[2].Store(true)
	for range 3 {
		if allowed, fallback := takeAll(t, s, l, "a1", "c1"); allowed || !fallback {
			t.Fatalf("Take over a and dead c: allowed %v fallback %v, want the policy's refusal", allowed, fallback)
		}
	}
	before = p.calls[0].Load()
	if allowed, fallback := takeAll(t, s, l, "a1"); allowed || !fallback {
		t.Fatalf("a1 after 3 failed Takes over a and c: allowed %v fallback %v; want a's breaker open too (the failures counted for a)", allowed, fallback)
	}
	if p.calls[0].Load() != before {
		t.Fatal("a call reached a with its breaker open")
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
