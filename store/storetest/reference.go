package storetest

import (
	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// reference decides as a store must, on local states, with the rules the
// package doc lists. It is not safe for concurrent use.
type reference struct {
	states map[string]*algo.State
}

func newReference() *reference { return &reference{states: make(map[string]*algo.State)} }

// state returns a copy of key's live state: zero when missing or expired.
func (r *reference) state(key string, l *algo.Limit, now int64) algo.State {
	s, ok := r.states[key]
	if !ok || l.ExpiresAt(s) <= now {
		return algo.State{}
	}
	return s.Clone()
}

// put keeps s as key's state, or forgets the key when s is no different
// from a fresh state.
func (r *reference) put(key string, l *algo.Limit, s algo.State, now int64) {
	if l.ExpiresAt(&s) <= now {
		delete(r.states, key)
		return
	}
	r.states[key] = &s
}

func (r *reference) take(reqs []store.Request, now int64) (bool, []algo.Decision) {
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

func (r *reference) peek(q store.Request, now int64) algo.Decision {
	s := r.state(q.Key, q.Limit, now)
	return q.Limit.Peek(&s, now, q.Cost)
}

func (r *reference) refund(q store.Request, now int64) {
	at := q.At
	if at == 0 {
		at = now
	}
	r.giveBack(q, now, func(v *algo.State) { q.Limit.Refund(v, now, at, q.Cost) })
}

func (r *reference) release(q store.Request, now int64) {
	r.giveBack(q, now, func(v *algo.State) { q.Limit.Release(v, now, q.Lease) })
}

func (r *reference) renew(q store.Request, now int64) {
	r.giveBack(q, now, func(v *algo.State) { q.Limit.Renew(v, now, q.Lease) })
}

// giveBack applies f to a copy of q's key's live state and keeps the
// result; a key without live state is left alone (refund, release, renew).
func (r *reference) giveBack(q store.Request, now int64, f func(*algo.State)) {
	s, ok := r.states[q.Key]
	if !ok || q.Limit.ExpiresAt(s) <= now {
		return
	}
	v := s.Clone()
	f(&v)
	r.put(q.Key, q.Limit, v, now)
}

func (r *reference) reset(key string) { delete(r.states, key) }

// expiresAt is key's ExpiresAt, 0 when it holds no state.
func (r *reference) expiresAt(key string, l *algo.Limit) int64 {
	if s, ok := r.states[key]; ok {
		return l.ExpiresAt(s)
	}
	return 0
}
