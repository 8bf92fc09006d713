package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/storetest"
)

// runID keeps the keys of concurrent test runs on a shared server apart.
var runID = func() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// invocations counts runKey's calls.
var invocations atomic.Int64

// runKey returns a key prefix unique to one invocation of a test: runID
// is per process, and -count=N runs a test N times in one process, on
// the keys the previous run left.
func runKey() string { return runID + "." + strconv.FormatInt(invocations.Add(1), 10) }

// openT opens a store on url for the test and closes it at the end.
func openT(tb testing.TB, url string, opts ...Option) *Store {
	tb.Helper()
	s, err := Open(url, opts...)
	if err != nil {
		tb.Fatalf("Open(%s): %v", url, err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// pttl reads a key's TTL the way storetest's RealTTL check wants it.
func pttl(tb testing.TB, st store.Store, key string) (time.Duration, bool) {
	tb.Helper()
	s := st.(*Store)
	ms, err := s.client.Do(context.Background(), s.client.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		tb.Fatalf("PTTL %s: %v", key, err)
	}
	if ms < 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// harness returns the conformance harness for a store URL.
func harness(url string, opts ...Option) storetest.Harness {
	return storetest.Harness{
		New: func(tb testing.TB, clock func() time.Time) store.Store {
			o := append([]Option(nil), opts...)
			if clock != nil {
				o = append(o, WithTestClock(clock))
			}
			return openT(tb, url, o...)
		},
		RealTTL: true,
		TTL:     pttl,
	}
}

func redisURL(tb testing.TB) string {
	tb.Helper()
	return "redis://" + testserver.Redis(tb)
}

func clusterURL(tb testing.TB) string {
	tb.Helper()
	return "redis-cluster://" + strings.Join(testserver.RedisCluster(tb), ",")
}

func sentinelURL(tb testing.TB) string {
	tb.Helper()
	master, sentinels := testserver.RedisSentinel(tb)
	return "redis-sentinel://" + master + "@" + strings.Join(sentinels, ",")
}

// withTestTTLFloor raises WithTestClock's TTL floor, for long tests whose
// keys may sit idle longer than a second of real time.
func withTestTTLFloor(d time.Duration) Option {
	return func(o *options) error {
		o.testTTLFloor = d
		return nil
	}
}

// withoutLoneTake sends lone takes through the batch script
// (lua/takes.lua) instead of lua/take.lua.
func withoutLoneTake() Option {
	return func(o *options) error {
		o.testNoLone = true
		return nil
	}
}
