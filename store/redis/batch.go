package redis

import (
	"context"
	"sync"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// A call is one Take waiting for its decision. Calls are pooled: a busy
// store allocates none per decision.
type call struct {
	ctx  context.Context
	op   string
	reqs []store.Request
	out  []algo.Decision
	slot int
	now  string // the test clock's time, or "" for the server's

	res store.Result
	err error

	// sig receives sigDone once the call is decided, and sigLead when a
	// finishing leader hands it the lead. Capacity 2: one of each.
	sig chan uint8
	// taken and handed are guarded by the batcher's mutex: the call is in
	// a batch; a lead token is on its way to it.
	taken, handed bool
}

const (
	sigDone uint8 = iota + 1
	sigLead
)

var callPool = sync.Pool{New: func() any { return &call{sig: make(chan uint8, 2)} }}

func getCall(ctx context.Context, op string, reqs []store.Request, out []algo.Decision, slot int, now string) *call {
	c := callPool.Get().(*call)
	c.ctx, c.op, c.reqs, c.out, c.slot, c.now = ctx, op, reqs, out, slot, now
	return c
}

func putCall(c *call) {
	*c = call{sig: c.sig}
	callPool.Put(c)
}

// batcher coalesces concurrent calls into batches by flat combining: a
// caller that finds fewer than max batches in flight becomes a leader and
// sends everything queued (up to size calls, its own included) as one
// batch; the others wait. A leader whose own call is done hands the lead
// to the oldest waiting call instead of serving the queue forever, so no
// caller waits behind more than a couple of batches. An idle store sends a
// lone call at once from the caller's goroutine: no hand-off, no timer.
type batcher struct {
	size   int
	max    int
	window time.Duration
	exec   func([]*call)

	mu     sync.Mutex
	queue  []*call
	active int

	bufs sync.Pool // *[]*call
}

// do queues c and returns when it is decided.
func (b *batcher) do(c *call) {
	b.mu.Lock()
	b.queue = append(b.queue, c)
	lead := b.active < b.max
	if lead {
		b.active++
	}
	b.mu.Unlock()
	if lead {
		b.lead(c)
	}
	for {
		if <-c.sig == sigLead {
			b.lead(c)
			continue
		}
		// Decided. A lead token handed to c meanwhile must still be
		// passed on, or the batcher would lose a sender.
		b.mu.Lock()
		pending := c.handed
		b.mu.Unlock()
		if pending {
			<-c.sig
			b.lead(c)
		}
		return
	}
}

// lead sends batches while self is undecided, then hands the lead on or,
// with nothing queued, retires it.
func (b *batcher) lead(self *call) {
	b.mu.Lock()
	self.handed = false
	if b.window > 0 && !self.taken && len(b.queue) < b.size {
		b.mu.Unlock()
		time.Sleep(b.window)
		b.mu.Lock()
	}
	for !self.taken && len(b.queue) > 0 {
		n := min(len(b.queue), b.size)
		bp, _ := b.bufs.Get().(*[]*call)
		if bp == nil {
			bp = new([]*call)
		}
		batch := append((*bp)[:0], b.queue[:n]...)
		for _, c := range batch {
			c.taken = true
		}
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()

		b.exec(batch)

		clear(batch)
		*bp = batch[:0]
		b.bufs.Put(bp)
		b.mu.Lock()
	}
	for _, next := range b.queue {
		if !next.handed {
			next.handed = true
			b.mu.Unlock()
			next.sig <- sigLead
			return
		}
	}
	b.active--
	b.mu.Unlock()
}
