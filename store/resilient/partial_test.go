package resilient_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// deadNodes makes a Redis client's connections to the addresses marked
// down fail, as to a dead node: dials are refused, reads and writes on
// open connections fail. The node itself (shared with other tests) is
// left alone.
type deadNodes struct{ down sync.Map } // address → true

func (f *deadNodes) option(o *rueidis.ClientOption) {
	o.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
		if _, ok := f.down.Load(addr); ok {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &deadConn{Conn: c, f: f, addr: addr}, nil
	}
}

type deadConn struct {
	net.Conn
	f    *deadNodes
	addr string
}

func (c *deadConn) Read(b []byte) (int, error) {
	if _, ok := c.f.down.Load(c.addr); ok {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return c.Conn.Read(b)
}

func (c *deadConn) Write(b []byte) (int, error) {
	if _, ok := c.f.down.Load(c.addr); ok {
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return c.Conn.Write(b)
}

// nodeOf returns the address of the master serving key's slot: the node
// that answers a GET of it rather than MOVED.
func nodeOf(t *testing.T, s *redis.Store, key string) string {
	t.Helper()
	for addr, n := range s.Client().Nodes() {
		err := n.Do(t.Context(), n.B().Get().Key(key).Build()).Error()
		if err == nil || rueidis.IsRedisNil(err) {
			return addr
		}
	}
	t.Fatalf("no node serves %s", key)
	return ""
}

// TestPartialRefusalStandsWhateverThePolicy: on a real Redis Cluster, a
// Take over a key over its limit on a live node, a key of a live node
// and a key of a dead node is refused under every failure policy, in
// every order of the keys: the store refused it (Result.Partial) while
// the dead node failed, so the policy does not answer (FailOpen admitted
// it: a request a live key refused). The decisions are the store's (the
// dead key's undecided: the zero Decision), nothing is charged, the
// result is no Fallback, Hooks.Fallback is not called, Hooks.Call sees
// the dead node's error, and the dead node's breaker counts it (opens,
// at a threshold of 1) while the live ones stay closed.
func TestPartialRefusalStandsWhateverThePolicy(t *testing.T) {
	f := new(deadNodes)
	inner, err := redis.Open("redis-cluster://"+strings.Join(testserver.RedisCluster(t), ","), redis.WithClientOption(f.option), redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	spent := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: 24 * time.Hour})
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: 24 * time.Hour})
	prefix := "partial:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	dead := prefix + "dead"
	deadAddr := nodeOf(t, inner, dead)
	pd := inner.Partition(dead)
	var keys []string // refusing, live: on live nodes, in partitions of their own
	for i := 0; len(keys) < 2; i++ {
		if i > 100_000 {
			t.Fatal("no keys of live nodes found")
		}
		k := prefix + strconv.Itoa(i)
		if p := inner.Partition(k); p != pd && nodeOf(t, inner, k) != deadAddr &&
			!slices.ContainsFunc(keys, func(o string) bool { return inner.Partition(o) == p }) {
			keys = append(keys, k)
		}
	}
	refusing, live := keys[0], keys[1]
	if res, err := inner.Take(t.Context(), []store.Request{{Key: refusing, Limit: spent, Cost: 1}}, make([]algo.Decision, 1)); err != nil || !res.Allowed {
		t.Fatalf("spend %s: %+v, %v", refusing, res, err)
	}
	f.down.Store(deadAddr, true)
	defer f.down.Delete(deadAddr)

	R := store.Request{Key: refusing, Limit: spent, Cost: 1}
	L := store.Request{Key: live, Limit: l, Cost: 1}
	D := store.Request{Key: dead, Limit: l, Cost: 1}
	orders := [][]store.Request{{L, R, D}, {R, L, D}, {D, R, L}}
	type run struct {
		policy resilient.Policy
		reqs   []store.Request
	}
	var runs []run
	for _, reqs := range orders {
		runs = append(runs, run{resilient.FailOpen, reqs})
	}
	for _, p := range []resilient.Policy{resilient.FailClosed, resilient.FailLocal, resilient.FailUnavailable} {
		runs = append(runs, run{p, orders[0]})
	}
	for n, r := range runs {
		var mu sync.Mutex
		var callErrs []error
		fallbacks := 0
		s, err := resilient.New(inner, resilient.WithPolicy(r.policy), resilient.WithTimeout(2*time.Second), resilient.WithBreaker(1, time.Minute),
			resilient.WithHooks(resilient.Hooks{
				Call: func(op string, _ time.Duration, err error) {
					mu.Lock()
					defer mu.Unlock()
					callErrs = append(callErrs, err)
				},
				Fallback: func(string, resilient.Policy, error) {
					mu.Lock()
					defer mu.Unlock()
					fallbacks++
				},
			}))
		if err != nil {
			t.Fatal(err)
		}
		name := r.policy.String() + " " + strconv.Itoa(n)
		out := make([]algo.Decision, 3)
		res, err := s.Take(t.Context(), r.reqs, out)
		if err != nil || res.Allowed || res.Fallback || !res.Partial {
			t.Errorf("%s: Take = %+v, %v; want refused by the store (Partial, no Fallback), no error", name, res, err)
		}
		for i, q := range r.reqs {
			switch q.Key {
			case dead:
				if out[i] != (algo.Decision{}) {
					t.Errorf("%s: the dead key's decision %+v, want the zero Decision (undecided)", name, out[i])
				}
			case refusing:
				if out[i].Allowed || out[i].Limit != 1 || out[i].RetryAfter <= 0 {
					t.Errorf("%s: the refusing key's decision %+v, want its refusal", name, out[i])
				}
			case live:
				if !out[i].Allowed || out[i].Remaining != 100 {
					t.Errorf("%s: the live key's decision %+v, want it would pass, nothing charged (100 left)", name, out[i])
				}
			}
		}
		mu.Lock()
		if fallbacks != 0 || len(callErrs) != 1 || !errors.Is(callErrs[0], store.ErrUnavailable) {
			t.Errorf("%s: %d fallbacks, calls' errors %v; want no fallback, the dead node's error once", name, fallbacks, callErrs)
		}
		mu.Unlock()
		br := s.Breakers()
		if br[pd] != resilient.Open || br[inner.Partition(refusing)] != resilient.Closed || br[inner.Partition(live)] != resilient.Closed {
			t.Errorf("%s: breakers of the dead, refusing and live keys' partitions %v, %v, %v; want open, closed, closed",
				name, br[pd], br[inner.Partition(refusing)], br[inner.Partition(live)])
		}
		// s is not closed: it would close inner, which the next run wraps.
	}
	peek := make([]algo.Decision, 2)
	if err := inner.Peek(t.Context(), []store.Request{{Key: live, Limit: l}, {Key: refusing, Limit: spent}}, peek); err != nil || peek[0].Remaining != 100 || peek[1].Remaining != 0 {
		t.Fatalf("Peek(live, refusing) = %+v, %v: want nothing charged (100 and 0 left)", peek, err)
	}
}
