package algo

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestCompileRejects(t *testing.T) {
	tests := []struct {
		name  string
		p     Params
		field string // the error must name it
	}{
		{"no algorithm", Params{Limit: 1, Period: time.Second}, "algorithm"},
		{"unknown algorithm", Params{Algorithm: 99, Limit: 1, Period: time.Second}, "algorithm"},
		{"zero limit", Params{Algorithm: TokenBucket, Period: time.Second}, "limit"},
		{"negative limit", Params{Algorithm: FixedWindow, Limit: -5, Period: time.Second}, "limit"},
		{"limit 2^53", Params{Algorithm: FixedWindow, Limit: 1 << 53, Period: time.Second}, "limit"},
		{"limit max int64", Params{Algorithm: GCRA, Limit: math.MaxInt64, Period: time.Second}, "limit"},
		{"zero period", Params{Algorithm: FixedWindow, Limit: 10}, "period"},
		{"negative period", Params{Algorithm: SlidingLog, Limit: 10, Period: -time.Second}, "period"},
		{"period of 290 years", Params{Algorithm: FixedWindow, Limit: 10, Period: 290 * 365 * 24 * time.Hour}, "period"},
		{"sliding window of 150 years", Params{Algorithm: SlidingWindow, Limit: 10, Period: 150 * 365 * 24 * time.Hour}, "period"},
		{"period under 1µs", Params{Algorithm: TokenBucket, Limit: 10, Period: 999}, "period"},
		{"calendar on a bucket", Params{Algorithm: TokenBucket, Limit: 10, Calendar: CalendarMonth}, "calendar"},
		{"unknown calendar", Params{Algorithm: FixedWindow, Limit: 10, Calendar: 7}, "calendar"},
		{"negative burst", Params{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: -1}, "burst"},
		{"negative delay", Params{Algorithm: Shaper, Limit: 10, Period: time.Second, Burst: 5, Delay: -1}, "delay"},
		{"delay over burst", Params{Algorithm: Shaper, Limit: 10, Period: time.Second, Burst: 5, Delay: 6}, "delay"},
		{"negative sub-windows", Params{Algorithm: SlidingWindow, Limit: 10, Period: time.Second, SubWindows: -2}, "sub_windows"},
		{"too many sub-windows", Params{Algorithm: SlidingWindow, Limit: 10, Period: time.Hour, SubWindows: 3601}, "sub_windows"},
		{"sub-windows do not divide", Params{Algorithm: SlidingWindow, Limit: 10, Period: 10 * time.Microsecond, SubWindows: 3}, "sub_windows"},
		{"sliding log too large", Params{Algorithm: SlidingLog, Limit: 1<<20 + 1, Period: time.Second}, "limit"},
		{"concurrency too large", Params{Algorithm: Concurrency, Limit: 1<<20 + 1}, "limit"},
		{"bucket capacity × period over 2^53", Params{Algorithm: TokenBucket, Limit: 1 << 30, Period: 24 * time.Hour}, "burst"},
		{"initial tokens above burst", Params{Algorithm: TokenBucket, Limit: 10, Period: time.Second, InitialTokens: ptr[int64](11)}, "initial_tokens"},
		{"negative initial tokens", Params{Algorithm: TokenBucket, Limit: 10, Period: time.Second, InitialTokens: ptr[int64](-1)}, "initial_tokens"},
		{"initial tokens on gcra", Params{Algorithm: GCRA, Limit: 10, Period: time.Second, InitialTokens: ptr[int64](1)}, "initial_tokens"},
		{"initial tokens on a window", Params{Algorithm: FixedWindow, Limit: 10, Period: time.Second, InitialTokens: ptr[int64](1)}, "initial_tokens"},
		{"warm-up without period", Params{Algorithm: SmoothWarmup, Limit: 10, Period: time.Second}, "warmup_period"},
		{"negative warm-up", Params{Algorithm: SmoothWarmup, Limit: 10, Period: time.Second, WarmupPeriod: -time.Second}, "warmup_period"},
		{"cold factor below 1", Params{Algorithm: SmoothWarmup, Limit: 10, Period: time.Second, WarmupPeriod: time.Second, ColdFactor: 0.5}, "cold_factor"},
		{"negative cold factor", Params{Algorithm: SmoothWarmup, Limit: 10, Period: time.Second, WarmupPeriod: time.Second, ColdFactor: -3}, "cold_factor"},
		{"NaN cold factor", Params{Algorithm: SmoothWarmup, Limit: 10, Period: time.Second, WarmupPeriod: time.Second, ColdFactor: math.NaN()}, "cold_factor"},
		{"infinite cold factor", Params{Algorithm: SmoothWarmup, Limit: 10, Period: time.Second, WarmupPeriod: time.Second, ColdFactor: math.Inf(1)}, "cold_factor"},
		{"absurd cold factor", Params{Algorithm: SmoothWarmup, Limit: 10, Period: time.Second, WarmupPeriod: time.Second, ColdFactor: 1e300}, "cold_factor"},
		{"negative max burst", Params{Algorithm: SmoothBursty, Limit: 10, Period: time.Second, MaxBurstSeconds: -1}, "max_burst_seconds"},
		{"NaN max burst", Params{Algorithm: SmoothBursty, Limit: 10, Period: time.Second, MaxBurstSeconds: math.NaN()}, "max_burst_seconds"},
		{"absurd max burst", Params{Algorithm: SmoothBursty, Limit: 10, Period: time.Second, MaxBurstSeconds: 1e15}, "max_burst_seconds"},
		{"smooth faster than 1/µs", Params{Algorithm: SmoothBursty, Limit: 2, Period: time.Microsecond}, "limit"},
		{"negative max wait", Params{Algorithm: SmoothBursty, Limit: 10, Period: time.Second, MaxWait: -1}, "max_wait"},
		{"negative lease ttl", Params{Algorithm: Concurrency, Limit: 10, LeaseTTL: -time.Second}, "lease_ttl"},
		{"retain under 1µs", Params{Algorithm: SmoothBursty, Limit: 10, Period: time.Second, Retain: 999}, "retain"},
		{"negative retain", Params{Algorithm: SmoothBursty, Limit: 10, Period: time.Second, Retain: -time.Second}, "retain"},
		{"retain of 290 years", Params{Algorithm: SmoothBursty, Limit: 10, Period: time.Second, Retain: 290 * 365 * 24 * time.Hour}, "retain"},
		{"retain on a bucket that starts full", Params{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Retain: time.Hour}, "retain"},
		{"calendar with a period", Params{Algorithm: FixedWindow, Limit: 5, Period: time.Hour, Calendar: CalendarMonth}, "period"},
		{"calendar year with a period", Params{Algorithm: FixedWindow, Limit: 5, Period: time.Microsecond, Calendar: CalendarYear}, "period"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Compile(tt.p)
			if err == nil {
				t.Fatalf("Compile(%+v) = %v, want an error naming %s", tt.p, l, tt.field)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Compile error %q does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.field+":") {
				t.Errorf("Compile error %q does not name the field %q", err, tt.field)
			}
		})
	}
}

// TestCompileAlgorithmNotSet: Params without an Algorithm is told so,
// with the Go names to choose from, not "unknown algorithm 0"; an
// out-of-range Kind gets the same list.
func TestCompileAlgorithmNotSet(t *testing.T) {
	const list = "algo.FixedWindow, algo.SlidingLog, algo.SlidingWindow, algo.TokenBucket, algo.GCRA, algo.Shaper, algo.SmoothBursty, algo.SmoothWarmup, algo.Concurrency"
	for _, c := range []struct {
		p    Params
		want string
	}{
		{Params{Limit: 10, Period: time.Second}, "invalid limit: algorithm: not set: set Params.Algorithm to one of " + list},
		{Params{Algorithm: 99, Limit: 10, Period: time.Second}, "invalid limit: algorithm: unknown algorithm 99: want one of " + list},
	} {
		if _, err := Compile(c.p); err == nil || err.Error() != c.want || !errors.Is(err, ErrInvalid) {
			t.Errorf("Compile(%+v) = %v;\nwant %s (wrapping ErrInvalid)", c.p, err, c.want)
		}
	}
	// Every Kind is in the list under its Go name: a new Kind without one
	// would read "algo." there.
	for _, k := range Kinds() {
		if int(k) >= len(kindGoNames) || kindGoNames[k] == "" {
			t.Errorf("%s has no Go name in kindGoNames", k)
		}
	}
}

func TestCompileDefaults(t *testing.T) {
	tests := []struct {
		name     string
		p        Params
		capacity int64
		check    func(Params) bool
	}{
		{"token bucket burst defaults to limit", Params{Algorithm: TokenBucket, Limit: 7, Period: time.Second}, 7,
			func(p Params) bool { return p.Burst == 7 }},
		{"gcra burst defaults to limit", Params{Algorithm: GCRA, Limit: 7, Period: time.Second}, 7,
			func(p Params) bool { return p.Burst == 7 }},
		{"token bucket explicit burst", Params{Algorithm: TokenBucket, Limit: 7, Period: time.Second, Burst: 20}, 20,
			func(p Params) bool { return p.Burst == 20 }},
		{"shaper burst defaults to no queue", Params{Algorithm: Shaper, Limit: 7, Period: time.Second}, 1,
			func(p Params) bool { return p.Burst == 0 }},
		{"shaper capacity is burst+1", Params{Algorithm: Shaper, Limit: 7, Period: time.Second, Burst: 4}, 5, nil},
		{"sliding window one sub-window by default", Params{Algorithm: SlidingWindow, Limit: 7, Period: time.Second}, 7,
			func(p Params) bool { return p.SubWindows == 1 }},
		{"bursty stores one second", Params{Algorithm: SmoothBursty, Limit: 5, Period: time.Second}, 6,
			func(p Params) bool { return p.MaxBurstSeconds == 1 }},
		{"warm-up cold factor 3", Params{Algorithm: SmoothWarmup, Limit: 5, Period: time.Second, WarmupPeriod: time.Second}, 1,
			func(p Params) bool { return p.ColdFactor == 3 }},
		{"warm-up cold factor 1 is allowed", Params{Algorithm: SmoothWarmup, Limit: 5, Period: time.Second, WarmupPeriod: time.Second, ColdFactor: 1}, 1, nil},
		{"concurrency needs no period", Params{Algorithm: Concurrency, Limit: 3}, 3, nil},
		{"calendar month needs no period", Params{Algorithm: FixedWindow, Limit: 3, Calendar: CalendarMonth}, 3, nil},
		{"sliding log at its bound", Params{Algorithm: SlidingLog, Limit: 1 << 20, Period: time.Second}, 1 << 20, nil},
		{"bucket at the 2^53 bound", Params{Algorithm: TokenBucket, Limit: 1 << 23, Period: time.Second * (1 << 30) / 1e6}, 1 << 23, nil},
		{"bursty retains an hour", Params{Algorithm: SmoothBursty, Limit: 5, Period: time.Second}, 6,
			func(p Params) bool { return p.Retain == time.Hour }},
		{"bucket starting short retains an hour", Params{Algorithm: TokenBucket, Limit: 5, Period: time.Second, InitialTokens: ptr[int64](4)}, 5,
			func(p Params) bool { return p.Retain == time.Hour }},
		{"explicit retain", Params{Algorithm: TokenBucket, Limit: 5, Period: time.Second, InitialTokens: ptr[int64](0), Retain: 90 * time.Second}, 5,
			func(p Params) bool { return p.Retain == 90*time.Second }},
		{"bucket starting full retains nothing", Params{Algorithm: TokenBucket, Limit: 5, Period: time.Second}, 5,
			func(p Params) bool { return p.Retain == 0 }},
		{"retain on a bucket whose initial tokens are its capacity is moot", Params{Algorithm: TokenBucket, Limit: 5, Period: time.Second, InitialTokens: ptr[int64](5), Retain: time.Hour}, 5,
			func(p Params) bool { return p.Retain == 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := mustCompile(t, tt.p)
			if got := l.Capacity(); got != tt.capacity {
				t.Errorf("Capacity() = %d, want %d", got, tt.capacity)
			}
			if tt.check != nil && !tt.check(l.Params()) {
				t.Errorf("Params() = %+v: default not filled in", l.Params())
			}
			if l.Algorithm() != tt.p.Algorithm {
				t.Errorf("Algorithm() = %v, want %v", l.Algorithm(), tt.p.Algorithm)
			}
		})
	}
}

func TestConcurrencyLeaseTTLDefaults(t *testing.T) {
	tests := []struct {
		p    Params
		want time.Duration
	}{
		{Params{Algorithm: Concurrency, Limit: 1}, time.Minute},
		{Params{Algorithm: Concurrency, Limit: 1, Period: 10 * time.Second}, 10 * time.Second},
		{Params{Algorithm: Concurrency, Limit: 1, Period: 10 * time.Second, LeaseTTL: 3 * time.Second}, 3 * time.Second},
	}
	for _, tt := range tests {
		l := mustCompile(t, tt.p)
		if got := l.Window(base); got != tt.want {
			t.Errorf("Compile(%+v).Window = %v, want the lease TTL %v", tt.p, got, tt.want)
		}
	}
}

func TestParseKind(t *testing.T) {
	for _, k := range Kinds() {
		got, err := ParseKind(k.String())
		if err != nil || got != k {
			t.Errorf("ParseKind(%q) = %v, %v, want %v", k.String(), got, err, k)
		}
	}
	for in, want := range map[string]Kind{
		" Token-Bucket ":     TokenBucket,
		"LEAKY_BUCKET":       GCRA,
		"leaky-bucket-queue": Shaper,
		"sliding_window_log": SlidingLog,
		"warmup":             SmoothWarmup,
	} {
		if got, err := ParseKind(in); err != nil || got != want {
			t.Errorf("ParseKind(%q) = %v, %v, want %v", in, got, err, want)
		}
	}
	_, err := ParseKind("token_bucketz")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"token_bucketz"`) || !strings.Contains(err.Error(), "sliding_log") {
		t.Errorf("ParseKind(bad) error = %v, want ErrInvalid naming the input and the choices", err)
	}
	if got := Kind(0).String(); got != "Kind(0)" {
		t.Errorf("Kind(0).String() = %q", got)
	}
}

func TestLimitString(t *testing.T) {
	for _, tt := range []struct {
		p    Params
		want string
	}{
		{Params{Algorithm: TokenBucket, Limit: 100, Period: time.Minute, Burst: 20}, "token_bucket 100/1m0s capacity 20"},
		{Params{Algorithm: FixedWindow, Limit: 5, Calendar: CalendarMonth}, "fixed_window 5/month"},
		{Params{Algorithm: SlidingLog, Limit: 5, Period: time.Second}, "sliding_log 5/1s"},
		{Params{Algorithm: Concurrency, Limit: 2}, "concurrency 2 (lease 1m0s)"},
		{Params{Algorithm: Concurrency, Limit: 2, Period: 10 * time.Second}, "concurrency 2 (lease 10s)"},
		{Params{Algorithm: Concurrency, Limit: 2, Period: time.Second, LeaseTTL: 30 * time.Second}, "concurrency 2 (lease 30s)"},
	} {
		if got := mustCompile(t, tt.p).String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

// TestCompileRejectsParametersThatDoNotApply: a parameter the algorithm
// ignores is an error naming it, not a limit other than the one meant.
func TestCompileRejectsParametersThatDoNotApply(t *testing.T) {
	sec := time.Second
	for _, tc := range []struct {
		p    Params
		want string
	}{
		{Params{Algorithm: FixedWindow, Limit: 5, Period: sec, Burst: 10}, "burst: applies to token_bucket, gcra and shaper, not fixed_window"},
		{Params{Algorithm: TokenBucket, Limit: 5, Period: sec, SubWindows: 4}, "sub_windows: applies to sliding_window, not token_bucket"},
		{Params{Algorithm: GCRA, Limit: 5, Period: sec, Delay: 1}, "delay: applies to shaper, not gcra"},
		{Params{Algorithm: SmoothBursty, Limit: 5, Period: sec, WarmupPeriod: sec}, "warmup_period: applies to smooth_warmup, not smooth_bursty"},
		{Params{Algorithm: SmoothBursty, Limit: 5, Period: sec, ColdFactor: 3}, "cold_factor: applies to smooth_warmup, not smooth_bursty"},
		{Params{Algorithm: SmoothWarmup, Limit: 5, Period: sec, WarmupPeriod: sec, MaxBurstSeconds: 2}, "max_burst_seconds: applies to smooth_bursty, not smooth_warmup"},
		{Params{Algorithm: TokenBucket, Limit: 5, Period: sec, MaxWait: sec}, "max_wait: applies to smooth_bursty and smooth_warmup, not token_bucket"},
		{Params{Algorithm: SlidingLog, Limit: 5, Period: sec, LeaseTTL: sec}, "lease_ttl: applies to concurrency, not sliding_log"},
		{Params{Algorithm: Concurrency, Limit: 5, Burst: 2}, "burst: applies to token_bucket, gcra and shaper, not concurrency"},
		{Params{Algorithm: GCRA, Limit: 5, Period: sec, Retain: sec}, "retain: applies to token_bucket and smooth_bursty, not gcra"},
		{Params{Algorithm: SmoothWarmup, Limit: 5, Period: sec, WarmupPeriod: sec, Retain: sec}, "retain: applies to token_bucket and smooth_bursty, not smooth_warmup"},
		{Params{Algorithm: FixedWindow, Limit: 5, Period: sec, Retain: sec}, "retain: applies to token_bucket and smooth_bursty, not fixed_window"},
		{Params{Algorithm: TokenBucket, Limit: 5, Period: sec, Retain: sec}, "retain: applies to a token_bucket with initial_tokens below its capacity"},
		{Params{Algorithm: FixedWindow, Limit: 5, Period: time.Hour, Calendar: CalendarMonth}, "period: a month window is a calendar month long; set Period or Calendar, not both"},
	} {
		_, err := Compile(tc.p)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%+v) = %v, want ErrInvalid with %q", tc.p, err, tc.want)
		}
	}
}

// TestCompileStatesTheBound: each range error states the bound the value
// must meet, not a looser one.
func TestCompileStatesTheBound(t *testing.T) {
	sec := time.Second
	warm := func(c float64) Params {
		return Params{Algorithm: SmoothWarmup, Limit: 5, Period: sec, WarmupPeriod: sec, ColdFactor: c}
	}
	bursty := func(m float64) Params {
		return Params{Algorithm: SmoothBursty, Limit: 5, Period: sec, MaxBurstSeconds: m}
	}
	for _, tc := range []struct {
		p    Params
		want string
	}{
		{warm(0.5), "cold_factor: must be a finite number >= 1 (0 selects the default, 3), got 0.5"},
		{warm(-1), "cold_factor: must be a finite number >= 1 (0 selects the default, 3), got -1"},
		{warm(math.NaN()), "cold_factor: must be a finite number >= 1 (0 selects the default, 3), got NaN"},
		{warm(math.Inf(1)), "cold_factor: must be a finite number >= 1 (0 selects the default, 3), got +Inf"},
		{bursty(-1), "max_burst_seconds: must be a finite number > 0 (0 selects the default, 1), got -1"},
		{bursty(math.NaN()), "max_burst_seconds: must be a finite number > 0 (0 selects the default, 1), got NaN"},
		{bursty(math.Inf(1)), "max_burst_seconds: must be a finite number > 0 (0 selects the default, 1), got +Inf"},
		{Params{Algorithm: SmoothBursty, Limit: 5, Period: sec, Retain: -sec}, "retain: must not be negative, got -1s"},
	} {
		_, err := Compile(tc.p)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.HasSuffix(err.Error(), tc.want) {
			t.Errorf("Compile(%+v) = %v, want ErrInvalid ending %q", tc.p, err, tc.want)
		}
	}
}
