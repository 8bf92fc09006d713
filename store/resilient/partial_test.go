package resilient_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

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
	c := newPartialCluster(t)
	inner, refusing, live, dead, pd, spent, l := c.inner, c.refusing, c.live, c.dead, c.pd, c.spent, c.l
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

// partialCluster is a Redis store on the shared Cluster whose connections
// to one master are refused (dead), a key of it, a key over its limit
// (spent: limit 1, taken) and a live key (limit 100) on live masters, in
// partitions of their own.
type partialCluster struct {
	inner                *redis.Store
	refusing, live, dead string
	pd                   int // the dead key's partition
	spent, l             *algo.Limit
}

func newPartialCluster(t *testing.T) *partialCluster {
	t.Helper()
	seeds := testserver.RedisCluster(t)
	f := new(testserver.DeadNodes)
	inner, err := redis.Open("redis-cluster://"+strings.Join(seeds, ","),
		redis.WithClientOption(func(o *rueidis.ClientOption) { o.DialCtxFn = f.Dial }), redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	c := &partialCluster{inner: inner,
		spent: compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: 24 * time.Hour}),
		l:     compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: 24 * time.Hour})}
	prefix := "partial:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	c.dead = prefix + "dead"
	deadAddr := testserver.ClusterMaster(t, seeds, c.dead)
	c.pd = inner.Partition(c.dead)
	var keys []string
	for i := 0; len(keys) < 2; i++ {
		if i > 100_000 {
			t.Fatal("no keys of live nodes found")
		}
		k := prefix + strconv.Itoa(i)
		if p := inner.Partition(k); p != c.pd && testserver.ClusterMaster(t, seeds, k) != deadAddr &&
			!slices.ContainsFunc(keys, func(o string) bool { return inner.Partition(o) == p }) {
			keys = append(keys, k)
		}
	}
	c.refusing, c.live = keys[0], keys[1]
	if res, err := inner.Take(t.Context(), []store.Request{{Key: c.refusing, Limit: c.spent, Cost: 1}}, make([]algo.Decision, 1)); err != nil || !res.Allowed {
		t.Fatalf("spend %s: %+v, %v", c.refusing, res, err)
	}
	f.Down(deadAddr)
	t.Cleanup(func() { f.Up(deadAddr) })
	return c
}

// TestOpenBreakerLiveRefusalStands: while the dead node's breaker is open
// (and the over-limit cache holds nothing), a Take over a key a live node
// refuses and a key of the dead node is refused, under FailOpen, by a
// Peek of the live keys (Partial, no Fallback: see
// TestOpenBreakerLiveRefusalIsNoFallback), the dead key undecided; a take whose live keys all pass is
// answered by the policy (admitted) as before. Before, FailOpen admitted
// both.
func TestOpenBreakerLiveRefusalStands(t *testing.T) {
	c := newPartialCluster(t)
	s, err := resilient.New(c.inner, resilient.WithPolicy(resilient.FailOpen), resilient.WithTimeout(2*time.Second),
		resilient.WithBreaker(1, time.Minute), resilient.WithOverLimitCache(0))
	if err != nil {
		t.Fatal(err)
	}
	R := store.Request{Key: c.refusing, Limit: c.spent, Cost: 1}
	L := store.Request{Key: c.live, Limit: c.l, Cost: 1}
	D := store.Request{Key: c.dead, Limit: c.l, Cost: 1}
	if res, err := s.Take(t.Context(), []store.Request{L, D}, make([]algo.Decision, 2)); err != nil || !res.Allowed || !res.Fallback {
		t.Fatalf("Take(live, dead): %+v, %v; want the policy's admission", res, err)
	}
	if st := s.Breakers()[c.pd]; st != resilient.Open {
		t.Fatalf("the dead node's breaker is %v, want open", st)
	}
	out := make([]algo.Decision, 3)
	res, err := s.Take(t.Context(), []store.Request{L, R, D}, out)
	if err != nil || res.Allowed || !res.Partial {
		t.Fatalf("Take(live, refusing, dead), the dead node's breaker open: %+v, %v; want refused, Partial", res, err)
	}
	if !out[0].Allowed || out[0].Remaining != 100 || out[1].Allowed || out[1].Limit != 1 || out[1].RetryAfter <= 0 || out[2] != (algo.Decision{}) {
		t.Errorf("decisions %+v; want the live key's 100 left, the refusing key's refusal, the dead key's zero Decision", out)
	}
	if res, err := s.Take(t.Context(), []store.Request{L, D}, make([]algo.Decision, 2)); err != nil || !res.Allowed || !res.Fallback || res.Partial {
		t.Errorf("Take(live, dead), the breaker open: %+v, %v; want the policy's admission", res, err)
	}
}

// TestPartialRefusalBesideNoPerm: a Take over a key over its limit and a
// key the Redis user's ACL does not cover (NOPERM: no outage, an error
// returned as it is) is refused, Partial, in either order, rather than
// failing with the NOPERM: the refusal stands as it does beside an
// outage, and Hooks.Call sees the NOPERM (the server's store log reports
// it). Before, the Take failed, and a caller admitting on errors passed
// a request a key refused.
func TestPartialRefusalBesideNoPerm(t *testing.T) {
	nodes := testserver.RedisCluster(t)
	prefix := "pnp:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	user, pass := "fgpartial-"+strconv.FormatInt(time.Now().UnixNano()%1e9, 10), "Pw-partial-s3cret"
	for _, n := range nodes {
		args := append([]string{"ACL", "SETUSER", user, "reset", "on", ">" + pass, "~" + redis.DefaultProbeKey, "~" + prefix + "ok:*"}, redis.ACLRules...)
		if _, err := testserver.RedisDo(n, 2*time.Second, args...); err != nil {
			t.Fatalf("ACL SETUSER on %s: %v", n, err)
		}
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			_, _ = testserver.RedisDo(n, 2*time.Second, "ACL", "DELUSER", user)
		}
	})
	inner, err := redis.Open("redis-cluster://"+user+":"+pass+"@"+strings.Join(nodes, ","), redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	spent := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: 24 * time.Hour})
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: 24 * time.Hour})
	refusing, denied := prefix+"ok:r", prefix+"no:d"
	for i := 0; inner.Partition(denied) == inner.Partition(refusing); i++ {
		denied = prefix + "no:d" + strconv.Itoa(i)
	}
	if res, err := inner.Take(t.Context(), []store.Request{{Key: refusing, Limit: spent, Cost: 1}}, make([]algo.Decision, 1)); err != nil || !res.Allowed {
		t.Fatalf("spend %s: %+v, %v", refusing, res, err)
	}
	var mu sync.Mutex
	var callErrs []error
	s, err := resilient.New(inner, resilient.WithPolicy(resilient.FailOpen), resilient.WithTimeout(2*time.Second),
		resilient.WithHooks(resilient.Hooks{Call: func(_ string, _ time.Duration, err error) {
			mu.Lock()
			defer mu.Unlock()
			callErrs = append(callErrs, err)
		}}))
	if err != nil {
		t.Fatal(err)
	}
	R := store.Request{Key: refusing, Limit: spent, Cost: 1}
	D := store.Request{Key: denied, Limit: l, Cost: 1}
	for _, reqs := range [][]store.Request{{R, D}, {D, R}} {
		out := make([]algo.Decision, 2)
		res, err := s.Take(t.Context(), reqs, out)
		if err != nil || res.Allowed || !res.Partial || res.Fallback {
			t.Errorf("Take(%s, %s) = %+v, %v; want refused, Partial, no error", reqs[0].Key, reqs[1].Key, res, err)
		}
		for i, q := range reqs {
			if q.Key == denied && out[i] != (algo.Decision{}) || q.Key == refusing && (out[i].Allowed || out[i].Limit != 1) {
				t.Errorf("Take(%s, %s): %s's decision %+v; want the denied key undecided, the refusing key's refusal", reqs[0].Key, reqs[1].Key, q.Key, out[i])
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(callErrs) != 2 || !errors.Is(callErrs[0], redis.ErrPermission) || !errors.Is(callErrs[1], redis.ErrPermission) {
		t.Errorf("calls' errors %v, want the NOPERM twice", callErrs)
	}
}

// TestOpenBreakerLiveRefusalIsNoFallback: the refusal a live key's Peek
// gives while the dead node's breaker is open is the store's, as the
// store's own Partial refusal is (TestPartialRefusalStandsWhateverThePolicy):
// no Fallback and no Hooks.Fallback, under FailOpen and FailLocal, so that
// the server counts it over_limit (not fallback_refused, which says
// nothing of the limit) and Envoy's current_limit is the limit, not
// FailLocal's share. The take the policy answers (the live keys all pass)
// is still a Fallback, and Hooks.Fallback sees it. Before, the refusal
// was a Fallback and Hooks.Fallback was called for it.
func TestOpenBreakerLiveRefusalIsNoFallback(t *testing.T) {
	c := newPartialCluster(t)
	for _, p := range []resilient.Policy{resilient.FailOpen, resilient.FailLocal} {
		var mu sync.Mutex
		fallbacks := 0
		s, err := resilient.New(c.inner, resilient.WithPolicy(p), resilient.WithTimeout(2*time.Second),
			resilient.WithBreaker(1, time.Minute), resilient.WithOverLimitCache(0), resilient.WithInstances(2),
			resilient.WithHooks(resilient.Hooks{Fallback: func(string, resilient.Policy, error) {
				mu.Lock()
				defer mu.Unlock()
				fallbacks++
			}}))
		if err != nil {
			t.Fatal(err)
		}
		R := store.Request{Key: c.refusing, Limit: c.spent, Cost: 1}
		L := store.Request{Key: c.live, Limit: c.l, Cost: 1}
		D := store.Request{Key: c.dead, Limit: c.l, Cost: 1}
		// Opens the dead node's breaker (threshold 1); answered by the
		// policy: one fallback.
		if res, err := s.Take(t.Context(), []store.Request{L, D}, make([]algo.Decision, 2)); err != nil || !res.Allowed || !res.Fallback {
			t.Fatalf("%v: Take(live, dead): %+v, %v; want the policy's admission", p, res, err)
		}
		if st := s.Breakers()[c.pd]; st != resilient.Open {
			t.Fatalf("%v: the dead node's breaker is %v, want open", p, st)
		}
		out := make([]algo.Decision, 3)
		res, err := s.Take(t.Context(), []store.Request{L, R, D}, out)
		if err != nil || res.Allowed || !res.Partial || res.Fallback {
			t.Errorf("%v: Take(live, refusing, dead), the breaker open: %+v, %v; want refused, Partial, no Fallback", p, res, err)
		}
		if out[1].Allowed || out[1].Limit != 1 || out[2] != (algo.Decision{}) {
			t.Errorf("%v: decisions %+v; want the refusing key's refusal of its whole limit (1), the dead key undecided", p, out)
		}
		mu.Lock()
		if fallbacks != 1 {
			t.Errorf("%v: Hooks.Fallback called %d times; want once (the first take's), not for the store's refusal", p, fallbacks)
		}
		mu.Unlock()
		// s is not closed: it would close inner, which the next run wraps.
	}
}
