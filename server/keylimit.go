package server

import (
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store"
)

// keyWindowLimit reads the state layout a store key of the policy engine
// names after its last '#' (policy.KeyLayout; docs/STORES.md, "Store
// keys"): the
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
	p, ok := policy.KeyLayout(key)
	switch {
	case !ok:
		return nil, false
	case p.Algorithm != algo.FixedWindow && p.Algorithm != algo.SlidingWindow:
		return nil, true
	}
	p.Limit = 1
	if l, err := algo.Compile(p); err == nil {
		return l, true
	}
	return nil, false
}

// requestInspector returns the store under s.store's wrappers (each one's
// Unwrap: store/resilient, store/lease) that is a store.RequestInspector,
// or nil: a store whose Reset and Inspect, given a key alone, may miss
// state that the key's limit locates.
func (s *Server) requestInspector() store.RequestInspector {
	ri, _, _ := store.Under[store.RequestInspector](s.store)
	return ri
}
