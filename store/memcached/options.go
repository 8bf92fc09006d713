package memcached

import (
	"crypto/tls"
	"fmt"
	"runtime"
	"time"
)

// Option configures Open.
type Option func(*config) error

type config struct {
	now          func() time.Time
	timeout      time.Duration
	maxIdleConns int
	retries      int
	backoffMin   time.Duration
	backoffMax   time.Duration
	prefix       string
	skew         time.Duration
	maxItemSize  int
	skipCheck    bool // tests: open without checkServers
	partial      bool // WithPartialStart
	tls          *tls.Config
}

// The defaults of Open's options.
const (
	// DefaultTimeout bounds each round trip to a server.
	DefaultTimeout = 200 * time.Millisecond
	// DefaultRetries is how many times a lost compare-and-swap is retried
	// before ErrContention.
	DefaultRetries = 16
	// DefaultBackoffMin and DefaultBackoffMax bound the jittered
	// exponential backoff between compare-and-swap attempts.
	DefaultBackoffMin = 50 * time.Microsecond
	DefaultBackoffMax = 5 * time.Millisecond
	// DefaultKeyPrefix leads every memcached key Floodgate writes.
	DefaultKeyPrefix = "fg:"
	// DefaultClockSkew is the clock difference between instances the
	// store tolerates (see the package documentation).
	DefaultClockSkew = time.Second
	// DefaultMaxItemSize is memcached's default item size limit (-I 1m).
	DefaultMaxItemSize = 1 << 20
)

func defaultConfig() config {
	return config{
		now:          time.Now,
		timeout:      DefaultTimeout,
		maxIdleConns: max(64, 8*runtime.GOMAXPROCS(0)),
		retries:      DefaultRetries,
		backoffMin:   DefaultBackoffMin,
		backoffMax:   DefaultBackoffMax,
		prefix:       DefaultKeyPrefix,
		skew:         DefaultClockSkew,
		maxItemSize:  DefaultMaxItemSize,
	}
}

// WithClock sets the clock decisions are made by (default time.Now).
// Memcached has no clock command, so every instance sharing the servers
// uses its own; see the package documentation for what skew does.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("memcached: WithClock: nil clock")
		}
		c.now = now
		return nil
	}
}

// WithTimeout bounds each network round trip, dial included (default
// DefaultTimeout, 200ms). A context deadline is checked between round
// trips, so it cannot cut one short: keep this below your latency budget.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("memcached: WithTimeout: must be > 0, got %v", d)
		}
		c.timeout = d
		return nil
	}
}

// WithMaxIdleConns sets how many idle connections are kept per server
// (default 64 or 8 × GOMAXPROCS, whichever is larger). Set it at least to
// the number of goroutines deciding at once, or connections churn.
func WithMaxIdleConns(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("memcached: WithMaxIdleConns: must be >= 1, got %d", n)
		}
		c.maxIdleConns = n
		return nil
	}
}

// WithRetries sets how many times a compare-and-swap lost to a concurrent
// writer is retried before the operation fails with store.ErrContention,
// nothing charged (default DefaultRetries, 16). 0 means one attempt only.
func WithRetries(n int) Option {
	return func(c *config) error {
		if n < 0 || n > 1000 {
			return fmt.Errorf("memcached: WithRetries: must be between 0 and 1000, got %d", n)
		}
		c.retries = n
		return nil
	}
}

// WithBackoff sets the bounds of the wait between compare-and-swap attempts
// (defaults 50µs and 5ms): attempt k waits a uniformly random time in
// [0, min(maxWait, minWait × 2^k)] ("full jitter"), so contenders spread out
// instead of colliding again.
func WithBackoff(minWait, maxWait time.Duration) Option {
	return func(c *config) error {
		if minWait < 0 || maxWait < minWait {
			return fmt.Errorf("memcached: WithBackoff: want 0 <= min <= max, got %v and %v", minWait, maxWait)
		}
		c.backoffMin, c.backoffMax = minWait, maxWait
		return nil
	}
}

// WithKeyPrefix sets the prefix of every memcached key the store writes
// (default "fg:"), so that several Floodgate deployments can share servers.
// At most 40 bytes of printable ASCII without spaces.
func WithKeyPrefix(p string) Option {
	return func(c *config) error {
		if len(p) > maxPrefix {
			return fmt.Errorf("memcached: WithKeyPrefix: at most %d bytes, got %d", maxPrefix, len(p))
		}
		for i := 0; i < len(p); i++ {
			if p[i] <= ' ' || p[i] >= 0x7f {
				return fmt.Errorf("memcached: WithKeyPrefix: byte %d (%q) is not printable ASCII", i, p[i])
			}
		}
		c.prefix = p
		return nil
	}
}

// WithClockSkew sets the largest clock difference expected between the
// instances sharing the servers (default DefaultClockSkew, 1s). It is added
// to every expiry so that an instance whose clock is behind never finds a
// window's counter already gone. It does not correct skew: see the package
// documentation for what skew costs.
func WithClockSkew(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > 24*time.Hour {
			return fmt.Errorf("memcached: WithClockSkew: must be between 0 and 24h, got %v", d)
		}
		c.skew = d
		return nil
	}
}

// WithMaxItemSize sets the servers' item size limit in bytes (memcached's
// -I; default 1 MiB). Open lowers it to the smallest item_size_max the
// servers report. A sliding log or concurrency state that would not fit
// (with the key and memcached's item header) is refused with an error
// wrapping store.ErrBadRequest rather than sent.
func WithMaxItemSize(n int) Option {
	return func(c *config) error {
		if n < 1024 {
			return fmt.Errorf("memcached: WithMaxItemSize: must be >= 1024, got %d", n)
		}
		c.maxItemSize = n
		return nil
	}
}

// WithPartialStart makes Open succeed on a ring whose servers answer only
// in part: when at least one server answers its check and each of the
// others failed it by not answering (a connection refused, reset or
// closed, a timeout, a host name that does not resolve), Open returns the store instead of the first such
// error, and Unanswered lists those servers. The ring is built of every
// server of the URL all the same, so each key goes to the server it would
// go to with every server up (nothing is counted twice when a server
// comes back); the keys of a server that did not answer fail as a dead
// server's do while running (errors wrapping store.ErrUnavailable that
// name it, one store.Partitioner partition each), until it answers. Such
// a server's settings are not read: the item size limit is the smallest of
// the answering servers' and WithMaxItemSize, and a server started with -C
// is found by its first decision that needs compare-and-swap. A server
// that answers but cannot be used (-C, not memcached) still fails Open,
// and so does a ring none of whose servers answers (with the first
// server's error). Default off: Open fails as soon as one server does not
// answer. storeurl.OpenRetrying (floodgate serve --start-degraded) sets
// it.
func WithPartialStart() Option {
	return func(c *config) error {
		c.partial = true
		return nil
	}
}

// WithTLS sets the TLS configuration of a memcacheds:// URL's connections
// (default: the system roots, which SSL_CERT_FILE and SSL_CERT_DIR
// replace, no client certificate, TLS 1.2 or later): give it your own
// RootCAs, a client certificate (Certificates or GetClientCertificate, for
// a server started with ssl_verify_mode=2) or a ServerName. Every server of
// the ring is verified against ServerName when it is set, else against
// its own host as the URL writes it (a name, or an IP address that the
// certificate must list). The configuration is cloned: changing it after
// Open changes nothing. A nil config is an error here; with a memcached://
// URL, which speaks plain TCP, it is an error of Open: the URL's scheme
// says whether the servers speak TLS.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) error {
		if cfg == nil {
			return fmt.Errorf("memcached: WithTLS: nil config (memcacheds:// without WithTLS verifies the servers against the system roots)")
		}
		c.tls = cfg.Clone()
		return nil
	}
}
