// Package algo holds Floodgate's rate-limiting algorithms as pure functions.
//
// Every algorithm is a method on a compiled [Limit] that takes the key's
// [State], the current time and a cost, and returns a [Decision] while
// updating the state in place. Nothing in this package reads a clock, takes a
// lock or does I/O: stores wrap these functions (the memory store under a
// shard lock, the Memcached store under compare-and-swap) or port them
// line for line (the Redis Lua scripts), and tests drive them with explicit
// instants. The zero State is a key that has never been used.
//
// # Time and numbers
//
// Time is an int64 count of microseconds since the Unix epoch. Microseconds,
// not nanoseconds, because the same math runs inside Redis Lua scripts where
// every number is an IEEE double: all integer arithmetic in this package stays
// below 2^53 so that Go and Lua compute bit-identical results. [Compile]
// rejects parameters that would break that bound (for example a token bucket
// whose capacity × period exceeds 2^53 µs).
//
// A time earlier than the one a state last saw is treated as that later time:
// stored time never moves backwards, so a clock that steps back cannot
// refill a bucket twice.
//
// # The algorithms
//
//	FixedWindow   exact per window; up to 2×Limit in a span straddling a boundary.
//	              State: window start and count (16 bytes). Calendar months and
//	              years are supported for quotas.
//	SlidingLog    exact: at most Limit units in any span of Period. State: one
//	              timestamp per admitted unit (≤ Limit × 8 bytes).
//	SlidingWindow the weighted approximation over N sub-windows (N = 1 is the
//	              classic two-window estimate). Error: at most the count of one
//	              sub-window, and none when traffic is steady. State: N+1 counts.
//	TokenBucket   capacity Burst, refilled at Limit per Period, optional initial
//	              tokens. Exact integer arithmetic. State: level and time (16 bytes).
//	GCRA          the token bucket seen as a meter (a virtual scheduling
//	              tolerance of Burst); it always starts full. Same state and math.
//	Shaper        the leaky bucket as a queue: admitted requests get a Delay so
//	              they leave at Limit per Period; more than Burst waiting are
//	              refused; the first Delay excess requests pass at once (nginx
//	              limit_req's burst and delay).
//	SmoothBursty  Guava's RateLimiter: stored permits up to MaxBurstSeconds of rate,
//	SmoothWarmup  and the warm-up variant whose interval falls from ColdFactor ×
//	              stable to stable over WarmupPeriod. A request pays for the one
//	              before it, so one acquire(3) costs what three acquire(1) do.
//	Concurrency   at most Limit leases held at once; each lease expires after
//	              LeaseTTL if its holder never releases it.
//
// # Decisions
//
// A [Decision] carries what callers and HTTP headers need. RetryAfter is
// rounded up to the microsecond and is exact for the state as it stands: a
// caller that waits it out and retries with the same cost, with no one else
// taking in between, is admitted. A cost that can never be admitted (larger
// than the capacity) gets RetryAfter == [Never].
package algo
