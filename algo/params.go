package algo

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Kind names an algorithm.
type Kind uint8

// The algorithms. The zero Kind is invalid so that a forgotten field is an
// error, not a silent default.
const (
	FixedWindow Kind = iota + 1
	SlidingLog
	SlidingWindow
	TokenBucket
	GCRA
	Shaper
	SmoothBursty
	SmoothWarmup
	Concurrency
)

var kindNames = [...]string{
	FixedWindow:   "fixed_window",
	SlidingLog:    "sliding_log",
	SlidingWindow: "sliding_window",
	TokenBucket:   "token_bucket",
	GCRA:          "gcra",
	Shaper:        "shaper",
	SmoothBursty:  "smooth_bursty",
	SmoothWarmup:  "smooth_warmup",
	Concurrency:   "concurrency",
}

// kindGoNames are the Kinds' Go names, for the errors of a Go caller who
// left Params.Algorithm unset.
var kindGoNames = [...]string{
	FixedWindow:   "FixedWindow",
	SlidingLog:    "SlidingLog",
	SlidingWindow: "SlidingWindow",
	TokenBucket:   "TokenBucket",
	GCRA:          "GCRA",
	Shaper:        "Shaper",
	SmoothBursty:  "SmoothBursty",
	SmoothWarmup:  "SmoothWarmup",
	Concurrency:   "Concurrency",
}

// goKindList is "algo.FixedWindow, algo.SlidingLog, …": every Kind by its
// Go name.
func goKindList() string {
	names := make([]string, 0, len(kindGoNames))
	for _, k := range Kinds() {
		names = append(names, "algo."+kindGoNames[k])
	}
	return strings.Join(names, ", ")
}

// Kinds lists every algorithm, in declaration order.
func Kinds() []Kind {
	return []Kind{FixedWindow, SlidingLog, SlidingWindow, TokenBucket, GCRA, Shaper, SmoothBursty, SmoothWarmup, Concurrency}
}

// String returns the algorithm's configuration name, e.g. "token_bucket".
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// kindAliases are the other spellings users reach for.
var kindAliases = map[string]Kind{
	"leaky_bucket":       GCRA,
	"leaky_bucket_meter": GCRA,
	"leaky_bucket_queue": Shaper,
	"sliding_window_log": SlidingLog,
	"warmup":             SmoothWarmup,
	"smooth_warming_up":  SmoothWarmup,
}

// ParseKind maps a configuration name (case-insensitive, '-' or '_') to a Kind.
func ParseKind(s string) (Kind, error) {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	for k, name := range kindNames {
		if name != "" && name == n {
			return Kind(k), nil
		}
	}
	if k, ok := kindAliases[n]; ok {
		return k, nil
	}
	names := make([]string, 0, len(kindNames))
	for _, k := range Kinds() {
		names = append(names, k.String())
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q (want one of %s)", ErrInvalid, s, strings.Join(names, ", "))
}

// Calendar aligns fixed windows to UTC calendar periods instead of multiples
// of Period since the epoch.
type Calendar uint8

// Calendar periods. CalendarNone uses Period.
const (
	CalendarNone Calendar = iota
	CalendarMonth
	CalendarYear
)

// String returns "month", "year" or "".
func (c Calendar) String() string {
	switch c {
	case CalendarMonth:
		return "month"
	case CalendarYear:
		return "year"
	}
	return ""
}

// Params describes a limit before validation. The zero value of each optional
// field selects its documented default.
type Params struct {
	// Algorithm is required.
	Algorithm Kind
	// Limit is the number of units admitted per Period (the quota). For
	// Concurrency it is the number of leases that may be held at once. Required, > 0.
	Limit int64
	// Period is the window length or the time in which Limit units refill.
	// Any length works (30s, 5m, 36h) from 1µs to 2^53µs (about 285
	// years); it is truncated to whole microseconds. Required unless
	// Calendar is set (then it must be zero) or the algorithm is
	// Concurrency.
	Period time.Duration
	// Calendar, for FixedWindow only, aligns windows to UTC months or years.
	Calendar Calendar
	// Burst is the capacity: TokenBucket and GCRA admit Burst units at once
	// (default Limit); Shaper queues up to Burst units behind the one being
	// served (default 0: no queue).
	Burst int64
	// InitialTokens, for TokenBucket, is the level of a fresh bucket
	// (default nil: full). 0 starts empty.
	InitialTokens *int64
	// SubWindows, for SlidingWindow, is the number of sub-windows per Period
	// (default 1: the two-window weighted estimate). Period must divide evenly.
	SubWindows int
	// Delay, for Shaper, is how many excess units pass at once before the rest
	// are spaced out (nginx limit_req's delay=). Default 0; at most Burst.
	Delay int64
	// WarmupPeriod, for SmoothWarmup, is how long a cold limiter takes to
	// reach its stable rate. Required for SmoothWarmup.
	WarmupPeriod time.Duration
	// ColdFactor, for SmoothWarmup, is the cold interval ÷ stable interval
	// (default 3, Guava's). Must be >= 1; 1 means no warm-up curve.
	ColdFactor float64
	// MaxBurstSeconds, for SmoothBursty, is how many seconds of unused rate
	// may be stored (default 1, Guava's).
	MaxBurstSeconds float64
	// Retain is how long a full state is kept before a store may forget
	// it (see Limit.ExpiresAt), for the limits whose fresh state is not
	// full: a TokenBucket with InitialTokens below its capacity, and
	// SmoothBursty, whose fresh key stores no permits. Forgotten the
	// instant it filled up, an idle key would restart short: idle longer,
	// it would get fewer tokens. A key full for longer than Retain is
	// forgotten and restarts at InitialTokens or with no stored permits,
	// never admitting more than the kept key would have (bucket4j's
	// basedOnTimeForRefillingBucketUpToMax). Default one hour; from 1µs
	// to 2^53µs, truncated to whole microseconds. Compile rejects it for
	// the other algorithms and for a TokenBucket without InitialTokens.
	// With InitialTokens equal to the capacity a fresh bucket is full and
	// Retain does nothing (Params reports 0): accepted so that a limit
	// scaled down, whose initial tokens may round up to its capacity,
	// still compiles.
	Retain time.Duration
	// MaxWait, for SmoothBursty and SmoothWarmup, is how long a request may be
	// told to wait (Decision.Delay) and still be admitted (default 0:
	// tryAcquire without timeout).
	MaxWait time.Duration
	// LeaseTTL, for Concurrency, is how long a lease lives if its holder
	// never releases it (default Period if set, else one minute).
	LeaseTTL time.Duration
}

// ErrInvalid is wrapped by every parameter error from Compile and ParseKind.
var ErrInvalid = errors.New("invalid limit")

// maxExact is 2^53: integer arithmetic below it is exact in IEEE doubles,
// which is what Redis Lua uses.
const maxExact = 1 << 53

// Limit is a validated, compiled Params. It is immutable and safe for
// concurrent use; the per-key State is the caller's.
type Limit struct {
	p        Params
	periodUS int64 // window or refill period in µs
	capacity int64 // units: Burst for buckets, Burst+1 for the shaper, Limit otherwise
	subUS    int64 // SlidingWindow: sub-window length
	leaseUS  int64 // Concurrency
	maxWait  int64 // Smooth*
	smooth   smoothParams
	// perDiv and rateDiv divide by periodUS and p.Limit without a
	// division instruction (see divisor); perDiv is unusable when
	// periodUS is 0 (calendar windows, Concurrency without a Period).
	perDiv, rateDiv divisor
	// capLevel is the buckets' capacity in unit·µs: capacity × periodUS.
	capLevel int64
	// retainUS is how long a full state is kept (see Params.Retain); 0
	// when a fresh state is full.
	retainUS int64
}

// defaultRetain is Params.Retain's default.
const defaultRetain = time.Hour

// setRetain fills in Retain for a limit whose fresh state is not full.
func (l *Limit) setRetain() {
	if l.p.Retain == 0 {
		l.p.Retain = defaultRetain
	}
	l.retainUS = int64(l.p.Retain / time.Microsecond)
}

// retained is ExpiresAt for a state that is full from instant full on:
// full plus the retention, saturated at maxTime (full itself may lie
// beyond it for a bucket updated near the end of time).
func (l *Limit) retained(full int64) int64 {
	if l.retainUS == 0 {
		return full
	}
	if full >= maxTime-l.retainUS {
		return max(full, maxTime)
	}
	return full + l.retainUS
}

// Compile validates p, fills in defaults and precomputes what the
// algorithms need. Every problem is an error wrapping ErrInvalid that names
// the field, a parameter the algorithm does not use included (a Burst on a
// window, SubWindows on a bucket); nothing panics.
func Compile(p Params) (*Limit, error) {
	bad := func(field, format string, args ...any) (*Limit, error) {
		return nil, fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
	}
	if p.Algorithm == 0 {
		return bad("algorithm", "not set: set Params.Algorithm to one of %s", goKindList())
	}
	if p.Algorithm > Concurrency {
		return bad("algorithm", "unknown algorithm %d: want one of %s", uint8(p.Algorithm), goKindList())
	}
	if p.Limit <= 0 {
		return bad("limit", "must be > 0, got %d", p.Limit)
	}
	if p.Limit >= maxExact {
		return bad("limit", "must be < 2^53, got %d", p.Limit)
	}
	if p.Period < 0 {
		return bad("period", "must be > 0, got %v", p.Period)
	}
	if p.Calendar != CalendarNone && p.Algorithm != FixedWindow {
		return bad("calendar", "calendar periods apply to fixed_window only, not %s", p.Algorithm)
	}
	if p.Calendar > CalendarYear {
		return bad("calendar", "unknown calendar period %d", p.Calendar)
	}
	if p.Calendar != CalendarNone && p.Period != 0 {
		return bad("period", "a %s window is a calendar %s long; set Period or Calendar, not both (got %v)", p.Calendar, p.Calendar, p.Period)
	}
	needPeriod := p.Calendar == CalendarNone && p.Algorithm != Concurrency
	if needPeriod && p.Period < time.Microsecond {
		return bad("period", "must be at least 1µs, got %v", p.Period)
	}
	if p.Period/time.Microsecond > maxTime {
		return bad("period", "must be below 2^53µs (about 285 years), got %v", p.Period)
	}
	// A sliding window's reset runs to the end of the next sub-window, up
	// to two periods away, which must stay below 2^53µs for every store to
	// report it exactly (Redis computes in doubles).
	if p.Algorithm == SlidingWindow && p.Period/time.Microsecond > maxTime/2 {
		return bad("period", "must be below 2^52µs (about 142 years) for sliding_window, whose reset can be two periods away, got %v", p.Period)
	}
	if p.Burst < 0 {
		return bad("burst", "must be >= 0, got %d", p.Burst)
	}
	if p.Delay < 0 {
		return bad("delay", "must be >= 0, got %d", p.Delay)
	}
	if p.SubWindows < 0 {
		return bad("sub_windows", "must be >= 1, got %d", p.SubWindows)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"warmup_period", p.WarmupPeriod}, {"max_wait", p.MaxWait}, {"lease_ttl", p.LeaseTTL}, {"retain", p.Retain}} {
		if f.d < 0 {
			return bad(f.name, "must not be negative, got %v", f.d)
		}
	}
	switch {
	case p.Retain > 0 && p.Retain < time.Microsecond:
		return bad("retain", "must be at least 1µs, got %v", p.Retain)
	case p.Retain/time.Microsecond > maxTime:
		return bad("retain", "must be below 2^53µs (about 285 years), got %v", p.Retain)
	}
	// Zero selects the default; any other value must be in range.
	if c := p.ColdFactor; c != 0 && !(c >= 1 && !math.IsInf(c, 0)) {
		return bad("cold_factor", "must be a finite number >= 1 (0 selects the default, 3), got %v", c)
	}
	if m := p.MaxBurstSeconds; m != 0 && !(m > 0 && !math.IsInf(m, 0)) {
		return bad("max_burst_seconds", "must be a finite number > 0 (0 selects the default, 1), got %v", m)
	}
	// A parameter set for an algorithm that ignores it is a mistake (a
	// burst on a window, sub-windows on a bucket): say so rather than
	// decide with a limit other than the one meant.
	for _, f := range []struct {
		name string
		set  bool
		for_ []Kind
	}{
		{"burst", p.Burst != 0, []Kind{TokenBucket, GCRA, Shaper}},
		{"sub_windows", p.SubWindows != 0, []Kind{SlidingWindow}},
		{"delay", p.Delay != 0, []Kind{Shaper}},
		{"warmup_period", p.WarmupPeriod != 0, []Kind{SmoothWarmup}},
		{"cold_factor", p.ColdFactor != 0, []Kind{SmoothWarmup}},
		{"max_burst_seconds", p.MaxBurstSeconds != 0, []Kind{SmoothBursty}},
		{"retain", p.Retain != 0, []Kind{TokenBucket, SmoothBursty}},
		{"max_wait", p.MaxWait != 0, []Kind{SmoothBursty, SmoothWarmup}},
		{"lease_ttl", p.LeaseTTL != 0, []Kind{Concurrency}},
	} {
		if f.set && !slices.Contains(f.for_, p.Algorithm) {
			names := make([]string, len(f.for_))
			for i, k := range f.for_ {
				names[i] = k.String()
			}
			list := names[0]
			if n := len(names); n > 1 {
				list = strings.Join(names[:n-1], ", ") + " and " + names[n-1]
			}
			return bad(f.name, "applies to %s, not %s", list, p.Algorithm)
		}
	}
	l := &Limit{p: p, periodUS: int64(p.Period / time.Microsecond), capacity: p.Limit}
	switch p.Algorithm {
	case SlidingLog:
		if p.Limit > 1<<20 {
			return bad("limit", "sliding_log keeps one timestamp per unit; %d is over the 1048576 bound, use sliding_window", p.Limit)
		}
	case SlidingWindow:
		if l.p.SubWindows == 0 {
			l.p.SubWindows = 1
		}
		n := int64(l.p.SubWindows)
		if n > 3600 {
			return bad("sub_windows", "at most 3600, got %d", n)
		}
		if l.periodUS%n != 0 {
			return bad("sub_windows", "period %v does not divide into %d equal sub-windows", p.Period, n)
		}
		l.subUS = l.periodUS / n
	case TokenBucket, GCRA, Shaper:
		switch p.Algorithm {
		case Shaper:
			if p.Delay > p.Burst {
				return bad("delay", "must be <= burst (%d), got %d", p.Burst, p.Delay)
			}
			l.capacity = p.Burst + 1
		default:
			if l.p.Burst == 0 {
				l.p.Burst = p.Limit
			}
			l.capacity = l.p.Burst
		}
		if p.InitialTokens != nil {
			if p.Algorithm != TokenBucket {
				return bad("initial_tokens", "applies to token_bucket only, not %s", p.Algorithm)
			}
			if *p.InitialTokens < 0 || *p.InitialTokens > l.capacity {
				return bad("initial_tokens", "must be between 0 and the capacity %d, got %d", l.capacity, *p.InitialTokens)
			}
		}
		if p.Algorithm == TokenBucket {
			switch {
			case p.InitialTokens == nil && p.Retain != 0:
				return bad("retain", "applies to a token_bucket with initial_tokens below its capacity; this one starts full, and a full bucket forgotten loses nothing")
			case p.InitialTokens != nil && *p.InitialTokens < l.capacity:
				l.setRetain()
			default:
				l.p.Retain = 0 // a fresh bucket is full: nothing to retain
			}
		}
		// Levels are kept in unit·µs (a unit is worth periodUS); the
		// capacity in those terms must stay exact in a double.
		if l.capacity > maxExact/l.periodUS {
			return bad("burst", "capacity %d × period %v exceeds 2^53 µs; use a shorter period or a smaller burst", l.capacity, p.Period)
		}
		l.capLevel = l.capacity * l.periodUS
	case SmoothBursty, SmoothWarmup:
		if err := l.compileSmooth(); err != nil {
			return nil, err
		}
	case Concurrency:
		l.leaseUS = int64(p.LeaseTTL / time.Microsecond)
		if l.leaseUS == 0 {
			l.leaseUS = l.periodUS
		}
		if l.leaseUS == 0 {
			l.leaseUS = int64(time.Minute / time.Microsecond)
		}
		if p.Limit > 1<<20 {
			return bad("limit", "concurrency keeps one lease per slot; %d is over the 1048576 bound", p.Limit)
		}
	}
	if p.InitialTokens != nil && p.Algorithm != TokenBucket {
		return bad("initial_tokens", "applies to token_bucket only, not %s", p.Algorithm)
	}
	if l.periodUS > 0 {
		l.perDiv = newDivisor(uint64(l.periodUS))
	}
	l.rateDiv = newDivisor(uint64(p.Limit))
	return l, nil
}

// Params returns the parameters with defaults filled in.
func (l *Limit) Params() Params { return l.p }

// Algorithm returns the limit's algorithm.
func (l *Limit) Algorithm() Kind { return l.p.Algorithm }

// Capacity is the most units a fresh key admits at once, and the Limit
// reported in every Decision: Limit for windows and Concurrency, Burst for
// TokenBucket and GCRA, Burst+1 for Shaper. The Smooth algorithms admit a
// request of any size while their ticket is free; for them it is the most
// unit requests that can pass without waiting: the whole stored permits
// plus one for SmoothBursty, 1 for SmoothWarmup.
func (l *Limit) Capacity() int64 { return l.capacity }

// MaxCost is the largest cost one request may carry: a larger one can
// never pass (RetryAfter Never). It is the Capacity (a window's Limit),
// except for the Smooth algorithms, which admit a request bigger than their
// burst and make the next ones wait what it is worth (Guava's acquire(n)):
// for them, the stored permits plus what the longer of Period and MaxWait
// is worth at the stable rate, so that no single request can hold a key
// for longer than that.
func (l *Limit) MaxCost() int64 {
	switch l.p.Algorithm {
	case SmoothBursty, SmoothWarmup:
		return l.smooth.maxCost
	case Concurrency, FixedWindow, SlidingLog, SlidingWindow:
		return l.p.Limit
	}
	return l.capacity
}

// Window is the policy window reported to clients (the IETF header's w):
// Period, or for calendar windows the length of the current window at now.
func (l *Limit) Window(now int64) time.Duration {
	if l.p.Calendar != CalendarNone {
		start, end := l.windowBounds(now)
		return micros(end - start)
	}
	if l.p.Algorithm == Concurrency {
		return time.Duration(l.leaseUS) * time.Microsecond
	}
	return l.p.Period
}

// String describes the limit, e.g. "token_bucket 100/1m0s capacity 20",
// or for Concurrency the slots and the effective lease TTL (LeaseTTL, or
// its default), e.g. "concurrency 2 (lease 1m0s)".
func (l *Limit) String() string {
	if l.p.Algorithm == Concurrency {
		return fmt.Sprintf("%s %d (lease %v)", l.p.Algorithm, l.p.Limit, time.Duration(l.leaseUS)*time.Microsecond)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d/", l.p.Algorithm, l.p.Limit)
	if l.p.Calendar != CalendarNone {
		b.WriteString(l.p.Calendar.String())
	} else {
		b.WriteString(l.p.Period.String())
	}
	if l.capacity != l.p.Limit {
		fmt.Fprintf(&b, " capacity %d", l.capacity)
	}
	return b.String()
}
