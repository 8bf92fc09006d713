// Package memory is Floodgate's embedded store: per-key algorithm state in
// the process's memory, the default store and the fastest one.
//
// # Model
//
// Keys are spread over a power-of-two number of shards by a fast seeded hash
// (hash/maphash). Each shard indexes its keys in an open-addressing table of
// pointers that readers probe without a lock; the shard's lock serialises
// only the writers of the index (a new key, a removal, a growth). Each key
// has its own lock, in the same cache line as its state and its copy of the
// key: a decision on an existing key takes that lock and nothing else, so
// callers on different keys never meet, and callers on the same key are
// serialised exactly. Every decision is one of the algo package's pure
// functions applied under the key's lock, so the memory store decides
// exactly as the reference does: a budget of K admits exactly K under any
// number of goroutines.
//
// A Take over several requests is all-or-nothing: the store locks their keys
// in one global order (by address, so two such calls cannot deadlock),
// decides every request on a copy of its state, and stores the copies only
// if all pass. No refund is ever needed, and no other caller can see a
// half-charged state.
//
// # Time
//
// The store reads its clock once per call. The default clock is the wall
// clock read when the store was created plus the monotonic time elapsed
// since: it costs one monotonic clock read per call (time.Now costs two) and
// does not jump when the system's wall clock is stepped. WithClock injects
// any other clock, such as a fake one in tests.
//
// # Memory
//
// A key costs its state and its index slot. A key whose state no longer
// differs from a fresh one — or, for the limits whose fresh state is not
// full (a token bucket with InitialTokens below its burst, SmoothBursty),
// has been full for the limit's Retain — is removed when
// algo.Limit.ExpiresAt has passed: at
// once when a call finds it so, and in the background by the janitor
// (WithSweepInterval). The number of keys is capped, at DefaultMaxKeys
// (1,000,000) unless WithMaxKeys says otherwise (0: no cap); a full shard
// evicts a key to make room (see WithMaxKeys for the policy and its cost in
// exactness), and Stats counts evictions.
//
// Measured on amd64 with 16-byte keys (BenchmarkFootprint; figures in
// docs/BENCHMARKS.md): a token bucket, GCRA or fixed window key costs 98
// bytes of heap at one million keys — one 64-byte block holding the key's
// lock, its state (three words and one for its expiry and algorithm), its
// length and its copy of the key (up to 20 bytes fit in the 64), and a
// 16-byte index slot (a pointer beside the key's hash and length, so that a
// probe reads one cache line per slot) at a load between 3/8 and 3/4.
// A longer key costs its bytes rounded up to the allocator's next size
// class.
// Algorithms with variable state (sliding log, concurrency, sliding window
// with more than one sub-window) add a slice of 8 bytes per timestamp,
// lease or sub-window, kept in a side map of the shard.
//
// # Allocations
//
// Take and Peek on keys that already exist allocate nothing, except for the
// variable-state algorithms: a Take when their state grows, and every Peek,
// which decides on a copy of the state's variable part (one allocation). A
// new key allocates
// one block for its entry and its copy of the key; the store never keeps
// the caller's key string. TakeKey is the form the limiter package uses to
// decide a key made of a prefix and a suffix without concatenating them.
package memory
