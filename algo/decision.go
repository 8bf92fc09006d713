package algo

import (
	"math"
	"time"
)

// Never is the RetryAfter of a request that can never be admitted: its cost
// is larger than the limit's MaxCost (its capacity, except for the Smooth
// algorithms). It is distinct from any real wait.
const Never = time.Duration(math.MaxInt64)

// Decision is the outcome of one request against one limit. It is returned by
// value: it holds no pointers and costs no allocation.
type Decision struct {
	// Allowed reports whether the request was admitted (and charged).
	Allowed bool
	// Limit is the capacity the request was measured against: the quota of a
	// window, the burst of a bucket (see Limit.Capacity).
	Limit int64
	// Remaining is how many more units could be admitted right now, after
	// this decision: between 0 and Limit. For the Smooth algorithms, how
	// many unit requests would pass without waiting.
	Remaining int64
	// RetryAfter is zero when Allowed. Otherwise it is how long to wait before
	// the same cost would be admitted if nobody else takes meanwhile, rounded
	// up to the microsecond (exact: 1µs sooner is too soon), or Never when
	// the cost exceeds Limit.MaxCost (the capacity, except for the Smooth
	// algorithms). For Concurrency it is when the oldest leases expire, an
	// upper bound since a release may come first.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to its full capacity if
	// nothing more is taken. Zero for a key at full capacity.
	ResetAfter time.Duration
	// Delay is how long an admitted request should wait before it proceeds:
	// the Shaper's queueing delay and the Smooth algorithms' pacing. Zero for
	// the other algorithms.
	Delay time.Duration
}

// IsNever reports whether the request can never be admitted.
func (d Decision) IsNever() bool { return d.RetryAfter == Never }

// micros converts a microsecond count to a Duration: 0 if negative, and
// just short of Never if it would overflow (only periods of centuries get
// there).
func micros(us int64) time.Duration {
	switch {
	case us <= 0:
		return 0
	case us >= int64(Never/time.Microsecond):
		return Never - 1
	}
	return time.Duration(us) * time.Microsecond
}

// ceilDiv returns ⌈a/b⌉ for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// State is one key's algorithm state. Its meaning depends on the algorithm
// (see each algorithm's file); the zero State is a key never used. Stores
// keep it as is (memory), encode it (Memcached, see MarshalBinary) or keep an
// equivalent layout of their own (Redis). Ext is nil for the algorithms whose
// state is fixed-size, so most keys cost 24 bytes of state.
type State struct {
	A, B, C int64
	Ext     []int64
}

// Clone returns a deep copy of s.
func (s State) Clone() State {
	if s.Ext != nil {
		s.Ext = append([]int64(nil), s.Ext...)
	}
	return s
}

// Take decides whether cost units may be admitted at now (µs since the
// epoch) and, if so, charges them to s. A now earlier than the state has
// seen is read as the latest time it has seen. A cost of 0 charges nothing
// and reports the state, but starts a fresh key's clock (see the package
// doc). Negative costs are treated as 0. For Concurrency, Take holds an
// anonymous lease that can only expire; use TakeLease to be able to release
// it.
func (l *Limit) Take(s *State, now, cost int64) Decision {
	var d Decision
	l.decide(&d, s, now, cost, 0, true)
	return d
}

// Peek returns the decision Take would make, without changing s beyond
// forgetting what has expired and noting the time (which Take would do as
// well). On a fresh key it reports as if the key started at now, but leaves
// it fresh.
func (l *Limit) Peek(s *State, now, cost int64) Decision {
	var d Decision
	l.decide(&d, s, now, cost, 0, false)
	return d
}

// AdmissionDelay is the Delay a request of cost gets when it is admitted at
// the end of a refusal's RetryAfter, if nobody else takes or gives back
// units meanwhile: RetryAfter + AdmissionDelay is when a refused request
// could proceed, which is what a caller with a deadline must compare with
// it. For Shaper it is the water the request would find ahead of it, less
// Delay units: (Capacity − cost − Delay) emission intervals, rounded up
// (at most 1µs more than the Delay the store then reports). For
// SmoothBursty and SmoothWarmup it is MaxWait, since a refusal's
// RetryAfter ends when the ticket comes within MaxWait. Zero for the other
// algorithms, and for a cost over the capacity.
func (l *Limit) AdmissionDelay(cost int64) time.Duration {
	switch l.p.Algorithm {
	case Shaper:
		if cost < 0 || cost > l.capacity {
			return 0
		}
		return micros(l.rateDiv.ceil(l.capLevel - (cost+l.p.Delay)*l.periodUS))
	case SmoothBursty, SmoothWarmup:
		return micros(l.maxWait)
	}
	return 0
}

// TakeLease is Take for Concurrency: the cost slots are held under lease
// (a non-zero id the caller chose, e.g. random) until Release or until
// LeaseTTL passes. Lease 0 is Take's anonymous lease, which only expires.
// Other algorithms ignore lease.
func (l *Limit) TakeLease(s *State, now, cost int64, lease uint64) Decision {
	var d Decision
	l.decide(&d, s, now, cost, lease, true)
	return d
}

// TakeLeaseTo is TakeLease writing its decision into *d: the same
// decision, for callers on a hot path that keep it in place (a store
// filling its out slice). A Decision has too many fields to travel in
// registers, and one returned by value through a chain of calls is copied
// through memory at each step, which costs more than a token bucket's
// arithmetic.
func (l *Limit) TakeLeaseTo(d *Decision, s *State, now, cost int64, lease uint64) {
	l.decide(d, s, now, cost, lease, true)
}

// maxTime is the latest instant the algorithms work with, 2^53-1 µs (in the
// year 2255): later times are treated as it, so that every sum of a time and
// a period stays exact in a double and far from int64 overflow.
const maxTime = maxExact - 1

// clampTime maps any int64 to the instants the algorithms accept: times
// before the epoch are the epoch, times after maxTime are maxTime.
func clampTime(t int64) int64 {
	switch {
	case t < 0:
		return 0
	case t > maxTime:
		return maxTime
	}
	return t
}

// decide writes the decision into d rather than returning it: Decision has
// too many fields for the compiler to keep in registers, and each return
// of one by value through a call chain costs a copy through memory that
// the processor cannot forward (a stall worth more than the arithmetic of
// a token bucket).
func (l *Limit) decide(d *Decision, s *State, now, cost int64, lease uint64, commit bool) {
	if cost < 0 {
		cost = 0
	}
	now = clampTime(now)
	switch l.p.Algorithm {
	case TokenBucket, GCRA, Shaper:
		l.bucket(d, s, now, cost, commit)
	case FixedWindow:
		l.fixedWindow(d, s, now, cost, commit)
	case SlidingLog:
		*d = l.slidingLog(s, now, cost, commit)
	case SlidingWindow:
		*d = l.slidingWindow(s, now, cost, commit)
	case SmoothBursty, SmoothWarmup:
		*d = l.smoothTake(s, now, cost, commit)
	case Concurrency:
		*d = l.concurrency(s, now, cost, lease, commit)
	default:
		*d = Decision{}
	}
}

// Refund gives back cost units that a Take at time at admitted, as far as
// the algorithm can tell them apart: the reserve-then-roll-back half of an
// all-or-nothing acquisition over several keys in stores that cannot lock
// them together. For the windows, logs and buckets, refunding a Take at the
// instant it was made restores the state's decisions exactly (buckets: at
// any later instant too while nothing else has been taken since; after
// other takes, a bucket gets back the cost less what refilled since at,
// since it may have been full again meanwhile and spent, and the units the
// take still keeps cannot be told then: it errs towards strictness); units
// counted in a window that has since passed are not given back. A take is stamped at the state's latest time when
// that is after its own (racing takes of one key in a store), so the
// sliding log's Refund, while the state's time is below at + Period,
// removes the oldest cost units stamped at or after at rather than only
// those stamped at: it finds the take's units, and when it removes another
// take's instead, those are no later than its own, so it never leaves more
// capacity than removing the take's own would. That holds for an at no
// later than the take's stamp, such as the now its Take was given (a
// store's Result.At); a refund at a later instant, or of a take refunded
// already, may remove units of takes made since. The Smooth algorithms move
// the ticket back by what the cost is worth at the stable rate, less what
// the permits stored since at are worth, never before the latest time
// seen, and do not restore stored permits: inexact, mostly stricter, but
// a take paid from stored permits gets their worth back as ticket time,
// which lets the next request proceed up to that much sooner.
// Concurrency ignores Refund: slots come back by Release. A refund never leaves the state with more capacity than a fresh
// key, and never moves its time backwards.
func (l *Limit) Refund(s *State, now, at, cost int64) {
	if cost <= 0 {
		return
	}
	now, at = clampTime(now), clampTime(at)
	switch l.p.Algorithm {
	case FixedWindow:
		l.fixedWindowRefund(s, at, cost)
	case SlidingLog:
		slidingLogRefund(s, at, cost, l.periodUS)
	case SlidingWindow:
		l.slidingWindowRefund(s, at, cost)
	case TokenBucket, GCRA, Shaper:
		l.bucketRefund(s, now, at, cost)
	case SmoothBursty, SmoothWarmup:
		l.smoothRefund(s, now, at, cost)
	case Concurrency:
		// Leases are given back by Release.
	}
}

// Seen returns the latest time (µs) s has seen: the instant its latest
// decision was made at, which is later than the now that decision was
// given when the state had already seen a later one (a take that read its
// clock before another's and reached the state after it, or a clock that
// stepped back). A store reports it as the Result.At of a Take of one key,
// so that the Refund of that take finds the window it was counted in.
// Zero for a fresh state.
func (l *Limit) Seen(s *State) int64 {
	switch l.p.Algorithm {
	case TokenBucket, GCRA, Shaper:
		return s.B
	case SlidingWindow:
		return s.A
	case FixedWindow, SlidingLog, SmoothBursty, SmoothWarmup, Concurrency:
		return s.C
	}
	return 0
}

// Release gives back the slots of lease (Concurrency only) and reports
// whether it held any. Lease 0 is the anonymous lease of Take: it can only
// expire, so releasing it reports false and changes nothing.
func (l *Limit) Release(s *State, now int64, lease uint64) bool {
	if l.p.Algorithm != Concurrency || lease == 0 {
		return false
	}
	return concurrencyRelease(s, clampTime(now), lease)
}

// Renew extends the slots of lease (Concurrency only) to expire LeaseTTL
// after now, and reports whether it held any: the heartbeat of a holder that
// lives longer than the TTL (a websocket, a long stream). A lease that has
// expired or been released is not revived: renewing it changes nothing and
// reports false, so a holder that missed its renewal may have lost its slot
// to another. A now earlier than the state has seen is read as the latest
// time seen. Lease 0, Take's anonymous lease, can only expire: renewing it
// reports false. Renew never moves an expiry earlier (a LeaseTTL shortened
// by a reload leaves a later expiry as it is).
func (l *Limit) Renew(s *State, now int64, lease uint64) bool {
	if l.p.Algorithm != Concurrency || lease == 0 {
		return false
	}
	return concurrencyRenew(s, clampTime(now), lease, l.leaseUS)
}

// ExpiresAt is the instant (µs) from which a store may forget s: stores use
// it as the key's time-to-live, and a state for which it has passed reads
// as a fresh State. For most limits it is when s decides like a fresh
// State (zero for a state already as good as fresh). A TokenBucket with
// InitialTokens below its capacity and SmoothBursty start fresh keys
// short: for them it is Params.Retain after the state is full (the bucket
// refilled, the permits stored), so that a key idle for a while keeps what
// it has earned, and a key forgotten after that admits no more than the
// kept one would have. It is at most the later of 2^53-1 and the instant
// the state is full.
func (l *Limit) ExpiresAt(s *State) int64 {
	switch l.p.Algorithm {
	case FixedWindow:
		return l.fixedWindowExpiry(s)
	case SlidingLog:
		return slidingLogExpiry(s, l.periodUS)
	case SlidingWindow:
		return l.slidingWindowExpiry(s)
	case TokenBucket, GCRA, Shaper:
		return l.bucketExpiry(s)
	case SmoothBursty, SmoothWarmup:
		return l.smoothExpiry(s)
	case Concurrency:
		return concurrencyExpiry(s)
	}
	return 0
}
