package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// Epoch is where every fake clock of the suite starts: a UTC instant that
// is the start of a year, a month, a day and every period that divides a
// day, so that trace files can reason about window boundaries.
var Epoch = time.Date(2025, time.January, 1, 0, 0, 0, 0, time.UTC)

// Harness tells the suite how to create the store under test and what it
// can do. Only New is required.
type Harness struct {
	// New returns an empty store (or one whose keys cannot meet the
	// suite's, which carry a random run id) that reads the time from clock,
	// at microsecond resolution. A nil clock, which Bench passes, means the
	// store's own clock. New registers the store's Close with tb.Cleanup or
	// leaves it to the suite, which closes every store it creates; a second
	// Close may return an error, which the suite ignores.
	New func(tb testing.TB, clock func() time.Time) store.Store
	// Kinds lists the algorithms the store supports (default: algo.Kinds()).
	Kinds []algo.Kind
	// RealTTL says the store expires keys by its own clock rather than the
	// injected one (Redis expires keys by the server's clock). The expiry
	// test then checks the key's time-to-live through TTL instead of
	// advancing the fake clock past the state's ExpiresAt.
	RealTTL bool
	// TTL reports the time-to-live the store has set on key, and whether
	// the key exists. Required with RealTTL.
	TTL func(tb testing.TB, st store.Store, key string) (ttl time.Duration, ok bool)
	// Goroutines is the number of concurrent callers in the concurrency
	// tests (default 64).
	Goroutines int
	// Attempts is the number of takes in the exactness test (default 1200,
	// with a budget of 1000).
	Attempts int
	// RandomOps is the length of each randomized trace (default 1500).
	RandomOps int
	// Parallel runs the suite's subtests with t.Parallel.
	Parallel bool
	// BenchKeys lists Bench's key cardinalities (default 1, 10 000,
	// 1 000 000).
	BenchKeys []int
}

func (h *Harness) defaults(tb testing.TB) {
	tb.Helper()
	if h.New == nil {
		tb.Fatal("storetest: Harness.New is required")
	}
	if h.RealTTL && h.TTL == nil {
		tb.Fatal("storetest: Harness.TTL is required with RealTTL")
	}
	if len(h.Kinds) == 0 {
		h.Kinds = algo.Kinds()
	}
	if h.Goroutines <= 0 {
		h.Goroutines = 64
	}
	if h.Attempts <= 0 {
		h.Attempts = 1200
	}
	if h.RandomOps <= 0 {
		h.RandomOps = 1500
	}
	if len(h.BenchKeys) == 0 {
		h.BenchKeys = []int{1, 10_000, 1_000_000}
	}
}

func (h *Harness) supports(k algo.Kind) bool { return slices.Contains(h.Kinds, k) }

// Clock is a fake clock safe for concurrent use. Its zero value reads the
// Unix epoch; NewClock starts it elsewhere.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock {
	c := new(Clock)
	c.Set(start)
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// Set moves the clock to t (backwards too).
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// micros returns the clock's time in µs since the epoch, the store's unit.
func (c *Clock) micros() int64 { return c.ns.Load() / int64(time.Microsecond) }

// runID tells apart the keys of concurrent runs against a shared server.
var runID = func() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// namespace returns a key prefix unique to the test, in one hash slot.
func namespace(t testing.TB) string {
	return fmt.Sprintf("{st%s/%s}:", runID, strings.ReplaceAll(t.Name(), " ", "_"))
}

// open creates a store through the harness and closes it after the test.
func (h *Harness) open(t testing.TB, clock func() time.Time) store.Store {
	t.Helper()
	st := h.New(t, clock)
	if st == nil {
		t.Fatal("storetest: Harness.New returned nil")
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// Run runs the conformance suite against the stores h creates.
func Run(t *testing.T, h Harness) {
	t.Helper()
	h.defaults(t)
	tests := []struct {
		name string
		run  func(*testing.T, *Harness)
	}{
		{"traces", testTraces},
		{"random", testRandom},
		{"exact", testExact},
		{"all_or_nothing", testAllOrNothing},
		{"all_or_nothing_concurrent", testAllOrNothingConcurrent},
		{"expiry", testExpiry},
		{"retain", testRetain},
		{"reset", testReset},
		{"refund_release", testRefundRelease},
		{"foreign_give_back", testForeignGiveBack},
		{"renew", testRenew},
		{"peek", testPeek},
		{"bad_requests", testBadRequests},
		{"edges", testEdges},
		{"cancelled", testCancelled},
		{"closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if h.Parallel {
				t.Parallel()
			}
			tc.run(t, &h)
		})
	}
}

// kindParams returns, for each algorithm, the parameters of a limit of
// budget units per period that the suite uses when a test does not care
// about the details.
func kindParams(k algo.Kind, budget int64, period time.Duration) algo.Params {
	p := algo.Params{Algorithm: k, Limit: budget, Period: period}
	switch k {
	case algo.Shaper:
		p.Burst = budget - 1 // capacity Burst+1 = budget
	case algo.SmoothBursty:
		p.MaxWait = period
	case algo.SmoothWarmup:
		p.WarmupPeriod = period
		p.MaxWait = period
	case algo.Concurrency:
		p.LeaseTTL = period
	}
	return p
}

func compile(t testing.TB, p algo.Params) *algo.Limit {
	t.Helper()
	l, err := algo.Compile(p)
	if err != nil {
		t.Fatalf("storetest: compile %+v: %v", p, err)
	}
	return l
}

// formatDecision prints a decision compactly for failure messages.
func formatDecision(d algo.Decision) string {
	var b strings.Builder
	if d.Allowed {
		b.WriteString("allowed")
	} else {
		b.WriteString("denied")
	}
	fmt.Fprintf(&b, " limit=%d remaining=%d", d.Limit, d.Remaining)
	if d.RetryAfter == algo.Never {
		b.WriteString(" retry=never")
	} else {
		fmt.Fprintf(&b, " retry=%v", d.RetryAfter)
	}
	fmt.Fprintf(&b, " reset=%v delay=%v", d.ResetAfter, d.Delay)
	return b.String()
}

// takeOne is a Take over one request.
func takeOne(t testing.TB, st store.Store, r store.Request) (algo.Decision, store.Result) {
	t.Helper()
	out := make([]algo.Decision, 1)
	res, err := st.Take(t.Context(), []store.Request{r}, out)
	if err != nil {
		t.Fatalf("Take(%s, cost %d): %v", r.Key, r.Cost, err)
	}
	if res.Allowed != out[0].Allowed {
		t.Fatalf("Take(%s, cost %d): Result.Allowed = %v but decision.Allowed = %v", r.Key, r.Cost, res.Allowed, out[0].Allowed)
	}
	return out[0], res
}

// peekOne is a Peek of one request.
func peekOne(t testing.TB, st store.Store, r store.Request) algo.Decision {
	t.Helper()
	out := make([]algo.Decision, 1)
	if err := st.Peek(t.Context(), []store.Request{r}, out); err != nil {
		t.Fatalf("Peek(%s, cost %d): %v", r.Key, r.Cost, err)
	}
	return out[0]
}

// checkErr fails unless err wraps want.
func checkErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want one wrapping %v", what, want)
	} else if !errorsIs(err, want) {
		t.Errorf("%s: error %v does not wrap %v", what, err, want)
	}
}
