package policy

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// dialThrough is the option that has a Redis store dial its nodes
// through f, whose nodes marked down are dead to it.
func dialThrough(f *testserver.DeadNodes) redis.Option {
	return redis.WithClientOption(func(o *rueidis.ClientOption) { o.DialCtxFn = f.Dial })
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
	seeds := testserver.RedisCluster(t)
	f := new(testserver.DeadNodes)
	inner, err := redis.Open("redis-cluster://"+strings.Join(seeds, ","), dialThrough(f), redis.WithTimeout(time.Second))
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
	aAddr := testserver.ClusterMaster(t, seeds, keyOf(a))
	var b []Entry
	for i := 0; b == nil; i++ {
		if i > 1000 {
			t.Fatal("no value of b whose key is on another node than a's")
		}
		d := ent("b", "y"+strconv.Itoa(i))
		if testserver.ClusterMaster(t, seeds, keyOf(d)) != aAddr {
			b = d
		}
	}
	if r, err := e.Decide(t.Context(), req("d", a)); err != nil || r.Code != CodeOK {
		t.Fatalf("spend a: %+v, %v", r, err)
	}
	bAddr := testserver.ClusterMaster(t, seeds, keyOf(b))
	f.Down(bAddr)
	defer f.Up(bAddr)

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
