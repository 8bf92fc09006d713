package resilient_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/resilient"
)

// deaf is a partitioned store whose node b answers a call only when hold
// is closed (or after late, when hold is nil), whatever the call's
// context: a third-party client that ignores its context and has no
// timeout of its own. Its failure names no partition. The other nodes
// answer at once. answers receives one value per call of b answered, when
// not nil.
type deaf struct {
	partitioned
	hold    chan struct{}
	late    time.Duration
	answers chan struct{}
	calls   atomic.Int64
}

func (d *deaf) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	d.calls.Add(1)
	for _, r := range reqs {
		if d.Partition(r.Key) != 1 {
			continue
		}
		if d.hold != nil {
			<-d.hold
		} else {
			<-ctx.Done()
			time.Sleep(d.late)
		}
		if d.answers != nil {
			d.answers <- struct{}{}
		}
		return store.Result{}, fmt.Errorf("test: node b: %w", store.ErrUnavailable)
	}
	return d.partitioned.Take(ctx, reqs, out)
}

// TestDeafPartitionTripsBreaker is the review's scenario: callers keep
// taking a shared key on c and a user's key on b as one Take, and b's
// store never answers, ignoring the call's context. b's breaker opens
// within a few timeouts of each caller: the calls left on the store (each
// a goroutine stuck there, each having held its caller a timeout) stay
// within the callers' first calls and a few times the breaker's threshold.
// That count, not the wall clock, is what is asserted: a loaded machine
// can run the callers' timeouts late, but not make them call more often.
// Before, a late call was counted only when the store answered, or 10 s
// after the deadline: b's breaker stayed closed and each caller left one
// more stuck call per timeout.
func TestDeafPartitionTripsBreaker(t *testing.T) {
	const (
		callers   = 50
		threshold = 5
		timeout   = 50 * time.Millisecond
		run       = 12 * timeout
		patience  = 10 * time.Second // for the breaker to open, on a loaded machine
	)
	c := newClock()
	d := &deaf{hold: make(chan struct{})}
	d.partitioned.Store = memStore(t, c)
	s, err := resilient.New(d, resilient.WithPolicy(resilient.FailClosed), resilient.WithTimeout(timeout),
		resilient.WithBreaker(threshold, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g0 := runtime.NumGoroutine()
	defer func() { // the stuck calls answer and end
		close(d.hold)
		for i := 0; runtime.NumGoroutine() > g0 && i < 1000; i++ {
			time.Sleep(time.Millisecond)
		}
	}()
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1_000_000, Period: time.Hour})
	start := time.Now()
	var opened atomic.Int64 // ns after start
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			reqs := []store.Request{{Key: "c-global", Limit: l, Cost: 1}, {Key: fmt.Sprintf("b-user%d", w), Limit: l, Cost: 1}}
			out := make([]algo.Decision, 2)
			for time.Since(start) < run || opened.Load() == 0 && time.Since(start) < patience {
				if _, err := s.Take(context.Background(), reqs, out); err != nil {
					t.Errorf("Take: %v", err)
					return
				}
				if s.Breakers()[1] == resilient.Open {
					opened.CompareAndSwap(0, int64(time.Since(start)))
					time.Sleep(time.Millisecond) // answered by the policy: no need to spin
				}
			}
		})
	}
	wg.Wait()
	calls, stuck := d.calls.Load(), runtime.NumGoroutine()-g0
	t.Logf("%d callers for %v: b's breaker open after %v, %d store calls, %d goroutines left",
		callers, run, time.Duration(opened.Load()), calls, stuck)
	if opened.Load() == 0 {
		t.Fatalf("b's breaker never opened in %v of calls to a store that does not answer (%d calls); breakers %v", patience, calls, s.Breakers())
	}
	// Once b's breaker is open no call reaches the store: the calls are
	// those made before, one per caller and timeout.
	if bound := int64(callers + 10*threshold); calls > bound {
		t.Errorf("%d store calls, want at most %d (the callers' first and 10 × the breaker's threshold)", calls, bound)
	}
	if bound := callers + 10*threshold; stuck > bound {
		t.Errorf("%d goroutines left, want at most %d", stuck, bound)
	}
}

// TestLateGraceCountsUnanswered: a call over several partitions that the
// store never answers is counted as failed on each of them a late grace
// (another timeout, at least 100 ms) after its deadline, not 10 s later:
// three such calls, one at a time, open b's breaker within a second (and
// c's: the store cannot say which node held them).
func TestLateGraceCountsUnanswered(t *testing.T) {
	c := newClock()
	d := &deaf{hold: make(chan struct{})}
	defer close(d.hold)
	d.partitioned.Store = memStore(t, c)
	s, err := resilient.New(d, resilient.WithPolicy(resilient.FailClosed), resilient.WithClock(c.Now),
		resilient.WithBreaker(3, time.Second), resilient.WithTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
	for i := range 3 {
		if allowed, fallback := takeAll(t, s, l, "c-global", "b-user"); allowed || !fallback {
			t.Fatalf("request %d over deaf b: allowed %v fallback %v, want the closed policy's refusal", i, allowed, fallback)
		}
	}
	start := time.Now()
	for s.Breakers()[1] != resilient.Open {
		if time.Since(start) > time.Second {
			t.Fatalf("breakers %v 1 s after 3 calls the store never answered, want b open", s.Breakers())
		}
		time.Sleep(time.Millisecond) // the late grace's timers count on their goroutines
	}
	t.Logf("b's breaker open %v after the third call", time.Since(start))
	if got := s.Breakers(); got[2] != resilient.Open {
		t.Errorf("breakers %v, want c open too (the store did not say which node held the calls)", got)
	}
}

// TestLateAnswerReleasesCall: a call handed off at its deadline whose
// store answers a little later is released then (its copy of the
// requests, and so their limits, can be collected), not when the late
// grace, or 10 s, has passed: the answer stops the grace's timer, which
// held the call. Asserted as reachability, counted in GCs rather than
// timed: once the answer is counted and its goroutine has ended, the
// limit is collected by one of the next 20 GCs started before the grace's
// timer could have fired. A run on a machine too loaded to do all that
// in time tells nothing either way and is run again, up to 5 times.
func TestLateAnswerReleasesCall(t *testing.T) {
	const attempts = 5
	for i := 1; ; i++ {
		if lateAnswerReleases(t) {
			return
		}
		if i == attempts {
			t.Fatalf("%d runs too loaded to tell: in none were the store's late answer counted, its goroutine ended and 20 GCs started before the late grace could run out", attempts)
		}
	}
}

// lateAnswerReleases runs TestLateAnswerReleasesCall's call once. It
// returns true when a GC started after the store's late answer was counted
// (and its goroutine ended), and before the grace's timer could have fired,
// collected the call's limit; it fails t when 20 such GCs did not, and
// returns false when the grace ran out first.
func lateAnswerReleases(t *testing.T) bool {
	t.Helper()
	const (
		timeout = 500 * time.Millisecond // and so the late grace
		gcs     = 20
	)
	c := newClock()
	d := &deaf{late: 10 * time.Millisecond, answers: make(chan struct{}, 1)}
	d.partitioned.Store = memStore(t, c)
	counted := make(chan error, 2) // b's and c's breakers trip on the answer's count
	s, err := resilient.New(d, resilient.WithPolicy(resilient.FailClosed), resilient.WithTimeout(timeout),
		resilient.WithBreaker(1, time.Minute), resilient.WithHooks(resilient.Hooks{Tripped: func(err *resilient.CircuitOpenError) {
			select {
			case counted <- err:
			default:
			}
		}}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g0 := runtime.NumGoroutine()
	var limit weak.Pointer[algo.Limit]
	graceOver := time.Now().Add(2 * timeout) // at the earliest: the timer starts at the deadline
	func() {
		l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 1000, Period: time.Hour})
		limit = weak.Make(l)
		if allowed, fallback := takeAll(t, s, l, "c-global", "b-user"); allowed || !fallback {
			t.Fatalf("take over late b: allowed %v fallback %v, want the closed policy's refusal", allowed, fallback)
		}
	}()
	select {
	case err := <-counted: // the grace's timer is stopped before the count
		switch {
		case strings.Contains(err.Error(), "test: node b"):
		case time.Now().After(graceOver):
			t.Logf("the late grace ran out before the store's late answer was counted: run again")
			return false
		default:
			t.Fatalf("breaker tripped on %v within the late grace, want on the store's late answer (test: node b)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the store's late answer was not counted in 10 s")
	}
	for i := 0; runtime.NumGoroutine() > g0; i++ { // the call's goroutine ends
		if i == 10_000 {
			t.Fatalf("%d goroutines 10 s after the store's late answer, want %d as before the call", runtime.NumGoroutine(), g0)
		}
		time.Sleep(time.Millisecond)
	}
	answered := time.Now()
	for i := range gcs {
		if !time.Now().Before(graceOver) {
			t.Logf("%d GCs in the %v between the store's late answer and the end of the late grace: run again", i, graceOver.Sub(answered))
			return false
		}
		runtime.GC()
		if limit.Value() == nil {
			t.Logf("released: GC %d, started %v after the late answer's goroutine ended, collected the call's limit", i+1, time.Since(answered))
			return true
		}
		time.Sleep(time.Millisecond) // the timer's P drops the stopped timer when it next schedules
	}
	if jobRunning() { // another test's goroutine ended in its place: ours may hold the call still
		t.Logf("a store call's goroutine still runs after %d GCs: run again", gcs)
		return false
	}
	t.Fatalf("the call is still held after the store's late answer: %d GCs in the %v after its goroutine ended, before the late grace of %v could run out, found its limit reachable", gcs, time.Since(answered), timeout)
	return false
}

// jobRunning reports whether a goroutine runs a store call of a Store.
func jobRunning() bool {
	buf := make([]byte, 1<<20)
	return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("resilient.(*job).start"))
}
