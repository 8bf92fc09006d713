package algo_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/algo"
)

// t0 is a fixed instant so the examples are deterministic: time is always
// passed in, never read from a clock.
var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

func Example() {
	// 100 requests per minute per client, in fixed windows.
	limit, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Minute})
	if err != nil {
		panic(err)
	}
	var state algo.State // one per key; the zero State is a new key
	d := limit.Take(&state, t0, 1)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	d = limit.Take(&state, t0+time.Second.Microseconds(), 100)
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	// Output:
	// true 99 1m0s
	// false 99 59s
}

func ExampleCompile() {
	_, err := algo.Compile(algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: -1})
	fmt.Println(errors.Is(err, algo.ErrInvalid))
	fmt.Println(err)
	// Output:
	// true
	// invalid limit: burst: must be >= 0, got -1
}

func ExampleLimit_Take() {
	// A token bucket: 10 per second, bursts of up to 10.
	limit, _ := algo.Compile(algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second})
	var s algo.State
	fmt.Println(limit.Take(&s, t0, 10).Allowed) // burst 10 admits 10 at once
	d := limit.Take(&s, t0, 1)                  // the 11th waits one interval
	fmt.Println(d.Allowed, d.RetryAfter)
	d = limit.Take(&s, t0, 11) // more than the burst can ever be
	fmt.Println(d.Allowed, d.IsNever())
	// Output:
	// true
	// false 100ms
	// false true
}

func ExampleParams_initialTokens() {
	// A bucket that starts empty: a new client earns its burst instead of
	// getting it on arrival.
	zero := int64(0)
	limit, _ := algo.Compile(algo.Params{Algorithm: algo.TokenBucket, Limit: 2, Period: time.Second, Burst: 4, InitialTokens: &zero})
	var s algo.State
	d := limit.Take(&s, t0, 1)
	fmt.Println(d.Allowed, d.RetryAfter)
	later := t0 + (2 * time.Second).Microseconds()
	d = limit.Take(&s, later, 4)
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// false 500ms
	// true 0
}

func ExampleDecision_delay() {
	// The leaky bucket as a queue: one request per 250ms leaves; three may
	// wait behind the one being served; the first excess one passes at
	// once (nginx's burst=3 delay=1).
	limit, _ := algo.Compile(algo.Params{Algorithm: algo.Shaper, Limit: 4, Period: time.Second, Burst: 3, Delay: 1})
	var s algo.State
	for range 5 {
		d := limit.Take(&s, t0, 1)
		if d.Allowed {
			fmt.Println("go after", d.Delay)
		} else {
			fmt.Println("rejected, retry after", d.RetryAfter)
		}
	}
	// Output:
	// go after 0s
	// go after 0s
	// go after 250ms
	// go after 500ms
	// rejected, retry after 250ms
}

func ExampleLimit_TakeLease() {
	// At most two requests in flight; a holder that dies frees its slot
	// when the lease expires.
	limit, _ := algo.Compile(algo.Params{Algorithm: algo.Concurrency, Limit: 2, LeaseTTL: 30 * time.Second})
	var s algo.State
	fmt.Println(limit.TakeLease(&s, t0, 1, 101).Allowed)
	fmt.Println(limit.TakeLease(&s, t0, 1, 102).Allowed)
	d := limit.TakeLease(&s, t0, 1, 103)
	fmt.Println(d.Allowed, d.RetryAfter) // an upper bound: a release may come first
	fmt.Println(limit.Release(&s, t0, 101))
	fmt.Println(limit.TakeLease(&s, t0, 1, 103).Allowed)
	// Output:
	// true
	// true
	// false 30s
	// true
	// true
}

func ExampleKind_smoothWarmup() {
	// Guava's warm-up: 2 per second when warm; a cold limiter starts at 3×
	// the stable interval and speeds up over 4 seconds of use.
	limit, _ := algo.Compile(algo.Params{
		Algorithm: algo.SmoothWarmup, Limit: 2, Period: time.Second,
		WarmupPeriod: 4 * time.Second, ColdFactor: 3,
		MaxWait: time.Minute, // acquire: wait rather than be refused
	})
	var s algo.State
	now := t0
	for range 7 {
		d := limit.Take(&s, now, 1)
		fmt.Print(d.Delay, " ")
		now += d.Delay.Microseconds() // the caller sleeps, then proceeds
	}
	fmt.Println()
	// Output:
	// 0s 1.375s 1.125s 875ms 625ms 500ms 500ms
}

func ExampleParseKind() {
	k, _ := algo.ParseKind("Leaky-Bucket")
	fmt.Println(k)
	// Output: gcra
}

func ExampleState_MarshalBinary() {
	limit, _ := algo.Compile(algo.Params{Algorithm: algo.SlidingLog, Limit: 3, Period: time.Minute})
	var s algo.State
	limit.Take(&s, t0, 2)
	b, _ := s.MarshalBinary() // what a store such as Memcached keeps
	var back algo.State
	if err := back.UnmarshalBinary(b); err != nil {
		panic(err)
	}
	fmt.Println(len(b), limit.Take(&back, t0, 1).Remaining)
	// Output: 28 0
}
