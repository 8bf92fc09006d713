package policy

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate/floodgate/algo"
)

// Turns holds admitted requests for their Delay, as a shaper's queue asks,
// and keeps their turns so that a request that gives its turn up gives it
// to the requests queued behind it. The zero Turns is ready to use; it is
// safe for concurrent use. Engine.DecideWait holds requests with one, and
// so does each middleware.Middleware: one implementation of a hold.
//
// A shaper gives each request it admits a turn: its Delay, the water
// ahead of it. A request whose hold ends early (its context ended) gives
// back its units (Engine.Refund), but the requests queued behind it had
// their turns computed with its units ahead of them: they would wait as
// if it were still to leave, and a request decided after the refund would
// get a turn among theirs, so that two left at once, faster than the
// rate. So Turns keeps the turns of the requests it holds for a shaper,
// per key (the domain, the descriptor's entries and the limit), and a
// request that gives its turn up moves those queued behind it on that key
// up by its units' worth of time (cost × period ÷ rate): into the turns
// the key's state, refunded, now gives them, which the next request
// decided is queued behind. Only requests decided after the one that
// gives up, and whose turn on the key is later, move, and never before
// its turn: the queue never leaves faster than the rate, whatever other
// holders sharing the store (another Turns, another process) hold: their
// requests keep their turns, later than the state's. A request delayed by
// several limits leaves at the latest of its turns; a Delay set by a limit
// that is not a shaper's (a smooth limit's) is waited out as it is.
type Turns struct {
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

// Hold holds a request that resp admitted (req is what was decided) for
// resp.Delay from now, less when a request queued ahead of it on a
// shaper's key gives its turn up. It returns nil once the request may go
// on, at once when resp has no Delay, and ctx's error when ctx ends first:
// the request has then given its turn up, and the caller gives back what
// it charged (Engine.Refund) and does not go on. Hold does not check the
// Delay against ctx's deadline: a caller that would rather refuse a
// request that cannot wait that long checks first.
func (ts *Turns) Hold(ctx context.Context, req Request, resp Response) error {
	d := resp.Delay
	if d <= 0 {
		return nil
	}
	w := ts.join(req, resp, time.Now())
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		ts.mu.Lock()
		wait := time.Until(w.due)
		ts.mu.Unlock()
		if wait <= 0 {
			ts.leave(w, false)
			return nil
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-w.moved:
		case <-ctx.Done():
			ts.leave(w, true)
			return ctx.Err()
		}
	}
}

// join registers a request that resp admitted with a Delay, decided at
// now: a slot on the key of each shaper limit that delayed it. When none
// did (a smooth limit's Delay, say) the waiter has no slot and is due at
// now + resp.Delay: it is held for its Delay, in no queue.
func (ts *Turns) join(req Request, resp Response, now time.Time) *turnWaiter {
	w := &turnWaiter{fixed: now, moved: make(chan struct{}, 1)}
	cost := max(req.Hits, 1)
	for i, s := range resp.Statuses {
		for _, l := range s.Limits {
			lim := l.lim
			if l.Shadow || l.Decision.Delay <= 0 || !l.Decision.Allowed {
				continue
			}
			if lim == nil || lim.Algorithm() != algo.Shaper || i >= len(req.Descriptors) {
				w.fixed = later(w.fixed, now.Add(l.Decision.Delay))
				continue
			}
			id := turnKey(req.Domain, req.Descriptors[i], l)
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
		w.due = now.Add(resp.Delay)
		return w
	}
	w.due = later(w.fixed, now.Add(resp.Delay))
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.byID == nil {
		ts.byID = map[string]*turnQueue{}
	}
	ts.seq++
	for _, sl := range w.slots {
		q := ts.byID[sl.q.id]
		if q == nil {
			q = sl.q
			ts.byID[q.id] = q
		}
		sl.q, sl.seq = q, ts.seq
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
func turnKey(domain string, d Descriptor, l LimitStatus) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range d.Entries {
		b.WriteString("\x00")
		b.WriteString(strconv.Quote(e.Key))
		b.WriteString(strconv.Quote(e.Value))
	}
	b.WriteString("\x00" + strconv.Quote(l.Name) + strconv.Quote(l.Rule))
	b.WriteString("\x00" + l.lim.String())
	return b.String()
}

// leave takes w's slots out of their queues. With gaveUp, the request did
// not go on: each slot's later requests, decided after it, move up by its
// step, not before its turn.
func (ts *Turns) leave(w *turnWaiter, gaveUp bool) {
	if len(w.slots) == 0 {
		return // in no queue
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
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
			delete(ts.byID, q.id)
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
