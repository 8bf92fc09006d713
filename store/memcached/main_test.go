package memcached_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store/memcached"
)

// addr is the memcached every test shares: FLOODGATE_TEST_MEMCACHED or one
// started by TestMain. Tests use unique keys and never flush it.
var addr string

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(exactChild())
	}
	addr = os.Getenv(testserver.EnvMemcached)
	if addr == "" {
		srv, err := testserver.StartMemcached()
		var missing *testserver.MissingBinaryError
		switch {
		case errors.As(err, &missing) && os.Getenv("CI") == "":
			fmt.Fprintf(os.Stderr, "SKIP store/memcached: %v (install memcached, or run make test)\n", err)
			os.Exit(0)
		case err != nil:
			fmt.Fprintf(os.Stderr, "store/memcached: %v\n", err)
			os.Exit(1)
		}
		addr = srv.Addr
		code := m.Run()
		srv.Stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// fakeClock is a settable clock: tests move time explicitly, never sleep.
type fakeClock struct{ us atomic.Int64 }

func newClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.us.Store(t.UnixMicro())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.UnixMicro(c.us.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.us.Add(int64(d / time.Microsecond)) }
func (c *fakeClock) US() int64               { return c.us.Load() }

// t0 is a fixed instant for deterministic tests: 2026-03-01 00:00:00 UTC.
var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

var keySeq atomic.Int64

// uniqueKey returns a key no other test (or earlier run against a shared
// server) uses.
func uniqueKey(t testing.TB, name string) string {
	return fmt.Sprintf("%s/%s/%d-%d", t.Name(), name, time.Now().UnixNano(), keySeq.Add(1))
}

// open opens a store on the shared server with a fake clock. The timeout
// is generous: the race detector on a busy 2-core machine can stall a
// round trip for well over the default 200ms.
func open(t testing.TB, clock *fakeClock, opts ...memcached.Option) *memcached.Store {
	t.Helper()
	opts = append([]memcached.Option{memcached.WithTimeout(5 * time.Second)}, opts...)
	if clock != nil {
		opts = append([]memcached.Option{memcached.WithClock(clock.Now)}, opts...)
	}
	s, err := memcached.Open("memcached://"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func compile(t testing.TB, p algo.Params) *algo.Limit {
	t.Helper()
	l, err := algo.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func ptr[T any](v T) *T { return &v }

// limits is one limit per algorithm (and variant) the store supports.
var limits = []struct {
	name string
	p    algo.Params
}{
	{"fixed_window", algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Second}},
	{"fixed_window_month", algo.Params{Algorithm: algo.FixedWindow, Limit: 50, Calendar: algo.CalendarMonth}},
	{"sliding_window", algo.Params{Algorithm: algo.SlidingWindow, Limit: 10, Period: time.Second}},
	{"sliding_window_4", algo.Params{Algorithm: algo.SlidingWindow, Limit: 20, Period: 2 * time.Second, SubWindows: 4}},
	{"sliding_log", algo.Params{Algorithm: algo.SlidingLog, Limit: 10, Period: time.Second}},
	{"token_bucket", algo.Params{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Second, Burst: 10, InitialTokens: ptr[int64](4)}},
	{"gcra", algo.Params{Algorithm: algo.GCRA, Limit: 5, Period: time.Second, Burst: 3}},
	{"shaper", algo.Params{Algorithm: algo.Shaper, Limit: 5, Period: time.Second, Burst: 4, Delay: 1}},
	{"smooth_bursty", algo.Params{Algorithm: algo.SmoothBursty, Limit: 10, Period: time.Second, MaxWait: 200 * time.Millisecond}},
	{"smooth_warmup", algo.Params{Algorithm: algo.SmoothWarmup, Limit: 10, Period: time.Second, WarmupPeriod: time.Second, MaxWait: 300 * time.Millisecond}},
	{"concurrency", algo.Params{Algorithm: algo.Concurrency, Limit: 5, LeaseTTL: 2 * time.Second}},
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func itoa(i int) string { return strconv.Itoa(i) }
