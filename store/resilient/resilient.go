package resilient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/limitcache"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// ErrCircuitOpen is wrapped by the error (a *CircuitOpenError, which names
// the failure that opened the breaker) reported to Hooks.Fallback, and
// returned by Ping and the other calls, while the breaker sends nothing
// to the store. It wraps store.ErrUnavailable.
var ErrCircuitOpen = fmt.Errorf("resilient: circuit open: %w", store.ErrUnavailable)

// Store is a store.Store that wraps another with a timeout, circuit
// breakers (one per partition of a store.Partitioner, else one), a failure
// policy and an over-limit cache. Create it with New.
type Store struct {
	inner store.Store
	cfg   config
	cache *overLimit // nil: disabled
	// near is inner as a store.LocalTaker (store/lease), nil if it is
	// not one: a Take it decides in process needs no timed call.
	near store.LocalTaker

	dom atomic.Pointer[domains]
	// pending is set while a link of inner's Unwrap chain is missing (a
	// store opened in the background): the Partitioner is looked for
	// again after a call succeeds.
	pending atomic.Bool
	// stateMu orders the breakers' changes and guards the domains' counts.
	stateMu sync.Mutex
	worst   atomic.Int32 // BreakerState: what Breaker reports

	// localMu orders the local store's creation and Close; closed is set
	// by Close, after which every method returns store.ErrClosed.
	localMu sync.Mutex
	local   atomic.Pointer[store.Store]
	closed  atomic.Bool
	shares  limitcache.Cache[*algo.Limit] // FailLocal's local shares (see share)
}

var (
	_ store.Store     = (*Store)(nil)
	_ store.Inspector = (*Store)(nil)
)

// New wraps st. Options and their defaults:
//
//   - WithTimeout(50ms): deadline of every store call
//   - WithPolicy(FailOpen): what answers when the store cannot
//   - WithInstances(1): instances sharing the store, for FailLocal
//   - WithBreaker(5, 1s): consecutive failures that open a breaker, cool-down
//   - WithOverLimitCache(100000): keys kept as over limit; 0 disables
//   - WithOverLimitCacheTTL(1s): longest a cached refusal is trusted
//   - WithClock(time.Now): clock of the cache and the breaker
//   - WithHooks(Hooks{}): observers
//   - WithLocalStore(nil): FailLocal's store; nil means a store/memory Store
//
// When st, or a store down its Unwrap chain, is a store.Partitioner of
// more than one partition (a Redis Cluster, a memcached ring), each
// partition has a breaker of its own. The Store owns st: Close closes it.
func New(st store.Store, opts ...Option) (*Store, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidOption)
	}
	c := config{
		timeout:   DefaultTimeout,
		policy:    FailOpen,
		instances: 1,
		failures:  DefaultFailures,
		cooldown:  DefaultCooldown,
		cacheKeys: DefaultOverLimitKeys,
		cacheTTL:  DefaultOverLimitTTL,
		clock:     time.Now,
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.clock == nil {
		c.clock = time.Now
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	s := &Store{inner: st, cfg: c}
	s.near, _ = st.(store.LocalTaker)
	part, known := findPartitioner(st)
	s.dom.Store(s.newDomains(part))
	s.pending.Store(!known)
	if c.cacheKeys > 0 {
		s.cache = newOverLimit(c.cacheKeys, c.cacheTTL)
	}
	if c.local != nil {
		s.local.Store(&c.local)
	}
	return s, nil
}

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() store.Store { return s.inner }

// Policy returns the failure policy.
func (s *Store) Policy() Policy { return s.cfg.policy }

// Breaker returns the breaker's state; with one breaker per partition, the
// worst of theirs: Open when any is open, else HalfOpen when any is half-open,
// else Closed. Breakers returns each.
func (s *Store) Breaker() BreakerState { return BreakerState(s.worst.Load()) }

// CachedKeys returns the number of keys the over-limit cache holds.
func (s *Store) CachedKeys() int {
	if s.cache == nil {
		return 0
	}
	return s.cache.len()
}

func (s *Store) nowUS() int64 { return s.cfg.clock().UnixMicro() }

// outcome classifies a call's error.
type outcome uint8

const (
	ok        outcome = iota
	failed            // the store failed: breaker failure, policy answers
	contended         // the store is up but gave up (ErrContention): a Take is refused, a Peek answered by the policy
	callers           // the caller's error: returned as is, counted for no breaker
	storeErr          // the store answered with an error that is no outage: returned as is, counted as a success
)

// returned reports an outcome whose error goes back to the caller as it
// is, with no policy answering.
func (o outcome) returned() bool { return o == callers || o == storeErr }

// classify classifies err, the error of a call whose caller ended it when
// gone is set (see callerGone).
func classify(gone bool, err error) outcome {
	switch {
	case err == nil:
		return ok
	case gone, errors.Is(err, store.ErrBadRequest), errors.Is(err, store.ErrClosed):
		return callers
	case outage(err):
		// Before contention: a call that met contention on one key and
		// an outage on another (memcached's multi-key Take, one server
		// dead) could not be decided, and the dead server's breaker
		// must count it.
		return failed
	case errors.Is(err, store.ErrContention):
		return contended
	}
	return storeErr
}

// callerGone reports whether the caller ended the call: it cancelled ctx,
// or ctx's deadline, when it was the call's (own false: it came before the
// timeout; see callTimeout), has passed, though its timer may not have
// fired yet. A store client that sets its connection's deadline from the
// context's (Redis's) can fail with its own i/o timeout an instant before
// the context's timer fires; tested on ctx.Err() alone, that timeout was a
// store failure about half the time under a 3 ms caller deadline, the
// policy answering and the breaker counting it. When the call's deadline
// was its own, before the caller's, a deadline is the store's, even if the
// caller's has passed too by the time the call is classified (a loaded
// machine).
func callerGone(ctx context.Context, own bool) bool {
	switch err := ctx.Err(); {
	case errors.Is(err, context.Canceled):
		return true
	case own:
		return false
	case err != nil:
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// outage reports an error saying the store could not decide for now:
// store.ErrUnavailable (which the stores wrap around a refused or broken
// connection, a timeout, and a reply that passes by itself, such as
// Redis's LOADING, READONLY or CLUSTERDOWN), a deadline or cancellation
// that is not the caller's, a connection cut short (io.EOF,
// io.ErrUnexpectedEOF, from a store that does not wrap them) or a network
// error. Every other error lasts until someone changes something — a
// permission the deployment withholds (Redis's NOPERM and WRONGPASS),
// another program's data under the store's keys (WRONGTYPE) — and is the
// caller's to see: a policy answering for it would hide it for good
// (FailOpen admitted every request of a Redis user whose ACL missed the
// store's keys). The store did answer, so it counts as a success for the
// breaker (storeErr): a half-open breaker whose probe met such an error
// closes, rather than leaving every other call to the policy.
func outage(err error) bool {
	if errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// errTimeout reports a call abandoned at its deadline.
var errTimeout = fmt.Errorf("resilient: no answer within the timeout: %w", store.ErrUnavailable)

// A job is one store call, run on a goroutine of its own so that the
// caller can leave at the deadline. Jobs are pooled with their buffers: a
// call answered in time gives its job back, and a call abandoned at its
// deadline leaves its job to the garbage collector, since the goroutine may
// still write to it.
type job struct {
	s    *Store
	ctx  context.Context // the call's, with its deadline
	run  func(j *job) error
	fn   func(ctx context.Context) error // run by runFn
	reqs []store.Request                 // a copy: the call may outlive the caller
	out  []algo.Decision
	res  store.Result
	done chan error // capacity 1: the goroutine never blocks
	// startFn is start bound to the job once, when the pool makes it: a
	// go statement on the method value would allocate its closure on
	// every call.
	startFn func()
	// dom and parts are the breakers the call asks (see route); probes[i]
	// is set when the call is parts[i]'s half-open probe. The goroutine
	// reads them only once the caller handed the call off (late), after
	// which nobody writes them.
	dom    *domains
	parts  []int
	probes []bool
	// abandoned is set by the caller that left at the deadline; the
	// goroutine never reads it.
	abandoned bool
	// late says who reports the call's outcome to the breakers: the
	// caller, unless it left a call over several partitions at the
	// deadline and handed that to the goroutine (see lateCount).
	late atomic.Int32
	// bound is the timer that counts a handed-off call the store has not
	// answered within the late grace (see handOff); the goroutine stops it
	// when the answer comes first, so that the timer does not keep the job
	// alive.
	bound atomic.Pointer[time.Timer]
}

// The states of job.late.
const (
	running   int32 = iota // the store call is under way
	answered               // the goroutine sent the store's answer on done
	handedOff              // the caller left at the deadline: the store's answer, when it comes, is counted by the goroutine
	counted                // the outcome of a handed-off call was counted
)

// The late grace is how long after the deadline a call handed off to its
// goroutine waits for the store's answer before it is counted as failed on
// each of its partitions: the call's timeout, at least minLateGrace and at
// most maxLateGrace (see lateGrace). The stores that place their failures
// answer well within it (a Redis Cluster's client at the same deadline, a
// memcached server on a round-trip timeout the server sets to the same
// value); a store client that ignores its context and has no timeout of
// its own never does, and its dead node's breaker must open about as soon
// as if the call had been counted at the deadline, not after every caller
// has left several calls (and goroutines) stuck on it. The floor leaves
// room for a loaded machine's scheduling delay between the deadline and
// the store's answer; the ceiling bounds how long a half-open probe holds
// its breaker.
const (
	minLateGrace = 100 * time.Millisecond
	maxLateGrace = time.Second
)

// lateGrace is the late grace for a call timeout of d.
func lateGrace(d time.Duration) time.Duration { return min(max(d, minLateGrace), maxLateGrace) }

var jobs = sync.Pool{New: func() any {
	j := &job{done: make(chan error, 1)}
	j.startFn = j.start
	return j
}}

// getJob returns a job running run with a copy of reqs and room for as
// many decisions, routed to the breakers of reqs' keys.
func (s *Store) getJob(run func(*job) error, reqs []store.Request) *job {
	j := jobs.Get().(*job)
	j.s, j.run = s, run
	j.reqs = append(j.reqs[:0], reqs...)
	if cap(j.out) < len(reqs) {
		j.out = make([]algo.Decision, len(reqs))
	}
	j.out = j.out[:len(reqs)]
	j.route(s.dom.Load(), len(reqs), func(i int) string { return reqs[i].Key })
	return j
}

// putJob gives j back to the pool unless its goroutine may still use it.
func putJob(j *job) {
	if j.abandoned {
		return
	}
	clear(j.reqs) // keys and limits are the caller's: keep them alive no longer
	*j = job{reqs: j.reqs[:0], out: j.out[:0], parts: j.parts[:0], probes: j.probes[:0], done: j.done, startFn: j.startFn}
	jobs.Put(j)
}

// start is the job's goroutine. When the caller handed the call off at
// the deadline, the goroutine counts the store's late answer, unless the
// call was counted already (see handOff), and stops the timer of the late
// grace.
func (j *job) start() {
	err := j.run(j)
	if j.late.CompareAndSwap(running, answered) {
		j.done <- err
		return
	}
	if j.late.CompareAndSwap(handedOff, counted) {
		if t := j.bound.Load(); t != nil {
			t.Stop()
		}
		j.lateCount(err)
	}
	for _, p := range j.parts {
		j.dom.brs[p].late.Add(-1)
	}
}

func runTake(j *job) (err error) {
	j.res, err = j.s.inner.Take(j.ctx, j.reqs, j.out)
	return err
}

func runPeek(j *job) error { return j.s.inner.Peek(j.ctx, j.reqs, j.out) }

func runFn(j *job) error { return j.fn(j.ctx) }

// callFunc runs f against the store as call does, for the calls that are
// not worth a job of their own, under the breakers of reqs' keys.
func (s *Store) callFunc(ctx context.Context, op string, reqs []store.Request, f func(ctx context.Context) error) (outcome, error) {
	j := s.getJob(runFn, nil)
	j.route(s.dom.Load(), len(reqs), func(i int) string { return reqs[i].Key })
	j.fn = f
	defer putJob(j)
	return s.call(ctx, op, j)
}

// callKeys is callFunc for calls given keys alone.
func (s *Store) callKeys(ctx context.Context, op string, keys []string, f func(ctx context.Context) error) (outcome, error) {
	j := s.getJob(runFn, nil)
	j.route(s.dom.Load(), len(keys), func(i int) string { return keys[i] })
	j.fn = f
	defer putJob(j)
	return s.call(ctx, op, j)
}

// call runs j against the store under its breakers and the timeout. It
// returns the call's outcome and error; when a breaker refuses the call it
// returns failed and that breaker's *CircuitOpenError without running j.
// When the deadline passes first, j is marked abandoned. The outcome is
// counted by the breakers j asked (see count); a call over several
// partitions that the deadline cut short is counted when the store
// answers (see lateCount).
func (s *Store) call(ctx context.Context, op string, j *job) (outcome, error) {
	if s.closed.Load() {
		// Before the breakers: an open one would have the policy answer
		// for a store that is closed, not down.
		return callers, store.ErrClosed
	}
	d := j.dom
	for i, p := range j.parts {
		allowed, probe := d.brs[p].allow()
		if !allowed {
			for k := range i {
				if j.probes[k] {
					d.brs[j.parts[k]].cancelProbe()
				}
			}
			return failed, d.brs[p].refusal()
		}
		j.probes[i] = probe
	}
	timeout, own := s.callTimeout(ctx)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	j.ctx = cctx
	go j.startFn()
	var err error
	handed := false
	select {
	case err = <-j.done:
	case <-cctx.Done():
		switch {
		case callerGone(ctx, own):
			j.abandoned = true
			err = ctx.Err()
		case len(j.parts) > 1 && j.late.CompareAndSwap(running, handedOff):
			j.abandoned, handed = true, true
			err = errTimeout
		case len(j.parts) > 1:
			err = <-j.done // answered as the deadline passed
		default:
			j.abandoned = true
			err = errTimeout
		}
	}
	placed := partitionError(err)
	gone := callerGone(ctx, own)
	if err != nil {
		err = timeoutText(gone, err)
	}
	if h := s.cfg.hooks.Call; h != nil {
		h(op, time.Since(start), err)
	}
	o := classify(gone, err)
	if handed {
		j.handOff(lateGrace(s.cfg.timeout))
	} else {
		j.count(o, err, placed)
	}
	if o == ok && s.pending.Load() {
		s.resolve()
	}
	return o, err
}

// A caller whose deadline comes before the store timeout (Envoy's rate
// limit filter gives a call 20 ms by default) has its call cut
// callerReserve before that deadline, provided that leaves the store at
// least minCallerWait (see callTimeout).
const (
	callerReserve = 2 * time.Millisecond
	minCallerWait = 5 * time.Millisecond
)

// callTimeout is how long a call for ctx may wait for the store: the
// timeout, or, when ctx's deadline comes sooner, until callerReserve
// before it, if that leaves at least minCallerWait. A store that has not
// answered by then is slower than its callers can wait: the call is a
// timeout, counted by the breakers, and the policy answers while the
// caller still listens. Left to the caller's deadline, every call on a
// hung store (a partition dropping packets) would end with the caller's
// own error, counted for no breaker, and the policy would never answer:
// the breaker would stay closed and each call wait out its deadline. A
// caller with less time left keeps its deadline, whose passing counts
// for no breaker, so that a client with tiny deadlines cannot open the
// breaker for the others.
// own reports that the call's deadline comes before the caller's (or the
// caller has none), so that its passing is the store's timeout.
func (s *Store) callTimeout(ctx context.Context) (d time.Duration, own bool) {
	d = s.cfg.timeout
	dl, ok := ctx.Deadline()
	if !ok {
		return d, true
	}
	left := time.Until(dl)
	if cut := left - callerReserve; cut >= minCallerWait && cut < d {
		return cut, true
	}
	return d, d < left
}

// partitionError returns the *store.PartitionError in err's chain, or nil.
// A function of its own so that a call without an error allocates no
// target for errors.As.
func partitionError(err error) *store.PartitionError {
	if err == nil {
		return nil
	}
	var pe *store.PartitionError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// timeoutText returns errTimeout for a store error that gave up at the
// call's deadline, the caller being there (gone false; see callerGone):
// the same timeout as an abandoned call. Its text would add the key it
// was about (a client's address or API key) and make each timeout a cause
// of its own to the breaker's log. One that gave up at the caller's
// deadline is context.DeadlineExceeded, as when the context's timer fires
// first.
func timeoutText(gone bool, err error) error {
	switch {
	case !errors.Is(err, context.DeadlineExceeded):
		return err
	case gone:
		return context.DeadlineExceeded
	}
	return errTimeout
}

// count reports the outcome o of j's call, with error err, to the breakers
// j asked. A success (or contention: the store is up) counts for each. A
// failure the store placed (placed, a *store.PartitionError naming at
// least one of j's partitions) counts against the partitions it names as
// failed, as a success for those that did their part, and for none of
// those it names as not reached. A failure the store did not place counts
// against each partition: a Partitioner here places every failure of a
// call over several partitions that it can tell apart, so what is left
// failed for the whole call (or comes from a store that cannot tell), and
// counting it for no partition would keep a dead node's breaker closed
// under a load of multi-key calls, each then waiting out the timeout.
// A store error that is no outage (storeErr) counts as a success, but for
// the partitions the store placed it on (failed or not reached), which it
// counts for none. A call the caller ended (callers) counts for none and
// gives back the probes it held.
func (j *job) count(o outcome, err error, placed *store.PartitionError) {
	d := j.dom
	if placed != nil && (o != failed && o != storeErr || d.part == nil || !j.touches(placed.Failed)) {
		placed = nil
	}
	for i, p := range j.parts {
		b, probe := &d.brs[p], j.probes[i]
		switch {
		case o == storeErr && placed != nil && (slices.Contains(placed.Failed, p) || slices.Contains(placed.Skipped, p)):
			// A store error the store placed: the partitions it names
			// answered with that error or were not reached (a Cluster's
			// cross-slot call joins every failed group's error, so an
			// outage among them would have made this a failure): neither
			// a success nor a failure.
			if probe {
				b.cancelProbe()
			}
		case o == ok, o == contended, o == storeErr:
			b.success(probe)
		case o == failed && placed == nil, o == failed && slices.Contains(placed.Failed, p):
			b.failure(probe, err)
		case o == failed && !slices.Contains(placed.Skipped, p):
			b.success(probe)
		default:
			if probe {
				b.cancelProbe()
			}
		}
	}
}

// touches reports whether one of parts is one of j's partitions.
func (j *job) touches(parts []int) bool {
	for _, p := range parts {
		if slices.Contains(j.parts, p) {
			return true
		}
	}
	return false
}

// lateCount counts the answer, err, of a call over several partitions
// that the caller left at the deadline: the store's late error says which
// of them failed (a Redis Cluster's client gives up at the same deadline
// and names the slot ranges that did not answer; a memcached server that
// is down fails on its own round-trip timeout), where a timeout counted at
// the deadline would count against each of them, the live nodes' included.
// A failure the store placed counts as count has it; one it did not place
// counts against each partition. A success that came late says only that
// some partition was slow, not which: it counts for none (and gives back
// the probes). A call the store has not answered within the late grace
// is counted as failed on each partition, some at once (see handOff).
func (j *job) lateCount(err error) {
	o := classify(false, err)
	if o == ok || o == storeErr {
		o = callers // neither success nor failure
	}
	placed := partitionError(err)
	if err != nil {
		err = timeoutText(false, err)
	}
	j.count(o, err, placed)
}

// handOff leaves j, a call over several partitions that the caller left
// at the deadline, to be counted when the store answers (see lateCount),
// or as failed on each of its partitions if the store has not answered
// grace later (see expire). When j makes the late calls unanswered on one
// of its partitions more than its breaker's threshold of failures, the
// store is holding calls past their deadline, ignoring its context: j is
// counted as failed at once against each such partition, and its answer,
// if it comes, is not counted. Without that, every caller would leave a
// call (and its goroutine) on the store per timeout until the late grace
// of the first ones ran out; with it, the breaker of a partition whose
// store never answers opens within about twice its threshold of late
// calls beyond the callers' first, as it did when a timeout counted at the
// deadline. A store that answers at the deadline (Redis, memcached) has
// one late call pending at a time, a few on a busy machine.
func (j *job) handOff(grace time.Duration) {
	stuck := false
	for _, p := range j.parts {
		b := &j.dom.brs[p]
		if b.late.Add(1) > int32(b.limit) {
			stuck = true
		}
	}
	if stuck {
		if j.late.CompareAndSwap(handedOff, counted) {
			j.countStuck()
		}
		return
	}
	t := time.AfterFunc(grace, j.expire)
	j.bound.Store(t)
	if j.late.Load() != handedOff {
		t.Stop() // answered (and counted) before the timer was stored
	}
}

// expire counts j, handed off at its deadline, as failed on each of its
// partitions if the store has not answered it within the late grace: it
// cannot say which of them held the call.
func (j *job) expire() {
	if j.late.CompareAndSwap(handedOff, counted) {
		j.count(failed, errTimeout, nil)
	}
}

// countStuck counts j, handed off at its deadline, as failed on each of
// its partitions that has more late calls unanswered (j's included) than
// its breaker's threshold, and for none of the others (see handOff).
func (j *job) countStuck() {
	for i, p := range j.parts {
		b, probe := &j.dom.brs[p], j.probes[i]
		switch {
		case b.late.Load() > int32(b.limit):
			b.failure(probe, errTimeout)
		case probe:
			b.cancelProbe()
		}
	}
}

// retryAfter is how long until the breakers of j's partitions all let a
// call through (see breaker.retryAfter).
func (j *job) retryAfter() time.Duration {
	var d time.Duration
	for _, p := range j.parts {
		d = max(d, j.dom.brs[p].retryAfter())
	}
	return d
}

// Take decides reqs on the store; see the package documentation for the
// cache and the failure policy.
func (s *Store) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	if err := store.Check(reqs, out); err != nil {
		return store.Result{}, err
	}
	if s.closed.Load() {
		return store.Result{}, store.ErrClosed
	}
	cached := false
	var epoch uint64 // the cache's resets before the store call
	if s.cache != nil {
		res, hit, some := s.fromCache(reqs, out)
		if hit {
			return res, nil
		}
		cached = some
		epoch = s.cache.epoch()
	}
	if s.near != nil && ctx.Err() == nil {
		// An answer from memory (a leased slice's units, which the store
		// charged already, or the refusal it gave): no store call, so no
		// timeout, breaker or call hook. It stands while the store is
		// down, too: the units are the store's own.
		if res, ok := s.near.TakeLocal(reqs, out); ok {
			return s.answered(reqs, out, res, cached, epoch), nil
		}
	}
	j := s.getJob(runTake, reqs)
	defer putJob(j)
	o, err := s.call(ctx, "take", j)
	if err != nil && o != callers && !j.abandoned && j.res.Partial {
		// The store answered (j is no longer its goroutine's): refused
		// although part of it failed.
		return s.partialTake(reqs, out, j, cached, epoch), nil
	}
	switch o {
	case ok:
		copy(out, j.out)
		return s.answered(reqs, out, j.res, cached, epoch), nil
	case callers, storeErr:
		return store.Result{}, err
	case contended:
		return s.contendedTake(reqs, out), nil
	}
	return s.fallbackTake(ctx, j, reqs, out, err)
}

// answered completes a Take the store answered (out holds its decisions):
// requests it admitted leave the over-limit cache (cached: some of reqs
// were in it), and a refusal enters it, unless a reset came after epoch.
func (s *Store) answered(reqs []store.Request, out []algo.Decision, res store.Result, cached bool, epoch uint64) store.Result {
	if cached {
		s.forgetAdmitted(reqs, out)
	}
	if !res.Allowed && s.cache != nil {
		now := s.nowUS()
		for i := range reqs {
			s.cache.put(reqs[i].Key, reqs[i].Limit, reqs[i].Cost, now, out[i], epoch)
		}
	}
	return res
}

// ContentionRetryAfter is the RetryAfter of a Take refused because the
// store gave up on a hot key (store.ErrContention): the store is up, and
// another try soon may find the key quieter.
const ContentionRetryAfter = 100 * time.Millisecond

// contendedTake answers a Take the store gave up on (store.ErrContention:
// a compare-and-swap out of retries, nothing charged): refused, each
// request with nothing remaining and ContentionRetryAfter, whatever the
// failure policy. The store is up, and a policy answering for it would
// admit past the limit under FailOpen (every request the store could not
// count on a hot key) or refuse for a breaker's cool-down under FailClosed.
// The refusal is not cached: the key is hot, not over its limit.
func (s *Store) contendedTake(reqs []store.Request, out []algo.Decision) store.Result {
	for i := range reqs {
		out[i] = algo.Decision{Limit: reqs[i].Limit.Capacity(), RetryAfter: ContentionRetryAfter, ResetAfter: ContentionRetryAfter}
	}
	return store.Result{Allowed: false, At: s.nowUS()}
}

// partialTake answers a Take the store refused while part of it failed
// (store.Result.Partial: a key over its limit on a live node, another's
// node down): refused, whatever the failure policy, with the store's
// decisions (the zero Decision for the requests it did not decide) and
// Result.Partial, not Fallback: the store decided. The breakers counted
// the failure as any other (against the partitions the store named) and
// Hooks.Call saw it; Hooks.Fallback is not called. The refusals the
// store decided go to the over-limit cache, as any. A policy answering
// for it would admit, failing open, what a live key refused.
func (s *Store) partialTake(reqs []store.Request, out []algo.Decision, j *job, cached bool, epoch uint64) store.Result {
	copy(out, j.out)
	if cached {
		s.forgetAdmitted(reqs, out)
	}
	if s.cache != nil {
		now := s.nowUS()
		for i := range reqs {
			s.cache.put(reqs[i].Key, reqs[i].Limit, reqs[i].Cost, now, out[i], epoch)
		}
	}
	return store.Result{At: j.res.At, Partial: true}
}

// fromCache answers a Take from the over-limit cache when it holds a
// refusal of every request (hit): no store call. A Take of which some
// requests are not cached goes to the store, whose refusal charges
// nothing and reports each request's true state; the cache cannot tell
// what the others' Remaining is, and a number made up for them would
// reach the client's headers as if the store had said it. some reports
// that the cache holds some of the requests (see forgetAdmitted).
func (s *Store) fromCache(reqs []store.Request, out []algo.Decision) (res store.Result, hit, some bool) {
	now := s.nowUS()
	hit = true
	for i := range reqs {
		d, ok, exact := s.cache.get(reqs[i].Key, reqs[i].Limit, reqs[i].Cost, now)
		some = some || ok
		if ok && exact {
			out[i] = d
		} else {
			// Not held, or held for a smaller cost whose RetryAfter
			// would be too short for this one: the store tells.
			hit = false
		}
	}
	if !hit {
		return store.Result{}, false, some
	}
	if s.cfg.hooks.CacheHit != nil {
		s.cfg.hooks.CacheHit()
	}
	return store.Result{Allowed: false, At: now}, true, true
}

// forgetAdmitted drops from the cache the requests the store has just
// admitted (each on its own, out[i].Allowed): their cached refusal is
// out of date (another instance reset or refunded the key), and would
// refuse them alone until its TTL.
func (s *Store) forgetAdmitted(reqs []store.Request, out []algo.Decision) {
	for i := range reqs {
		if out[i].Allowed {
			s.cache.drop(reqs[i].Key)
		}
	}
}

// cachedRefusal answers a Take that the store could not, some of whose
// requests (not all: fromCache answered those) the cache holds as over
// limit: the take is refused, as the store would refuse it, whatever the
// failure policy would say; the cached requests report their cached
// refusal, the others what the policy reports for them (see policyPeek)
// with nothing charged. hit is false when the cache holds none of them.
// It is a fallback (Hooks.Fallback was called), not a CacheHit.
func (s *Store) cachedRefusal(ctx context.Context, j *job, reqs []store.Request, out []algo.Decision, now int64) (hit bool, err error) {
	for i := range reqs {
		if _, hit, _ = s.cache.get(reqs[i].Key, reqs[i].Limit, reqs[i].Cost, now); hit {
			break
		}
	}
	if !hit {
		return false, nil
	}
	if err := s.policyPeek(ctx, j, reqs, out); err != nil {
		return true, err
	}
	for i := range reqs {
		if d, ok, _ := s.cache.get(reqs[i].Key, reqs[i].Limit, reqs[i].Cost, now); ok {
			out[i] = d
		} else {
			out[i] = store.Unwind(out[i], reqs[i].Cost)
		}
	}
	return true, nil
}

// openDecision is FailOpen's decision of r: admitted, with the capacity
// less the cost remaining, as for a fresh key; but a cost above the
// limit's MaxCost, which can never pass whatever the store holds, is
// refused as the store refuses it (RetryAfter Never) rather than admitted.
func openDecision(r *store.Request) algo.Decision {
	c := r.Limit.Capacity()
	if r.Cost > r.Limit.MaxCost() {
		return algo.Decision{Limit: c, Remaining: c, RetryAfter: algo.Never}
	}
	return algo.Decision{Allowed: true, Limit: c, Remaining: max(0, c-r.Cost)}
}

// unavailable is FailUnavailable's answer to a Take or Peek the store did
// not answer (cause): an error wrapping store.ErrUnavailable, and cause
// unless it is a context's error, which a caller would take for its own
// deadline or cancellation (a gRPC server answers those DEADLINE_EXCEEDED
// or CANCELLED rather than UNAVAILABLE).
func unavailable(cause error) error {
	if errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, context.Canceled) {
		return fmt.Errorf("resilient: failure policy unavailable: %w: %v", store.ErrUnavailable, cause)
	}
	if errors.Is(cause, store.ErrUnavailable) {
		return fmt.Errorf("resilient: failure policy unavailable: %w", cause)
	}
	return fmt.Errorf("resilient: failure policy unavailable: %w: %w", store.ErrUnavailable, cause)
}

func (s *Store) fallbackTake(ctx context.Context, j *job, reqs []store.Request, out []algo.Decision, cause error) (store.Result, error) {
	now := s.nowUS()
	if s.cache != nil {
		// A key known over its limit stays refused while the store is
		// down: FailOpen or FailLocal would admit it.
		if hit, err := s.cachedRefusal(ctx, j, reqs, out, now); hit {
			s.fellBack(cause)
			return store.Result{Allowed: false, At: now, Fallback: true}, err
		}
	}
	if s.cfg.policy != FailClosed && s.liveRefusal(ctx, j, reqs, out, cause) {
		// The store refused (its Peek), as in partialTake: no
		// Fallback, which would report a live key's refusal as the
		// policy's (fallback_refused, FailLocal's share as the limit).
		return store.Result{Allowed: false, At: now, Partial: true}, nil
	}
	s.fellBack(cause)
	switch s.cfg.policy {
	case FailUnavailable:
		return store.Result{}, unavailable(cause)
	case FailOpen:
		allowed := true
		for i := range reqs {
			out[i] = openDecision(&reqs[i])
			allowed = allowed && out[i].Allowed
		}
		if !allowed {
			// All or nothing: a cost that can never pass refuses the take.
			for i := range reqs {
				out[i] = store.Unwind(out[i], reqs[i].Cost)
			}
		}
		return store.Result{Allowed: allowed, At: now, Fallback: true}, nil
	case FailClosed:
		retry := j.retryAfter()
		for i := range reqs {
			out[i] = algo.Decision{Limit: reqs[i].Limit.Capacity(), RetryAfter: retry, ResetAfter: retry}
		}
		return store.Result{Allowed: false, At: now, Fallback: true}, nil
	}
	local, err := s.localStore()
	if err != nil {
		return store.Result{}, errors.Join(cause, err)
	}
	res, err := local.Take(ctx, s.divide(reqs), out)
	res.Fallback = true
	return res, err
}

// fellBack calls Hooks.Fallback for a Take the failure policy (or the
// over-limit cache, in its place) answers, cause the store's error.
func (s *Store) fellBack(cause error) {
	if h := s.cfg.hooks.Fallback; h != nil {
		h("take", s.cfg.policy, cause)
	}
}

// liveRefusal answers a Take over several partitions that an open breaker
// kept from the store (cause wraps ErrCircuitOpen) when the store refuses
// one of its requests on a partition whose breaker is closed: a Peek of
// those requests alone, and a refusal among them refuses the take, as the
// store refuses it when it is asked while part of it fails
// (store.Result.Partial, without Fallback: the store decided, and
// Hooks.Fallback is not called). It fills out with the peeked decisions,
// nothing charged, and the zero Decision (undecided) for the others, and
// reports whether it refused; otherwise (a peek that fails or refuses nothing, no
// closed breaker) the policy answers, as before. FailOpen would otherwise
// admit, while a dead node's breaker is open and the over-limit cache
// holds no refusal of the key, every request a live key refuses beside a
// key of the dead node.
func (s *Store) liveRefusal(ctx context.Context, j *job, reqs []store.Request, out []algo.Decision, cause error) bool {
	d := j.dom
	if len(j.parts) < 2 || d.part == nil || !errors.Is(cause, ErrCircuitOpen) {
		return false
	}
	var live []store.Request
	var idx []int
	for i := range reqs {
		if d.brs[d.partition(reqs[i].Key)].get() == Closed {
			live = append(live, reqs[i])
			idx = append(idx, i)
		}
	}
	if len(live) == 0 || len(live) == len(reqs) {
		return false
	}
	pj := s.getJob(runPeek, live)
	defer putJob(pj)
	if o, _ := s.call(ctx, "peek", pj); o != ok {
		return false
	}
	refused := false
	for k := range live {
		refused = refused || !pj.out[k].Allowed
	}
	if !refused {
		return false
	}
	clear(out)
	for k, i := range idx {
		out[i] = store.Unwind(pj.out[k], live[k].Cost)
	}
	return true
}

// Peek reports the store's state without charging; when the store cannot
// answer, the failure policy does (FailOpen: a fresh key's state, FailClosed:
// refused, FailLocal: the local store's state). The over-limit cache is not
// consulted: Peek reports the store's view.
func (s *Store) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	if err := store.Check(reqs, out); err != nil {
		return err
	}
	j := s.getJob(runPeek, reqs)
	defer putJob(j)
	o, err := s.call(ctx, "peek", j)
	switch o {
	case ok:
		copy(out, j.out)
		return nil
	case callers, storeErr:
		return err
	}
	if h := s.cfg.hooks.Fallback; h != nil {
		h("peek", s.cfg.policy, err)
	}
	if s.cfg.policy == FailUnavailable {
		return unavailable(err)
	}
	if lerr := s.policyPeek(ctx, j, reqs, out); lerr != nil {
		return errors.Join(err, lerr)
	}
	return nil
}

// policyPeek fills out with the failure policy's answer to a Peek of reqs
// that the store could not answer (j is the call): FailOpen a fresh key's
// state, FailClosed a refusal until the breakers let calls through,
// FailLocal the local store's state. FailUnavailable, which answers no
// Peek, gets here only for the keys of a Take that the over-limit cache
// refuses (cachedRefusal): a fresh key's state, as FailOpen, says
// nothing was charged.
func (s *Store) policyPeek(ctx context.Context, j *job, reqs []store.Request, out []algo.Decision) error {
	switch s.cfg.policy {
	case FailOpen, FailUnavailable:
		for i := range reqs {
			out[i] = store.Unwind(openDecision(&reqs[i]), reqs[i].Cost)
		}
		return nil
	case FailClosed:
		retry := j.retryAfter()
		for i := range reqs {
			out[i] = algo.Decision{Limit: reqs[i].Limit.Capacity(), RetryAfter: retry, ResetAfter: retry}
		}
		return nil
	}
	local, err := s.localStore()
	if err != nil {
		return err
	}
	return local.Peek(ctx, s.divide(reqs), out)
}

// Refund gives units back on the store and drops the keys from the
// over-limit cache. When the store cannot be reached the refund is lost
// (the units come back when the key's state expires). It is never given
// to the local store, under FailLocal either: the units were charged on
// the store (an admission a failure policy gave is not refunded: see
// store.Result.Fallback), and the local store, which never charged them,
// would hand them out once more.
func (s *Store) Refund(ctx context.Context, reqs []store.Request) error {
	if err := store.Check(reqs, nil); err != nil {
		return err
	}
	s.dropCached(reqs)
	rs := append([]store.Request(nil), reqs...)
	o, err := s.callFunc(ctx, "refund", reqs, func(ctx context.Context) error { return s.inner.Refund(ctx, rs) })
	if o.returned() {
		return err
	}
	return nil
}

// Release gives leases back on the store and, when it exists, on the local
// store (a lease taken during an outage lives there). Unlike the decisions,
// a release the store did not do is an error, wrapping
// store.ErrUnavailable: no policy can answer for it, the slots stay held
// on the store until their lease TTL passes, and the caller must be able to
// tell (and say so). The local store's leases are released all the same.
func (s *Store) Release(ctx context.Context, reqs []store.Request) error {
	if err := store.Check(reqs, nil); err != nil {
		return err
	}
	rs := append([]store.Request(nil), reqs...)
	o, err := s.callFunc(ctx, "release", reqs, func(ctx context.Context) error { return s.inner.Release(ctx, rs) })
	var lerr error
	if local := s.localIfAny(); local != nil {
		lerr = local.Release(ctx, s.divide(reqs))
	}
	return leaseResult("release", o, err, lerr)
}

// Renew extends leases on the store (store.Renewer; nothing there when the
// inner store is not one) and, when it exists, on the local store, where a
// lease taken during an outage lives. Like a release, a renewal the store
// did not do is an error wrapping store.ErrUnavailable: the slots may then
// expire on the store while their holder lives, and the caller must be able
// to tell. The local store's leases are renewed all the same.
func (s *Store) Renew(ctx context.Context, reqs []store.Request) error {
	if err := store.Check(reqs, nil); err != nil {
		return err
	}
	if s.closed.Load() {
		return store.ErrClosed
	}
	o, err := ok, error(nil)
	if rn, isRenewer := s.inner.(store.Renewer); isRenewer {
		rs := append([]store.Request(nil), reqs...)
		o, err = s.callFunc(ctx, "renew", reqs, func(ctx context.Context) error { return rn.Renew(ctx, rs) })
	}
	var lerr error
	if local, isRenewer := s.localIfAny().(store.Renewer); isRenewer {
		lerr = local.Renew(ctx, s.divide(reqs))
	}
	return leaseResult("renew", o, err, lerr)
}

// leaseResult is the error of a release or renewal (op) whose store call
// ended with outcome o and error err, the local store's giving lerr: the
// local error when the store did its part, the caller's own error (its
// context) as it is, else the store's failure, wrapping
// store.ErrUnavailable, joined with the local error.
func leaseResult(op string, o outcome, err, lerr error) error {
	switch o {
	case ok:
		return lerr
	case callers, storeErr:
		return err
	}
	return errors.Join(leaseCallFailed(op, err), lerr)
}

// leaseCallFailed wraps the error of a release or a renewal (op) the store
// did not do, so that it wraps store.ErrUnavailable whatever the store
// answered (a Redis refusing the script is not a store.ErrUnavailable of
// its own).
func leaseCallFailed(op string, err error) error {
	if errors.Is(err, store.ErrUnavailable) {
		return fmt.Errorf("resilient: %s failed: %w", op, err)
	}
	return fmt.Errorf("resilient: %s failed: %w: %w", op, store.ErrUnavailable, err)
}

// Reset forgets the keys on the store, in the local store and in the
// over-limit cache. Unlike the decisions, it returns the store's error: an
// operator must know that a reset did not happen. A Take in flight during
// the Reset does not cache its refusal (see overLimit.put): it may have
// been decided on the state the Reset deletes.
func (s *Store) Reset(ctx context.Context, keys ...string) error {
	s.resetCached(keys)
	defer s.resetCached(keys)
	if local := s.localIfAny(); local != nil {
		if err := local.Reset(ctx, keys...); err != nil {
			return err
		}
	}
	ks := append([]string(nil), keys...)
	_, err := s.callKeys(ctx, "reset", keys, func(ctx context.Context) error { return s.inner.Reset(ctx, ks...) })
	return err
}

// Inspect reports a key's raw state from the wrapped store when it is a
// store.Inspector. It returns the store's error rather than a policy answer.
func (s *Store) Inspect(ctx context.Context, key string) (algo.State, bool, error) {
	in, isInspector := s.inner.(store.Inspector)
	if !isInspector {
		return algo.State{}, false, fmt.Errorf("resilient: %T cannot inspect keys", s.inner)
	}
	// The store's answer goes to a value of the call's own, read only
	// when the call succeeded: a call left at the deadline still runs,
	// and its late answer must not be written into what Inspect returned.
	res := new(struct {
		st    algo.State
		found bool
	})
	_, err := s.callKeys(ctx, "inspect", []string{key}, func(ctx context.Context) error {
		var err error
		res.st, res.found, err = in.Inspect(ctx, key)
		return err
	})
	if err != nil {
		return algo.State{}, false, err
	}
	return res.st, res.found, nil
}

// pingLimit is the limit of the probe key Ping peeks at.
var pingLimit, _ = algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Second})

// PingKey is the key Ping peeks at; it is never charged.
const PingKey = "fg:__ping"

// Ping checks that the store answers: a Peek of PingKey through the breaker
// and the timeout. While the breaker is open it returns a
// *CircuitOpenError (wrapping ErrCircuitOpen) that names the failure that
// opened it, and it never applies the failure policy.
func (s *Store) Ping(ctx context.Context) error {
	reqs := []store.Request{{Key: PingKey, Limit: pingLimit}}
	buf := make([]algo.Decision, 1)
	_, err := s.callFunc(ctx, "ping", reqs, func(ctx context.Context) error { return s.inner.Peek(ctx, reqs, buf) })
	return err
}

// Close closes the wrapped store and the local store. Every method but
// Close then returns store.ErrClosed, whatever the breakers' state: no
// failure policy answers for a closed store. A second Close does nothing.
func (s *Store) Close() error {
	s.localMu.Lock()
	first := !s.closed.Swap(true)
	local := s.localIfAny()
	s.localMu.Unlock()
	if !first {
		return nil
	}
	err := s.inner.Close()
	if local != nil {
		err = errors.Join(err, local.Close())
	}
	return err
}

// resetCached drops keys from the over-limit cache for a Reset (see
// overLimit.reset).
func (s *Store) resetCached(keys []string) {
	if s.cache == nil {
		return
	}
	for _, k := range keys {
		s.cache.reset(k)
	}
}

func (s *Store) dropCached(reqs []store.Request) {
	if s.cache == nil {
		return
	}
	for i := range reqs {
		s.cache.drop(reqs[i].Key)
	}
}

func (s *Store) localStore() (store.Store, error) {
	if st := s.local.Load(); st != nil {
		return *st, nil
	}
	s.localMu.Lock()
	defer s.localMu.Unlock()
	if st := s.local.Load(); st != nil {
		return *st, nil
	}
	if s.closed.Load() {
		// A call that fell back as Close ran: a store made now would
		// never be closed (its sweeper goroutine would leak).
		return nil, store.ErrClosed
	}
	m, err := memory.New(memory.WithSweepInterval(10 * time.Second))
	if err != nil {
		return nil, err
	}
	var st store.Store = m
	s.local.Store(&st)
	return st, nil
}

// localIfAny returns the local store if it exists.
func (s *Store) localIfAny() store.Store {
	if st := s.local.Load(); st != nil {
		return *st
	}
	return nil
}
