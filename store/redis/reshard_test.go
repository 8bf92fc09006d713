package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/resilient"
)

// Slot migrations (redis-cli --cluster reshard, rebalance) under load.

// migrationKey is a key of the slot that moves, with what was admitted on
// it.
type migrationKey struct {
	name     string
	limit    *algo.Limit
	admitted atomic.Int64
}

const migrationBudget = 200

// migrationKeys returns three keys of every exact algorithm under the hash
// tag tag, each spent down to headroom units of migrationBudget, and pairs
// of them for all-or-nothing takes.
func migrationKeys(t *testing.T, s *Store, prefix, tag string, headroom int64) ([]*migrationKey, [][]*migrationKey) {
	t.Helper()
	var keys []*migrationKey
	var pairs [][]*migrationKey
	out := make([]algo.Decision, 1)
	for _, k := range exactKinds {
		l, err := algo.Compile(withLimit(exactParams(k), migrationBudget))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			mk := &migrationKey{name: fmt.Sprintf("%s%s:%d{%s}", prefix, k, i, tag), limit: l}
			res, err := s.Take(t.Context(), []store.Request{{Key: mk.name, Limit: l, Cost: migrationBudget - headroom, Lease: 1}}, out)
			if err != nil || !res.Allowed {
				t.Fatalf("pre-spend %s: %v %+v", mk.name, err, out[0])
			}
			mk.admitted.Store(migrationBudget - headroom)
			keys = append(keys, mk)
		}
		pairs = append(pairs, keys[len(keys)-3:len(keys)-1])
	}
	return keys, pairs
}

// otherMaster returns a master of c other than m.
func otherMaster(t *testing.T, c *testserver.Cluster, m *testserver.Server) *testserver.Server {
	t.Helper()
	masters, err := c.Masters()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range masters {
		if o != m {
			return o
		}
	}
	t.Fatal("no other master")
	return nil
}

// TestSlotMigration moves hash slots of a private Cluster while the store
// decides on their keys.
func TestSlotMigration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a private Redis Cluster")
	}
	c := testserver.NewRedisCluster(t)
	if c == nil {
		return
	}
	t.Run("under load", func(t *testing.T) { testSlotMigrationUnderLoad(t, c, "") })
	// Under WAIT a take runs with its WAIT on a connection that does not
	// follow redirections; the store follows ASK and MOVED itself.
	t.Run("under load with WAIT", func(t *testing.T) { testSlotMigrationUnderLoad(t, c, "wait_replicas=1") })
	t.Run("least-privileged user", func(t *testing.T) { testSlotMigrationACL(t, c) })
}

// testSlotMigrationUnderLoad moves the hash slot of hot keys to another
// master while 64 goroutines take from them, one key at a time or two
// hash-tagged keys all or nothing (a third of the takes; an eighth of
// the single-key ones go through store/resilient), and holds the slot
// half-migrated for a second (as a slot of many keys is while they move). A take of one key
// must never fail: the client follows ASK to the node that has the key
// now. Before, the store's coalesced batches, which hold many keys of the
// slot, were refused with TRYAGAIN until the last key had moved: every
// decision of the slot failed (11 999 single-key takes in the second) and
// a store/resilient breaker over the slot's range opened. A take whose two
// keys are on both sides may fail while they are apart, with TRYAGAIN (or,
// sent again meanwhile, the store's timeout), and succeeds once they are
// together. No key admits past its budget, and no breaker opens.
func testSlotMigrationUnderLoad(t *testing.T, c *testserver.Cluster, query string) {
	url := "redis-cluster://" + strings.Join(c.Addrs(), ",")
	prefix := "fg:mig:" + runID + ":"
	if query != "" {
		url += "?" + query
		prefix += "q:"
	}
	s := openT(t, url, WithTimeout(time.Second))
	const tag = "hot"
	slot := Slot("{" + tag + "}")
	from, err := c.SlotOwner(slot)
	if err != nil {
		t.Fatal(err)
	}
	to := otherMaster(t, c, from)
	keys, pairs := migrationKeys(t, s, prefix, tag, 60)
	// Filler keys, newer than the limiter's: GETKEYSINSLOT lists them
	// first, so that the first batch moves them and a few limiter keys,
	// and leaves the others behind.
	const fillers = 300
	for i := range fillers {
		if _, err := testserver.RedisDo(from.Addr, time.Second, "SET", fmt.Sprintf("%sfill:%d{%s}", prefix, i, tag), "x"); err != nil {
			t.Fatal(err)
		}
	}

	// A store/resilient wrapper over a second store, taking single keys:
	// its breakers must stay closed.
	var trips atomic.Int64
	var tripMsg atomic.Value
	rs, err := resilient.New(openT(t, url, WithTimeout(time.Second)), resilient.WithPolicy(resilient.FailClosed),
		resilient.WithTimeout(500*time.Millisecond), resilient.WithOverLimitCache(0),
		resilient.WithHooks(resilient.Hooks{Tripped: func(e *resilient.CircuitOpenError) {
			trips.Add(1)
			tripMsg.Store(e.Error())
		}}))
	if err != nil {
		t.Fatal(err)
	}

	var (
		stop                 atomic.Bool
		moved                atomic.Bool
		ops                  atomic.Int64
		mu                   sync.Mutex
		singleErrs, pairErrs []error
		afterErrs            []error
		lease                atomic.Uint64
		wg                   sync.WaitGroup
	)
	lease.Store(1 << 20)
	const goroutines, maxOps = 64, 300_000
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			out := make([]algo.Decision, 2)
			for !stop.Load() && ops.Add(1) <= maxOps {
				ks := []*migrationKey{keys[rng.IntN(len(keys))]}
				if rng.IntN(3) == 0 {
					ks = pairs[rng.IntN(len(pairs))]
				}
				id := lease.Add(1)
				reqs := make([]store.Request, len(ks))
				for i, k := range ks {
					reqs[i] = store.Request{Key: k.name, Limit: k.limit, Cost: 1, Lease: id}
				}
				var st store.Store = s
				if g%8 == 0 && len(ks) == 1 {
					st = rs
				}
				after := moved.Load()
				res, err := st.Take(t.Context(), reqs, out[:len(reqs)])
				if err != nil {
					mu.Lock()
					switch {
					case after:
						afterErrs = append(afterErrs, err)
					case len(ks) == 1:
						singleErrs = append(singleErrs, err)
					default:
						pairErrs = append(pairErrs, err)
					}
					mu.Unlock()
					time.Sleep(time.Millisecond)
					continue
				}
				if res.Allowed {
					for _, k := range ks {
						k.admitted.Add(1)
					}
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	n, err := c.MigrateSlot(slot, to, fillers+5, func() { time.Sleep(time.Second) })
	if err != nil {
		t.Error(err)
	}
	moved.Store(true)
	movedAt := time.Since(start)
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	t.Logf("slot %d (%d keys) moved from %s to %s in %v; %d takes; errors: %d single-key, %d two-key while the slot moved, %d after",
		slot, n, from.Addr, to.Addr, movedAt.Round(time.Millisecond), ops.Load(), len(singleErrs), len(pairErrs), len(afterErrs))
	if owner, err := c.SlotOwner(slot); err != nil || owner != to {
		t.Fatalf("slot %d is served by %v (%v), want %s", slot, owner, err, to.Addr)
	}
	for _, e := range singleErrs[:min(len(singleErrs), 3)] {
		t.Errorf("a take of one key failed while its slot moved: %v", e)
	}
	for _, e := range afterErrs[:min(len(afterErrs), 3)] {
		t.Errorf("a take failed after the slot moved: %v", e)
	}
	for _, e := range pairErrs {
		if !errors.Is(e, store.ErrUnavailable) || !strings.Contains(e.Error(), "TRYAGAIN") && !errors.Is(e, context.DeadlineExceeded) {
			t.Errorf("a two-key take failed with %v, want store.ErrUnavailable, TRYAGAIN or the store's timeout", e)
			break
		}
	}
	if n := trips.Load(); n > 0 {
		t.Errorf("%d breakers opened; last: %v", n, tripMsg.Load())
	}
	for _, k := range keys {
		if got := k.admitted.Load(); got > migrationBudget {
			t.Errorf("key %s (%s): admitted %d over a budget of %d", k.name, k.limit, got, migrationBudget)
		}
	}
	// Every key and pair is decided on the new master.
	out := make([]algo.Decision, 2)
	for _, p := range pairs {
		reqs := []store.Request{{Key: p[0].name, Limit: p[0].limit, Cost: 1, Lease: 1}, {Key: p[1].name, Limit: p[1].limit, Cost: 1, Lease: 1}}
		if _, err := s.Take(t.Context(), reqs, out); err != nil {
			t.Errorf("take %s and %s after the move: %v", p[0].name, p[1].name, err)
		}
	}
}

// testSlotMigrationACL: a user with exactly ACLRules runs every operation
// on every algorithm on keys of a slot that is moving, a key already moved
// and a new one, both of which the source answers with ASK. Before, the
// rules lacked +asking: the client's ASKING was refused, the command went
// to the target without it, which answered MOVED back to the source, and
// so on until the store's timeout (each decision took the whole timeout,
// then failed with "context deadline exceeded", hiding the NOPERM). And
// Open refuses a user without +asking on a Cluster, naming ASKING.
func testSlotMigrationACL(t *testing.T, c *testserver.Cluster) {
	rules := append([]string{"~fg:*"}, ACLRules...)
	user, pass := aclUser(t, c.Addrs(), rules...)
	url := "redis-cluster://" + user + ":" + pass + "@" + strings.Join(c.Addrs(), ",")
	s := openT(t, url, WithTimeout(time.Second))
	const tag = "acl"
	slot := Slot("{" + tag + "}")
	from, err := c.SlotOwner(slot)
	if err != nil {
		t.Fatal(err)
	}
	to := otherMaster(t, c, from)
	prefix := "fg:mig:" + runID + ":acl:"
	ctx := t.Context()
	limits := map[algo.Kind]*algo.Limit{}
	for _, k := range algo.Kinds() {
		l, err := algo.Compile(smallParams(k))
		if err != nil {
			t.Fatal(err)
		}
		limits[k] = l
		if _, err := s.Take(ctx, []store.Request{{Key: prefix + k.String() + ":old{" + tag + "}", Limit: l, Cost: 1, Lease: 3}}, make([]algo.Decision, 1)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.MigrateSlot(slot, to, len(limits), func() {
		for _, k := range algo.Kinds() {
			for _, key := range []string{prefix + k.String() + ":old{" + tag + "}", prefix + k.String() + ":new{" + tag + "}"} {
				if !exerciseKey(t, s, key, limits[k]) {
					return // each further call would wait out the timeout
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	short, shortPass := aclUser(t, c.Addrs(), without(rules, "+asking")...)
	err = openErr(t, "redis-cluster://"+short+":"+shortPass+"@"+strings.Join(c.Addrs(), ","))
	if !errors.Is(err, ErrPermission) {
		t.Errorf("Open without +asking = %v, want ErrPermission", err)
	}
	wantMessage(t, err, "ASKING on ", "+asking")
}

// exerciseKey runs every operation of the store on key, one call each, and
// reports whether they all succeeded.
func exerciseKey(t *testing.T, s *Store, key string, l *algo.Limit) bool {
	t.Helper()
	ctx := t.Context()
	out := make([]algo.Decision, 1)
	one := []store.Request{{Key: key, Limit: l, Cost: 1, Lease: 3}}
	for _, st := range []struct {
		what string
		run  func() error
	}{
		{"take", func() error { _, err := s.Take(ctx, one, out); return err }},
		{"peek", func() error { return s.Peek(ctx, one, out) }},
		{"refund", func() error { return s.Refund(ctx, one) }},
		{"renew", func() error { return s.Renew(ctx, one) }},
		{"release", func() error { return s.Release(ctx, one) }},
		{"inspect", func() error { _, _, err := s.Inspect(ctx, key); return err }},
		{"reset", func() error { return s.Reset(ctx, key) }},
	} {
		start := time.Now()
		if err := st.run(); err != nil {
			t.Errorf("%s %s while its slot moves: %v (after %v)", st.what, key, err, time.Since(start).Round(time.Millisecond))
			return false
		}
	}
	return true
}
