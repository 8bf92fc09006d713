package algo

import (
	"slices"
	"time"
)

// Fixed window state: A = start of the current window (µs), B = units
// counted in it, C = the latest time seen.

// windowBounds returns the window [start, end) holding now: a multiple of
// Period since the epoch, or a UTC calendar month or year.
func (l *Limit) windowBounds(now int64) (start, end int64) {
	switch l.p.Calendar {
	case CalendarMonth, CalendarYear:
		t := time.UnixMicro(now).UTC()
		month := t.Month()
		if l.p.Calendar == CalendarYear {
			month = time.January
		}
		s := time.Date(t.Year(), month, 1, 0, 0, 0, 0, time.UTC)
		var e time.Time
		if l.p.Calendar == CalendarYear {
			e = s.AddDate(1, 0, 0)
		} else {
			e = s.AddDate(0, 1, 0)
		}
		return s.UnixMicro(), e.UnixMicro()
	}
	if now >= 0 {
		start = int64(l.perDiv.div(uint64(now))) * l.periodUS
	} else {
		start = now - floorMod(now, l.periodUS)
	}
	return start, start + l.periodUS
}

// floorMod is a mod b with the sign of b, so times before the epoch still
// fall in the right window.
func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// monotonic returns the later of now and the state's last-seen time, and
// records it: the state's time never moves backwards.
func monotonic(last *int64, now int64) int64 {
	if now < *last {
		return *last
	}
	*last = now
	return now
}

func (l *Limit) fixedWindow(out *Decision, s *State, now, cost int64, commit bool) {
	now = monotonic(&s.C, now)
	start, end := l.windowBounds(now)
	if s.A != start || s.B < 0 {
		s.A, s.B = start, 0
	}
	d := Decision{Limit: l.p.Limit}
	// cost > Limit is tested first so that a huge cost cannot overflow
	// the sum below.
	switch {
	case cost > l.p.Limit:
		d.Remaining = max(l.p.Limit-s.B, 0)
		d.RetryAfter = Never
	case s.B+cost <= l.p.Limit:
		d.Allowed = true
		if commit {
			s.B += cost
		}
		d.Remaining = l.p.Limit - s.B
		if !commit {
			d.Remaining -= cost
		}
	default:
		d.Remaining = max(l.p.Limit-s.B, 0)
		d.RetryAfter = micros(end - now)
	}
	if s.B > 0 || (d.Allowed && cost > 0) {
		d.ResetAfter = micros(end - now)
	}
	*out = d
}

func (l *Limit) fixedWindowRefund(s *State, at, cost int64) {
	start, _ := l.windowBounds(at)
	if s.A != start {
		return // the window the units were counted in has gone
	}
	s.B -= cost
	if s.B < 0 {
		s.B = 0
	}
}

func (l *Limit) fixedWindowExpiry(s *State) int64 {
	if s.B == 0 {
		return 0
	}
	_, end := l.windowBounds(s.A)
	return end
}

// Sliding log state: Ext = the admission time of every unit still inside
// the window, oldest first; C = the latest time seen.

func (l *Limit) slidingLog(s *State, now, cost int64, commit bool) Decision {
	now = monotonic(&s.C, now)
	// Forget units admitted at or before now - Period: the window is
	// (now - Period, now].
	cut := 0
	for cut < len(s.Ext) && s.Ext[cut]+l.periodUS <= now {
		cut++
	}
	if cut > 0 {
		s.Ext = s.Ext[:copy(s.Ext, s.Ext[cut:])]
	}
	n := int64(len(s.Ext))
	d := Decision{Limit: l.p.Limit}
	switch {
	case cost > l.p.Limit:
		d.Remaining = max(l.p.Limit-n, 0)
		d.RetryAfter = Never
	case n+cost <= l.p.Limit:
		d.Allowed = true
		d.Remaining = l.p.Limit - n - cost
		if commit {
			for i := int64(0); i < cost; i++ {
				s.Ext = append(s.Ext, now)
			}
		}
	default:
		d.Remaining = max(l.p.Limit-n, 0)
		// The oldest n+cost-Limit units must leave the window first.
		k := n + cost - l.p.Limit
		// (At least 1µs: only a state this package did not write, out of
		// order, could say otherwise.)
		d.RetryAfter = micros(max(s.Ext[k-1]+l.periodUS-now, 1))
	}
	if len(s.Ext) > 0 {
		d.ResetAfter = micros(s.Ext[len(s.Ext)-1] + l.periodUS - now)
	}
	if d.Allowed && cost > 0 && !commit {
		d.ResetAfter = micros(l.periodUS) // what Take would report
	}
	return d
}

// slidingLogRefund removes cost units of a take at at (the time the store
// reported for it, never after the stamp: a take is stamped at the
// state's time when that is later, see monotonic, so racing takes of one
// key may be stamped after the time their store reported). While the
// state's time is below at + Period, no entry at or after at has left the
// window, so the take's own units are all there, and the refund removes
// the oldest cost entries at or after at: those at at first, so a refund
// at the stamp removes what an exact match would. Each entry removed is no
// later than one of the take's own, so what stays is, entry by entry, no
// earlier than what removing the take's own units would leave: never more
// capacity, with several refunds interleaved too (each leaves at least as
// many entries at or after any time, so the next finds its take's count).
// Later, only entries stamped exactly at are removed (the newest of them):
// the take's units may have left the window, and later entries are
// others'.
func slidingLogRefund(s *State, at, cost, periodUS int64) {
	i, _ := slices.BinarySearch(s.Ext, at) // the first entry at or after at
	// No overflow: at and periodUS are at most maxTime.
	if s.C >= at+periodUS {
		j := i
		for j < len(s.Ext) && s.Ext[j] == at {
			j++
		}
		s.Ext = slices.Delete(s.Ext, j-int(min(cost, int64(j-i))), j)
		return
	}
	s.Ext = slices.Delete(s.Ext, i, i+int(min(cost, int64(len(s.Ext)-i))))
}

func slidingLogExpiry(s *State, periodUS int64) int64 {
	if len(s.Ext) == 0 {
		return 0
	}
	return s.Ext[len(s.Ext)-1] + periodUS
}
