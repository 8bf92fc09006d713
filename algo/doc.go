// Package algo holds Floodgate's rate-limiting algorithms as pure functions.
//
// Every algorithm is a method on a compiled [Limit] that takes the key's
// [State], the current time and a cost, and returns a [Decision] while
// updating the state in place. Nothing in this package reads a clock, takes a
// lock or does I/O: stores wrap these functions (the memory store under a
// shard lock, the Memcached store under compare-and-swap) or port them
// line for line (the Redis Lua scripts), and tests drive them with explicit
// instants. The zero State is a key that has never been used. A Limit is
// immutable and safe for concurrent use; a State is not, and its owner
// serialises access to it.
//
// # Time and numbers
//
// Time is an int64 count of microseconds since the Unix epoch. Microseconds,
// not nanoseconds, because the same math runs inside Redis Lua scripts where
// every number is an IEEE double: all integer arithmetic in this package stays
// below 2^53 so that Go and Lua compute bit-identical results. [Compile]
// rejects parameters that would break that bound (for example a token bucket
// whose capacity × period exceeds 2^53 µs). Instants outside [0, 2^53) µs
// — before 1970 or after the year 2255 — are treated as the nearest end of
// that range, and durations are truncated to whole microseconds.
//
// A time earlier than the one a state last saw is treated as that later time:
// stored time never moves backwards, so a clock that steps back cannot
// refill a bucket twice or bring back a window that has passed.
//
// # The algorithms
//
//	FixedWindow   at most Limit per window; up to 2×Limit in a span of
//	              Period that straddles a boundary. Windows are multiples of
//	              Period since the epoch, or UTC calendar months or years
//	              for quotas (28 to 31 days; 365 or 366).
//	SlidingLog    exact: at most Limit units in any span (t−Period, t].
//	              One timestamp per admitted unit.
//	SlidingWindow the weighted approximation over N sub-windows (N = 1 is the
//	              classic two-window estimate). The estimate is off from the
//	              true count of the last Period by at most the count of the
//	              oldest sub-window, which it weighs by the part still inside
//	              the window, and is exact for steady traffic. So at most
//	              Limit plus that count is admitted in any span of Period:
//	              the burst-at-the-boundary that doubles a fixed window is
//	              refused, but traffic that crowds the end of one sub-window
//	              and comes back as it leaves can approach 2×Limit. Larger N
//	              shrinks the sub-windows and, for real traffic, the error.
//	TokenBucket   capacity Burst (default Limit), refilled at Limit per
//	              Period, optional initial tokens: at most
//	              Burst + ⌊Limit × span ÷ Period⌋ units in any span. Exact
//	              integer arithmetic, no rounding drift.
//	GCRA          the token bucket seen as a meter (a virtual scheduling
//	              tolerance of Burst); it always starts full. Same state and
//	              math, same bound.
//	Shaper        the leaky bucket as a queue: admitted requests get a Delay so
//	              they leave at Limit per Period; more than Burst waiting are
//	              refused; the first Delay excess requests pass at once (nginx
//	              limit_req's burst and delay). A bucket of capacity Burst+1.
//	SmoothBursty  Guava's RateLimiter: stored permits up to MaxBurstSeconds of
//	              rate; a fresh key stores none (see "Keys that change").
//	SmoothWarmup  Guava's warm-up variant: a fresh key is cold, and the
//	              interval falls from ColdFactor × stable to stable over
//	              WarmupPeriod of use. In both Smooth algorithms a request
//	              of any size is admitted while the next free ticket is
//	              within MaxWait, and the request after it pays: one
//	              acquire(3) costs what three acquire(1) do.
//	Concurrency   at most Limit slots held at once; each lease expires after
//	              LeaseTTL if its holder neither releases nor renews it
//	              (Renew: a live holder extends its lease).
//
// The bounds above hold for any sequence of requests and instants; the tests
// check them by fuzzing.
//
// # State size
//
// A State is 48 bytes in memory (A, B, C and an empty Ext slice); only the
// algorithms that keep per-unit or per-sub-window data use Ext. Encoded
// sizes are typical values for MarshalBinary.
//
//	Algorithm        A, B, C                            Ext                   encoded
//	FixedWindow      window start, count, latest time   —                     ≈20 B
//	SlidingLog       —, —, latest time                  1 word per unit held  ≈12 B + 8 B/unit
//	SlidingWindow 1  latest time, 2 counts              —                     ≈12 B
//	SlidingWindow N  latest time, —, —                  N+1 counts            ≈12 B + 1–2 B/count
//	TokenBucket,     level (unit·µs), update time,      —                     ≈16 B
//	GCRA, Shaper     in use
//	Smooth*          stored permits, next ticket,       —                     ≈20 B
//	                 latest time
//	Concurrency      —, —, latest time                  2 words per slot held ≈12 B + 10 B/slot
//
// # Decisions
//
// A [Decision] carries what callers and HTTP headers need. RetryAfter is
// rounded up to the microsecond, measured from now (or from the state's
// latest time, if the clock stepped back), and exact for the state as it
// stands, for every algorithm: a caller that waits it out and retries with
// the same cost, with no one else taking in between, is admitted, and 1µs
// sooner it is not. For Concurrency it is when the oldest leases expire; a
// release can free a slot sooner, so there it is an upper bound. A cost
// that can never be admitted, one above [Limit.MaxCost], gets RetryAfter
// == [Never], and no other cost does. MaxCost is the capacity, except for
// the Smooth algorithms, which admit a request bigger than their burst and
// make the next ones pay for it, up to the stored permits plus what the
// longer of Period and MaxWait is worth.
//
// Remaining is exact too: Remaining more units are admitted right now and
// one more is not — except for the Smooth algorithms, where it counts the
// unit requests that would pass without waiting (SmoothBursty's stored
// permits plus the free ticket; SmoothWarmup's stored permits are what
// makes it slow, so only the ticket counts).
//
// # Keys that change
//
// [Limit.Peek] never starts a fresh key's clock, while a Take, even of cost
// 0, does: a TokenBucket with InitialTokens below its capacity starts
// refilling, and a SmoothBursty key starts storing permits.
//
// [Limit.ExpiresAt] is when a store may forget a state. For most limits a
// fresh state is a full one, and it is the instant the state decides like
// a fresh one. For those two a fresh state is short (InitialTokens, no
// stored permits), so a full state is kept for Params.Retain (default one
// hour) after it fills up: a key idle for 2 s has as many tokens as one
// idle for 1 s, and SmoothBursty's stored permits, Guava's burst after
// idleness, are there through every store. A key idle for longer than
// that is forgotten and restarts short, so it admits no more than the
// kept one would have (bucket4j's basedOnTimeForRefillingBucketUpToMax).
//
// A State written under other parameters — a configuration reload that
// lowers a burst, changes SubWindows or shortens LeaseTTL while keys keep
// their state — never causes a panic, nor lets a key hold more than the
// new capacity: bucket levels are clamped to it, a sliding-window ring of
// the wrong size starts empty, and leases stay ordered by expiry. Stores should
// still namespace keys by limit, because a state is meaningless to another
// algorithm.
package algo
