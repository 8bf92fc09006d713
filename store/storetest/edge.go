package storetest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// maxTimeUS is the latest instant the algorithms work with (2^53-1 µs):
// the largest Period and Retain algo.Compile accepts.
const maxTimeUS = 1<<53 - 1

// edgeLimits returns, for algorithm k, the limits at the edges of what
// algo.Compile accepts: the smallest and largest Limit, the shortest and
// longest Period, calendar windows, bursts unset and set, and each
// algorithm's own parameters at their bounds.
func edgeLimits(k algo.Kind) []algo.Params {
	const maxPeriod = time.Duration(maxTimeUS) * time.Microsecond
	ps := []algo.Params{
		kindParams(k, 5, time.Hour),
		kindParams(k, 1, time.Second),
		kindParams(k, 7, 36*time.Hour),
	}
	// The Smooth algorithms take at most one permit per µs.
	if k == algo.SmoothBursty || k == algo.SmoothWarmup {
		ps = append(ps, kindParams(k, 1, time.Microsecond))
	} else {
		ps = append(ps, kindParams(k, 3, time.Microsecond))
	}
	switch k {
	case algo.FixedWindow:
		ps = append(ps,
			algo.Params{Algorithm: k, Limit: 1e12, Period: time.Second},
			algo.Params{Algorithm: k, Limit: 1<<53 - 1, Period: maxPeriod},
			algo.Params{Algorithm: k, Limit: 10, Calendar: algo.CalendarMonth},
			algo.Params{Algorithm: k, Limit: 1e12, Calendar: algo.CalendarYear},
		)
	case algo.SlidingLog:
		ps = append(ps,
			algo.Params{Algorithm: k, Limit: 1 << 20, Period: time.Hour},
			algo.Params{Algorithm: k, Limit: 4, Period: maxPeriod},
		)
	case algo.SlidingWindow:
		ps = append(ps,
			algo.Params{Algorithm: k, Limit: 1e12, Period: time.Hour, SubWindows: 3600},
			// The longest period algo accepts for a sliding window: half
			// maxPeriod, since its ResetAfter runs to the end of the next
			// sub-window, up to 2 periods, which must stay below 2^53 µs.
			algo.Params{Algorithm: k, Limit: 1<<53 - 1, Period: maxPeriod / 2},
		)
	case algo.TokenBucket:
		zero := int64(0)
		ps = append(ps,
			algo.Params{Algorithm: k, Limit: 1e12, Period: time.Microsecond},
			algo.Params{Algorithm: k, Limit: 1<<53 - 1, Period: time.Microsecond},
			algo.Params{Algorithm: k, Limit: 1e12, Period: 36 * time.Hour, Burst: 1},
			algo.Params{Algorithm: k, Limit: 10, Period: time.Second, InitialTokens: &zero, Retain: time.Microsecond},
			algo.Params{Algorithm: k, Limit: 1, Period: maxPeriod, Burst: 1},
		)
	case algo.GCRA:
		ps = append(ps,
			algo.Params{Algorithm: k, Limit: 1<<53 - 1, Period: time.Microsecond},
			algo.Params{Algorithm: k, Limit: 1e12, Period: 36 * time.Hour, Burst: 1},
			algo.Params{Algorithm: k, Limit: 1, Period: maxPeriod},
		)
	case algo.Shaper:
		ps = append(ps,
			algo.Params{Algorithm: k, Limit: 1e12, Period: time.Second},
			algo.Params{Algorithm: k, Limit: 1e12, Period: time.Second, Burst: 1e9, Delay: 1e9},
			algo.Params{Algorithm: k, Limit: 1, Period: maxPeriod},
		)
	case algo.SmoothBursty:
		ps = append(ps,
			algo.Params{Algorithm: k, Limit: 1e6, Period: time.Second, MaxBurstSeconds: 1e-6},
			algo.Params{Algorithm: k, Limit: 1e6, Period: time.Second, MaxBurstSeconds: 1e9},
			algo.Params{Algorithm: k, Limit: 1, Period: 36 * time.Hour, MaxBurstSeconds: 1e6, MaxWait: maxPeriod},
		)
	case algo.SmoothWarmup:
		ps = append(ps,
			algo.Params{Algorithm: k, Limit: 1e6, Period: time.Second, WarmupPeriod: time.Microsecond, ColdFactor: 1},
			algo.Params{Algorithm: k, Limit: 1, Period: 36 * time.Hour, WarmupPeriod: 36 * time.Hour, ColdFactor: 1e6, MaxWait: time.Hour},
		)
	case algo.Concurrency:
		ps = append(ps,
			algo.Params{Algorithm: k, Limit: 1 << 20},
			algo.Params{Algorithm: k, Limit: 2, LeaseTTL: time.Microsecond},
			algo.Params{Algorithm: k, Limit: 2, LeaseTTL: maxPeriod},
		)
	}
	return ps
}

// edgeCosts returns the costs the edge test puts to l: nothing, one unit,
// the capacity and one more, the largest cost that can pass and one more,
// and costs at the edges of exact doubles and of int64.
func edgeCosts(l *algo.Limit) []int64 {
	var cs []int64
	for _, c := range []int64{0, 1, l.Capacity(), l.Capacity() + 1, l.MaxCost(), l.MaxCost() + 1,
		1<<53 - 1, 1 << 53, 1<<53 + 1, 1 << 62, math.MaxInt64} {
		if c >= 0 && !slices.Contains(cs, c) && !perUnitOverBudget(l, c) {
			cs = append(cs, c)
		}
	}
	return cs
}

// perUnitBudget is the largest cost the edge test has a per-unit state
// (sliding_log, concurrency: one entry per unit held) admit. Larger ones
// are out of what the shared stores take in one call, as docs/STORES.md
// says: Redis writes one sorted-set member per unit (a million units hold
// it for seconds, past the store's timeout), a memcached item holds some
// 100 000 units (its -I) and is refused beyond.
const perUnitBudget = 1 << 16

// perUnitOverBudget reports whether a cost c on l would be admitted into
// a per-unit state larger than perUnitBudget; a cost above l's MaxCost is
// refused without writing and is tested.
func perUnitOverBudget(l *algo.Limit, c int64) bool {
	switch l.Algorithm() {
	case algo.SlidingLog, algo.Concurrency:
		return c > perUnitBudget && c <= l.MaxCost()
	}
	return false
}

// edgeRun puts the same calls to a store and to the reference and
// requires the same decisions. A store may not refuse what the reference
// decides: an error, even one wrapping store.ErrBadRequest, is a
// disagreement.
type edgeRun struct {
	t     *testing.T
	st    store.Store
	ref   *Reference
	clock *Clock
}

// call runs f, turning a panic into an error.
func (e *edgeRun) call(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return f()
}

// failed reports whether err ends the case, failing the test.
func (e *edgeRun) failed(what string, err error) bool {
	e.t.Helper()
	if err == nil {
		return false
	}
	switch {
	case errors.Is(err, store.ErrBadRequest):
		e.t.Errorf("%s: the store refused what the reference decides: %v", what, err)
	default:
		e.t.Errorf("%s: %v", what, err)
	}
	return true
}

// take puts reqs to Take on both and compares; ok is false when the
// case must stop.
func (e *edgeRun) take(what string, reqs []store.Request) (res store.Result, ok bool) {
	e.t.Helper()
	out := make([]algo.Decision, len(reqs))
	err := e.call(func() (err error) {
		res, err = e.st.Take(e.t.Context(), reqs, out)
		return err
	})
	if e.failed("Take "+what, err) {
		return res, false
	}
	wantOK, want := e.ref.Take(reqs, e.clock.micros())
	if res.Allowed != wantOK {
		e.t.Errorf("Take %s: Result.Allowed = %v, reference %v", what, res.Allowed, wantOK)
	}
	for i := range out {
		if out[i] != want[i] {
			e.t.Errorf("Take %s: decision %d = %s, reference %s", what, i, formatDecision(out[i]), formatDecision(want[i]))
		}
	}
	return res, true
}

// peek puts q to Peek on both and compares.
func (e *edgeRun) peek(what string, q store.Request) bool {
	e.t.Helper()
	out := make([]algo.Decision, 1)
	err := e.call(func() error { return e.st.Peek(e.t.Context(), []store.Request{q}, out) })
	if e.failed("Peek "+what, err) {
		return false
	}
	if want := e.ref.Peek(q, e.clock.micros()); out[0] != want {
		e.t.Errorf("Peek %s: %s, reference %s", what, formatDecision(out[0]), formatDecision(want))
	}
	return true
}

// giveBack puts q to Release (Concurrency) or Refund on both.
func (e *edgeRun) giveBack(what string, q store.Request) bool {
	e.t.Helper()
	now := e.clock.micros()
	var err error
	if q.Limit.Algorithm() == algo.Concurrency {
		err = e.call(func() error { return e.st.Release(e.t.Context(), []store.Request{q}) })
		e.ref.Release(q, now)
	} else {
		err = e.call(func() error { return e.st.Refund(e.t.Context(), []store.Request{q}) })
		e.ref.Refund(q, now)
	}
	return !e.failed("give back "+what, err)
}

// testEdges puts edge inputs to the store and to the reference, for every
// algorithm the store supports: costs from 0 to math.MaxInt64, limits at
// the bounds algo.Compile accepts, keys a store might mangle (long, with
// spaces, control bytes, invalid UTF-8, their own Redis hash tags, or
// that an escaping could make collide), the same key many times at one
// instant and twice in one Take, refunds dated far in the past or future.
// The store must decide as the reference does.
func testEdges(t *testing.T, h *Harness) {
	forKinds(t, h, algo.Kinds(), func(t *testing.T, k algo.Kind) {
		for _, p := range edgeLimits(k) {
			l := compile(t, p)
			t.Run(edgeName(l), func(t *testing.T) {
				clock := NewClock(Epoch)
				e := &edgeRun{t: t, st: h.open(t, clock.Now), ref: NewReference(), clock: clock}
				edgeCostCases(e, l)
				edgeSameInstant(e, l)
				edgeRefundTimes(e, l)
				edgeEndOfTime(e, l)
				edgeLeases(e, l)
			})
		}
		t.Run("keys", func(t *testing.T) {
			clock := NewClock(Epoch)
			e := &edgeRun{t: t, st: h.open(t, clock.Now), ref: NewReference(), clock: clock}
			edgeKeys(e, compile(t, kindParams(k, 5, time.Hour)))
		})
	})
}

// edgeName names a limit's subtest.
func edgeName(l *algo.Limit) string {
	p := l.Params()
	name := strings.NewReplacer(" ", "_", "/", "per").Replace(l.String())
	if p.Burst != 0 && p.Algorithm == algo.Shaper {
		name += fmt.Sprintf("_burst%d_delay%d", p.Burst, p.Delay)
	}
	if p.InitialTokens != nil {
		name += fmt.Sprintf("_initial%d_retain%v", *p.InitialTokens, p.Retain)
	}
	if p.MaxBurstSeconds != 0 || p.ColdFactor != 0 {
		name += fmt.Sprintf("_mbs%g_cold%g_warmup%v", p.MaxBurstSeconds, p.ColdFactor, p.WarmupPeriod)
	}
	return name
}

// edgeCostCases puts each edge cost to a fresh key: a Peek, a Take, the
// same Take again at the same instant, a Take of one, a give-back of the
// cost dated at the first Take, and a Take a second later.
func edgeCostCases(e *edgeRun, l *algo.Limit) {
	e.t.Helper()
	ns := namespace(e.t)
	for _, c := range edgeCosts(l) {
		q := store.Request{Key: fmt.Sprintf("%scost%d", ns, c), Limit: l, Cost: c, Lease: 1}
		look := store.Request{Key: q.Key, Limit: l, Lease: 1}
		one := store.Request{Key: q.Key, Limit: l, Cost: 1, Lease: 1}
		w := func(s string) string { return fmt.Sprintf("cost %d: %s", c, s) }
		if !e.peek(w("on a fresh key"), q) {
			continue
		}
		res, ok := e.take(w("on a fresh key"), []store.Request{q})
		if !ok || !e.peek(w("cost 0 after the take"), look) {
			continue
		}
		if _, ok := e.take(w("again at the same instant"), []store.Request{q}); !ok {
			continue
		}
		if _, ok := e.take(w("then cost 1"), []store.Request{one}); !ok {
			continue
		}
		back := q
		back.At = res.At
		if !e.giveBack(w("dated at the first take"), back) || !e.peek(w("after giving back"), q) {
			continue
		}
		e.clock.Advance(time.Second)
		e.take(w("a second later"), []store.Request{q})
		e.clock.Set(Epoch)
	}
}

// edgeSameInstant takes one unit capacity+3 times at one instant, then
// takes a key twice in one request.
func edgeSameInstant(e *edgeRun, l *algo.Limit) {
	e.t.Helper()
	ns := namespace(e.t)
	q := store.Request{Key: ns + "same", Limit: l, Cost: 1, Lease: 2}
	n := min(l.Capacity(), 20) + 3
	for i := int64(0); i < n; i++ {
		if _, ok := e.take(fmt.Sprintf("cost 1, %d of %d at one instant", i+1, n), []store.Request{q}); !ok {
			return
		}
	}
	twice := store.Request{Key: ns + "twice", Limit: l, Cost: 1, Lease: 3}
	if _, ok := e.take("a key twice in one Take, cost 1 each", []store.Request{twice, twice}); !ok {
		return
	}
	full := twice
	full.Cost = l.Capacity()
	e.take("a key twice in one Take, cost 1 then its capacity", []store.Request{twice, full})
	e.peek("cost 0 after the Takes of a key twice", store.Request{Key: twice.Key, Limit: l})
}

// edgeRefundTimes gives back units with At at the edges: before the
// epoch, just after it, long before the Take, long after now, at the end
// of the algorithms' time and at math.MaxInt64.
func edgeRefundTimes(e *edgeRun, l *algo.Limit) {
	e.t.Helper()
	ns := namespace(e.t)
	now := e.clock.micros()
	for _, at := range []int64{-1, 1, now - int64(24*time.Hour/time.Microsecond), now + int64(10*365*24*time.Hour/time.Microsecond), maxTimeUS, math.MaxInt64} {
		q := store.Request{Key: fmt.Sprintf("%srefund-at%d", ns, at), Limit: l, Cost: min(2, l.Capacity()), Lease: 4}
		if _, ok := e.take(fmt.Sprintf("cost %d before a give-back at %d", q.Cost, at), []store.Request{q}); !ok {
			continue
		}
		back := q
		back.At = at
		if !e.giveBack(fmt.Sprintf("cost %d at %d", q.Cost, at), back) {
			continue
		}
		e.peek(fmt.Sprintf("after a give-back at %d", at), store.Request{Key: q.Key, Limit: l, Cost: 1})
	}
	never := store.Request{Key: ns + "never-seen", Limit: l, Cost: 1, Lease: 5}
	e.peek("of a never-seen key", never)
	e.giveBack("to a never-seen key", never)
	e.peek("of a never-seen key after a give-back", never)
}

// edgeEndOfTime decides on a clock at the end of the algorithms' time
// (2^53-1 µs, in 2255), where every sum of an instant and a period must
// stay exact in a double. (A clock past it is not tested: the algorithms
// read it as that instant, but Reference and the memory store compare a
// state's ExpiresAt with the clock as it is, and memcached names its
// window counters after it.)
func edgeEndOfTime(e *edgeRun, l *algo.Limit) {
	e.t.Helper()
	ns := namespace(e.t)
	defer e.clock.Set(Epoch)
	q := store.Request{Key: ns + "end-of-time", Limit: l, Cost: 1, Lease: 6}
	for _, at := range []time.Time{time.UnixMicro(maxTimeUS - 2), time.UnixMicro(maxTimeUS - 1), time.UnixMicro(maxTimeUS)} {
		e.clock.Set(at)
		what := fmt.Sprintf("at %v", at)
		if !e.peek(what, q) {
			return
		}
		if _, ok := e.take(what, []store.Request{q}); !ok {
			return
		}
		if !e.peek(what+" after a take", store.Request{Key: q.Key, Limit: l}) {
			return
		}
	}
}

// edgeLeases takes, renews and releases Concurrency leases whose ids are
// at the edges of uint64 and of exact doubles: ids that differ only past
// 2^53 must stay apart (a Lua number would merge them).
func edgeLeases(e *edgeRun, l *algo.Limit) {
	e.t.Helper()
	if l.Algorithm() != algo.Concurrency || l.Capacity() < 2 {
		return
	}
	rn, renews := e.st.(store.Renewer)
	ns := namespace(e.t)
	for _, pair := range [][2]uint64{{1<<53 + 1, 1<<53 + 2}, {1 << 63, 1<<63 + 1}, {math.MaxUint64, math.MaxUint64 - 1}} {
		key := fmt.Sprintf("%slease%d", ns, pair[0])
		a := store.Request{Key: key, Limit: l, Cost: 1, Lease: pair[0]}
		b := store.Request{Key: key, Limit: l, Cost: 1, Lease: pair[1]}
		if _, ok := e.take(fmt.Sprintf("lease %d", a.Lease), []store.Request{a}); !ok {
			continue
		}
		if _, ok := e.take(fmt.Sprintf("lease %d", b.Lease), []store.Request{b}); !ok {
			continue
		}
		e.clock.Advance(time.Microsecond)
		if renews {
			now := e.clock.micros()
			err := e.call(func() error { return rn.Renew(e.t.Context(), []store.Request{a}) })
			e.ref.Renew(a, now)
			if e.failed(fmt.Sprintf("Renew lease %d", a.Lease), err) {
				continue
			}
		}
		if !e.giveBack(fmt.Sprintf("lease %d", b.Lease), b) {
			continue
		}
		e.peek(fmt.Sprintf("after releasing lease %d of %d and %d", b.Lease, a.Lease, b.Lease), store.Request{Key: key, Limit: l, Cost: 1})
		e.clock.Set(Epoch.Add(l.Window(0) - time.Microsecond))
		e.peek(fmt.Sprintf("lease %d renewed, 1µs before its first expiry", a.Lease), store.Request{Key: key, Limit: l, Cost: 1})
		e.clock.Set(Epoch)
	}
}

// edgeKeys charges keys a store might mangle or confuse, each by a
// different amount, then reads them all back, and takes them all in one
// call (across Redis Cluster slots: some carry their own hash tag).
func edgeKeys(e *edgeRun, l *algo.Limit) {
	e.t.Helper()
	ns := namespace(e.t)
	// A tag of the run's own, for keys that do not start with ns.
	own := "edge" + runID + strings.ReplaceAll(e.t.Name(), "/", ".")
	keys := []string{
		ns + "a b",
		ns + "a%20b",
		ns + "a%2520b",
		ns + "a\nb",
		ns + "a\r\nb",
		ns + "a\x00b",
		ns + "a",
		ns + "a\x00",
		ns + "\xff\xfe\x80",
		ns + "\u00e9t\u00e9",
		ns + "%H",
		ns + "a%%s",
		ns + "{inner}",
		ns + "}{",
		"{" + own + "}:tagged",
		"x{" + own + "}y",
		"{}" + own,
		"}" + own + "{",
		"{" + own,
		own + "\x7f\x01",
		own + " ",
		own + "\t",
		own + "\u2028",
		ns + strings.Repeat("y", max(1, 160-len(ns))),
		ns + strings.Repeat("y", max(1, 161-len(ns))),
		ns + strings.Repeat("y", max(1, 158-len(ns))) + " ",
		ns + strings.Repeat("y", max(1, 157-len(ns))) + " ",
		ns + strings.Repeat("x", 160),
		ns + strings.Repeat("x", 161),
		ns + strings.Repeat("x", 250),
		ns + strings.Repeat(" ", 60),
		ns + strings.Repeat("k", 1<<10),
		ns + strings.Repeat("k", 1<<10-1) + "l",
		ns + strings.Repeat("k", 64<<10),
		ns + strings.Repeat("\x00", 64<<10),
	}
	for i, key := range keys {
		q := store.Request{Key: key, Limit: l, Cost: 1, Lease: uint64(i + 1)}
		for j := 0; j <= i%3; j++ {
			if _, ok := e.take(fmt.Sprintf("key %d (%.40q), take %d", i, key, j+1), []store.Request{q}); !ok {
				break
			}
		}
	}
	for i, key := range keys {
		e.peek(fmt.Sprintf("key %d (%.40q)", i, key), store.Request{Key: key, Limit: l})
	}
	all := make([]store.Request, len(keys))
	for i, key := range keys {
		all[i] = store.Request{Key: key, Limit: l, Cost: 1, Lease: uint64(100 + i)}
	}
	e.take("of every key at once", all)
	for i, key := range keys {
		e.peek(fmt.Sprintf("key %d (%.40q) after the Take of every key", i, key), store.Request{Key: key, Limit: l})
	}
	if err := e.call(func() error { return e.st.Reset(e.t.Context(), keys...) }); err != nil {
		e.t.Errorf("Reset of every key: %v", err)
		return
	}
	for _, key := range keys {
		e.ref.Reset(key)
	}
	for i, key := range keys {
		e.peek(fmt.Sprintf("key %d (%.40q) after Reset", i, key), store.Request{Key: key, Limit: l})
	}
}
