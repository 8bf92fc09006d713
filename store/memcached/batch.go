package memcached

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// A Take of several keys runs as a batch: each step sends every key's
// next command at once, pipelined per server (pipe.go), the servers
// concurrently, so that its round trips do not grow with the number of
// keys. Admitting is two steps (add of a zero counter, incr, and gets,
// then cas or add of the states); a refusal adds the roll-back (decr and gets, then the
// compare-and-swap restores) and the decisions alone (gets, then the
// states the algorithm left). Compare-and-swap conflicts add a step pair
// per retry, bounded by WithRetries as for one key.
//
// The requests of one key are decided in order, each on the state the
// previous one left, as successive Takes would: a counter's increments
// reach the server in order on one connection, and the requests of a
// compare-and-swap key are folded over the item read, which is then
// written once.
//
// Each server's requests go through their steps on their own, the servers
// concurrently, and each server's loop holds the local locks of its own
// compare-and-swap keys only: a server that stalls until the timeout holds
// up its own keys, not those of the Take on the other servers, which other
// callers of the store can decide meanwhile. A refusal or a failure on
// one server stops the others' loops at their next step.

// Kinds of request in a batch.
const (
	bFixed       = iota // a fixed-window charge: incr
	bSliding            // a sliding-window charge: incr, and read the older sub-windows
	bFixedPeek          // a fixed window that charges nothing (cost 0, or over the capacity)
	bSlidingPeek        // the same for a sliding window
	bCAS                // compare-and-swap state
)

// Where a counter's charge is.
const (
	cDone    = iota // charged, refused, failed or nothing to charge
	cIncr           // to create if missing (add of 0) and increment, in one step
	cSkipped        // not charged: the Take stopped before
)

// zero is the value a counter is created with, just before its first
// increment in the same step: a charge is one step whether or not its
// counter exists, and every command on one counter, of every request of
// the Take, reaches its server in the requests' order.
var zero = []byte("0")

// Where a compare-and-swap group is.
const (
	gDone  = iota
	gRead  // to read (gets)
	gWrite // to write (cas or add)
)

// maxIncrs bounds a counter's incr/add cycles, as incr does.
const maxIncrs = 4

// breq is one request of a batch.
type breq struct {
	kind    uint8
	srv     int
	keys    []string // the window counters: the current (charged) one first
	exp     int32    // the charged counter's expiration
	start   int64    // a fixed window's start
	sub     int64    // a sliding window's sub-window (µs)
	n       int      // and number of sub-windows
	grp     int      // bCAS: the group
	cstate  uint8
	incrs   int     // incr commands sent
	charged bool    // the counter was incremented (give it back on roll back)
	count   int64   // the counter after the increment
	counts  []int64 // the counters read (keys[1:] for a charge, keys for a peek)
	d       algo.Decision
	decided bool
	err     error
	// stamp is the time an admitted sliding log's units were stamped
	// with: the take's, or the later one its state had seen (a state's
	// time never moves back), where the roll-back's refund finds them.
	stamp int64
}

// bgroup is the requests of one compare-and-swap key.
type bgroup struct {
	key, mkey string
	srv       int
	members   []int
	state     uint8
	attempts  int
	// The item as read.
	exists bool
	val    []byte
	casID  uint64
	// What is to be written.
	mode  writeMode
	next  []byte
	exp   int64
	limit *algo.Limit // the limit of the last write, for errors
	// What the Take wrote, to undo on a refusal.
	wrote         bool
	before, after []byte
	err           error
}

type batch struct {
	s      *Store
	reqs   []store.Request
	now    int64
	rs     []breq
	groups []bgroup
	// servers lists the servers the requests are on, in order.
	servers []int
	// stop is set once a request is refused or failed on some server:
	// the other servers' loops charge nothing more.
	stop atomic.Bool
}

// takeBatch is Take for several requests.
func (s *Store) takeBatch(ctx context.Context, reqs []store.Request, out []algo.Decision, now int64) (store.Result, error) {
	res := store.Result{At: now}
	b := &batch{s: s, reqs: reqs, now: now, rs: make([]breq, len(reqs))}
	b.prepare()
	failed, err := b.charge(ctx)
	refused := -1
	for i := range b.rs {
		if b.rs[i].decided && !b.rs[i].d.Allowed {
			refused = i
			break
		}
	}
	if err == nil && refused < 0 {
		for i := range b.rs {
			out[i] = b.rs[i].d
		}
		res.Allowed = true
		return res, nil
	}
	unrolled, rbErr := b.rollback()
	if rbErr != nil {
		err = errors.Join(err, rbErr)
		failed = append(failed, unrolled...)
	}
	if err != nil {
		if refused >= 0 {
			// A live server refused: the Take is refused whatever the
			// failed part would have said (Result.Partial). As an error
			// alone, the caller's failure policy would answer it, and
			// failing open admit what a live key refused.
			b.partial(out, unrolled)
			res.Partial = true
		}
		return res, s.placed(err, reqs, failed, len(reqs))
	}
	// Report what each request alone would get with nothing charged,
	// except the one that refused when its key is not charged earlier in
	// reqs: it keeps its refusal. Looked at again it may pass, when what
	// refused it was another Take's units in flight (an increment not yet
	// given back, a charge being rolled back), and a refused Take must
	// name a refusing request, as storetest.Reference's does.
	kept, at := b.rs[refused].d, refused
	if chargedBefore(reqs, refused) {
		refused = -1
	}
	if failed, err := b.alone(); err != nil {
		// The Take is refused and rolled back; only what some requests
		// alone would get is not known (the zero Decision): the
		// refusal stands (Result.Partial), as in partial.
		for j := range reqs {
			br := &b.rs[j]
			bad := br.err != nil
			if br.kind == bCAS {
				bad = b.groups[br.grp].err != nil
			}
			out[j] = algo.Decision{}
			if !bad {
				out[j] = store.Unwind(br.d, reqs[j].Cost)
			}
		}
		out[at] = kept
		res.Partial = true
		return res, s.placed(err, reqs, failed, len(reqs))
	}
	for j := range reqs {
		out[j] = store.Unwind(b.rs[j].d, reqs[j].Cost)
	}
	if refused >= 0 {
		out[refused] = kept
	}
	return res, nil
}

// partial fills out for a Take that a request refused while part of it
// failed (store.Result.Partial), after the roll-back, without another
// round trip (the failed server would fail it again): a refused request
// keeps its refusal; one admitted gets what remains with its charge
// rolled back (store.Unwind), unless its roll-back failed (unrolled, the
// first request of a compare-and-swap group standing for the group):
// then it keeps its charged decision, the charge staying until it
// lapses; one that failed or was not decided gets the zero Decision.
func (b *batch) partial(out []algo.Decision, unrolled []int) {
	for j := range b.rs {
		br := &b.rs[j]
		failed := br.err != nil
		stuck := slices.Contains(unrolled, j)
		if br.kind == bCAS {
			g := &b.groups[br.grp]
			// A group that wrote was rolled back, and g.err is then the
			// roll-back's; otherwise it is the charge's.
			failed = g.err != nil && !g.wrote
			stuck = g.err != nil && g.wrote
		}
		switch {
		case failed || !br.decided:
			out[j] = algo.Decision{}
		case stuck || !br.d.Allowed:
			out[j] = br.d
		default:
			out[j] = store.Unwind(br.d, b.reqs[j].Cost)
		}
	}
}

// prepare names each request's items and groups the compare-and-swap
// requests by key.
func (b *batch) prepare() {
	s := b.s
	byKey := map[string]int{}
	for i := range b.reqs {
		r, br := &b.reqs[i], &b.rs[i]
		l, cost := r.Limit, r.Cost
		peek := cost == 0 || cost > l.Capacity()
		switch l.Algorithm() {
		case algo.FixedWindow:
			s.shapes.remember(l)
			start, end := windowBounds(l, b.now)
			br.keys, br.start = []string{s.keys.fixed(r.Key, start)}, start
			br.kind = bFixedPeek
			if !peek {
				br.kind, br.exp = bFixed, s.expiration(end, b.now)
			}
			br.srv = s.ring.server(br.keys[0])
		case algo.SlidingWindow:
			s.shapes.remember(l)
			sub, n := subWindow(l)
			idx := b.now / sub
			br.keys, br.sub, br.n = s.keys.sliding(r.Key, sub, idx, n), sub, n
			br.kind = bSlidingPeek
			if !peek {
				br.kind, br.exp = bSliding, s.expiration((idx+int64(n)+1)*sub, b.now)
			}
			br.srv = s.ring.server(br.keys[0])
		default:
			b.addCAS(i, byKey)
		}
		b.addServer(br.srv)
	}
	slices.Sort(b.servers)
}

// addCAS puts request i, a compare-and-swap one, in the group of its key
// (byKey: key → group index), made on the key's first request.
func (b *batch) addCAS(i int, byKey map[string]int) {
	br, key := &b.rs[i], b.reqs[i].Key
	br.kind = bCAS
	g, ok := byKey[key]
	if !ok {
		g = len(b.groups)
		byKey[key] = g
		mkey := b.s.keys.state(key)
		b.groups = append(b.groups, bgroup{key: key, mkey: mkey, srv: b.s.ring.server(mkey)})
	}
	b.groups[g].members = append(b.groups[g].members, i)
	br.grp, br.srv = g, b.groups[g].srv
}

// addServer adds srv to the servers the batch goes to, once.
func (b *batch) addServer(srv int) {
	if !slices.Contains(b.servers, srv) {
		b.servers = append(b.servers, srv)
	}
}

// lock takes the local locks of the compare-and-swap keys on server srv,
// in order so that two batches cannot deadlock (a single-key update holds
// one lock and takes no other, and a server's loop waits for nothing else
// while it holds them), and returns their unlock. The keys of one server
// only: a loop holding them waits for that server alone, so that a
// stalled server does not keep another server's keys from other callers.
func (b *batch) lock(srv int) func() {
	var idx []int
	for i := range b.groups {
		if b.groups[i].srv == srv {
			idx = append(idx, b.s.lockIndex(b.groups[i].key))
		}
	}
	if len(idx) == 0 {
		return func() {}
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		b.s.locks[i].Lock()
	}
	return func() {
		for _, i := range slices.Backward(idx) {
			b.s.locks[i].Unlock()
		}
	}
}

// step runs cmds: one pipelined round trip per server, the servers
// concurrently. Each command's reply or error is in it.
func (s *Store) step(cmds []*pcmd) {
	per := make([][]*pcmd, len(s.pipes))
	for _, c := range cmds {
		per[c.srv] = append(per[c.srv], c)
	}
	var wg sync.WaitGroup
	last := -1
	for i := range per {
		if len(per[i]) == 0 {
			continue
		}
		if last >= 0 {
			p, cs := s.pipes[last], per[last]
			wg.Go(func() { p.run(cs) })
		}
		last = i
	}
	if last >= 0 {
		s.pipes[last].run(per[last])
	}
	wg.Wait()
}

// stopped reports whether the batch must charge nothing more on server
// srv: a request refused or failed, on srv or (as another server's loop
// reported) elsewhere. It reads the requests of srv only: those of the
// other servers belong to their loops.
func (b *batch) stopped(srv int) bool {
	if b.stop.Load() {
		return true
	}
	for i := range b.rs {
		if br := &b.rs[i]; br.srv == srv && (br.err != nil || br.decided && !br.d.Allowed) {
			b.stop.Store(true)
			return true
		}
	}
	for i := range b.groups {
		if g := &b.groups[i]; g.srv == srv && g.err != nil {
			b.stop.Store(true)
			return true
		}
	}
	return false
}

// perServer runs f for each server of the batch, concurrently, each
// holding the local locks of its server's compare-and-swap keys, and
// returns f's errors by server.
func (b *batch) perServer(f func(srv int) error) []error {
	errs := make([]error, len(b.servers))
	var wg sync.WaitGroup
	for k, srv := range b.servers {
		run := func() {
			unlock := b.lock(srv)
			defer unlock()
			errs[k] = f(srv)
		}
		if k == len(b.servers)-1 {
			run()
		} else {
			wg.Go(run)
		}
	}
	wg.Wait()
	return errs
}

// charge runs the charging steps until every request is decided, one
// refuses (the others then stop where they are) or one fails. Each
// server's requests go through their steps on their own (chargeServer),
// the servers concurrently: a server waits for no other, so that the
// local locks of its keys are held for its own round trips only. It
// returns the failure, with the requests whose server failed.
func (b *batch) charge(ctx context.Context) ([]int, error) {
	for i := range b.rs {
		switch b.rs[i].kind {
		case bFixed, bSliding:
			b.rs[i].cstate = cIncr
		}
	}
	for i := range b.groups {
		b.groups[i].state = gRead
	}
	// chargeServer sets each request's failure, a deadline's included, in
	// b: read below, and placed on the keys' servers.
	b.perServer(func(srv int) error { b.chargeServer(ctx, srv); return nil })
	var failed []int
	var errs []error
	for i := range b.rs {
		if err := b.rs[i].err; err != nil {
			failed = append(failed, i)
			errs = append(errs, err)
		}
	}
	for gi := range b.groups {
		if g := &b.groups[gi]; g.err != nil {
			failed = append(failed, g.members[0])
			errs = append(errs, g.err)
		}
	}
	return failed, joinKeyErrors(errs)
}

// chargeServer runs the charging steps of the requests on server srv.
// ctx is looked at before a step that has commands to send, never after
// the last. When it has ended, the requests whose commands are not sent
// get its error, naming the server (the Take fails, placed on srv, and
// its charge is rolled back), and the other servers' loops stop at their
// next step.
func (b *batch) chargeServer(ctx context.Context, srv int) {
	s := b.s
	var (
		cmds []*pcmd
		rcmd = make([][]*pcmd, len(b.rs))
		gcmd = make([]*pcmd, len(b.groups))
	)
	for round := 0; ; round++ {
		stop := round > 0 && b.stopped(srv)
		cmds = cmds[:0]
		backoff := -1
		for i := range b.rs {
			r, br := &b.reqs[i], &b.rs[i]
			if br.srv != srv {
				continue
			}
			rcmd[i] = rcmd[i][:0]
			if stop && br.cstate != cDone {
				br.cstate = cSkipped
			}
			switch br.cstate {
			case cIncr:
				if br.incrs >= maxIncrs {
					br.cstate = cDone
					br.err = fmt.Errorf("memcached take %q: %w: counter %q kept vanishing between incr and add", r.Key, store.ErrContention, br.keys[0])
					continue
				}
				br.incrs++
				rcmd[i] = append(rcmd[i],
					&pcmd{verb: cmdAdd, srv: br.srv, key: br.keys[0], value: zero, exp: br.exp},
					&pcmd{verb: cmdIncr, srv: br.srv, key: br.keys[0], delta: uint64(r.Cost)})
			}
			if round == 0 {
				for _, k := range b.reads(br) {
					rcmd[i] = append(rcmd[i], &pcmd{verb: cmdGets, srv: br.srv, key: k})
				}
			}
			cmds = append(cmds, rcmd[i]...)
		}
		for gi := range b.groups {
			g := &b.groups[gi]
			gcmd[gi] = nil
			if g.srv != srv {
				continue
			}
			if stop && g.state != gDone {
				g.state = gDone
			}
			if gcmd[gi] = b.nextCmd(g, &backoff); gcmd[gi] != nil {
				cmds = append(cmds, gcmd[gi])
			}
		}
		if len(cmds) == 0 {
			return
		}
		// ctx is looked at only before a step with commands to send: a
		// Take whose last step is done is decided, whenever the deadline
		// passes after it.
		err := ctx.Err()
		if err == nil && backoff >= 0 {
			err = s.backoff(ctx, backoff)
		}
		if err != nil {
			b.notSent(srv, rcmd, gcmd, err)
			return
		}
		s.step(cmds)
		for i := range b.rs {
			if b.rs[i].srv == srv {
				b.counterReply(i, rcmd[i])
			}
		}
		for gi := range b.groups {
			if gcmd[gi] != nil {
				b.groupReply(&b.groups[gi], gcmd[gi])
			}
		}
		// A refusal or a failure here stops the other servers' loops at
		// their next step (stopped sets b.stop).
		b.stopped(srv)
	}
}

// notSent fails the requests of server srv whose commands (rcmd by
// request, gcmd by compare-and-swap group) were not sent, ctx having
// ended before (err is ctx's error), and stops the other servers' loops.
func (b *batch) notSent(srv int, rcmd [][]*pcmd, gcmd []*pcmd, err error) {
	addr := b.s.ring.addrs[srv].String()
	for i, cs := range rcmd {
		if len(cs) > 0 {
			b.rs[i].err = fmt.Errorf("memcached take %q: not decided, its context ended before its step to server %s was sent: %w", b.reqs[i].Key, addr, err)
		}
	}
	for gi, c := range gcmd {
		if c != nil {
			g := &b.groups[gi]
			g.err, g.state = fmt.Errorf("memcached take %q: not decided, its context ended before its step to server %s was sent: %w", g.key, addr, err), gDone
		}
	}
	b.stop.Store(true)
}

// reads lists the counters a window request reads while charging: a
// sliding window's older sub-windows, or every counter of one that
// charges nothing.
func (b *batch) reads(br *breq) []string {
	switch br.kind {
	case bSliding:
		return br.keys[1:]
	case bFixedPeek, bSlidingPeek:
		return br.keys
	}
	return nil
}

// counterReply takes in the replies to a window request's commands of a
// charging step, and decides it once charged.
func (b *batch) counterReply(i int, cmds []*pcmd) {
	r, br := &b.reqs[i], &b.rs[i]
	var addErr error
	for _, c := range cmds {
		if c.verb == cmdAdd && c.err != nil && !isConnErr(c.err) {
			// A server started with -M and full refuses even an add of a
			// counter that exists: only the incr says whether it counts.
			addErr = c.err
			continue
		}
		if c.err != nil {
			if br.err == nil {
				br.err = b.s.unavailableOr("take", r.Key, c.err)
			}
			br.cstate = cDone
			continue
		}
		switch c.verb {
		case cmdIncr:
			if c.res == rMiss {
				if addErr != nil {
					br.err, br.cstate = b.s.unavailableOr("take", r.Key, addErr), cDone
				}
				continue // it expired or was evicted since the add: again
			}
			br.cstate, br.charged, br.count = cDone, true, int64(c.n)
		case cmdAdd:
			// STORED: a fresh counter; NOT_STORED: it was there.
		case cmdGets:
			n := int64(0)
			if c.res == rOK {
				var err error
				if n, err = parseCount(c.val); err != nil {
					br.err = b.s.unavailable("take", r.Key, err)
				}
			}
			br.counts = append(br.counts, n)
		}
	}
	if br.err != nil || br.decided {
		return
	}
	l, cost, now := r.Limit, r.Cost, b.now
	switch br.kind {
	case bFixedPeek, bSlidingPeek:
		if len(br.counts) == len(br.keys) {
			br.d, br.decided = l.Peek(b.windowState(br, br.counts), now, cost), true
		}
	case bFixed:
		if br.charged {
			b.s.stats.counterOps.Add(1)
			st := algo.State{A: br.start, B: max(br.count-cost, 0), C: now}
			br.d, br.decided = l.Take(&st, now, cost), true
		}
	case bSliding:
		if br.charged && len(br.counts) == len(br.keys)-1 {
			b.s.stats.counterOps.Add(1)
			st := slidingState(br.n, now, br.sub, append([]int64{max(br.count-cost, 0)}, br.counts...))
			br.d, br.decided = l.Take(&st, now, cost), true
		}
	}
}

// windowState lays out counts (of br.keys) as the algo package's state.
func (b *batch) windowState(br *breq, counts []int64) *algo.State {
	if br.kind == bFixed || br.kind == bFixedPeek {
		return &algo.State{A: br.start, B: counts[0], C: b.now}
	}
	st := slidingState(br.n, b.now, br.sub, counts)
	return &st
}

// nextCmd is the command g's state asks for next — a gets to (re)read its
// item, the write of g.next, or nil when g is done — raising *backoff to
// the retry count of a re-read, which waits before it is sent.
func (b *batch) nextCmd(g *bgroup, backoff *int) *pcmd {
	switch g.state {
	case gRead:
		*backoff = max(*backoff, g.attempts-1)
		return &pcmd{verb: cmdGets, srv: g.srv, key: g.mkey}
	case gWrite:
		return b.writeCmd(g)
	}
	return nil
}

// writeCmd is the command writing g.next: cas over what was read, or add
// for a new item. It sets g.err instead when the state is too large.
func (b *batch) writeCmd(g *bgroup) *pcmd {
	if len(g.next)+len(g.mkey)+itemOverhead > b.s.cfg.maxItemSize {
		g.err, g.state = b.s.tooLarge(g.key, g.limit, len(g.next), nil), gDone
		return nil
	}
	c := &pcmd{verb: cmdAdd, srv: g.srv, key: g.mkey, value: g.next, exp: b.s.expiration(g.exp, b.now)}
	if g.exists {
		c.verb, c.casID = cmdCAS, g.casID
	}
	return c
}

// read takes in a gets of g's item.
func (b *batch) read(g *bgroup, c *pcmd) bool {
	if c.err != nil {
		g.err, g.state = b.s.unavailable("read", g.key, c.err), gDone
		return false
	}
	g.exists, g.val, g.casID = c.res == rOK, c.val, c.gotID
	if !g.exists {
		g.val = nil
	}
	if g.exists && g.casID == 0 {
		l := b.reqs[g.members[0]].Limit
		g.err, g.state = fmt.Errorf("%w: memcached: key %q: server %s gave no CAS id: it runs with compare-and-swap disabled (-C), which the %s algorithm needs; restart it without -C",
			store.ErrUnavailable, g.key, b.s.ServerFor(g.key), l.Algorithm()), gDone
		return false
	}
	return true
}

// written takes in the reply to g's write: true when it landed, or when
// it need not (tryWrite); otherwise g is to be read again, or has failed.
func (b *batch) written(g *bgroup, c *pcmd, retries int) bool {
	switch {
	case c.err == nil && c.res == rOK:
		b.s.stats.casOps.Add(1)
		g.state = gDone
		return true
	case c.err != nil && isTooLarge(c.err):
		g.err, g.state = b.s.tooLarge(g.key, g.limit, len(g.next), c.err), gDone
		return false
	case c.err != nil && g.mode == tryWrite:
		// The write only stores what a decision that charges nothing
		// left (see update): the decision stands.
		b.s.stats.casOps.Add(1)
		g.state = gDone
		return false
	case c.err != nil:
		g.err, g.state = b.s.unavailable("write", g.key, c.err), gDone
		return false
	}
	// Someone wrote, created or removed the item since it was read.
	if g.mode == tryWrite {
		b.s.stats.casOps.Add(1)
		g.state = gDone
		return false
	}
	if g.attempts >= retries {
		b.s.stats.contention.Add(1)
		g.err = fmt.Errorf("%w: memcached: key %q: %d compare-and-swap attempts lost to concurrent writers; nothing was charged",
			store.ErrContention, g.key, g.attempts+1)
		g.state = gDone
		return false
	}
	b.s.stats.casRetries.Add(1)
	g.attempts++
	g.state = gRead
	return false
}

// groupReply takes in the reply to g's command of a charging step: a read
// is decided (each request in order on the state the previous one left)
// and the state to write prepared; a write is recorded, or retried.
func (b *batch) groupReply(g *bgroup, c *pcmd) {
	now := b.now
	if c.verb != cmdGets {
		if b.written(g, c, b.s.cfg.retries) {
			if g.mode != noWrite && c.res == rOK && c.err == nil {
				g.wrote, g.before, g.after = true, g.val, g.next
			}
		}
		return
	}
	if !b.read(g, c) {
		return
	}
	cur, exists := g.val, g.exists
	g.mode, g.next = noWrite, nil
	for _, i := range g.members {
		r, br := &b.reqs[i], &b.rs[i]
		l, cost, lease := r.Limit, r.Cost, r.Lease
		d, mode, next, exp, err := b.s.fold(cur, exists, r.Key, l, now, func(st *algo.State, _ bool) (algo.Decision, writeMode) {
			d := l.TakeLease(st, now, cost, lease)
			if d.Allowed && cost > 0 {
				if l.Algorithm() == algo.SlidingLog && len(st.Ext) > 0 {
					br.stamp = st.Ext[len(st.Ext)-1] // the units just added
				}
				return d, mustWrite
			}
			return d, tryWrite
		})
		if err != nil {
			g.err, g.state = err, gDone
			return
		}
		br.d, br.decided = d, true
		if mode != noWrite {
			cur, exists = next, true
			g.mode, g.next, g.exp, g.limit = max(g.mode, mode), next, exp, l
		}
		if !d.Allowed {
			break // the Take is refused: nothing is written
		}
	}
	if g.mode == noWrite || b.stopped(g.srv) {
		b.s.stats.casOps.Add(1)
		g.state = gDone
		return
	}
	g.state = gWrite
}

// fold applies op to a state item's value cur (exists: there is one) as
// update does for key under l, without the server: it returns op's
// decision, how the result is to be written (noWrite: nothing changed)
// and the new value and its expiry.
func (s *Store) fold(cur []byte, exists bool, key string, l *algo.Limit, now int64,
	op func(st *algo.State, live bool) (algo.Decision, writeMode)) (algo.Decision, writeMode, []byte, int64, error) {
	var st algo.State
	live := false
	if exists {
		kind, exp, err := decodeState(cur, &st)
		if err != nil {
			return algo.Decision{}, noWrite, nil, 0, fmt.Errorf("memcached: key %q holds a malformed state (Reset it): %w", key, err)
		}
		if kind != l.Algorithm() || exp <= now {
			st = algo.State{}
		} else {
			live = true
		}
	}
	d, mode := op(&st, live)
	if mode == noWrite {
		return d, noWrite, cur, 0, nil
	}
	exp := l.ExpiresAt(&st)
	next := encodeState(make([]byte, 0, 40+9*len(st.Ext)), l, &st)
	if exists && bytes.Equal(next, cur) || !exists && exp <= now {
		return d, noWrite, cur, 0, nil
	}
	return d, mode, next, exp, nil
}

// rollback undoes what the charging steps charged: counters are given
// back with decr, and a compare-and-swap item that still holds what the
// Take wrote is put back as it was, one that another caller changed since
// is given algo.Limit.Refund (concurrency: the slots just taken are
// removed). It retries harder than a decision does: a failed roll-back
// leaves units charged for a refused request (under-admission, never
// over-admission) and is reported as an error, with the requests whose
// roll-back failed. Each server's keys are rolled back on their own, the
// servers concurrently, as they are charged.
func (b *batch) rollback() ([]int, error) {
	failed := make([][]int, len(b.servers))
	errs := b.perServer(func(srv int) error {
		k := slices.Index(b.servers, srv)
		var err error
		failed[k], err = b.rollbackServer(srv)
		return err
	})
	return slices.Concat(failed...), errors.Join(errs...)
}

// rollbackServer rolls back what the charge did on server srv.
func (b *batch) rollbackServer(srv int) ([]int, error) {
	s := b.s
	ctx := context.Background()
	retries := 4*s.cfg.retries + 4
	var cmds []*pcmd
	rcmd := make([]*pcmd, len(b.rs))
	for i := range b.rs {
		if br := &b.rs[i]; br.srv == srv && br.charged {
			s.stats.rollbacks.Add(1)
			rcmd[i] = &pcmd{verb: cmdDecr, srv: br.srv, key: br.keys[0], delta: uint64(b.reqs[i].Cost)}
			cmds = append(cmds, rcmd[i])
		}
	}
	var undo []*bgroup
	for gi := range b.groups {
		if g := &b.groups[gi]; g.srv == srv && g.wrote {
			s.stats.rollbacks.Add(1)
			g.state, g.attempts, g.err = gRead, 0, nil
			undo = append(undo, g)
		}
	}
	var errs []error
	var failed []int
	gcmd := make([]*pcmd, len(undo))
	for round := 0; ; round++ {
		backoff := -1
		for k, g := range undo {
			gcmd[k] = nil
			if gcmd[k] = b.nextCmd(g, &backoff); gcmd[k] != nil {
				cmds = append(cmds, gcmd[k])
			}
		}
		if len(cmds) == 0 {
			break
		}
		if backoff >= 0 {
			s.backoff(ctx, backoff)
		}
		s.step(cmds)
		cmds = cmds[:0]
		if round == 0 {
			for i, c := range rcmd {
				if c != nil && c.err != nil {
					// The decr's own error is the connection's or the
					// server's words: wrap it as the charge's errors are,
					// so that the failure policy and the breaker see an
					// unavailable store.
					errs = append(errs, fmt.Errorf("memcached: roll back key %q after a refusal (its units stay charged until they expire): %w", b.reqs[i].Key, b.s.unavailable("decr", b.reqs[i].Key, c.err)))
					failed = append(failed, i)
				}
			}
		}
		for k, g := range undo {
			c := gcmd[k]
			if c == nil {
				continue
			}
			if c.verb != cmdGets {
				b.written(g, c, retries)
				continue
			}
			if b.read(g, c) {
				b.undoGroup(g)
			}
		}
	}
	for _, g := range undo {
		if g.err != nil {
			errs = append(errs, fmt.Errorf("memcached: roll back key %q after a refusal (its units stay charged until they expire): %w", g.key, g.err))
			failed = append(failed, g.members[0])
		}
	}
	return failed, errors.Join(errs...)
}

// undoGroup prepares the write undoing g's charge on the item just read.
func (b *batch) undoGroup(g *bgroup) {
	now := b.now
	g.state = gDone
	if g.exists && bytes.Equal(g.val, g.after) {
		g.next, g.mode = g.before, mustWrite
		if g.next == nil {
			g.next = encodeState(nil, b.reqs[g.members[0]].Limit, &algo.State{}) // reads as fresh
		}
		g.exp = 0
		if _, e, err := decodeState(g.next, &algo.State{}); err == nil {
			g.exp = e
		}
		g.limit = b.reqs[g.members[0]].Limit
		g.state = gWrite
		return
	}
	cur, exists := g.val, g.exists
	g.mode = noWrite
	for _, i := range slices.Backward(g.members) {
		r := &b.reqs[i]
		if !b.rs[i].d.Allowed || r.Cost == 0 {
			continue
		}
		l, cost, lease := r.Limit, r.Cost, r.Lease
		_, mode, next, exp, err := b.s.fold(cur, exists, r.Key, l, now, func(st *algo.State, live bool) (algo.Decision, writeMode) {
			if !live {
				return algo.Decision{}, noWrite
			}
			if l.Algorithm() == algo.Concurrency {
				return algo.Decision{}, must(dropNewestLeases(st, lease, cost))
			}
			at := now
			if b.rs[i].stamp != 0 {
				at = b.rs[i].stamp
			}
			l.Refund(st, now, at, cost)
			return algo.Decision{}, mustWrite
		})
		if err != nil {
			g.err = err
			return
		}
		if mode != noWrite {
			cur, exists = next, true
			g.mode, g.next, g.exp, g.limit = mustWrite, next, exp, l
		}
	}
	if g.mode != noWrite {
		g.state = gWrite
	}
}

// alone decides every request on its own with nothing charged, after a
// refusal: a window request as Peek does; a compare-and-swap request as
// Peek does if it would pass, otherwise as its refused Take, storing the
// state the algorithm left (one attempt: it charges nothing), each on
// what the previous request of its key left. The decisions go to b.rs.
// It does not look at the caller's context: the Take is decided (refused,
// and rolled back, which does not either), and a deadline passing now must
// not turn the refusal into an error; the store's round-trip timeout
// bounds the read.
func (b *batch) alone() ([]int, error) {
	s, now := b.s, b.now
	var cmds []*pcmd
	rcmd := make([][]*pcmd, len(b.rs))
	for i := range b.rs {
		br := &b.rs[i]
		br.err, br.counts = nil, br.counts[:0]
		if br.kind == bCAS {
			continue
		}
		for _, k := range br.keys {
			rcmd[i] = append(rcmd[i], &pcmd{verb: cmdGets, srv: br.srv, key: k})
		}
		cmds = append(cmds, rcmd[i]...)
	}
	gcmd := make([]*pcmd, len(b.groups))
	for gi := range b.groups {
		g := &b.groups[gi]
		g.err = nil
		gcmd[gi] = &pcmd{verb: cmdGets, srv: g.srv, key: g.mkey}
		cmds = append(cmds, gcmd[gi])
	}
	s.step(cmds)
	var failed []int
	var errs []error
	for i, cs := range rcmd {
		br := &b.rs[i]
		for _, c := range cs {
			n := int64(0)
			err := c.err
			if err == nil && c.res == rOK {
				n, err = parseCount(c.val)
			}
			if err != nil {
				br.err = b.s.unavailable("read", b.reqs[i].Key, err)
				break
			}
			br.counts = append(br.counts, n)
		}
		if br.err != nil {
			failed, errs = append(failed, i), append(errs, br.err)
		} else if br.kind != bCAS {
			br.d = b.reqs[i].Limit.Peek(b.windowState(br, br.counts), now, b.reqs[i].Cost)
		}
	}
	cmds = cmds[:0]
	for gi := range b.groups {
		g := &b.groups[gi]
		if !b.read(g, gcmd[gi]) {
			failed, errs = append(failed, g.members[0]), append(errs, g.err)
			gcmd[gi] = nil
			continue
		}
		cur, exists := g.val, g.exists
		g.mode = noWrite
		for _, i := range g.members {
			r := &b.reqs[i]
			l, cost, lease := r.Limit, r.Cost, r.Lease
			d, mode, next, exp, err := s.fold(cur, exists, r.Key, l, now, func(st *algo.State, _ bool) (algo.Decision, writeMode) {
				if d := l.Peek(st, now, cost); d.Allowed {
					return d, tryWrite
				}
				return l.TakeLease(st, now, cost, lease), tryWrite
			})
			if err != nil {
				g.err = err
				break
			}
			b.rs[i].d = d
			if mode != noWrite {
				cur, exists = next, true
				g.mode, g.next, g.exp, g.limit = tryWrite, next, exp, l
			}
		}
		gcmd[gi] = nil
		if g.err == nil && g.mode != noWrite {
			gcmd[gi] = b.writeCmd(g)
		}
		if g.err != nil {
			failed, errs = append(failed, g.members[0]), append(errs, g.err)
			continue
		}
		if gcmd[gi] != nil {
			cmds = append(cmds, gcmd[gi])
		} else {
			s.stats.casOps.Add(1)
		}
	}
	if len(errs) > 0 {
		return failed, joinKeyErrors(errs)
	}
	if len(cmds) > 0 {
		s.step(cmds)
	}
	for gi := range b.groups {
		if c := gcmd[gi]; c != nil {
			g := &b.groups[gi]
			b.written(g, c, 0)
			if g.err != nil {
				failed, errs = append(failed, g.members[0]), append(errs, g.err)
			}
		}
	}
	return failed, joinKeyErrors(errs)
}

// joinKeyErrors joins the errors of a batch's keys, telling errors that
// differ only in the keys they quote once, with how many more keys failed
// alike: a server that went away fails every key of a take with the same
// cause, which would otherwise be repeated once a key in every log line
// and readiness text that quotes the error.
func joinKeyErrors(errs []error) error { return store.JoinAlike(errs, "key") }
