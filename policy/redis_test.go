package policy

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/redis"
)

// The scenarios and the hierarchy test also run on a real Redis and a real
// Redis Cluster (started by internal/testserver, or named by the
// FLOODGATE_TEST_REDIS* variables). Each run uses its own key prefix, so
// runs sharing a server do not meet; the store gets the scenario's clock
// through redis.WithTestClock.

var redisRun = func() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

var redisSeq atomic.Int64

func redisPrefix() Option {
	return WithKeyPrefix("fg:test:" + redisRun + ":" + strconv.FormatInt(redisSeq.Add(1), 10) + ":")
}

func openRedis(t testing.TB, url string, clock func() time.Time) store.Store {
	t.Helper()
	st, err := redis.Open(url, redis.WithTestClock(clock))
	if err != nil {
		t.Fatalf("redis.Open(%s): %v", url, err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func redisURL(t testing.TB) string { return "redis://" + testserver.Redis(t) }

func clusterURL(t testing.TB) string {
	return "redis-cluster://" + strings.Join(testserver.RedisCluster(t), ",")
}

func init() {
	scenarioStores = append(scenarioStores,
		scenarioStore{name: "redis", open: func(t *testing.T, clock func() time.Time) (store.Store, []Option) {
			return openRedis(t, redisURL(t), clock), []Option{redisPrefix()}
		}},
		scenarioStore{name: "redis-cluster", open: func(t *testing.T, clock func() time.Time) (store.Store, []Option) {
			return openRedis(t, clusterURL(t), clock), []Option{redisPrefix()}
		}},
	)
}

func TestHierarchyConcurrentRedis(t *testing.T) {
	cfg := mustParse(t, hierarchyConfig)
	st := openRedis(t, redisURL(t), frozen(time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)))
	e, err := NewEngine(cfg, st, redisPrefix())
	if err != nil {
		t.Fatal(err)
	}
	hierarchyRun(t, e)
}

// On a Cluster the levels of a hierarchy live in different slots: the
// store reserves and rolls back across them, and the guarantees hold.
func TestHierarchyConcurrentRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	cfg := mustParse(t, hierarchyConfig)
	st := openRedis(t, clusterURL(t), frozen(time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)))
	e, err := NewEngine(cfg, st, redisPrefix())
	if err != nil {
		t.Fatal(err)
	}
	hierarchyRun(t, e)
}

// hashTagConfig is hierarchyConfig with hash_tag: every level under a
// tenant shares the tenant's slot.
var hashTagConfig = strings.Replace(hierarchyConfig, "hierarchy: true\n", "hierarchy: true\nhash_tag: true\n", 1)

// TestHashTagKeysShareASlot: with hash_tag a request's keys below the
// domain's own limit carry its first entry as their hash tag, so a tenant
// and its users land in one Redis Cluster slot (and different tenants, in
// general, in different ones); without it they spread.
func TestHashTagKeysShareASlot(t *testing.T) {
	slots := func(cfg, tenant string) map[int]int {
		t.Helper()
		e := newMemEngine(t, mustParse(t, cfg), nil)
		keys, err := e.Keys(req("saas", ent("tenant", tenant, "user", "bob")))
		if err != nil || len(keys) != 3 {
			t.Fatalf("keys %q, %v: want 3 (global, tenant, user)", keys, err)
		}
		n := map[int]int{}
		for _, k := range keys {
			n[redis.Slot(k)]++
			if strings.Contains(k, "|") && strings.Contains(cfg, "hash_tag") && !strings.Contains(k, "|{tenant="+tenant+"}") {
				t.Errorf("key %q: want the hash tag {tenant=%s}", k, tenant)
			}
		}
		return n
	}
	tagged := slots(hashTagConfig, "acme")
	if len(tagged) != 2 { // the global limit, and the tenant with its user
		t.Errorf("hash_tag: slots %v, want the tenant's and the user's keys in one slot", tagged)
	}
	if s := slots(hashTagConfig, "globex"); len(s) != 2 {
		t.Errorf("hash_tag, another tenant: slots %v", s)
	}
	if plain := slots(hierarchyConfig, "acme"); len(plain) != 3 {
		t.Errorf("without hash_tag: slots %v, want three (keys spread)", plain)
	}
}

// On a Cluster with hash_tag a tenant's and its users' levels share a
// slot (one script decides them); the guarantees of the hierarchy hold.
func TestHierarchyConcurrentRedisClusterHashTag(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	cfg := mustParse(t, hashTagConfig)
	st := openRedis(t, clusterURL(t), frozen(time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)))
	e, err := NewEngine(cfg, st, redisPrefix())
	if err != nil {
		t.Fatal(err)
	}
	hierarchyRun(t, e)
}
