package policy

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestPartialRefusalBorrowKeepsUndecided: a Partial refusal (a live key
// over its limit, another descriptor's key on a dead Cluster node) whose
// only decided refusal is a rate with a ceil borrows, and the retry still
// takes the dead node's key: it is undecided, not a refusal to borrow
// for. On a resilient store failing closed the retry meets the dead node
// and the failure policy refuses the request (b's status with it); it
// was admitted, b's key dropped from the retry as if b had borrowed.
func TestPartialRefusalBorrowKeepsUndecided(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	cfg := mustParse(t, `
domain: d
hierarchy: true
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: day, requests_per_unit: 100, lendable: 0.5}
    descriptors:
      - key: user
        rate_limit: {name: user, unit: day, requests_per_unit: 1, ceil: 10}
  - key: b
    rate_limit: {name: b, unit: day, requests_per_unit: 100}
`)
	seeds := testserver.RedisCluster(t)
	f := new(testserver.DeadNodes)
	inner, err := redis.Open("redis-cluster://"+strings.Join(seeds, ","), dialThrough(f), redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	st, err := resilient.New(inner, resilient.WithPolicy(resilient.FailClosed), resilient.WithTimeout(2*time.Second), resilient.WithBreaker(100, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e, err := NewEngine(cfg, st, redisPrefix())
	if err != nil {
		t.Fatal(err)
	}
	nodesOf := func(d []Entry) []string {
		t.Helper()
		keys, err := e.Keys(req("d", d))
		if err != nil || len(keys) == 0 {
			t.Fatalf("Keys(%v) = %v, %v", d, keys, err)
		}
		var addrs []string
		for _, k := range keys {
			if a := testserver.ClusterMaster(t, seeds, k); !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
		}
		return addrs
	}
	// A user whose keys (rate, ceil, the tenant's and its lend pool) leave
	// a master free, and a b on that master.
	var masters []string
	for i := range 200 {
		if a := testserver.ClusterMaster(t, seeds, "k"+strconv.Itoa(i)); !slices.Contains(masters, a) {
			masters = append(masters, a)
		}
	}
	var u, b []Entry
	var live []string
	for i := 0; u == nil; i++ {
		if i > 1000 {
			t.Fatal("no tenant whose keys leave a master free")
		}
		d := ent("tenant", "t"+strconv.Itoa(i), "user", "u")
		if addrs := nodesOf(d); len(addrs) < len(masters) {
			u, live = d, addrs
		}
	}
	for i := 0; b == nil; i++ {
		if i > 1000 {
			t.Fatal("no value of b whose key is on another node than the user's")
		}
		d := ent("b", "y"+strconv.Itoa(i))
		if addrs := nodesOf(d); !slices.Contains(live, addrs[0]) {
			b = d
		}
	}
	if r, err := e.Decide(t.Context(), req("d", u)); err != nil || r.Code != CodeOK {
		t.Fatalf("spend the user's rate: %+v, %v", r, err)
	}
	bAddr := nodesOf(b)[0]
	f.Down(bAddr)
	defer f.Up(bAddr)

	r, err := e.Decide(t.Context(), req("d", u, b))
	if err != nil || r.Code != CodeOverLimit || !r.StoreFallback || r.Statuses[1].Code != CodeOverLimit {
		t.Fatalf("user over its rate (may borrow) and b on a dead node, failing closed: code %v, StoreFallback %v, err %v, b's status %+v; "+
			"want OVER_LIMIT from the failure policy, which the borrowing retry holding b's key meets (without b, it was admitted)",
			r.Code, r.StoreFallback, err, r.Statuses[1])
	}
}
