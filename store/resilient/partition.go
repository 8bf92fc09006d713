package resilient

import (
	"github.com/floodgate/floodgate/store"
)

// PartitionChange is a change of state of one breaker, reported to
// Hooks.PartitionState.
type PartitionChange struct {
	// Partition is the breaker's partition (store.Partitioner.Partition);
	// 0 when the store has one breaker.
	Partition int
	// Name is the partition's store.Partitioner.PartitionName ("slots
	// 5376-5631", "server 10.0.0.8:11211"); "" when the store has one
	// breaker.
	Name string
	// From and To are the breaker's states before and after the change.
	From, To BreakerState
	// Open is the number of breakers open or half-open after the change:
	// the partitions whose keys the failure policy answers (all but one
	// probe call each).
	Open int
	// Partitions is the number of breakers: the store's partitions, or 1.
	Partitions int
}

// domains are the breakers of a Store: one per partition of the
// store.Partitioner under it, or one for the whole store. A Store replaces
// its domains once at most, when the Partitioner is found after New (see
// Store.resolve); calls already made on the old ones finish there.
type domains struct {
	part store.Partitioner // nil: one breaker
	brs  []breaker
	// open and half count the breakers open and half-open; Store.stateMu.
	open, half int
}

// worst is the state Store.Breaker reports: open when any breaker is
// open, else half-open when any is, else closed; Store.stateMu is held.
func (d *domains) worst() BreakerState {
	switch {
	case d.open > 0:
		return Open
	case d.half > 0:
		return HalfOpen
	}
	return Closed
}

// count adds n to the count of breakers in state st; Store.stateMu is held.
func (d *domains) count(st BreakerState, n int) {
	switch st {
	case Open:
		d.open += n
	case HalfOpen:
		d.half += n
	}
}

// partition returns key's partition; a Partitioner's answer out of range
// counts as partition 0 rather than failing the call.
func (d *domains) partition(key string) int {
	if p := d.part.Partition(key); p >= 0 && p < len(d.brs) {
		return p
	}
	return 0
}

// newDomains returns the breakers for part (nil: one breaker).
func (s *Store) newDomains(part store.Partitioner) *domains {
	n := 1
	if part != nil {
		n = part.Partitions()
	}
	d := &domains{part: part, brs: make([]breaker, n)}
	c := s.cfg
	for i := range d.brs {
		d.brs[i] = breaker{limit: c.failures, cooldown: c.cooldown, now: c.clock, onTrip: c.hooks.Tripped,
			onChange: func(from, to BreakerState) { s.changed(d, i, from, to) }}
		if part != nil {
			d.brs[i].name = part.PartitionName(i)
		}
	}
	return d
}

// findPartitioner looks for a store.Partitioner of more than one partition
// in st and down its Unwrap chain (store/lease, storeurl.OpenRetrying),
// whose wrappers pass keys unchanged. known is false when a link of the
// chain is not there yet (a store still being opened in the background):
// the answer may change once it is.
func findPartitioner(st store.Store) (part store.Partitioner, known bool) {
	p, found, whole := store.Under[store.Partitioner](st)
	if found && p.Partitions() > 1 {
		return p, true
	}
	return nil, whole
}

// resolve looks for the Partitioner again, after a call succeeded while
// a link of the Unwrap chain was missing at New, and gives the Store one
// breaker per partition when it finds one.
func (s *Store) resolve() {
	part, known := findPartitioner(s.inner)
	if !known {
		return
	}
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if !s.pending.Load() {
		return
	}
	s.pending.Store(false)
	if part == nil {
		return
	}
	old := s.dom.Load()
	d := s.newDomains(part)
	s.dom.Store(d)
	was := BreakerState(s.worst.Load())
	s.worst.Store(int32(Closed))
	if was == Closed {
		return
	}
	// The one breaker tripped between the success and now: its state is
	// forgotten with it.
	if h := s.cfg.hooks.PartitionState; h != nil {
		h(PartitionChange{Partition: 0, From: was, To: Closed, Open: 0, Partitions: len(old.brs)})
	}
	if h := s.cfg.hooks.State; h != nil {
		h(was, Closed)
	}
}

// changed is the breakers' onChange: breaker p of d went from one state to
// another (its mutex is held). It keeps the counts behind Breaker and
// reports the change to the hooks, in order: stateMu serialises the
// breakers' changes.
func (s *Store) changed(d *domains, p int, from, to BreakerState) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if s.dom.Load() != d {
		return // replaced by resolve: no longer reported
	}
	d.count(from, -1)
	d.count(to, 1)
	if h := s.cfg.hooks.PartitionState; h != nil {
		h(PartitionChange{Partition: p, Name: d.brs[p].name, From: from, To: to, Open: d.open + d.half, Partitions: len(d.brs)})
	}
	was, now := BreakerState(s.worst.Load()), d.worst()
	if was == now {
		return
	}
	s.worst.Store(int32(now))
	if h := s.cfg.hooks.State; h != nil {
		h(was, now)
	}
}

// Breakers returns the state of every breaker, indexed by partition: one
// per partition of the store.Partitioner under the Store, or one.
func (s *Store) Breakers() []BreakerState {
	d := s.dom.Load()
	out := make([]BreakerState, len(d.brs))
	for i := range d.brs {
		out[i] = d.brs[i].get()
	}
	return out
}

// route points j at the breakers in force and the partitions of its n
// keys, key(i) the i-th, each once: a call over several partitions asks
// each of their breakers and reports its outcome to each.
func (j *job) route(d *domains, n int, key func(i int) string) {
	j.dom = d
	j.parts = j.parts[:0]
	if d.part == nil || n == 0 {
		j.parts = append(j.parts, 0)
	} else {
	keys:
		for i := range n {
			p := d.partition(key(i))
			for _, q := range j.parts {
				if q == p {
					continue keys
				}
			}
			j.parts = append(j.parts, p)
		}
	}
	if cap(j.probes) < len(j.parts) {
		j.probes = make([]bool, len(j.parts))
	}
	j.probes = j.probes[:len(j.parts)]
}
