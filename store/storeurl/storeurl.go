package storeurl

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/redis"
)

// ErrBadURL is wrapped by every URL error of Open.
var ErrBadURL = errors.New("storeurl: bad store URL")

// URLError is a store URL that Open cannot use. It wraps ErrBadURL and,
// when a store package found the problem, that package's error (such as
// redis.ErrBadURL), and says the URL once: `storeurl: bad store URL
// "redis://h:99999": address "h:99999": port must be 1-65535, got "99999"`.
type URLError struct {
	// URL is the store URL with any password hidden.
	URL string
	// Reason says what is wrong, without the URL.
	Reason string
	// Err is the store package's error; nil when Open found the problem.
	Err error
}

// Error renders ErrBadURL, the quoted URL and the reason.
func (e *URLError) Error() string { return fmt.Sprintf("%v %q: %s", ErrBadURL, e.URL, e.Reason) }

// Unwrap returns ErrBadURL and the store package's error, for errors.Is.
func (e *URLError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrBadURL}
	}
	return []error{ErrBadURL, e.Err}
}

func badURL(rawURL, format string, args ...any) error {
	return &URLError{URL: Redact(rawURL), Reason: fmt.Sprintf(format, args...)}
}

// wrapURLError turns a store package's URL error, which names the package
// and quotes the URL itself ("redis: bad store URL \"…\": reason",
// "memcached: store URL \"…\": reason"), into a URLError whose Reason is
// what follows the quoted URL.
func wrapURLError(rawURL string, err error) error {
	reason := err.Error()
	if i := strings.IndexByte(reason, '"'); i >= 0 {
		if q, qerr := strconv.QuotedPrefix(reason[i:]); qerr == nil {
			if rest, ok := strings.CutPrefix(reason[i+len(q):], ": "); ok && rest != "" {
				reason = rest
			}
		}
	}
	return &URLError{URL: Redact(rawURL), Reason: reason, Err: err}
}

// Schemes lists the URL schemes Open accepts.
func Schemes() []string {
	return []string{"memory", "redis", "rediss", "redis-cluster", "redis-sentinel", "memcached", "memcacheds"}
}

// Option configures Open; see Open for the defaults.
type Option func(*config)

type config struct {
	clock     func() time.Time
	timeout   time.Duration
	memOpts   []memory.Option
	redisOpts []redis.Option
	mcOpts    []memcached.Option

	// OpenRetrying's.
	log                *slog.Logger
	retryMin, retryMax time.Duration
	meanwhile          string
}

// WithClock sets the clock of the stores that read the caller's clock
// (memory and memcached; Redis uses its server's TIME). Default time.Now.
func WithClock(clock func() time.Time) Option { return func(c *config) { c.clock = clock } }

// WithTimeout bounds each round trip of the Redis and memcached clients
// (default 0: the client packages' defaults, 3 s for Redis and 200 ms for
// memcached). A resilient.Store in front keeps its own, usually shorter,
// per-call deadline.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithMemoryOptions passes options to memory.New.
func WithMemoryOptions(o ...memory.Option) Option {
	return func(c *config) { c.memOpts = append(c.memOpts, o...) }
}

// WithRedisOptions passes options to redis.Open.
func WithRedisOptions(o ...redis.Option) Option {
	return func(c *config) { c.redisOpts = append(c.redisOpts, o...) }
}

// WithMemcachedOptions passes options to memcached.Open.
func WithMemcachedOptions(o ...memcached.Option) Option {
	return func(c *config) { c.mcOpts = append(c.mcOpts, o...) }
}

// DefaultMaxKeys is the key cap of a memory:// store whose URL sets
// none, memory.New's default (memory.DefaultMaxKeys): about 130 MB
// (about 130 B a key, measured through serve at 300 000 keys), so that
// clients sending new descriptor values cannot grow a server without end.
// memory://?max_keys=0 removes the cap, as memory.WithMaxKeys(0) does.
const DefaultMaxKeys = memory.DefaultMaxKeys

// Open returns the store the URL names. Options and their defaults:
//
//   - memory:// holds at most DefaultMaxKeys keys unless max_keys says
//     otherwise (0: no cap)
//   - WithClock(time.Now)
//   - WithTimeout(0): each client's default round-trip timeout
//   - WithMemoryOptions, WithRedisOptions, WithMemcachedOptions: none
//
// Remote stores are connected to (and checked) before Open returns.
func Open(rawURL string, opts ...Option) (store.Store, error) {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok || scheme == "" {
		if s, _, found := strings.Cut(rawURL, ":"); found && slices.Contains(Schemes(), strings.ToLower(s)) {
			return nil, badURL(rawURL, "%q must be followed by ://, e.g. %s://127.0.0.1", s+":", s)
		}
		return nil, badURL(rawURL, "missing scheme: want one of %s, e.g. memory:// or redis://127.0.0.1:6379",
			strings.Join(withColons(Schemes()), ", "))
	}
	switch strings.ToLower(scheme) {
	case "memory":
		return openMemory(rawURL, c)
	case "redis", "rediss", "redis-cluster", "redis-sentinel":
		ro := c.redisOpts
		if c.timeout > 0 {
			ro = append([]redis.Option{redis.WithTimeout(c.timeout)}, ro...)
		}
		st, err := redis.Open(rawURL, ro...)
		if err != nil {
			if errors.Is(err, redis.ErrBadURL) {
				return nil, wrapURLError(rawURL, err)
			}
			return nil, err
		}
		return st, nil
	case "memcached", "memcacheds":
		// Checked before memcached.ParseURL, whose reasons quote what
		// follows the first '/', '?', '#' or '@': a password, or a
		// query that may hold one.
		if p, _ := store.SplitURL(rawURL); p.HasUserInfo {
			return nil, badURL(rawURL, "%s takes no user name or password (remove what precedes '@')", strings.ToLower(scheme))
		}
		if strings.ContainsAny(rawURL, "?#") {
			return nil, badURL(rawURL, "query parameters (?…) and fragments (#…) are not supported")
		}
		if _, err := memcached.ParseURL(rawURL); err != nil {
			return nil, wrapURLError(rawURL, err)
		}
		var mo []memcached.Option
		if c.clock != nil {
			mo = append(mo, memcached.WithClock(c.clock))
		}
		if c.timeout > 0 {
			mo = append(mo, memcached.WithTimeout(c.timeout))
		}
		st, err := memcached.Open(rawURL, append(mo, c.mcOpts...)...)
		if err != nil {
			return nil, err // not a nil *memcached.Store in a non-nil store.Store
		}
		return st, nil
	}
	return nil, badURL(rawURL, "unknown scheme %q: want one of %s", scheme, strings.Join(withColons(Schemes()), ", "))
}

func openMemory(rawURL string, c config) (store.Store, error) {
	bad := func(format string, args ...any) (store.Store, error) {
		return nil, badURL(rawURL, format, args...)
	}
	// The redacted URL is parsed, so that no reason quotes a password: a
	// valid one holds none, and reads the same.
	rest := store.RedactURL(rawURL)[len("memory://"):]
	path, query, _ := strings.Cut(rest, "?")
	if path != "" && path != "/" {
		return bad("memory:// takes no host or path, got %q", path)
	}
	mo := []memory.Option{memory.WithMaxKeys(DefaultMaxKeys)}
	if c.clock != nil {
		mo = append(mo, memory.WithClock(c.clock))
	}
	if query != "" {
		q, err := url.ParseQuery(query)
		if err != nil {
			return bad("query: %v", err)
		}
		for k, vs := range q {
			if len(vs) != 1 {
				return bad("parameter %q given %d times", k, len(vs))
			}
			if k != "max_keys" && k != "shards" {
				return bad("unknown parameter %q (want max_keys or shards)", k)
			}
			n, err := strconv.Atoi(vs[0])
			if err != nil || n < 0 {
				return bad("parameter %s=%q: want a non-negative integer", k, vs[0])
			}
			switch k {
			case "max_keys":
				mo = append(mo, memory.WithMaxKeys(n))
			case "shards":
				mo = append(mo, memory.WithShards(n))
			}
		}
	}
	st, err := memory.New(append(mo, c.memOpts...)...)
	if err != nil {
		if errors.Is(err, memory.ErrInvalidOption) {
			return nil, &URLError{URL: Redact(rawURL), Reason: err.Error(), Err: err}
		}
		return nil, err
	}
	return st, nil
}

func withColons(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s + "://"
	}
	return out
}

// Redact returns the URL with any password replaced by "xxxxx", for logs.
// All the user information of a memcached:// or memcacheds:// URL, which
// takes none, is hidden.
func Redact(rawURL string) string { return store.RedactURL(rawURL) }
