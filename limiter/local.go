package limiter

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/algo"
)

// LocalOption configures a Local; see NewLocal for the defaults.
type LocalOption func(*localConfig)

type localConfig struct {
	clock      func() time.Time
	maxWaiters int
}

// WithLocalClock makes the limiter read the time from clock (default: the
// wall clock at NewLocal plus the monotonic time elapsed since, one
// monotonic clock read per decision). Tests pass a fake clock.
func WithLocalClock(clock func() time.Time) LocalOption {
	return func(c *localConfig) { c.clock = clock }
}

// WithLocalMaxWaiters bounds how many Waits may queue on the Local at
// once (default DefaultMaxWaiters, 1024; at least 1), as WithMaxWaiters
// does for a Limiter's key: a Wait that finds the queue full returns at
// once a *RetryError matching ErrQueueFull. math.MaxInt gives
// golang.org/x/time/rate's behaviour: no bound but the deadlines.
func WithLocalMaxWaiters(n int) LocalOption {
	return func(c *localConfig) { c.maxWaiters = n }
}

// Local is one in-process limiter with no key: one algorithm state under a
// mutex, for code that needs a single limiter object as with
// golang.org/x/time/rate (the package doc maps its methods). It is safe for
// concurrent use and exact: a budget of K admits exactly K across all
// goroutines. SetParams changes its limit while it runs. Create it with
// NewLocal: unlike rate.Limiter's, the zero Local has no limit to apply.
// It refuses everything as a cost beyond any capacity: Allow and AllowN
// report false, Take, Peek and Reserve a refusal with RetryAfter
// algo.Never, Wait an error wrapping ErrNever, SetParams an error, and
// Limit nil.
type Local struct {
	mu    sync.Mutex
	st    algo.State
	limit *algo.Limit
	clock clock
	// bucket is set for TokenBucket and GCRA, whose Allow and AllowN skip
	// the divisions that only the full Decision needs; see allowBucket.
	// SetParams rewrites these fields with limit, under mu.
	bucket                   bool
	per, rate, cap, capLevel int64
	// gen counts the times the state was dropped or no longer holds the
	// units of earlier reservations (Reset, SetParams to another
	// algorithm, another window, a sliding log's longer Period), so that
	// a reservation gives its units back only to the state it took them
	// from.
	gen uint64
	// waits holds Wait's queue, under the key "".
	waits waitQueues
}

// NewLocal returns a limiter applying p. Options and their defaults:
//
//   - WithLocalClock: a monotonic clock anchored on the wall clock.
//   - WithLocalMaxWaiters: DefaultMaxWaiters (1024) Waits queued.
//
// A nil LocalOption is ignored. The state's time starts at the first
// decision, as a store key's does,
// not at NewLocal: with InitialTokens 0 a bucket begins to refill then
// (a zero-cost Peek does not start it; AllowN(0) does).
//
// It returns an error wrapping algo.ErrInvalid when p is invalid, and an
// error for algo.Concurrency, whose leases need a key and an ID: use New
// with a memory store and Acquire.
func NewLocal(p algo.Params, opts ...LocalOption) (*Local, error) {
	lim, err := compileLocal(p, "NewLocal")
	if err != nil {
		return nil, err
	}
	c := localConfig{maxWaiters: DefaultMaxWaiters}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.maxWaiters < 1 {
		return nil, fmt.Errorf("limiter: NewLocal: max waiters must be at least 1, got %d", c.maxWaiters)
	}
	l := &Local{clock: newClock(c.clock), waits: waitQueues{size: c.maxWaiters}}
	l.install(lim)
	return l, nil
}

func compileLocal(p algo.Params, where string) (*algo.Limit, error) {
	lim, err := algo.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	if lim.Algorithm() == algo.Concurrency {
		return nil, fmt.Errorf("limiter: %s: %w: a concurrency limit needs leases, which Local does not keep: use New with a memory store and Acquire", where, algo.ErrInvalid)
	}
	return lim, nil
}

// install makes lim the limit, with the fields of allowBucket. l.mu is
// held, or l is not shared yet.
func (l *Local) install(lim *algo.Limit) {
	l.limit = lim
	l.bucket = isBucket(lim.Algorithm())
	l.per, l.rate, l.cap, l.capLevel = 0, 0, 0, 0
	if l.bucket {
		p := lim.Params()
		l.per = int64(p.Period / time.Microsecond)
		l.rate = p.Limit
		l.cap = lim.Capacity()
		l.capLevel = l.cap * l.per
	}
}

// isBucket reports whether k keeps a token bucket's level: TokenBucket and
// GCRA share their state and decide alike.
func isBucket(k algo.Kind) bool { return k == algo.TokenBucket || k == algo.GCRA }

// Limit returns the compiled limit: the one of NewLocal, or of the latest
// SetParams; nil for the zero Local.
func (l *Local) Limit() *algo.Limit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// SetParams compiles p and makes it the limit, atomically with respect to
// every other method: a decision is made wholly under the old limit or
// wholly under the new one. It returns the errors of NewLocal, and then
// changes nothing. It is the counterpart of x/time/rate's SetLimit and
// SetBurst, and like them keeps what the limiter has used where the state
// means the same under p:
//
//   - TokenBucket and GCRA (to either): the state is first brought to now
//     at the old rate, then the level carries over in units (a change of
//     Period rescales it, rounding down), clamped to the new capacity.
//     InitialTokens applies to a fresh limiter only.
//   - Shaper: the water in the bucket (the units queued) carries over in
//     units, rounding up, clamped to the new capacity.
//   - FixedWindow, SlidingWindow: with the same window (Period, Calendar,
//     SubWindows) the counts carry over as they are; with another, the
//     units the old limit counts now (for SlidingWindow its estimate,
//     rounded up), all of them, also above its Limit, are counted in the
//     new window that holds now, at most the new Limit.
//   - SlidingLog: the log carries over; the new Period decides which of
//     its units still count.
//   - SmoothBursty, SmoothWarmup: the stored permits (clamped to the new
//     maximum) and the next free ticket carry over, as Guava's setRate
//     keeps the ticket.
//
// Any other change of algorithm starts fresh, as NewLocal would, and the
// reservations made before it then give nothing back on Cancel; nor do
// they after a change of a FixedWindow's or SlidingWindow's window, whose
// new window counts what the old one counted at the change, at most the
// new Limit, and not a reservation's units apart (one of a window already
// passed is not in it at all), or of a SlidingLog to a longer Period,
// which would find newer units in the place of those the old Period
// forgot.
func (l *Local) SetParams(p algo.Params) error {
	lim, err := compileLocal(p, "SetParams")
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limit == nil {
		return errors.New("limiter: SetParams on the zero Local, which has no clock and no limit: create it with NewLocal")
	}
	switch kept, orphaned := carry(l.limit, lim, &l.st, l.clock.now()); {
	case !kept:
		l.st = algo.State{}
		l.gen++
	case orphaned:
		// A unit given back would be one the state no longer counts:
		// the new window counts what the old one counted at now, at
		// most the new Limit, under no reservation's name (one of a
		// window already passed is not in it, one the cap cut off only
		// in part), and a sliding log has forgotten the units of the
		// old Period. Given back, the limit would admit more than it
		// allows.
		l.gen++
	}
	l.install(lim)
	return nil
}

// carry rewrites s, a state of old at now, as a state of lim, and reports
// whether it could (kept) and whether the units of reservations made
// before can no longer be given back to it (orphaned): a window's count
// rebuilt in another window, or a sliding log whose longer Period would
// find others' units in the place of those the old one forgot; see
// SetParams for what carries over. The layouts it reads
// are algo's (see each algorithm's file there).
func carry(old, lim *algo.Limit, s *algo.State, now int64) (kept, orphaned bool) {
	from, to := old.Algorithm(), lim.Algorithm()
	if from != to && !(isBucket(from) && isBucket(to)) {
		return false, false
	}
	// Bring the state to now under the old limit: a bucket refills at the
	// old rate, windows move on, expired units are forgotten.
	d := old.Peek(s, now, 0)
	op, np := old.Params(), lim.Params()
	switch to {
	case algo.TokenBucket, algo.GCRA, algo.Shaper:
		if s.C == 0 {
			return true, false // fresh: it starts as the new limit says
		}
		oldPer, per := int64(op.Period/time.Microsecond), int64(np.Period/time.Microsecond)
		oldCap, capLevel := old.Capacity()*oldPer, lim.Capacity()*per
		level := min(max(s.A, 0), oldCap)
		if to == algo.Shaper {
			// The level is the room left; what carries over is the water.
			s.A = capLevel - min(rescale(oldCap-level, per, oldPer, true), capLevel)
		} else {
			s.A = min(rescale(level, per, oldPer, false), capLevel)
		}
	case algo.FixedWindow, algo.SlidingWindow:
		if op.Period == np.Period && op.Calendar == np.Calendar && op.SubWindows == np.SubWindows {
			return true, false
		}
		used := d.Limit - d.Remaining
		if d.Remaining == 0 && np.Limit > op.Limit {
			// Remaining stops at 0: a count above the old Limit (one
			// lowered within the window, whose count carried as it was)
			// is read against the new, larger Limit, so that it carries
			// whole and not as the old Limit's clamp of it.
			wide := op
			wide.Limit = np.Limit
			if w, err := algo.Compile(wide); err == nil {
				dw := w.Peek(s, now, 0)
				used = dw.Limit - dw.Remaining
			}
		}
		*s = algo.State{}
		if used > 0 {
			lim.Take(s, now, min(used, np.Limit))
		}
		return true, true
	case algo.SlidingLog:
		// The old Period's Peek forgot the units it no longer counts; a
		// refund under a longer one, still within its window, would
		// remove the newer units left in their place.
		return true, np.Period > op.Period
	}
	return true, false
}

// rescale converts a level of x unit·µs at oldPer µs per unit to per µs per
// unit, x × per ÷ oldPer, rounded down or up, without overflow (a result
// beyond 2^63 is returned as the largest int64; callers clamp it).
func rescale(x, per, oldPer int64, up bool) int64 {
	if per == oldPer {
		return x
	}
	hi, lo := bits.Mul64(uint64(x), uint64(per))
	if hi >= uint64(oldPer) {
		return 1<<63 - 1
	}
	q, r := bits.Div64(hi, lo, uint64(oldPer))
	if up && r != 0 {
		q++
	}
	if q > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(q)
}

// Allow reports whether one unit may be taken now and, if so, takes it.
func (l *Local) Allow() bool { return l.AllowN(1) }

// AllowN reports whether n units may be taken now and, if so, takes them.
// A negative n is refused (false), as Limiter.AllowN refuses it with an
// error; 0 takes nothing and reports whether the limiter is usable now.
// Shaper, SmoothBursty and SmoothWarmup admit units to be used after a
// Delay (a shaper's queue, a smooth limiter's pacing within MaxWait),
// which AllowN does not report: true then means taken, not "act now".
// Use Take for the Decision and its Delay, or Wait, which waits it out.
func (l *Local) AllowN(n int64) bool {
	if n < 0 {
		return false
	}
	now := l.clock.now()
	l.mu.Lock()
	ok, done := l.allowBucket(now, n)
	if !done && l.limit != nil {
		ok = l.limit.Take(&l.st, now, n).Allowed
	}
	l.mu.Unlock()
	return ok
}

// maxTime is the latest instant the algo package works with (2^53-1 µs);
// later ones, and times before the epoch, take algo's own path.
const maxTime = 1<<53 - 1

// allowBucket is algo's token bucket (and GCRA) Take for a key in use,
// reduced to the admission: the same exact integer refill in unit·µs (see
// algo/bucket.go), with the refill test done by a 128-bit multiplication
// instead of a division, and without the Remaining and ResetAfter that
// Allow does not report. It leaves the state exactly as algo's Take would
// (TestLocalMatchesAlgo and FuzzLocalMatchesAlgo hold it to that). done is
// false when the case is not the common one (a fresh state, a cost beyond
// the capacity or below 0, a time out of range): the caller then asks algo.
// l.mu is held.
func (l *Local) allowBucket(now, n int64) (ok, done bool) {
	s := &l.st
	if !l.bucket || s.C == 0 || n < 0 || n > l.cap || now < 0 || now > maxTime {
		return false, false
	}
	level := min(max(s.A, 0), l.capLevel)
	if now > s.B {
		if need := l.capLevel - level; need > 0 {
			hi, lo := bits.Mul64(uint64(now-s.B), uint64(l.rate))
			if hi != 0 || lo >= uint64(need) {
				level = l.capLevel
			} else {
				level += int64(lo)
			}
		}
		s.B = now
	}
	if cost := n * l.per; level >= cost {
		level -= cost
		ok = true
		if n > 0 {
			s.C = s.B + 1 // the latest take, which algo's refunds read
		}
	}
	s.A = level
	return ok, true
}

// Take decides n units now, takes them if admitted, and returns the whole
// decision. A negative n is refused and takes nothing: the decision is
// Peek(n)'s.
func (l *Local) Take(n int64) algo.Decision {
	if n < 0 {
		return l.Peek(n)
	}
	now := l.clock.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limit == nil {
		return noLimit
	}
	return l.limit.Take(&l.st, now, n)
}

// noLimit is the zero Local's decision: a refusal no wait can turn into an
// admission.
var noLimit = algo.Decision{RetryAfter: algo.Never}

// Peek returns the decision Take(n) would make, taking nothing. For a
// negative n that is a refusal that no wait can turn into an admission
// (RetryAfter algo.Never) with the state as Peek(0) reports it.
func (l *Local) Peek(n int64) algo.Decision {
	now := l.clock.now()
	l.mu.Lock()
	if l.limit == nil {
		l.mu.Unlock()
		return noLimit
	}
	d := l.limit.Peek(&l.st, now, max(n, 0))
	l.mu.Unlock()
	if n < 0 {
		d.Allowed, d.RetryAfter, d.Delay = false, algo.Never, 0
	}
	return d
}

// Reset forgets the state: the limiter is as new. Reservations made before
// it give nothing back.
func (l *Local) Reset() {
	l.mu.Lock()
	l.st = algo.State{}
	l.gen++
	l.mu.Unlock()
}

// take decides n (>= 0) units and returns the decision with what giving
// them back needs: the instant of the decision, the limit it was made
// under and the state's generation. The clock is read under the lock, so
// that with a monotonic clock no decision has seen a later time and the
// instant is the one algo stamped the units with. The zero Local returns
// noLimit and a nil lim.
func (l *Local) take(n int64) (d algo.Decision, at int64, lim *algo.Limit, gen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limit == nil {
		return noLimit, 0, nil, 0
	}
	at = l.clock.now()
	lim, gen = l.limit, l.gen
	d = lim.Take(&l.st, at, n)
	return d, at, lim, gen
}

// giveBack refunds n units taken at the instant at, unless the state they
// were taken from has been dropped since.
func (l *Local) giveBack(n, at int64, gen uint64) {
	l.mu.Lock()
	if l.gen == gen {
		l.limit.Refund(&l.st, l.clock.now(), at, n)
	}
	l.mu.Unlock()
}

// LocalReservation is the outcome of Local.Reserve: units taken that can be
// given back with Cancel. It is safe for concurrent use.
type LocalReservation struct {
	l         *Local
	cost, at  int64
	gen       uint64
	d         algo.Decision
	cancelled atomic.Bool
}

// Reserve takes n units like Take and returns a reservation that can give
// them back with Cancel, as Limiter.Reserve does for a key. Unlike
// x/time/rate's Reserve it never goes into debt: a reservation the limit
// cannot admit now is refused and holds nothing (OK is false, Delay is
// algo.Never, and Decision().RetryAfter says when to try again). A
// negative n is refused with Peek(n)'s decision, as Take refuses it.
func (l *Local) Reserve(n int64) *LocalReservation {
	if n < 0 {
		return &LocalReservation{d: l.Peek(n)}
	}
	d, at, _, gen := l.take(n)
	return &LocalReservation{l: l, cost: n, at: at, gen: gen, d: d}
}

// OK reports whether the units were taken.
func (r *LocalReservation) OK() bool { return r.d.Allowed }

// Delay is how long after the decision to wait before acting on the
// reservation, as for Limiter's Reservation. When OK it is the decision's
// Delay: the time until the reserved units may be used, x/time/rate's
// meaning, which only Shaper (its queue) and SmoothBursty and SmoothWarmup
// (their pacing) report; the other algorithms admit for now or not at all,
// so it is 0. When refused it is algo.Never, as x/time/rate's InfDuration
// for a reservation that is not OK: it holds no units and waiting gives it
// none, so `time.Sleep(r.Delay()); act()` never acts on a refusal. When a
// new Reserve would be admitted (if nobody else takes meanwhile) is the
// decision's RetryAfter (Decision().RetryAfter; algo.Never too when n
// exceeds the capacity).
func (r *LocalReservation) Delay() time.Duration {
	if r.d.Allowed {
		return r.d.Delay
	}
	return algo.Never
}

// Decision returns the decision the reservation was made with.
func (r *LocalReservation) Decision() algo.Decision { return r.d }

// Cancel gives the units back (algo.Limit.Refund), as far as the algorithm
// can tell them apart: a bucket takes them back whenever Cancel comes (all
// of them while nothing else was taken; after other takes, less what
// refilled since the reservation), a window only while the window they
// were counted in lasts, and the Smooth
// algorithms move their ticket back by what the units are worth at the
// stable rate, never before now, without restoring the stored permits the
// take spent: inexact, erring towards strictness (a SmoothBursty limiter
// then lets fewer requests through without waiting, and a SmoothWarmup
// limiter's next admission can wait up to about its warm-up period). Under a limit changed by SetParams that kept the state, the
// units go back to that state under the new limit. Cancel does nothing for
// a refused reservation, after a first Cancel, or after Reset or a
// SetParams that started fresh or changed a window or a sliding log's
// Period as SetParams says.
func (r *LocalReservation) Cancel() {
	if !r.d.Allowed || r.cost == 0 || r.cancelled.Swap(true) {
		return
	}
	r.l.giveBack(r.cost, r.at, r.gen)
}

// clock reads the time in µs since the epoch: from an injected clock, or
// from the monotonic clock anchored on the wall clock at creation, which
// costs one clock read where time.Now costs two.
type clock struct {
	fn     func() time.Time
	base   time.Time
	baseUS int64
}

func newClock(fn func() time.Time) clock {
	now := time.Now()
	return clock{fn: fn, base: now, baseUS: now.UnixMicro()}
}

func (c *clock) now() int64 {
	if c.fn != nil {
		return c.fn().UnixMicro()
	}
	return c.baseUS + int64(time.Since(c.base)/time.Microsecond)
}
