package middleware

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/policy"
)

// A shaper gives each request it admits a turn: its Delay, the water
// ahead of it. A request whose hold ends early (its client went away, a
// handler around the middleware cancelled it) gives back its units
// (refund), but the requests queued behind it had their turns computed
// with its units ahead of them: they would wait as if it were still to
// leave, and a request decided after the refund would get a turn among
// theirs, so that two left at once, faster than the rate. So a
// Middleware keeps the turns of the requests it holds for a shaper, per
// key, and a request that gives its turn up moves those queued behind it
// on that key up by its units' worth of time (cost × period ÷ rate):
// into the turns the key's state, refunded, now gives them, which the
// next request decided is queued behind. Only requests decided after the
// one that gives up, and whose turn on the key is later, move, and never
// before its turn: the queue never leaves faster than the rate, whatever
// other instances sharing the store hold (their requests keep their
// turns, later than the state's). A request delayed by several limits
// leaves at the latest of its turns.

// turnQueues are a Middleware's held requests, by shaper key.
type turnQueues struct {
	mu   sync.Mutex
	byID map[string]*turnQueue
	seq  uint64
}

// turnQueue is one key's held requests, in the order they were decided.
type turnQueue struct {
	id      string
	waiters []*turnSlot
}

// turnSlot is a held request's turn on one key.
type turnSlot struct {
	w    *turnWaiter
	q    *turnQueue
	seq  uint64        // the order the request was decided in
	at   time.Time     // its turn on the key
	step time.Duration // what its units are worth on the key
}

// turnWaiter is a held request: it leaves at due, the latest of its
// slots' turns and of the delays of limits that keep no queue here.
type turnWaiter struct {
	slots []*turnSlot
	fixed time.Time
	due   time.Time
	moved chan struct{} // signalled when due moves earlier
}

// join registers a request that resp admitted with a Delay, decided at
// now: a slot on the key of each shaper limit that delayed it. nil when
// none did (a smooth limit's Delay, say): the request is held as before.
func (tq *turnQueues) join(domain string, req policy.Request, resp policy.Response, now time.Time) *turnWaiter {
	w := &turnWaiter{fixed: now, moved: make(chan struct{}, 1)}
	cost := max(req.Hits, 1)
	for i, s := range resp.Statuses {
		for _, l := range s.Limits {
			lim := l.Limit()
			if l.Shadow || l.Decision.Delay <= 0 || !l.Decision.Allowed {
				continue
			}
			if lim == nil || lim.Algorithm() != algo.Shaper || i >= len(req.Descriptors) {
				w.fixed = later(w.fixed, now.Add(l.Decision.Delay))
				continue
			}
			id := turnKey(domain, req.Descriptors[i], l)
			if w.slot(id) {
				continue // the same key twice: one turn, one charge
			}
			p := lim.Params()
			unit := p.Period.Truncate(time.Microsecond) / time.Duration(p.Limit)
			step := unit * time.Duration(cost)
			if unit > 0 && step/unit != time.Duration(cost) {
				step = 0 // overflows: a turn too long to move
			}
			w.slots = append(w.slots, &turnSlot{w: w, at: now.Add(l.Decision.Delay), step: step, q: &turnQueue{id: id}})
		}
	}
	if len(w.slots) == 0 {
		return nil
	}
	w.due = later(w.fixed, now.Add(resp.Delay))
	tq.mu.Lock()
	defer tq.mu.Unlock()
	if tq.byID == nil {
		tq.byID = map[string]*turnQueue{}
	}
	tq.seq++
	for _, sl := range w.slots {
		q := tq.byID[sl.q.id]
		if q == nil {
			q = sl.q
			tq.byID[q.id] = q
		}
		sl.q, sl.seq = q, tq.seq
		q.waiters = append(q.waiters, sl)
	}
	return w
}

// slot reports whether w has a slot on the key id already.
func (w *turnWaiter) slot(id string) bool {
	for _, sl := range w.slots {
		if sl.q.id == id {
			return true
		}
	}
	return false
}

// turnKey names a limit's key: the domain, the descriptor's entries and
// the limit (its name, its rule and the limit itself, which a reload
// replaces). Two requests with the same turnKey are on the same store key;
// requests on one store key may have different turnKeys (a parent's limit
// reached through different descriptors), and then do not move each
// other, which is never faster than the rate, only less eager.
func turnKey(domain string, d policy.Descriptor, l policy.LimitStatus) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range d.Entries {
		b.WriteString("\x00")
		b.WriteString(strconv.Quote(e.Key))
		b.WriteString(strconv.Quote(e.Value))
	}
	b.WriteString("\x00" + strconv.Quote(l.Name) + strconv.Quote(l.Rule))
	b.WriteString("\x00" + l.Limit().String())
	return b.String()
}

// leave takes w's slots out of their queues. With gaveUp, the request did
// not go on: each slot's later requests, decided after it, move up by its
// step, not before its turn.
func (tq *turnQueues) leave(w *turnWaiter, gaveUp bool) {
	tq.mu.Lock()
	defer tq.mu.Unlock()
	for _, sl := range w.slots {
		q := sl.q
		i := 0
		for i < len(q.waiters) && q.waiters[i] != sl {
			i++
		}
		if i == len(q.waiters) {
			continue
		}
		q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
		if len(q.waiters) == 0 {
			delete(tq.byID, q.id)
			continue
		}
		if !gaveUp || sl.step <= 0 {
			continue
		}
		for _, o := range q.waiters[i:] {
			if o.seq <= sl.seq || !o.at.After(sl.at) {
				continue
			}
			o.at = later(o.at.Add(-sl.step), sl.at)
			ow := o.w
			due := ow.fixed
			for _, s := range ow.slots {
				due = later(due, s.at)
			}
			if due.Before(ow.due) {
				ow.due = due
				select {
				case ow.moved <- struct{}{}:
				default:
				}
			}
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// holdTurn holds an admitted request for resp's Delay, within its gRPC
// client's deadline (grpcDeadline), as holdCall does, except that a
// shaper's turn moves up when a request queued ahead of it gives its own
// up (see turnQueues). It returns false when the request cannot wait that
// long or its context ends first, and then gives its turn up: the caller
// refunds what it charged.
func (m *Middleware) holdTurn(ctx context.Context, r *http.Request, req policy.Request, resp policy.Response) bool {
	ctx, cancel := grpcDeadline(ctx, r)
	defer cancel()
	d := resp.Delay
	if m.o.maxWait > 0 && d > m.o.maxWait {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return false
	}
	now := time.Now()
	w := m.turns.join(m.domain, req, resp, now)
	if w == nil {
		return m.hold(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		m.turns.mu.Lock()
		wait := time.Until(w.due)
		m.turns.mu.Unlock()
		if wait <= 0 {
			m.turns.leave(w, false)
			return true
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-w.moved:
		case <-ctx.Done():
			m.turns.leave(w, true)
			return false
		}
	}
}
