// Package limitcache keeps values derived from compiled limits (a limit's
// local share, its regions' shares), keyed by the *algo.Limit they were
// derived from, in a bounded cache that needs no lock to read.
package limitcache

import (
	"sync"
	"sync/atomic"

	"github.com/floodgate/floodgate/algo"
)

// Max bounds each of the two generations of values a Cache keeps. They are
// keyed by the limit, and a server compiles new limits on every reload and
// override (and a request-carried limit, past the policy's cache of them,
// on every request): kept without a bound, the values of limits long gone
// would pile up for as long as the process runs.
const Max = 4096

// Cache holds values in two generations of at most Max each, 2·Max in
// all. A value is looked for in the current generation, then in the
// previous one; only a value in neither is derived, and goes into the
// current one. When the current one is full it becomes the previous one,
// and the previous one is dropped: a value goes after Max other values at
// least have been derived since its own.
//
// Only derived values fill a generation, so a set of live limits of up to
// 2·Max that stops changing turns the generations at most twice more and
// is then never derived again. A value found in the previous generation is
// not copied into the current one: the copies would fill it and turn the
// generations with no new limit, dropping values in use, so that a set of
// more than Max live limits would keep being derived. (One map cleared when
// it filled derived a value on nearly every call past Max live limits.)
//
// A value must be a function of the limit's parameters alone, so that one
// dropped and derived again is the same.
//
// The zero value is empty and ready; lookups take no lock, and a lock
// orders the turns of the generations.
type Cache[V any] struct {
	gens   atomic.Pointer[gens]
	turnMu sync.Mutex
}

type gens struct {
	cur, prev *gen
}

// gen is one generation: m holds at most Max values, each of which holds a
// place counted in n before it is stored (n may go past Max only by the
// places it refuses).
type gen struct {
	m sync.Map // *algo.Limit → V
	n atomic.Int64
}

// Get returns l's value, if kept.
func (c *Cache[V]) Get(l *algo.Limit) (V, bool) {
	g := c.load()
	if v, ok := g.cur.m.Load(l); ok {
		return v.(V), true
	}
	if v, ok := g.prev.m.Load(l); ok {
		return v.(V), true
	}
	var zero V
	return zero, false
}

// Put stores v as l's value in the current generation, turning the
// generations first when it is full, and returns the value stored for l:
// v, or one another caller stored first (an equal one).
func (c *Cache[V]) Put(l *algo.Limit, v V) V {
	g := c.load()
	for g.cur.n.Add(1) > Max {
		g = c.turn(g)
	}
	if old, loaded := g.cur.m.LoadOrStore(l, v); loaded {
		g.cur.n.Add(-1)
		return old.(V)
	}
	return v
}

// Kept returns how many values the current and the previous generations
// hold.
func (c *Cache[V]) Kept() (cur, prev int) {
	g := c.load()
	g.cur.m.Range(func(any, any) bool { cur++; return true })
	g.prev.m.Range(func(any, any) bool { prev++; return true })
	return cur, prev
}

// load returns the generations, made on first use.
func (c *Cache[V]) load() *gens {
	if g := c.gens.Load(); g != nil {
		return g
	}
	c.gens.CompareAndSwap(nil, &gens{cur: new(gen), prev: new(gen)})
	return c.gens.Load()
}

// turn makes full's current generation the previous one under a new,
// empty current one, unless another caller has turned them already, and
// returns the generations now in use.
func (c *Cache[V]) turn(full *gens) *gens {
	c.turnMu.Lock()
	defer c.turnMu.Unlock()
	if g := c.gens.Load(); g != full {
		return g
	}
	g := &gens{cur: new(gen), prev: full.cur}
	c.gens.Store(g)
	return g
}
