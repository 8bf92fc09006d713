package storetest

import (
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// Reference decides as a store must, on local states, with the rules the
// package doc lists: a state past its ExpiresAt is fresh, a refused Take
// leaves each state as its request alone would, Peek writes nothing, and
// a give-back (Refund, Release, Renew) leaves a key without live state
// alone. The suite checks every store against it; a store's own
// differential tests (Redis's Lua against algo) can too. Times are µs
// since the epoch. It is not safe for concurrent use.
type Reference struct {
	states map[string]*algo.State
}

// NewReference returns a Reference holding no state.
func NewReference() *Reference { return &Reference{states: make(map[string]*algo.State)} }

// state returns a copy of key's live state: zero when missing or expired.
func (r *Reference) state(key string, l *algo.Limit, now int64) algo.State {
	s, ok := r.states[key]
	if !ok || l.ExpiresAt(s) <= now {
		return algo.State{}
	}
	return s.Clone()
}

// put keeps s as key's state, or forgets the key when s is no different
// from a fresh state.
func (r *Reference) put(key string, l *algo.Limit, s algo.State, now int64) {
	if l.ExpiresAt(&s) <= now {
		delete(r.states, key)
		return
	}
	r.states[key] = &s
}

// Take decides reqs all or nothing at now, as Store.Take must: whether
// all were admitted, and each request's decision.
func (r *Reference) Take(reqs []store.Request, now int64) (bool, []algo.Decision) {
	out := make([]algo.Decision, len(reqs))
	states := make(map[string]*algo.State, len(reqs))
	ok := true
	for i, q := range reqs {
		s, seen := states[q.Key]
		if !seen {
			v := r.state(q.Key, q.Limit, now)
			s = &v
			states[q.Key] = s
		}
		out[i] = q.Limit.TakeLease(s, now, q.Cost, q.Lease)
		if !out[i].Allowed {
			ok = false
			break
		}
	}
	if !ok {
		// Nothing is charged: a request that would pass alone leaves its
		// state as Peek does, one that is refused as its (refused) Take does.
		for i, q := range reqs {
			s := r.state(q.Key, q.Limit, now)
			d := q.Limit.Peek(&s, now, q.Cost)
			if !d.Allowed {
				d = q.Limit.TakeLease(&s, now, q.Cost, q.Lease)
			}
			out[i] = store.Unwind(d, q.Cost)
			r.put(q.Key, q.Limit, s, now)
		}
		return false, out
	}
	for i, q := range reqs {
		if s, fresh := states[q.Key]; fresh {
			r.put(q.Key, reqs[i].Limit, *s, now)
			delete(states, q.Key)
		}
	}
	return true, out
}

// Peek decides q at now without charging it.
func (r *Reference) Peek(q store.Request, now int64) algo.Decision {
	s := r.state(q.Key, q.Limit, now)
	return q.Limit.Peek(&s, now, q.Cost)
}

// Refund gives q's cost back at now (at q.At when set).
func (r *Reference) Refund(q store.Request, now int64) {
	at := q.At
	if at == 0 {
		at = now
	}
	r.giveBack(q, now, func(v *algo.State) { q.Limit.Refund(v, now, at, q.Cost) })
}

// Release frees q's lease at now.
func (r *Reference) Release(q store.Request, now int64) {
	r.giveBack(q, now, func(v *algo.State) { q.Limit.Release(v, now, q.Lease) })
}

// Renew extends q's lease at now.
func (r *Reference) Renew(q store.Request, now int64) {
	r.giveBack(q, now, func(v *algo.State) { q.Limit.Renew(v, now, q.Lease) })
}

// giveBack applies f to a copy of q's key's live state and keeps the
// result; a key without live state is left alone (refund, release, renew).
func (r *Reference) giveBack(q store.Request, now int64, f func(*algo.State)) {
	s, ok := r.states[q.Key]
	if !ok || q.Limit.ExpiresAt(s) <= now {
		return
	}
	v := s.Clone()
	f(&v)
	r.put(q.Key, q.Limit, v, now)
}

// Reset forgets key's state.
func (r *Reference) Reset(key string) { delete(r.states, key) }

// ExpiresAt is key's state's ExpiresAt under l, 0 when it holds no state.
func (r *Reference) ExpiresAt(key string, l *algo.Limit) int64 {
	if s, ok := r.states[key]; ok {
		return l.ExpiresAt(s)
	}
	return 0
}

// Stored returns key's state as kept, expired or not, and whether there is
// one; the caller must not modify it.
func (r *Reference) Stored(key string) (*algo.State, bool) {
	s, ok := r.states[key]
	return s, ok
}
