package memory

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidOption is wrapped by New's errors for out-of-range options.
var ErrInvalidOption = errors.New("memory: invalid option")

// Defaults of the options.
const (
	// DefaultShards is the number of shards when WithShards is not given:
	// enough that callers creating keys in parallel rarely share a lock on
	// machines up to a few dozen cores, few enough that an empty store stays
	// small (about 50 KB).
	DefaultShards = 256
	// DefaultSweepInterval is how often the janitor removes expired keys
	// when WithSweepInterval is not given.
	DefaultSweepInterval = time.Minute
	// DefaultMaxKeys is the key cap when WithMaxKeys is not given, the
	// same as a memory:// store URL's (store/storeurl): about 100 MB of
	// keys (about 100 bytes each, see the package doc), so that a limiter
	// keyed by user, IP or any value its callers choose cannot grow the
	// process without end. WithMaxKeys(0) removes the cap.
	DefaultMaxKeys = 1_000_000
	// MaxShards bounds WithShards.
	MaxShards = 1 << 16
	// evictSamples is how many keys a full shard looks at to choose the one
	// to evict (Redis samples 5 for its approximated LRU).
	evictSamples = 5
	// minKeysPerShard is the fewest keys a capped shard holds when the
	// shard count is chosen by the store (see WithMaxKeys).
	minKeysPerShard = 64
)

// Option configures a Store; see New for the defaults.
type Option func(*config)

type config struct {
	clock     func() time.Time
	shards    int
	shardsSet bool // WithShards was given
	maxKeys   int
	sweep     time.Duration
}

// WithClock makes the store read the time from clock instead of its
// default monotonic clock (see the package doc). Tests pass a fake clock;
// every decision then depends only on it. Nil restores the default.
func WithClock(clock func() time.Time) Option {
	return func(c *config) { c.clock = clock }
}

// WithShards sets the number of shards, rounded up to a power of two
// (default DefaultShards, at most MaxShards). A shard's lock serialises the
// changes to its index (new keys, removals, growth), not decisions on
// existing keys, so more shards help workloads that create many keys at
// once; each costs about 200 bytes.
func WithShards(n int) Option {
	return func(c *config) { c.shards, c.shardsSet = n, true }
}

// WithMaxKeys caps the number of keys (default DefaultMaxKeys, 1,000,000;
// 0: no cap, keys leave only when their state expires). The cap is kept
// per shard, at ⌈n ÷ shards⌉
// keys each, so the store may hold up to n rounded up to a multiple of the
// shard count. Without WithShards, a small cap also lowers the number of
// shards so that each holds at least minKeysPerShard keys (a cap of 100
// over the default 256 shards would hold one key per shard, and a new key
// would push out whichever key shared its shard).
//
// A shard that is full when a new key arrives samples up to 5 of its keys
// and removes one: the first whose state has already expired (counted in
// Stats.Expired), else the one whose state would expire soonest — the key
// closest to fresh, whose loss admits the fewest extra units (counted in
// Stats.Evictions). This is Redis's approximated LRU with ExpiresAt in place
// of the access time. An evicted key starts afresh when it comes back, so
// evictions trade exactness for bounded memory: size the cap above the
// working set and watch Stats.Evictions. Keys do not spread over the
// shards evenly, so the fullest shards evict before the store holds n
// keys: under the default cap, a million distinct keys leave about 994,000
// (some 6,000 evictions; none up to 950,000), and a working set of a
// million keys needs a cap of about 1.1 million, or none.
func WithMaxKeys(n int) Option {
	return func(c *config) { c.maxKeys = n }
}

// WithSweepInterval sets how often a janitor goroutine removes the keys
// whose state has expired (default DefaultSweepInterval). Zero disables the
// janitor: expired keys are then removed only when a call finds them, by
// Sweep, or by eviction. Close stops the janitor and waits for it.
func WithSweepInterval(d time.Duration) Option {
	return func(c *config) { c.sweep = d }
}

func (c *config) validate() error {
	if c.shards < 1 || c.shards > MaxShards {
		return fmt.Errorf("%w: shards must be between 1 and %d, got %d", ErrInvalidOption, MaxShards, c.shards)
	}
	if c.maxKeys < 0 {
		return fmt.Errorf("%w: max keys must be >= 0 (0: no cap), got %d", ErrInvalidOption, c.maxKeys)
	}
	if c.sweep < 0 {
		return fmt.Errorf("%w: sweep interval must be >= 0 (0: no janitor), got %v", ErrInvalidOption, c.sweep)
	}
	return nil
}

// ceilPow2 returns the smallest power of two >= n, for 1 <= n <= MaxShards.
func ceilPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
