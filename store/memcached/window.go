package memcached

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// The window algorithms keep plain decimal counters, one per window or
// sub-window, and charge with memcached's atomic incr: incr-then-check.
// The count incr returns includes this request's cost; the decision is the
// algo package's own, made on the state as it was before the increment; a
// refusal gives the cost back with decr. So a refused request never stays
// charged, and since the counter only ever over-states what is admitted
// (by refusals not yet given back), the window never admits more than the
// pure algorithm would: with unit costs, exactly as many.

// windowBounds returns the fixed window [start, end) holding now, as the
// algo package computes it (multiples of Period, or calendar months and
// years).
func windowBounds(l *algo.Limit, now int64) (start, end int64) {
	var st algo.State
	l.Peek(&st, now, 0) // a fresh state moves to the window holding now
	st.B = 1
	return st.A, l.ExpiresAt(&st)
}

// subWindow returns a sliding window's sub-window length (µs) and count.
func subWindow(l *algo.Limit) (sub int64, n int) {
	p := l.Params()
	n = max(p.SubWindows, 1)
	return int64(p.Period/time.Microsecond) / int64(n), n
}

// parseCount reads a counter; incr and decr may leave trailing spaces when
// a number shrinks in place.
func parseCount(v []byte) (int64, error) {
	n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("counter holds %q, not a count", v)
	}
	return n, nil
}

// incr adds cost to a counter, creating it with the expiration when it is
// missing, and returns the new count.
func (s *Store) incr(key string, cost int64, exp int32) (int64, error) {
	for range 4 {
		n, err := s.mc.Increment(key, uint64(cost))
		if err == nil {
			return int64(n), nil
		}
		if !errors.Is(err, memcache.ErrCacheMiss) {
			return 0, err
		}
		err = s.mc.Add(&memcache.Item{Key: key, Value: strconv.AppendInt(nil, cost, 10), Expiration: exp})
		if err == nil {
			return cost, nil
		}
		if !errors.Is(err, memcache.ErrNotStored) {
			return 0, err
		}
		// Another caller created it first: increment theirs.
	}
	return 0, fmt.Errorf("%w: counter %q kept vanishing between incr and add", store.ErrContention, key)
}

// decr takes cost back from a counter. A counter that expired meanwhile has
// nothing left to give back.
func (s *Store) decr(key string, cost int64) error {
	_, err := s.mc.Decrement(key, uint64(cost))
	if err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
		return err
	}
	return nil
}

// counts reads counters; a missing one is zero.
func (s *Store) counts(keys []string) ([]int64, error) {
	out := make([]int64, len(keys))
	if len(keys) == 1 {
		it, err := s.mc.Get(keys[0])
		if errors.Is(err, memcache.ErrCacheMiss) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out[0], err = parseCount(it.Value)
		return out, err
	}
	items, err := s.mc.GetMulti(keys)
	if err != nil {
		return nil, err
	}
	for i, k := range keys {
		if it, ok := items[k]; ok {
			if out[i], err = parseCount(it.Value); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func (s *Store) takeFixed(r *store.Request, now int64) (algo.Decision, error) {
	l, cost := r.Limit, r.Cost
	s.shapes.remember(l)
	if cost == 0 || cost > l.Capacity() {
		d, err := s.peekFixed(r, now) // nothing to charge
		return d, err
	}
	start, end := windowBounds(l, now)
	key := s.keys.fixed(r.Key, start)
	c, err := s.incr(key, cost, s.expiration(end, now))
	if err != nil {
		return algo.Decision{}, s.unavailableOr("take", r.Key, err)
	}
	s.stats.counterOps.Add(1)
	st := algo.State{A: start, B: max(c-cost, 0), C: now}
	d := l.Take(&st, now, cost)
	if d.Allowed {
		return d, nil
	}
	s.stats.rollbacks.Add(1)
	if err := s.decr(key, cost); err != nil {
		return d, s.unavailable("take (undo a refused increment)", r.Key, err)
	}
	return d, nil
}

func (s *Store) peekFixed(r *store.Request, now int64) (algo.Decision, error) {
	st, _, err := s.loadWindow(r.Key, r.Limit, now)
	if err != nil {
		return algo.Decision{}, err
	}
	return r.Limit.Peek(&st, now, r.Cost), nil
}

// slidingState lays out the counts of the sub-windows now/sub, now/sub-1,
// … (newest first) the way the algo package keeps them: A the latest time
// seen, the counts in a ring of N+1 slots indexed by sub-window number
// mod N+1, in B and C when N = 1.
func slidingState(n int, now, sub int64, counts []int64) algo.State {
	idx := now / sub
	st := algo.State{A: now}
	if n == 1 {
		for j, c := range counts {
			if floorMod(idx-int64(j), 2) == 0 {
				st.B = c
			} else {
				st.C = c
			}
		}
		return st
	}
	st.Ext = make([]int64, n+1)
	for j, c := range counts {
		st.Ext[floorMod(idx-int64(j), int64(n+1))] = c
	}
	return st
}

func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

func (s *Store) takeSliding(r *store.Request, now int64) (algo.Decision, error) {
	l, cost := r.Limit, r.Cost
	s.shapes.remember(l)
	if cost == 0 || cost > l.Capacity() {
		d, err := s.peekSliding(r, now)
		return d, err
	}
	sub, n := subWindow(l)
	idx := now / sub
	keys := s.keys.sliding(r.Key, sub, idx, n)
	c, err := s.incr(keys[0], cost, s.expiration((idx+int64(n)+1)*sub, now))
	if err != nil {
		return algo.Decision{}, s.unavailableOr("take", r.Key, err)
	}
	s.stats.counterOps.Add(1)
	counts, err := s.counts(keys[1:])
	if err != nil {
		// The older counters could not be read: give the increment back.
		if derr := s.decr(keys[0], cost); derr != nil {
			err = errors.Join(err, derr)
		}
		return algo.Decision{}, s.unavailable("take", r.Key, err)
	}
	st := slidingState(n, now, sub, append([]int64{max(c-cost, 0)}, counts...))
	d := l.Take(&st, now, cost)
	if d.Allowed {
		return d, nil
	}
	s.stats.rollbacks.Add(1)
	if err := s.decr(keys[0], cost); err != nil {
		return d, s.unavailable("take (undo a refused increment)", r.Key, err)
	}
	return d, nil
}

func (s *Store) peekSliding(r *store.Request, now int64) (algo.Decision, error) {
	st, _, err := s.loadWindow(r.Key, r.Limit, now)
	if err != nil {
		return algo.Decision{}, err
	}
	return r.Limit.Peek(&st, now, r.Cost), nil
}

// loadWindow reads a window limit's counters for key at now as an
// algo.State, and whether any counter exists.
func (s *Store) loadWindow(key string, l *algo.Limit, now int64) (algo.State, bool, error) {
	keys := s.windowCounters(key, l, now)
	if keys == nil {
		return algo.State{}, false, nil
	}
	counts, err := s.counts(keys)
	if err != nil {
		return algo.State{}, false, s.unavailable("read", key, err)
	}
	found := false
	for _, c := range counts {
		found = found || c > 0
	}
	return countsState(l, now, counts), found, nil
}

// windowCounters lists the counters key has under the window limit l at
// now, newest first: a fixed window's one, a sliding window's current
// sub-window and its older ones; nil for the other algorithms.
func (s *Store) windowCounters(key string, l *algo.Limit, now int64) []string {
	switch l.Algorithm() {
	case algo.FixedWindow:
		start, _ := windowBounds(l, now)
		return []string{s.keys.fixed(key, start)}
	case algo.SlidingWindow:
		sub, n := subWindow(l)
		return s.keys.sliding(key, sub, now/sub, n)
	}
	return nil
}

// countsState lays out counts, those of windowCounters(key, l, now), as
// l's algo.State at now.
func countsState(l *algo.Limit, now int64, counts []int64) algo.State {
	if l.Algorithm() == algo.FixedWindow {
		start, _ := windowBounds(l, now)
		return algo.State{A: start, B: counts[0], C: now}
	}
	sub, n := subWindow(l)
	return slidingState(n, now, sub, counts)
}

// windowKeys lists the counters key may have now under every window limit
// this Store has used.
func (s *Store) windowKeys(key string, now int64) []string {
	var keys []string
	for _, l := range s.shapes.list() {
		switch l.Algorithm() {
		case algo.FixedWindow:
			start, _ := windowBounds(l, now)
			keys = append(keys, s.keys.fixed(key, start))
		case algo.SlidingWindow:
			sub, n := subWindow(l)
			keys = append(keys, s.keys.sliding(key, sub, now/sub, n)...)
		}
	}
	return keys
}

// refundCounter gives cost back to the counter that counted a Take at at.
func (s *Store) refundCounter(r *store.Request, at int64) error {
	s.stats.counterOps.Add(1)
	if err := s.decr(s.refundedCounter(r, at), r.Cost); err != nil {
		return s.unavailable("refund", r.Key, err)
	}
	return nil
}

// refundedCounter is the counter that counted r's Take at at: a fixed
// window's of the window holding at, a sliding window's sub-window
// holding at.
func (s *Store) refundedCounter(r *store.Request, at int64) string {
	if r.Limit.Algorithm() == algo.FixedWindow {
		start, _ := windowBounds(r.Limit, at)
		return s.keys.fixed(r.Key, start)
	}
	sub, _ := subWindow(r.Limit)
	return s.keys.sliding(r.Key, sub, at/sub, 0)[0]
}

// unavailableOr keeps ErrContention as it is and wraps anything else as
// store.ErrUnavailable.
func (s *Store) unavailableOr(op, key string, err error) error {
	if errors.Is(err, store.ErrContention) {
		return fmt.Errorf("memcached %s %q: %w", op, key, err)
	}
	return s.unavailable(op, key, err)
}
