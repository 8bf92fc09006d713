package policy

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// deadNodes makes a Redis client's connections to the addresses marked
// down fail, as to a dead node (dials refused, reads and writes on open
// connections failing), leaving the shared node itself alone.
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

// masterOf returns the address of the master serving key's slot: the
// node that answers a GET of it rather than MOVED.
func masterOf(t *testing.T, s *redis.Store, key string) string {
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

// TestPartialRefusalOverLimitEndToEnd: an Engine on a resilient store
// failing open, on a real Redis Cluster one node of which is dead (its
// connections refused). A request whose descriptor "a" is over its limit
// on a live node and whose descriptor "b" lives on the dead node is
// OVER_LIMIT, in either order of its descriptors: the store refused it
// although part of it failed (store.Result.Partial), and the failure
// policy does not answer (it admitted the request: OK). The refusing
// descriptor reports its refusal; the dead one's status shows no limit
// (undecided: no made-up count), and the response is no StoreFallback.
func TestPartialRefusalOverLimitEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	cfg := mustParse(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {name: a, unit: day, requests_per_unit: 1}
  - key: b
    rate_limit: {name: b, unit: day, requests_per_unit: 100}
`)
	f := new(deadNodes)
	inner, err := redis.Open(clusterURL(t), redis.WithClientOption(f.option), redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	st, err := resilient.New(inner, resilient.WithPolicy(resilient.FailOpen), resilient.WithTimeout(2*time.Second), resilient.WithBreaker(100, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e, err := NewEngine(cfg, st, redisPrefix())
	if err != nil {
		t.Fatal(err)
	}
	keyOf := func(d []Entry) string {
		t.Helper()
		keys, err := e.Keys(req("d", d))
		if err != nil || len(keys) != 1 {
			t.Fatalf("Keys(%v) = %v, %v; want one key", d, keys, err)
		}
		return keys[0]
	}
	a := ent("a", "x")
	aAddr := masterOf(t, inner, keyOf(a))
	var b []Entry
	for i := 0; b == nil; i++ {
		if i > 1000 {
			t.Fatal("no value of b whose key is on another node than a's")
		}
		d := ent("b", "y"+strconv.Itoa(i))
		if masterOf(t, inner, keyOf(d)) != aAddr {
			b = d
		}
	}
	if r, err := e.Decide(t.Context(), req("d", a)); err != nil || r.Code != CodeOK {
		t.Fatalf("spend a: %+v, %v", r, err)
	}
	bAddr := masterOf(t, inner, keyOf(b))
	f.down.Store(bAddr, true)
	defer f.down.Delete(bAddr)

	for _, order := range [][2]int{{0, 1}, {1, 0}} {
		descs := [2][]Entry{a, b}
		ia, ib := order[0], order[1] // where a and b go
		var ds [2][]Entry
		ds[ia], ds[ib] = descs[0], descs[1]
		r, err := e.Decide(t.Context(), req("d", ds[0], ds[1]))
		if err != nil {
			t.Fatalf("a at %d, b (dead) at %d: %v", ia, ib, err)
		}
		if r.Code != CodeOverLimit || r.StoreFallback {
			t.Errorf("a at %d, b (dead) at %d: code %v, StoreFallback %v; want OVER_LIMIT, the store's (no fallback)", ia, ib, r.Code, r.StoreFallback)
		}
		sa, sb := r.Statuses[ia], r.Statuses[ib]
		if sa.Code != CodeOverLimit || len(sa.Limits) != 1 || sa.Decision.Allowed || sa.Decision.Limit != 1 || sa.Decision.RetryAfter <= 0 {
			t.Errorf("a at %d: status %+v; want its refusal", ia, sa)
		}
		if sb.Code == CodeOverLimit || len(sb.Limits) != 0 || sb.Decision != (algo.Decision{}) {
			t.Errorf("b (dead) at %d: status %+v; want no limit decided, no count", ib, sb)
		}
	}
}
