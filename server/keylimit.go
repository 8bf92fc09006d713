package server

import (
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// keyWindowLimit reads the state layout a store key of the policy engine
// names after its last '#' (docs/STORES.md, "Store keys"): the
// algorithm, its period in µs or calendar unit, a sliding window's
// sub-windows, an "override:" before them and a "~…" suffix after them
// for derived keys:
//
//	fg:api|user=42#fixed_window:60000000
//	fg:api|user=42#fixed_window:month~ceil
//	fg:api|user=42#sliding_window:60000000/6
//
// For a fixed or sliding window it returns a limit of that layout (its
// quota is 1: only the windows matter), which a store.RequestInspector
// needs to find the key's counters. It returns nil and known for another
// algorithm, whose state the key alone locates, and known false for a key
// that names no layout it can read.
func keyWindowLimit(key string) (l *algo.Limit, known bool) {
	i := strings.LastIndexByte(key, '#')
	if i < 0 {
		return nil, false
	}
	fp, _, _ := strings.Cut(key[i+1:], "~")
	fp = strings.TrimPrefix(fp, "override:")
	name, period, ok := strings.Cut(fp, ":")
	if !ok {
		return nil, false
	}
	kind, err := algo.ParseKind(name)
	if err != nil || kind.String() != name {
		return nil, false
	}
	if kind != algo.FixedWindow && kind != algo.SlidingWindow {
		return nil, true
	}
	p := algo.Params{Algorithm: kind, Limit: 1}
	period, sub, hasSub := strings.Cut(period, "/")
	switch {
	case kind == algo.FixedWindow && period == algo.CalendarMonth.String():
		p.Calendar = algo.CalendarMonth
	case kind == algo.FixedWindow && period == algo.CalendarYear.String():
		p.Calendar = algo.CalendarYear
	default:
		us, err := strconv.ParseInt(period, 10, 64)
		if err != nil || us <= 0 || us > 1<<53 {
			return nil, false
		}
		p.Period = time.Duration(us) * time.Microsecond
	}
	if hasSub {
		n, err := strconv.Atoi(sub)
		if err != nil || kind != algo.SlidingWindow || n < 2 {
			return nil, false
		}
		p.SubWindows = n
	}
	if l, err = algo.Compile(p); err != nil {
		return nil, false
	}
	return l, true
}

// requestInspector returns the store under s.store's wrappers (each one's
// Unwrap: store/resilient, store/lease) that is a store.RequestInspector,
// or nil: a store whose Reset and Inspect, given a key alone, may miss
// state that the key's limit locates.
func (s *Server) requestInspector() store.RequestInspector {
	st := s.store
	for st != nil {
		if ri, ok := st.(store.RequestInspector); ok {
			return ri
		}
		u, ok := st.(interface{ Unwrap() store.Store })
		if !ok {
			return nil
		}
		st = u.Unwrap()
	}
	return nil
}
