package memcached_test

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestMatchesReference drives every algorithm through a random trace of
// takes, peeks, refunds and releases on one key, on the store and on the
// pure algo functions over a local State, and wants the same decision at
// every step. The reference follows the rules of store/storetest: a Take
// keeps the state the algorithm left, and a state past its ExpiresAt reads
// as fresh.
func TestMatchesReference(t *testing.T) {
	for _, lt := range limits {
		t.Run(lt.name, func(t *testing.T) {
			l := compile(t, lt.p)
			clock := newClock(t0.Add(123456789 * time.Microsecond))
			s := open(t, clock)
			c := ctx(t)
			key := uniqueKey(t, "k")
			var ref algo.State
			rng := rand.New(rand.NewPCG(7, uint64(len(lt.name))))
			type taken struct {
				at, cost int64
				lease    uint64
			}
			var admitted []taken
			step := int64(l.Window(clock.US())/time.Microsecond) / 6
			for i := range 400 {
				clock.Advance(time.Duration(rng.Int64N(step)) * time.Microsecond)
				now := clock.US()
				if l.ExpiresAt(&ref) <= now {
					ref = algo.State{}
				}
				req := store.Request{Key: key, Limit: l, Cost: rng.Int64N(4), Lease: uint64(i + 1)}
				if rng.IntN(25) == 0 {
					req.Cost = l.Capacity() + 1
				}
				out := make([]algo.Decision, 1)
				switch op := rng.IntN(10); {
				case op < 7:
					res, err := s.Take(c, []store.Request{req}, out)
					if err != nil {
						t.Fatalf("step %d: Take: %v", i, err)
					}
					want := l.TakeLease(&ref, now, req.Cost, req.Lease)
					if want.Allowed && req.Cost > 0 {
						admitted = append(admitted, taken{res.At, req.Cost, req.Lease})
					}
					if out[0] != want || res.Allowed != want.Allowed || res.At != now {
						t.Fatalf("step %d: Take(t+%dµs, %d) = %+v (result %+v), want %+v", i, now-t0.UnixMicro(), req.Cost, out[0], res, want)
					}
				case op < 8:
					if err := s.Peek(c, []store.Request{req}, out); err != nil {
						t.Fatalf("step %d: Peek: %v", i, err)
					}
					next := ref.Clone()
					if want := l.Peek(&next, now, req.Cost); out[0] != want {
						t.Fatalf("step %d: Peek(t+%dµs, %d) = %+v, want %+v", i, now-t0.UnixMicro(), req.Cost, out[0], want)
					}
				default:
					if len(admitted) == 0 {
						continue
					}
					j := rng.IntN(len(admitted))
					a := admitted[j]
					admitted = append(admitted[:j], admitted[j+1:]...)
					req.Cost, req.At, req.Lease = a.cost, a.at, a.lease
					if l.Algorithm() == algo.Concurrency {
						if err := s.Release(c, []store.Request{req}); err != nil {
							t.Fatalf("step %d: Release: %v", i, err)
						}
						l.Release(&ref, now, a.lease)
					} else {
						if err := s.Refund(c, []store.Request{req}); err != nil {
							t.Fatalf("step %d: Refund: %v", i, err)
						}
						l.Refund(&ref, now, a.at, a.cost)
					}
				}
			}
			if len(admitted) == 0 {
				t.Fatal("the trace admitted nothing; it tests nothing")
			}
		})
	}
}

// TestAllOrNothing takes three keys at once until the concurrency limit
// refuses, and checks that the keys already charged were given back and
// that out follows store.Take's rules.
func TestAllOrNothing(t *testing.T) {
	clock := newClock(t0)
	s := open(t, clock)
	c := ctx(t)
	tb := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Hour, Burst: 5})
	fw := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Hour})
	cc := compile(t, algo.Params{Algorithm: algo.Concurrency, Limit: 2, LeaseTTL: time.Hour})
	k := uniqueKey(t, "")
	reqs := func(lease uint64) []store.Request {
		return []store.Request{
			{Key: k + "tb", Limit: tb, Cost: 1},
			{Key: k + "cc", Limit: cc, Cost: 1, Lease: lease},
			{Key: k + "fw", Limit: fw, Cost: 1},
		}
	}
	out := make([]algo.Decision, 3)
	for i := range 2 {
		res, err := s.Take(c, reqs(uint64(i+1)), out)
		if err != nil || !res.Allowed {
			t.Fatalf("take %d: %+v, %v; want admitted", i, res, err)
		}
	}
	res, err := s.Take(c, reqs(3), out)
	if err != nil || res.Allowed {
		t.Fatalf("third take: %+v, %v; want refused by the concurrency limit", res, err)
	}
	if !out[0].Allowed || out[0].Remaining != 3 {
		t.Errorf("out[0] = %+v; want Allowed (alone it would pass) and Remaining 3 with nothing charged", out[0])
	}
	if out[1].Allowed || out[1].Remaining != 0 || out[1].RetryAfter <= 0 {
		t.Errorf("out[1] = %+v; want the refusal", out[1])
	}
	if !out[2].Allowed || out[2].Remaining != 3 {
		t.Errorf("out[2] = %+v; want Allowed alone and Remaining 3 with nothing charged", out[2])
	}
	peek := make([]algo.Decision, 3)
	if err := s.Peek(c, reqs(0), peek); err != nil {
		t.Fatal(err)
	}
	if peek[0].Remaining != 2 || peek[2].Remaining != 2 {
		t.Errorf("after the refused take, Peek(cost 1) remaining = %d, %d; want 2, 2 (nothing charged)", peek[0].Remaining, peek[2].Remaining)
	}
	if st := s.Stats(); st.Rollbacks != 1 {
		t.Errorf("Stats().Rollbacks = %d, want 1 (the token bucket; the refused key charges nothing)", st.Rollbacks)
	}
}

// TestRefusedTakeNamesARefusal: concurrent all-or-nothing Takes over a
// hierarchy of four distinct keys (global 60, tenant 30, user 12, path 7
// per hour; costs 1 to 3; 16 callers on 4 stores, as from 4 processes).
// With distinct keys, storetest.Reference refuses a Take only when one of
// its requests is refused on its own, and says so in its out; a store must
// too, even when what refused it was another Take's units in flight (a
// window increment before its decr, a charge being rolled back), which are
// gone by the time the other requests are looked at again. No key may
// count more than it admitted, nor admit more than its limit.
func TestRefusedTakeNamesARefusal(t *testing.T) {
	clock := newClock(t0)
	stores := make([]*memcached.Store, 4)
	for i := range stores {
		stores[i] = open(t, clock)
	}
	c := ctx(t)
	limit := func(n int64) *algo.Limit {
		return compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: n, Period: time.Hour})
	}
	levels := []struct {
		name  string
		limit *algo.Limit
		n     int // distinct keys of the level
	}{{"path", limit(7), 2 * 3 * 3}, {"user", limit(12), 3 * 3}, {"tenant", limit(30), 3}, {"global", limit(60), 1}}
	for run := range 12 {
		pre := uniqueKey(t, fmt.Sprint(run))
		var mu sync.Mutex
		admitted := map[string]int64{}
		var nameless []string
		var wg sync.WaitGroup
		for g := range 16 {
			s := stores[g%len(stores)]
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(run), uint64(g)))
				out := make([]algo.Decision, len(levels))
				for range 30 {
					tenant := rng.IntN(3)
					user := tenant*3 + rng.IntN(3)
					keys := []int{user*2 + rng.IntN(2), user, tenant, 0}
					cost := 1 + rng.Int64N(3)
					reqs := make([]store.Request, len(levels))
					for i, l := range levels {
						reqs[i] = store.Request{Key: pre + l.name + itoa(keys[i]), Limit: l.limit, Cost: cost}
					}
					res, err := s.Take(c, reqs, out)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if res.Allowed {
						for _, r := range reqs {
							admitted[r.Key] += cost
						}
					} else if !slices.ContainsFunc(out, func(d algo.Decision) bool { return !d.Allowed }) {
						nameless = append(nameless, fmt.Sprintf("cost %d: %+v", cost, out))
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(nameless) > 0 {
			t.Errorf("run %d: %d refused Takes with every request allowed, e.g. %s", run, len(nameless), nameless[0])
		}
		out := make([]algo.Decision, 1)
		for _, l := range levels {
			for k := range l.n {
				key := pre + l.name + itoa(k)
				if err := stores[0].Peek(c, []store.Request{{Key: key, Limit: l.limit}}, out); err != nil {
					t.Fatal(err)
				}
				if n, counted := admitted[key], l.limit.Capacity()-out[0].Remaining; n > l.limit.Capacity() || counted != n {
					t.Errorf("run %d: %s admitted %d of %d, counts %d", run, key, n, l.limit.Capacity(), counted)
				}
			}
		}
	}
}

// TestRollbackKeepsOthersAnonymousLeases: rolling back an anonymous
// (lease 0) concurrency slot must not release slots others hold under
// lease 0, as algo.Limit.Release(0) would.
func TestRollbackKeepsOthersAnonymousLeases(t *testing.T) {
	s := open(t, newClock(t0))
	c := ctx(t)
	cc := compile(t, algo.Params{Algorithm: algo.Concurrency, Limit: 3, LeaseTTL: time.Hour})
	fw := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Hour})
	k := uniqueKey(t, "")
	out := make([]algo.Decision, 2)
	if res, err := s.Take(c, []store.Request{{Key: k + "cc", Limit: cc, Cost: 1}}, out[:1]); err != nil || !res.Allowed {
		t.Fatalf("first anonymous slot: %+v, %v", res, err)
	}
	if res, err := s.Take(c, []store.Request{{Key: k + "fw", Limit: fw, Cost: 1}}, out[:1]); err != nil || !res.Allowed {
		t.Fatalf("fill the window: %+v, %v", res, err)
	}
	res, err := s.Take(c, []store.Request{{Key: k + "cc", Limit: cc, Cost: 1}, {Key: k + "fw", Limit: fw, Cost: 1}}, out)
	if err != nil || res.Allowed {
		t.Fatalf("take over both: %+v, %v; want refused by the window", res, err)
	}
	if err := s.Peek(c, []store.Request{{Key: k + "cc", Limit: cc}}, out[:1]); err != nil {
		t.Fatal(err)
	}
	if out[0].Remaining != 2 {
		t.Errorf("concurrency remaining = %d, want 2: the first caller's anonymous slot is still held, the rolled-back one is free", out[0].Remaining)
	}
}

func TestResetAndInspect(t *testing.T) {
	for _, lt := range limits {
		t.Run(lt.name, func(t *testing.T) {
			l := compile(t, lt.p)
			s := open(t, newClock(t0.Add(time.Hour+500*time.Millisecond)))
			c := ctx(t)
			key := uniqueKey(t, "k")
			if _, ok, err := s.Inspect(c, key); err != nil || ok {
				t.Fatalf("Inspect of an unused key = %v, %v; want not found", ok, err)
			}
			out := make([]algo.Decision, 1)
			req := []store.Request{{Key: key, Limit: l, Cost: 1, Lease: 9}}
			if _, err := s.Take(c, req, out); err != nil || !out[0].Allowed {
				t.Fatalf("Take: %+v, %v", out[0], err)
			}
			fresh := out[0].Remaining
			st, ok, err := s.Inspect(c, key)
			if err != nil || !ok {
				t.Fatalf("Inspect after a take = %+v, %v, %v; want found", st, ok, err)
			}
			if err := s.Reset(c, key); err != nil {
				t.Fatal(err)
			}
			if st, ok, err := s.Inspect(c, key); err != nil || ok {
				t.Fatalf("Inspect after Reset = %+v, %v, %v; want not found", st, ok, err)
			}
			if _, err := s.Take(c, req, out); err != nil || out[0].Remaining != fresh {
				t.Fatalf("Take after Reset = %+v, %v; want remaining %d as for a fresh key", out[0], err, fresh)
			}
		})
	}
}

// TestRequestInspectorOnAnotherInstance: a store that has never used a
// limit finds, inspects and resets another instance's state of a key
// under it when given the limit (store.RequestInspector), window counters
// included, which it cannot find from the key alone; the other instance
// then decides on a fresh key. With clocks up to the skew tolerance apart
// across a window boundary too.
func TestRequestInspectorOnAnotherInstance(t *testing.T) {
	for _, lt := range limits {
		for _, apart := range []time.Duration{0, -600 * time.Millisecond, 600 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s/%v", lt.name, apart), func(t *testing.T) {
				l := compile(t, lt.p)
				ca := newClock(t0.Add(time.Hour + 700*time.Millisecond))
				a := open(t, ca)
				b := open(t, newClock(ca.Now().Add(apart)))
				c := ctx(t)
				key := uniqueKey(t, "k")
				req := store.Request{Key: key, Limit: l, Cost: 1, Lease: 9}
				out := make([]algo.Decision, 1)
				if _, err := a.Take(c, []store.Request{req}, out); err != nil || !out[0].Allowed {
					t.Fatalf("A: Take: %+v, %v", out[0], err)
				}
				fresh := out[0].Remaining
				if _, err := a.Take(c, []store.Request{req}, out); err != nil {
					t.Fatalf("A: Take: %v", err)
				}
				if apart == 0 {
					if st, ok, err := b.InspectRequest(c, req); err != nil || !ok {
						t.Fatalf("B: InspectRequest of A's key = %+v, %v, %v; want found", st, ok, err)
					}
				}
				if err := b.ResetRequests(c, []store.Request{req}); err != nil {
					t.Fatal(err)
				}
				if st, ok, err := a.InspectRequest(c, req); err != nil || ok {
					t.Fatalf("A: InspectRequest after B's ResetRequests = %+v, %v, %v; want not found", st, ok, err)
				}
				if _, err := a.Take(c, []store.Request{req}, out); err != nil || out[0].Remaining != fresh {
					t.Fatalf("A: Take after B's ResetRequests = %+v, %v; want remaining %d as for a fresh key", out[0], err, fresh)
				}
			})
		}
	}
}

func TestBadInput(t *testing.T) {
	s := open(t, newClock(t0))
	c := ctx(t)
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Second})
	out := make([]algo.Decision, 1)
	cases := []struct {
		name string
		reqs []store.Request
		out  []algo.Decision
	}{
		{"nil limit", []store.Request{{Key: "k", Cost: 1}}, out},
		{"empty key", []store.Request{{Limit: l, Cost: 1}}, out},
		{"negative cost", []store.Request{{Key: "k", Limit: l, Cost: -1}}, out},
		{"short out", []store.Request{{Key: "k", Limit: l}, {Key: "j", Limit: l}}, out},
	}
	for _, tc := range cases {
		if _, err := s.Take(c, tc.reqs, tc.out); !errors.Is(err, store.ErrBadRequest) {
			t.Errorf("Take with %s: %v, want ErrBadRequest", tc.name, err)
		}
	}
	if err := s.Reset(c, ""); !errors.Is(err, store.ErrBadRequest) {
		t.Errorf("Reset(\"\") = %v, want ErrBadRequest", err)
	}
	bad := []struct {
		url  string
		opts []memcached.Option
	}{
		{"redis://" + addr, nil},
		{"memcached://" + addr, []memcached.Option{nil}},
		{"memcached://" + addr, []memcached.Option{memcached.WithClock(nil)}},
		{"memcached://" + addr, []memcached.Option{memcached.WithTimeout(0)}},
		{"memcached://" + addr, []memcached.Option{memcached.WithRetries(-1)}},
		{"memcached://" + addr, []memcached.Option{memcached.WithBackoff(time.Second, time.Millisecond)}},
		{"memcached://" + addr, []memcached.Option{memcached.WithKeyPrefix("a b")}},
		{"memcached://" + addr, []memcached.Option{memcached.WithKeyPrefix(strings.Repeat("p", 41))}},
		{"memcached://" + addr, []memcached.Option{memcached.WithClockSkew(-time.Second)}},
		{"memcached://" + addr, []memcached.Option{memcached.WithMaxIdleConns(0)}},
		{"memcached://" + addr, []memcached.Option{memcached.WithMaxItemSize(10)}},
	}
	for _, b := range bad {
		if st, err := memcached.Open(b.url, b.opts...); err == nil {
			st.Close()
			t.Errorf("Open(%q, %d options) succeeded, want an error", b.url, len(b.opts))
		}
	}
}

// TestOddKeys: keys memcached could not hold as they are (spaces, control
// bytes, UTF-8, over 250 bytes) are encoded and stay distinct.
func TestOddKeys(t *testing.T) {
	s := open(t, newClock(t0))
	c := ctx(t)
	fw := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Hour})
	tb := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Hour})
	base := uniqueKey(t, "")
	keys := []string{base + "a b", base + "a%20b", base + "\x00\n", base + "ключ", base + strings.Repeat("x", 300), base + strings.Repeat("x", 301)}
	out := make([]algo.Decision, 1)
	for _, l := range []*algo.Limit{fw, tb} {
		for _, k := range keys {
			if _, err := s.Take(c, []store.Request{{Key: k, Limit: l, Cost: 1}}, out); err != nil || !out[0].Allowed {
				t.Fatalf("%s: first take on key %q: %+v, %v; want admitted (keys must not collide)", l, k, out[0], err)
			}
		}
	}
}

// TestItemTooLarge: a state over the servers' item limit is a clear error,
// not a failed write.
func TestItemTooLarge(t *testing.T) {
	s := open(t, newClock(t0), memcached.WithMaxItemSize(1024))
	l := compile(t, algo.Params{Algorithm: algo.SlidingLog, Limit: 1000, Period: time.Hour})
	out := make([]algo.Decision, 1)
	_, err := s.Take(ctx(t), []store.Request{{Key: uniqueKey(t, "k"), Limit: l, Cost: 500}}, out)
	if !errors.Is(err, store.ErrBadRequest) || !strings.Contains(err.Error(), "item size limit") {
		t.Fatalf("Take of 500 log entries with a 1 KiB item limit: %v; want ErrBadRequest naming the item size limit", err)
	}
}

func TestClosed(t *testing.T) {
	s := open(t, nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Second})
	reqs := []store.Request{{Key: "k", Limit: l, Cost: 1}}
	out := make([]algo.Decision, 1)
	c := ctx(t)
	if _, err := s.Take(c, reqs, out); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Take after Close = %v, want ErrClosed", err)
	}
	if err := s.Peek(c, reqs, out); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Peek after Close = %v, want ErrClosed", err)
	}
	if err := s.Reset(c, "k"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Reset after Close = %v, want ErrClosed", err)
	}
	if _, _, err := s.Inspect(c, "k"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Inspect after Close = %v, want ErrClosed", err)
	}
}

// TestServerDown: a dead server is ErrUnavailable at once (the caller's
// failure policy decides), and decisions resume when it is back.
func TestServerDown(t *testing.T) {
	srv := testserver.NewMemcached(t)
	s, err := memcached.Open("memcached://"+srv.Addr, memcached.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := ctx(t)
	out := make([]algo.Decision, 1)
	for _, lt := range []algo.Params{limits[0].p, limits[2].p, limits[5].p} {
		l := compile(t, lt)
		reqs := []store.Request{{Key: "k", Limit: l, Cost: 1}}
		if _, err := s.Take(c, reqs, out); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, lt := range []algo.Params{limits[0].p, limits[2].p, limits[5].p} {
		l := compile(t, lt)
		reqs := []store.Request{{Key: "k", Limit: l, Cost: 1}}
		start := time.Now()
		_, err := s.Take(c, reqs, out)
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s with the server down: %v, want ErrUnavailable", l, err)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("%s: failing took %v; a refused connection should fail at once", l, el)
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	l := compile(t, limits[5].p)
	if _, err := s.Take(c, []store.Request{{Key: "k", Limit: l, Cost: 1}}, out); err != nil || !out[0].Allowed {
		t.Fatalf("after restart: %+v, %v; want admitted", out[0], err)
	}
}

// ttl asks memcached (meta get, flag t) for an item's remaining seconds;
// -1 means no expiry, and ok is false when the item is missing.
func ttl(t *testing.T, key string) (secs int64, ok bool) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(conn, "mg %s t\r\n", key)
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	line = strings.TrimSpace(line)
	if line == "EN" {
		return 0, false
	}
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "HD" || !strings.HasPrefix(f[1], "t") {
		t.Fatalf("mg %s t: unexpected reply %q", key, line)
	}
	secs, err = strconv.ParseInt(f[1][1:], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return secs, true
}

// TestExpiry checks each item's TTL: the algorithm's ExpiresAt, rounded up,
// plus the skew tolerance and a second; beyond 30 days an absolute time.
func TestExpiry(t *testing.T) {
	clock := newClock(t0.Add(10 * time.Second)) // 10s into a minute, an hour, a month
	s := open(t, clock, memcached.WithClockSkew(2*time.Second))
	c := ctx(t)
	now := clock.US()
	tests := []struct {
		name string
		p    algo.Params
		cost int64
		key  func(key string) string
		want int64 // seconds
	}{
		{"token bucket 3 short of full, refilling 5/s", algo.Params{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Second, Burst: 10}, 3,
			func(k string) string { return memcached.StateKey(s, k) }, 1 + 3},
		{"fixed minute window, 50s left", algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute}, 1,
			func(k string) string { return memcached.FixedKey(s, k, now-10_000_000) }, 50 + 3},
		{"36h window", algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: 36 * time.Hour}, 1,
			func(k string) string { return memcached.FixedKey(s, k, now-now%(36*3600e6)) },
			(now-now%(36*3600e6)+36*3600e6-now+999_999)/1e6 + 3},
		{"sliding minute, 2 sub-windows: current one weighs until 60s+30s-10s", algo.Params{Algorithm: algo.SlidingWindow, Limit: 5, Period: time.Minute, SubWindows: 2}, 1,
			func(k string) string { return memcached.SlidingKey(s, k, 30_000_000, now/30_000_000) }, 80 + 3},
		{"calendar month: over 30 days, so an absolute time", algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Calendar: algo.CalendarMonth}, 1,
			func(k string) string { return memcached.FixedKey(s, k, t0.UnixMicro()) }, 31*24*3600 - 10 + 3},
	}
	for _, tt := range tests {
		key := uniqueKey(t, "k")
		l := compile(t, tt.p)
		out := make([]algo.Decision, 1)
		if _, err := s.Take(c, []store.Request{{Key: key, Limit: l, Cost: tt.cost}}, out); err != nil || !out[0].Allowed {
			t.Fatalf("%s: Take: %+v, %v", tt.name, out[0], err)
		}
		got, ok := ttl(t, tt.key(key))
		if !ok {
			t.Errorf("%s: item missing", tt.name)
			continue
		}
		// memcached counts whole seconds on its own clock: allow a tick.
		// An absolute time is read against memcached's start time, which
		// it sets a few seconds early: allow those too.
		slack := int64(1)
		if tt.want > 30*24*3600 {
			slack = 3
		}
		if got < tt.want-slack || got > tt.want+slack {
			t.Errorf("%s: TTL %ds, want %ds", tt.name, got, tt.want)
		}
	}
}

// TestContentionIsAnErrorNotAnAdmission: with no retries allowed, racing
// compare-and-swaps from 16 stores (as from 16 processes; callers in one
// process queue on a local lock instead) lose, fail with ErrContention,
// charge nothing, and never admit past the budget.
func TestContentionIsAnErrorNotAnAdmission(t *testing.T) {
	clock := newClock(t0)
	stores := make([]*memcached.Store, 16)
	for i := range stores {
		stores[i] = open(t, clock, memcached.WithRetries(0))
	}
	s := stores[0]
	c := ctx(t)
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Hour, Burst: 50})
	key := uniqueKey(t, "hot")
	var mu sync.Mutex
	admitted, contended := 0, 0
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() {
			out := make([]algo.Decision, 1)
			for range 20 {
				_, err := s.Take(c, []store.Request{{Key: key, Limit: l, Cost: 1}}, out)
				mu.Lock()
				switch {
				case errors.Is(err, store.ErrContention):
					contended++
				case err != nil:
					t.Error(err)
				case out[0].Allowed:
					admitted++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	out := make([]algo.Decision, 1)
	if err := s.Peek(c, []store.Request{{Key: key, Limit: l}}, out); err != nil {
		t.Fatal(err)
	}
	var st memcached.Stats
	for _, s := range stores {
		st.Contention += s.Stats().Contention
	}
	t.Logf("admitted %d, contended %d of 320", admitted, contended)
	if admitted > 50 {
		t.Fatalf("admitted %d, over the burst of 50", admitted)
	}
	if charged := 50 - out[0].Remaining; charged != int64(admitted) {
		t.Fatalf("the bucket is charged %d but %d were admitted: a contended attempt charged something", charged, admitted)
	}
	if contended == 0 || st.Contention != uint64(contended) {
		t.Fatalf("contended = %d, Stats().Contention = %d; want the same, non-zero", contended, st.Contention)
	}
}

// TestClockSkew shows what a skew between two instances does, and that it
// is bounded as the package documentation says.
func TestClockSkew(t *testing.T) {
	c := ctx(t)
	t.Run("fixed window, clocks 30s apart", func(t *testing.T) {
		// Instance A's clock reads 45s into a minute, B's 30s later: 15s
		// into the next one. They count different windows, so the two
		// admit a full limit each in the same real minute: 2 × Limit,
		// the bound a fixed window already has across a boundary.
		l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute})
		ca := newClock(t0.Add(45 * time.Second))
		cb := newClock(t0.Add(75 * time.Second))
		a, b := open(t, ca), open(t, cb)
		key := uniqueKey(t, "k")
		admitted := 0
		out := make([]algo.Decision, 1)
		for i := range 30 {
			s := a
			if i%2 == 1 {
				s = b
			}
			if _, err := s.Take(c, []store.Request{{Key: key, Limit: l, Cost: 1}}, out); err != nil {
				t.Fatal(err)
			}
			if out[0].Allowed {
				admitted++
			}
		}
		if admitted != 20 {
			t.Fatalf("admitted %d across two instances 30s apart; want 20 (each counts its own window)", admitted)
		}
		// Once A's clock reaches B's window they share it again.
		ca.Advance(30 * time.Second)
		if _, err := a.Take(c, []store.Request{{Key: key, Limit: l, Cost: 1}}, out); err != nil || out[0].Allowed {
			t.Fatalf("A in B's window: %+v, %v; want refused, the window is full", out[0], err)
		}
	})
	t.Run("token bucket, clocks 30s apart", func(t *testing.T) {
		// 1 unit per 10s, burst 5. A fast instance refills early by
		// skew × rate = 3 units; a slow one never refills twice, because
		// the stored time never moves backwards.
		l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: 10 * time.Second, Burst: 5})
		slow, fast := open(t, newClock(t0)), open(t, newClock(t0.Add(30*time.Second)))
		key := uniqueKey(t, "k")
		out := make([]algo.Decision, 1)
		count := func(s *memcached.Store) int {
			n := 0
			for range 10 {
				if _, err := s.Take(c, []store.Request{{Key: key, Limit: l, Cost: 1}}, out); err != nil {
					t.Fatal(err)
				}
				if out[0].Allowed {
					n++
				}
			}
			return n
		}
		if n := count(slow); n != 5 {
			t.Fatalf("slow instance on a fresh bucket admitted %d, want the burst 5", n)
		}
		if n := count(fast); n != 3 {
			t.Fatalf("fast instance admitted %d, want skew × rate = 3", n)
		}
		if n := count(slow); n != 0 {
			t.Fatalf("slow instance after the fast one admitted %d, want 0: its clock is behind the stored time", n)
		}
	})
}

// TestSeveralServers spreads keys over two servers; every entry of one key
// (a sliding window's sub-window counters) stays on one server.
func TestSeveralServers(t *testing.T) {
	a, b := testserver.NewMemcached(t), testserver.NewMemcached(t)
	if a == nil || b == nil {
		return
	}
	clock := newClock(t0)
	s, err := memcached.Open("memcached://"+a.Addr+","+b.Addr, memcached.WithClock(clock.Now), memcached.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := ctx(t)
	l := compile(t, algo.Params{Algorithm: algo.SlidingWindow, Limit: 3, Period: 4 * time.Second, SubWindows: 4})
	perServer := map[string]int{}
	out := make([]algo.Decision, 1)
	for i := range 200 {
		key := "k" + itoa(i)
		perServer[s.ServerFor(key)]++
		admitted := 0
		for j := range 5 {
			clock.Advance(100 * time.Millisecond)
			if _, err := s.Take(c, []store.Request{{Key: key, Limit: l, Cost: 1}}, out); err != nil {
				t.Fatalf("key %s take %d: %v", key, j, err)
			}
			if out[0].Allowed {
				admitted++
			}
		}
		if admitted != 3 {
			t.Fatalf("key %s: admitted %d of 5 within one window, want 3", key, admitted)
		}
	}
	if len(perServer) != 2 || perServer[a.Addr] < 50 || perServer[b.Addr] < 50 {
		t.Fatalf("keys per server = %v, want both servers used", perServer)
	}
}
