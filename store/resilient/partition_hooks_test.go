package resilient_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestPartitionHooks: each breaker's changes are reported with its
// partition and the count of open ones; State reports the worst state,
// once per change of it; Tripped and the refusal name the partition.
func TestPartitionHooks(t *testing.T) {
	c := newClock()
	var changes, states []string
	var trips []*resilient.CircuitOpenError
	p, s := onPartitions(t, c, resilient.WithHooks(resilient.Hooks{
		PartitionState: func(ch resilient.PartitionChange) {
			changes = append(changes, fmt.Sprintf("%d %s %v>%v open %d/%d", ch.Partition, ch.Name, ch.From, ch.To, ch.Open, ch.Partitions))
		},
		State:   func(from, to resilient.BreakerState) { states = append(states, from.String()+">"+to.String()) },
		Tripped: func(err *resilient.CircuitOpenError) { trips = append(trips, err) },
	}))
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	p.down[0].Store(true)
	p.down[2].Store(true)
	for range 3 {
		takeAll(t, s, l, "a1")
		takeAll(t, s, l, "c1")
	}
	if got, want := fmt.Sprint(s.Breakers()), "[open closed open]"; got != want {
		t.Fatalf("Breakers() = %s, want %s", got, want)
	}
	err := s.Peek(context.Background(), []store.Request{{Key: "b1", Limit: l}}, make([]algo.Decision, 1))
	if err != nil {
		t.Fatalf("Peek of a live partition: %v", err)
	}
	err = s.Ping(context.Background()) // "fg:__ping" is in partition ('f'-'a') % 3 = 2
	var coe *resilient.CircuitOpenError
	if !errors.As(err, &coe) || coe.Partition != "node c" ||
		err.Error() != "resilient: circuit open for node c after 3 consecutive failures; last: test: node c: store: unavailable: connection refused" {
		t.Fatalf("Ping = %v, want the open circuit of node c", err)
	}
	p.down[0].Store(false)
	p.down[2].Store(false)
	c.Advance(time.Second)
	takeAll(t, s, l, "a1")
	takeAll(t, s, l, "c1")
	wantChanges := []string{
		"0 node a closed>open open 1/3",
		"2 node c closed>open open 2/3",
		"0 node a open>half-open open 2/3",
		"0 node a half-open>closed open 1/3",
		"2 node c open>half-open open 1/3",
		"2 node c half-open>closed open 0/3",
	}
	if fmt.Sprint(changes) != fmt.Sprint(wantChanges) {
		t.Errorf("PartitionState:\n%q\nwant\n%q", changes, wantChanges)
	}
	if got, want := fmt.Sprint(states), "[closed>open open>half-open half-open>closed]"; got != want {
		t.Errorf("State: %s, want %s (the worst state's changes)", got, want)
	}
	if len(trips) != 2 || trips[0].Partition != "node a" || trips[1].Partition != "node c" {
		t.Errorf("Tripped: %v, want node a then node c", trips)
	}
}

// TestOneBreakerHooks: over a store that is not a Partitioner, the one
// breaker is reported as partition 0 of 1, unnamed, and its errors read as
// before.
func TestOneBreakerHooks(t *testing.T) {
	var changes []resilient.PartitionChange
	srv, inner := outage(t)
	defer inner.Close()
	s, err := resilient.New(inner, resilient.WithBreaker(1, time.Hour), resilient.WithHooks(resilient.Hooks{
		PartitionState: func(ch resilient.PartitionChange) { changes = append(changes, ch) },
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour})
	take(t, s, "k", l, 1)
	want := resilient.PartitionChange{From: resilient.Closed, To: resilient.Open, Open: 1, Partitions: 1}
	if len(changes) != 1 || changes[0] != want {
		t.Fatalf("PartitionState calls %+v, want one: %+v", changes, want)
	}
	if got := s.Ping(context.Background()); !strings.HasPrefix(got.Error(), "resilient: circuit open after 1 consecutive failures; last: ") {
		t.Fatalf("Ping = %v", got)
	}
	if len(s.Breakers()) != 1 {
		t.Fatalf("Breakers() = %v, want one", s.Breakers())
	}
}

// opening is a store opened in the background, as storeurl.OpenRetrying
// opens it: every call fails and Unwrap returns nil until open is set.
type opening struct {
	inner atomic.Pointer[partitioned]
}

func (o *opening) Unwrap() store.Store {
	if p := o.inner.Load(); p != nil {
		return p
	}
	return nil
}

func (o *opening) get() (*partitioned, error) {
	if p := o.inner.Load(); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("test: not open yet: %w", store.ErrUnavailable)
}

func (o *opening) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	p, err := o.get()
	if err != nil {
		return store.Result{}, err
	}
	return p.Take(ctx, reqs, out)
}

func (o *opening) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	p, err := o.get()
	if err != nil {
		return err
	}
	return p.Peek(ctx, reqs, out)
}

func (o *opening) Refund(ctx context.Context, reqs []store.Request) error  { return nil }
func (o *opening) Release(ctx context.Context, reqs []store.Request) error { return nil }
func (o *opening) Reset(ctx context.Context, keys ...string) error         { return nil }
func (o *opening) Close() error                                            { return nil }

// TestPartitionerFoundOnceOpen: a Partitioner under a store that opens
// after New is found after the first call that succeeds: the wrapper
// starts with one breaker, which the failures before the store opened
// may open, and has one per partition from then on.
func TestPartitionerFoundOnceOpen(t *testing.T) {
	c := newClock()
	var states []string
	o := &opening{}
	s, err := resilient.New(o, resilient.WithPolicy(resilient.FailClosed), resilient.WithClock(c.Now),
		resilient.WithBreaker(3, time.Second), resilient.WithTimeout(time.Minute),
		resilient.WithHooks(resilient.Hooks{State: func(from, to resilient.BreakerState) { states = append(states, to.String()) }}))
	if err != nil {
		t.Fatal(err)
	}
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	for range 3 {
		takeAll(t, s, l, "a1")
	}
	if len(s.Breakers()) != 1 || s.Breaker() != resilient.Open {
		t.Fatalf("before the store opened: breakers %v, want one, open", s.Breakers())
	}
	p := &partitioned{Store: memStore(t, c)}
	o.inner.Store(p)
	c.Advance(time.Second)
	if allowed, fallback := takeAll(t, s, l, "b1"); !allowed || fallback {
		t.Fatalf("the probe once open: allowed %v fallback %v", allowed, fallback)
	}
	if got := fmt.Sprint(s.Breakers()); got != "[closed closed closed]" {
		t.Fatalf("after the first success: breakers %s, want one per partition", got)
	}
	p.down[1].Store(true)
	for range 3 {
		takeAll(t, s, l, "b1")
	}
	if allowed, fallback := takeAll(t, s, l, "a1"); !allowed || fallback {
		t.Fatalf("a with b's breaker open: allowed %v fallback %v, want the store's admission", allowed, fallback)
	}
	if got, want := fmt.Sprint(states), "[open half-open closed open]"; got != want {
		t.Errorf("State: %s, want %s", got, want)
	}
}
