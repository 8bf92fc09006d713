package resilient

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate/floodgate/store"
)

// Policy is what answers when the store cannot.
type Policy uint8

// The failure policies; see the package documentation.
const (
	FailOpen Policy = iota + 1
	FailClosed
	FailLocal
	// FailUnavailable answers nothing: the Take or Peek fails fast with an
	// error wrapping store.ErrUnavailable, for the caller to decide (a
	// server answers gRPC UNAVAILABLE or HTTP 503, and Envoy applies its
	// failure_mode_deny).
	FailUnavailable
)

// String returns "open", "closed", "local" or "unavailable".
func (p Policy) String() string {
	switch p {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	case FailLocal:
		return "local"
	case FailUnavailable:
		return "unavailable"
	}
	return fmt.Sprintf("Policy(%d)", uint8(p))
}

// ParsePolicy maps "open", "closed", "local" or "unavailable"
// (case-insensitive) to a Policy.
func ParsePolicy(s string) (Policy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "open":
		return FailOpen, nil
	case "closed":
		return FailClosed, nil
	case "local":
		return FailLocal, nil
	case "unavailable":
		return FailUnavailable, nil
	}
	return 0, fmt.Errorf("%w: unknown failure policy %q (want open, closed, local or unavailable)", ErrInvalidOption, s)
}

// Defaults of the options.
const (
	DefaultTimeout       = 50 * time.Millisecond
	DefaultFailures      = 5
	DefaultCooldown      = time.Second
	DefaultOverLimitKeys = 100_000
	// DefaultOverLimitTTL bounds how long a cached refusal is trusted: an
	// admin reset, which deletes a key's state on the store, reaches every
	// instance within it, and a key refused at R requests per second costs
	// each instance one store call per second instead of R.
	DefaultOverLimitTTL = time.Second
)

// ErrInvalidOption is wrapped by New's errors for options out of range.
var ErrInvalidOption = errors.New("resilient: invalid option")

// Hooks observe the wrapper's work, for metrics and logs. Any of them may be
// nil. They are called synchronously and must be quick; State,
// PartitionState and Tripped are called with a breaker's lock held and
// must not call the Store.
type Hooks struct {
	// Call is called after every call that reached the store, with the
	// operation ("take", "peek", "refund", "release", "renew", "reset",
	// "inspect", "ping"), its latency and its error (nil on success; a timeout is an
	// error wrapping store.ErrUnavailable).
	Call func(op string, latency time.Duration, err error)
	// State is called when the state Store.Breaker reports changes: the
	// breaker's, or with one breaker per partition (store.Partitioner) the
	// worst of theirs (open, then half-open, then closed), so that a
	// single gauge says whether any keys are answered by the policy.
	State func(from, to BreakerState)
	// PartitionState is called when one breaker changes state, before
	// State, with the partition it guards and how many breakers are open
	// or half-open now; with one breaker, for it too (partition 0, no
	// name).
	PartitionState func(c PartitionChange)
	// Tripped is called when a breaker opens (after PartitionState and
	// State), from closed or again after a failed probe (err.Reopened:
	// once per cool-down while the store keeps failing), with the error
	// calls get while it stays open: the consecutive failures and the last
	// one, the store's own text (READONLY, NOPERM, MOVED, OOM, a refused
	// connection), and the partition (err.Partition) when the store has
	// one breaker per partition, for a log.
	Tripped func(err *CircuitOpenError)
	// Fallback is called when the failure policy answers a Take or Peek in
	// the store's place; cause is the store's error or, while the breaker
	// is open, its *CircuitOpenError.
	Fallback func(op string, p Policy, cause error)
	// CacheHit is called when the over-limit cache refuses a Take without a
	// store call.
	CacheHit func()
}

// Option configures a Store; see New for the defaults.
type Option func(*config)

type config struct {
	timeout   time.Duration
	policy    Policy
	instances int
	failures  int
	cooldown  time.Duration
	cacheKeys int
	cacheTTL  time.Duration
	clock     func() time.Time
	hooks     Hooks
	local     store.Store
}

// WithTimeout sets the deadline of every store call (default
// DefaultTimeout, 50 ms). It must be > 0.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithPolicy sets the failure policy (default FailOpen).
func WithPolicy(p Policy) Option { return func(c *config) { c.policy = p } }

// WithInstances sets the expected number of instances sharing the store,
// which FailLocal divides every limit by (default 1). It must be >= 1.
func WithInstances(n int) Option { return func(c *config) { c.instances = n } }

// WithBreaker sets how many consecutive failures open the breaker (default
// DefaultFailures, 5) and how long it stays open before a probe (default
// DefaultCooldown, 1 s). failures must be >= 1 and cooldown > 0.
func WithBreaker(failures int, cooldown time.Duration) Option {
	return func(c *config) { c.failures, c.cooldown = failures, cooldown }
}

// WithOverLimitCache sets how many over-limit keys the cache holds (default
// DefaultOverLimitKeys, 100 000); 0 disables the cache.
func WithOverLimitCache(keys int) Option { return func(c *config) { c.cacheKeys = keys } }

// WithOverLimitCacheTTL sets how long the over-limit cache trusts a
// refusal before it asks the store again, even when the refusal's retry
// time is later (default DefaultOverLimitTTL, 1 s). It bounds how long an
// instance keeps refusing a key that another instance reset or refunded;
// a longer TTL saves store calls for keys far over their limit (one per
// TTL per instance) and delays resets as much. It must be > 0.
func WithOverLimitCacheTTL(d time.Duration) Option { return func(c *config) { c.cacheTTL = d } }

// WithClock sets the clock of the cache and the breaker (default time.Now).
func WithClock(clock func() time.Time) Option { return func(c *config) { c.clock = clock } }

// WithHooks sets the observers of calls, breaker changes, fallbacks and
// cache hits (default none).
func WithHooks(h Hooks) Option { return func(c *config) { c.hooks = h } }

// WithLocalStore sets the store FailLocal decides on (default: a new
// store/memory Store created on first use). The wrapper closes it.
func WithLocalStore(st store.Store) Option { return func(c *config) { c.local = st } }

func (c *config) validate() error {
	switch {
	case c.timeout <= 0:
		return fmt.Errorf("%w: timeout must be > 0, got %v", ErrInvalidOption, c.timeout)
	case c.policy < FailOpen || c.policy > FailUnavailable:
		return fmt.Errorf("%w: unknown failure policy %d", ErrInvalidOption, c.policy)
	case c.instances < 1:
		return fmt.Errorf("%w: instances must be >= 1, got %d", ErrInvalidOption, c.instances)
	case c.failures < 1:
		return fmt.Errorf("%w: breaker failures must be >= 1, got %d", ErrInvalidOption, c.failures)
	case c.cooldown <= 0:
		return fmt.Errorf("%w: breaker cool-down must be > 0, got %v", ErrInvalidOption, c.cooldown)
	case c.cacheKeys < 0:
		return fmt.Errorf("%w: over-limit cache size must be >= 0, got %d", ErrInvalidOption, c.cacheKeys)
	case c.cacheTTL <= 0:
		return fmt.Errorf("%w: over-limit cache TTL must be > 0, got %v", ErrInvalidOption, c.cacheTTL)
	}
	return nil
}
