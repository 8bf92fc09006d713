package memcached_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// flipCtx is a context whose deadline passes at its (after+1)th Err call:
// the deadline falling at a chosen point of a call, between two of its
// steps (the store looks at Err before each), without a clock.
type flipCtx struct {
	context.Context
	after int64
	calls atomic.Int64
}

func flipAfter(parent context.Context, after int64) *flipCtx {
	return &flipCtx{Context: parent, after: after}
}

func (c *flipCtx) Err() error {
	if c.calls.Add(1) > c.after {
		return context.DeadlineExceeded
	}
	return c.Context.Err()
}

// deadlineKey is a key of the deadline tests with its limit.
type deadlineKey struct {
	name string
	l    *algo.Limit
}

// deadlineLimits are window limits (refunded with decr, one step) and
// compare-and-swap ones (read, then cas: two steps), over an hour on a
// clock that does not move: nothing refills.
func deadlineLimits(t *testing.T) (windows, cas []*algo.Limit) {
	windows = []*algo.Limit{
		compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour}),
		compile(t, algo.Params{Algorithm: algo.SlidingWindow, Limit: 10, Period: time.Hour, SubWindows: 4}),
	}
	cas = []*algo.Limit{
		compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Hour, Burst: 10}),
		compile(t, algo.Params{Algorithm: algo.SlidingLog, Limit: 10, Period: time.Hour}),
	}
	return windows, cas
}

// refundUnder takes 2 units of each key, refunds 1 of each in one Refund
// under rc, and returns the Refund's error and the keys refunded (9
// remaining) and not (8); any other count fails the test.
func refundUnder(t *testing.T, s *memcached.Store, rc context.Context, keys []deadlineKey) (err error, refunded, not []string) {
	t.Helper()
	c := ctx(t)
	reqs := make([]store.Request, len(keys))
	for i, k := range keys {
		reqs[i] = store.Request{Key: k.name, Limit: k.l, Cost: 2}
	}
	out := make([]algo.Decision, len(reqs))
	res, err := s.Take(c, reqs, out)
	if err != nil || !res.Allowed {
		t.Fatalf("Take: %+v, %v", res, err)
	}
	for i := range reqs {
		reqs[i].Cost, reqs[i].At = 1, res.At
	}
	err = s.Refund(rc, reqs)
	for i := range reqs {
		reqs[i].Cost = 0
	}
	if perr := s.Peek(c, reqs, out); perr != nil {
		t.Fatal(perr)
	}
	for i, d := range out {
		switch d.Remaining {
		case 9:
			refunded = append(refunded, keys[i].name)
		case 8:
			not = append(not, keys[i].name)
		default:
			t.Errorf("%s: %d remaining after taking 2 of 10 and refunding 1, want 9 (refunded once) or 8 (not refunded)", keys[i].name, d.Remaining)
		}
	}
	return err, refunded, not
}

var moreAlike = regexp.MustCompile(`\(and (\d+) more keys? alike\)`)

// checkNamesNotRefunded checks that err names exactly the keys in not:
// nil when every key was refunded; otherwise a deadline error quoting
// none of the refunded keys, and as many of the others, counted with
// joinKeyErrors' "(and N more keys alike)", as were not refunded; over
// several servers, a *store.PartitionError failing exactly their servers.
func checkNamesNotRefunded(t *testing.T, s *memcached.Store, err error, refunded, not []string) {
	t.Helper()
	if len(not) == 0 {
		if err != nil {
			t.Errorf("every key was refunded, yet Refund returned %v", err)
		}
		return
	}
	if err == nil {
		t.Errorf("%d keys not refunded (%q), yet Refund returned nil", len(not), not)
		return
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Refund: %v, want context.DeadlineExceeded", err)
	}
	msg := err.Error()
	for _, k := range refunded {
		if strings.Contains(msg, strconv.Quote(k)) {
			t.Errorf("Refund's error names %q, which was refunded: %v", k, err)
		}
	}
	named := 0
	for _, k := range not {
		if strings.Contains(msg, strconv.Quote(k)) {
			named++
		}
	}
	for _, m := range moreAlike.FindAllStringSubmatch(msg, -1) {
		n, _ := strconv.Atoi(m[1])
		named += n
	}
	if named != len(not) {
		t.Errorf("Refund's error names %d keys, want the %d not refunded %q: %v", named, len(not), not, err)
	}
	var parts, bad []int
	for _, k := range slices.Concat(refunded, not) {
		parts = append(parts, s.Partition(k))
	}
	for _, k := range not {
		bad = append(bad, s.Partition(k))
	}
	slices.Sort(parts)
	slices.Sort(bad)
	parts, bad = slices.Compact(parts), slices.Compact(bad)
	var pe *store.PartitionError
	switch {
	case len(parts) > 1 && !errors.As(err, &pe):
		t.Errorf("Refund over servers %v: %v, want a *store.PartitionError failing %v", parts, err, bad)
	case len(parts) > 1 && (!slices.Equal(pe.Failed, bad) || len(pe.Skipped) > 0):
		t.Errorf("Refund's PartitionError fails %v (skips %v), want %v (the servers of the keys not refunded)", pe.Failed, pe.Skipped, bad)
	}
}

// TestRefundBatchDeadline: on one server, a batched Refund looks at its
// context before each step that has commands to send (Refund first, then
// the decrements and the states' reads, then the states' cas), never
// after the last: a refund that landed returns nil whenever the deadline
// passes after it, where it used to return context.DeadlineExceeded for
// the whole batch. A deadline midway fails, and names, exactly the keys
// whose commands were not sent, their counts unchanged; the others are
// refunded once.
func TestRefundBatchDeadline(t *testing.T) {
	s := open(t, newClock(t0))
	windows, cas := deadlineLimits(t)
	for _, tc := range []struct {
		name        string
		cas         bool // compare-and-swap keys too
		after       int64
		wantWindows bool // window keys refunded
		wantCAS     bool
	}{
		{"windows/deadline before the decrements", false, 1, false, false},
		{"windows/deadline after the decrements", false, 2, true, false},
		{"windows/no deadline", false, 100, true, false},
		{"mixed/deadline before the first step", true, 1, false, false},
		{"mixed/deadline before the cas", true, 2, true, false},
		{"mixed/deadline after the cas", true, 3, true, true},
		{"mixed/no deadline", true, 100, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var keys []deadlineKey
			var want, wantNot []string
			add := func(ls []*algo.Limit, refunded bool) {
				for j, l := range ls {
					k := deadlineKey{uniqueKey(t, l.Algorithm().String()+itoa(j)), l}
					keys = append(keys, k)
					if refunded {
						want = append(want, k.name)
					} else {
						wantNot = append(wantNot, k.name)
					}
				}
			}
			add(windows, tc.wantWindows)
			if tc.cas {
				add(cas, tc.wantCAS)
			}
			err, refunded, not := refundUnder(t, s, flipAfter(ctx(t), tc.after), keys)
			if !slices.Equal(refunded, want) || !slices.Equal(not, wantNot) {
				t.Errorf("refunded %q, not %q; want refunded %q, not %q", refunded, not, want, wantNot)
			}
			checkNamesNotRefunded(t, s, err, refunded, not)
		})
	}
}

// TestRefundBatchDeadlineTwoServers: over two servers, whose loops look
// at the context concurrently, a deadline at any point of a batched
// Refund leaves every key refunded once or not at all, and the error
// (a *store.PartitionError) names exactly those not refunded and fails
// their servers only; with every key refunded, it is nil. Five Err calls
// are enough for the whole refund (Refund's, then two steps per server).
func TestRefundBatchDeadlineTwoServers(t *testing.T) {
	s := openURL(t, twoServers(t), newClock(t0))
	windows, cas := deadlineLimits(t)
	for after := int64(1); after <= 6; after++ {
		t.Run("after"+itoa(int(after)), func(t *testing.T) {
			var keys []deadlineKey
			for _, l := range slices.Concat(windows, cas) {
				for j := range 3 {
					keys = append(keys, deadlineKey{uniqueKey(t, l.Algorithm().String()+itoa(j)), l})
				}
			}
			err, refunded, not := refundUnder(t, s, flipAfter(ctx(t), after), keys)
			t.Logf("%d keys refunded, %d not", len(refunded), len(not))
			switch {
			case after == 1 && len(refunded) > 0:
				t.Errorf("deadline before any step: %q refunded", refunded)
			case after >= 5 && len(not) > 0:
				t.Errorf("deadline after every step: %q not refunded", not)
			}
			checkNamesNotRefunded(t, s, err, refunded, not)
		})
	}
}

// TestTakeBatchDeadlineAfterLastStep: a multi-key Take looks at its
// context before each step that has commands to send, never after the
// last: a Take whose steps are done is admitted and charged once however
// soon after them the deadline passes, where it used to be rolled back
// and fail with context.DeadlineExceeded. A deadline before a step still
// fails it, with nothing left charged.
func TestTakeBatchDeadlineAfterLastStep(t *testing.T) {
	s := open(t, newClock(t0))
	windows, cas := deadlineLimits(t)
	for _, tc := range []struct {
		name   string
		limits []*algo.Limit
		after  int64
		admit  bool
	}{
		{"windows/deadline before the charge", windows, 0, false},
		{"windows/deadline after the charge", windows, 1, true},
		{"mixed/deadline before the charge", []*algo.Limit{windows[0], cas[0]}, 0, false},
		{"mixed/deadline before the cas", []*algo.Limit{windows[0], cas[0]}, 1, false},
		{"mixed/deadline after the cas", []*algo.Limit{windows[0], cas[0]}, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reqs := make([]store.Request, len(tc.limits))
			for i, l := range tc.limits {
				reqs[i] = store.Request{Key: uniqueKey(t, l.Algorithm().String()), Limit: l, Cost: 1}
			}
			out := make([]algo.Decision, len(reqs))
			res, err := s.Take(flipAfter(ctx(t), tc.after), reqs, out)
			if tc.admit {
				if err != nil || !res.Allowed {
					t.Errorf("Take with the deadline after its last step: %+v, %v; want admitted", res, err)
				}
			} else if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Take with the deadline before a step: %+v, %v; want context.DeadlineExceeded", res, err)
			}
			for i := range reqs {
				reqs[i].Cost = 0
			}
			if err := s.Peek(ctx(t), reqs, out); err != nil {
				t.Fatal(err)
			}
			want := int64(10)
			if tc.admit {
				want = 9
			}
			for i, d := range out {
				if d.Remaining != want {
					t.Errorf("%s: %d remaining, want %d", reqs[i].Key, d.Remaining, want)
				}
			}
		})
	}
}

// TestTakeBatchRefusedDeadlineAfterLastStep: a multi-key Take refused at
// its charge step, rolled back, is a refusal whatever its deadline does
// after that step: the look at each request alone that reports the
// decisions does not fail it with the deadline (the store's own round-trip
// timeout bounds that read, as it bounds the roll-back). Before, it
// returned context.DeadlineExceeded for a Take already decided.
func TestTakeBatchRefusedDeadlineAfterLastStep(t *testing.T) {
	s := open(t, newClock(t0))
	windows, _ := deadlineLimits(t)
	full := store.Request{Key: uniqueKey(t, "full"), Limit: windows[0], Cost: 10}
	out := make([]algo.Decision, 2)
	if res, err := s.Take(ctx(t), []store.Request{full}, out[:1]); err != nil || !res.Allowed {
		t.Fatalf("spending %s: %+v %v", full.Key, res, err)
	}
	full.Cost = 1
	fresh := store.Request{Key: uniqueKey(t, "fresh"), Limit: windows[1], Cost: 1}
	reqs := []store.Request{full, fresh}
	res, err := s.Take(flipAfter(ctx(t), 1), reqs, out) // the deadline passes after the charge step
	if err != nil || res.Allowed || out[0].Allowed {
		t.Fatalf("Take refused at its charge step, deadline after it: %+v %+v, %v; want refused by %s, no error", res, out, err, full.Key)
	}
	for i := range reqs {
		reqs[i].Cost = 0
	}
	if err := s.Peek(ctx(t), reqs, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Remaining != 0 || out[1].Remaining != 10 {
		t.Errorf("after the refusal: %d and %d remaining, want 0 and 10 (nothing charged)", out[0].Remaining, out[1].Remaining)
	}
}

// endCtx is a context whose deadline passes when the test says so.
type endCtx struct {
	context.Context
	ended atomic.Bool
}

func (c *endCtx) Err() error {
	if c.ended.Load() {
		return context.DeadlineExceeded
	}
	return c.Context.Err()
}

// TestTakeBatchDeadlinePlaced: a multi-key Take over two servers whose
// deadline passes while one server (behind a proxy that holds its
// replies) has yet to answer its first step, the other having done its
// whole part, fails with an error placed on the slow server alone
// (*store.PartitionError, Failed its partition, its address in the
// text), and the fast server's charge is rolled back. Before, the error
// was the bare context.DeadlineExceeded, and store/resilient counted it
// against every server of the call.
func TestTakeBatchDeadlinePlaced(t *testing.T) {
	proxy := newFaultProxy(t, addr)
	s, err := memcached.Open("memcached://"+addr+","+proxy.Addr(), memcached.WithClock(newClock(t0).Now), memcached.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	windows, cas := deadlineLimits(t)
	var fast, slow string // a window key on addr, a compare-and-swap one behind the proxy
	for i := 0; fast == "" || slow == ""; i++ {
		k := uniqueKey(t, "k"+itoa(i))
		switch {
		case s.ServerFor(k) == addr && fast == "":
			fast = k
		case s.ServerFor(k) == proxy.Addr() && slow == "":
			slow = k
		}
	}
	reqs := []store.Request{{Key: fast, Limit: windows[0], Cost: 1}, {Key: slow, Limit: cas[0], Cost: 1}}
	c := &endCtx{Context: ctx(t)}
	proxy.stall.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := s.Take(c, reqs, make([]algo.Decision, 2))
		done <- err
	}()
	// Wait (at most 10 s) until the fast server's charge is in, then end
	// the deadline and let the slow server answer its first step.
	peek := []store.Request{{Key: fast, Limit: windows[0]}}
	out := make([]algo.Decision, 1)
	for i := 0; ; i++ {
		if err := s.Peek(ctx(t), peek, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Remaining == 9 {
			break
		}
		if i == 1000 {
			proxy.stall.Store(false)
			t.Fatalf("the fast server's charge never showed: %+v", out[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.ended.Store(true)
	proxy.stall.Store(false)
	err = <-done
	var pe *store.PartitionError
	if !errors.As(err, &pe) {
		t.Fatalf("Take cut by its deadline: %v (%T), want a *store.PartitionError", err, err)
	}
	if want := []int{s.Partition(slow)}; !slices.Equal(pe.Failed, want) || pe.Skipped != nil {
		t.Errorf("failed %v, skipped %v; want failed %v (the slow server), none skipped", pe.Failed, pe.Skipped, want)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), proxy.Addr()) {
		t.Errorf("error %q: want context.DeadlineExceeded naming server %s", err, proxy.Addr())
	}
	if err := s.Peek(ctx(t), peek, out); err != nil || out[0].Remaining != 10 {
		t.Errorf("Peek(%s) after the Take = %+v, %v; want its charge rolled back (10 remaining)", fast, out[0], err)
	}
}
