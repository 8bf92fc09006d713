package redis

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// A call is one Take waiting for its decision. Calls are pooled: a busy
// store allocates none per decision.
type call struct {
	ctx context.Context
	// bound is the store's deadline (see Store.storeCtx) when ctx's is
	// later or absent, nil when ctx's comes first: the call ends at the
	// sooner of the two, queued or sent.
	bound context.Context
	op    string
	reqs  []store.Request
	out   []algo.Decision
	slot  int
	now   string // the test clock's time, or "" for the server's

	res store.Result
	err error

	// sig receives a value once the call is decided (capacity 1).
	sig chan struct{}
	// state says who may touch reqs and out (see callWaiting).
	state atomic.Uint32
	// taken is guarded by the batcher's mutex: the call left the queue
	// for a batch.
	taken bool
	// one holds the call as a batch of its own, sent by its caller.
	one [1]*call
}

// A call's states. A batch reads a taken call's reqs while it builds its
// script call (callWaiting), then marks it callSent: its caller may then
// leave at its deadline (callAbandoned), and the batch neither decodes
// into its out nor reads its reqs again; or the batch claims it to decode
// its reply (callClaimed), and the caller waits for that.
const (
	callWaiting uint32 = iota
	callSent
	callAbandoned
	callClaimed
)

var callPool = sync.Pool{New: func() any { return &call{sig: make(chan struct{}, 1)} }}

func getCall(ctx, bound context.Context, op string, reqs []store.Request, out []algo.Decision, slot int, now string) *call {
	c := callPool.Get().(*call)
	c.ctx, c.bound, c.op, c.reqs, c.out, c.slot, c.now = ctx, bound, op, reqs, out, slot, now
	return c
}

func putCall(c *call) {
	sig := c.sig
	*c = call{}
	c.sig = sig
	callPool.Put(c)
}

// sent marks c's request as read into its script call: from now on its
// caller may leave at its deadline.
func (c *call) sent() { c.state.CompareAndSwap(callWaiting, callSent) }

// claim reports whether the batch may decode c's reply into it, and keeps
// its caller waiting for that; false: the caller left.
func (c *call) claim() bool {
	for {
		switch st := c.state.Load(); st {
		case callAbandoned:
			return false
		case callClaimed:
			return true
		default:
			if c.state.CompareAndSwap(st, callClaimed) {
				return true
			}
		}
	}
}

// done wakes c's caller, once c is decided.
func (c *call) done() { c.sig <- struct{}{} }

// stopped reports whether c's context or the store's deadline ended.
func (c *call) stopped() bool {
	return c.ctx.Err() != nil || (c.bound != nil && c.bound.Err() != nil)
}

// stopErr is the error of a call that stopped: its context's, or the
// deadline's of the store's timeout.
func (c *call) stopErr() error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// batcher coalesces concurrent calls into batches. A caller that finds
// the store idle (fewer than max batches in flight, nothing queued) sends
// its call at once from its own goroutine: no hand-off, no timer; it ends
// at its context's deadline, or the store's, as the client's call does.
// Otherwise it queues its call, starting a sender goroutine when fewer
// than max are in flight, and waits for the decision or its deadline,
// whichever comes first: a sender sends everything queued (up to size
// calls) as one batch until the queue is empty. A call whose deadline
// passes while queued leaves the queue unsent; one whose deadline passes
// while its batch is in flight returns at once, its outcome unknown, and
// the batch ends in the background.
type batcher struct {
	size   int
	max    int
	window time.Duration
	exec   func([]*call)

	mu     sync.Mutex
	queue  []*call
	active int // senders: callers sending their own call, and goroutines

	bufs sync.Pool // *[]*call
	// serveFn is serve, bound once: starting it allocates nothing.
	serveFn func()
}

func newBatcher(size, max int, window time.Duration, exec func([]*call)) *batcher {
	b := &batcher{size: size, max: max, window: window, exec: exec}
	b.serveFn = b.serve
	return b
}

// do sends c and reports whether it was decided; false: the caller's
// deadline came first, c.err says why, and c belongs to its batch now
// (it must not be pooled).
func (b *batcher) do(c *call) bool {
	b.mu.Lock()
	if b.active < b.max && len(b.queue) == 0 && b.window <= 0 {
		b.active++
		c.taken = true
		b.mu.Unlock()
		c.one[0] = c
		b.exec(c.one[:])
		c.one[0] = nil
		<-c.sig
		b.retire()
		return true
	}
	b.queue = append(b.queue, c)
	start := b.active < b.max
	if start {
		b.active++
	}
	b.mu.Unlock()
	if start {
		go b.serveFn()
	}
	return b.wait(c)
}

// retire gives back a caller's sending slot, to a new sender goroutine
// when calls queued meanwhile.
func (b *batcher) retire() {
	b.mu.Lock()
	if len(b.queue) > 0 {
		b.mu.Unlock()
		go b.serveFn()
		return
	}
	b.active--
	b.mu.Unlock()
}

// wait waits for c's decision or the end of its context or of the store's
// deadline.
func (b *batcher) wait(c *call) bool {
	var stop, bound <-chan struct{}
	stop = c.ctx.Done()
	if c.bound != nil {
		bound = c.bound.Done()
	}
	select {
	case <-c.sig:
		return true
	case <-stop:
	case <-bound:
	}
	b.mu.Lock()
	if !c.taken {
		// Still queued (or dropped by a sender, as stopped): never sent.
		if i := slices.Index(b.queue, c); i >= 0 {
			b.queue = slices.Delete(b.queue, i, i+1)
		}
		b.mu.Unlock()
		c.err = notSent(c)
		return true
	}
	b.mu.Unlock()
	for {
		switch c.state.Load() {
		case callSent:
			if c.state.CompareAndSwap(callSent, callAbandoned) {
				c.err = abandoned(c)
				return false
			}
		case callClaimed:
			<-c.sig
			return true
		default:
			// Its batch is reading its request: microseconds.
			runtime.Gosched()
		}
	}
}

// serve sends the queued calls, batch after batch, until none is left,
// then gives back its sending slot.
func (b *batcher) serve() {
	if b.window > 0 {
		b.mu.Lock()
		short := len(b.queue) < b.size
		b.mu.Unlock()
		if short {
			time.Sleep(b.window)
		}
	}
	b.mu.Lock()
	for len(b.queue) > 0 {
		bp, _ := b.bufs.Get().(*[]*call)
		if bp == nil {
			bp = new([]*call)
		}
		batch := (*bp)[:0]
		n := 0
		for _, c := range b.queue {
			if len(batch) == b.size {
				break
			}
			n++
			if c.stopped() {
				continue // its caller removes nothing: it is left out here
			}
			c.taken = true
			batch = append(batch, c)
		}
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()

		if len(batch) > 0 {
			b.exec(batch)
		}

		clear(batch)
		*bp = batch[:0]
		b.bufs.Put(bp)
		b.mu.Lock()
	}
	b.active--
	b.mu.Unlock()
}
