package redis

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/storeurl/hostlist"
)

// ErrBadURL is wrapped by every store URL error from Open.
var ErrBadURL = errors.New("redis: bad store URL")

// Mode says how a store reaches Redis.
type Mode uint8

// The deployments a store URL selects.
const (
	Standalone Mode = iota + 1 // redis:// and rediss://
	Sentinel                   // redis-sentinel://
	Cluster                    // redis-cluster://
)

// String returns "standalone", "sentinel" or "cluster".
func (m Mode) String() string {
	switch m {
	case Standalone:
		return "standalone"
	case Sentinel:
		return "sentinel"
	case Cluster:
		return "cluster"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Endpoint is a parsed store URL.
type Endpoint struct {
	Mode Mode
	// Addrs are host:port pairs: the server, the sentinels, or the cluster
	// seed nodes.
	Addrs []string
	// MasterSet is the Sentinel master name (Sentinel only).
	MasterSet string
	// Username and Password authenticate to the data nodes (AUTH).
	Username, Password string
	// DB is the database number (standalone and Sentinel; 0 by default).
	DB int
	// TLS is set by rediss://.
	TLS bool
	// WaitReplicas and WaitTimeout are the query parameters wait_replicas
	// and wait_timeout (see WithWait); 0 when not given.
	WaitReplicas int
	WaitTimeout  time.Duration
}

// DefaultWaitTimeout is the wait_timeout of a URL that gives
// wait_replicas alone: how long WAIT waits for the replicas after each
// write (see WithWait).
const DefaultWaitTimeout = 50 * time.Millisecond

// Bounds of the wait_replicas and wait_timeout parameters.
const (
	maxWaitReplicas = 100
	maxWaitTimeout  = 10 * time.Second
)

// ParseURL parses a store URL:
//
//	redis://[user:pass@]host[:port][/db]           standalone (port 6379 by default)
//	rediss://[user:pass@]host[:port][/db]          standalone over TLS
//	redis-sentinel://[user:pass@]master@host:port,host:port[/db]
//	redis-cluster://[user:pass@]host:port,host:port
//
// Each may end in a query of these parameters:
//
//	wait_replicas=N        follow every write with WAIT N (see WithWait); 0, the default, sends no WAIT
//	wait_timeout=DURATION  WAIT's timeout, a Go duration from 1ms to 10s (default 50ms; needs wait_replicas)
//
// The credentials end at the URL's last '@', so a password may hold '/',
// '?', '#', ':' or '@' as it is (percent-escapes are decoded too); a
// fragment, or another query parameter, is an error. Credentials without
// ':' (redis://name@host) are a user name, as rueidis and go-redis read
// them (redis-cli reads a password: they are hidden in errors all the
// same). The host list follows the rule of every store URL (package
// hostlist), memcached:// included: a port is decimal digits from 1 to
// 65535 without sign or space (leading zeros are dropped: :06379 is port
// 6379); a host holds no space nor control character; an IPv6 host is in
// brackets; a list has no empty member and no server twice. A database
// number is decimal digits without sign too. Errors wrap ErrBadURL and say what is wrong; the
// credentials never appear in them (see redactURL), nor does the query
// (only the name of a parameter and the value of a known one, as
// written).
func ParseURL(raw string) (Endpoint, error) {
	// Cut as store.RedactURL cuts: the password it hides is the one read
	// here, whatever it holds.
	p, ok := store.SplitURL(raw)
	rest, query, hasQuery := strings.Cut(p.Rest, "?")
	shown := redactURL(raw)
	if hasQuery {
		// Not quoted: an unknown parameter may carry a password
		// (?password=…).
		shown = redactURL(strings.TrimSuffix(raw, p.Rest) + rest)
	}
	bad := func(format string, args ...any) (Endpoint, error) {
		return Endpoint{}, fmt.Errorf("%w %q: %s", ErrBadURL, shown, fmt.Sprintf(format, args...))
	}
	scheme := p.Scheme
	if !ok {
		return bad("missing scheme (want redis://, rediss://, redis-sentinel:// or redis-cluster://)")
	}
	var e Endpoint
	switch strings.ToLower(scheme) {
	case "redis":
		e.Mode = Standalone
	case "rediss":
		e.Mode, e.TLS = Standalone, true
	case "redis-sentinel":
		e.Mode = Sentinel
	case "redis-cluster":
		e.Mode = Cluster
	default:
		return bad("unknown scheme %q (want redis, rediss, redis-sentinel or redis-cluster)", scheme)
	}
	hosts, path, _ := strings.Cut(rest, "/")
	if strings.Contains(p.Rest, "#") {
		return bad("fragments (#…) are not supported")
	}
	if hasQuery {
		if err := parseQuery(&e, query); err != nil {
			return bad("%s", err)
		}
	}
	if p.HasUserInfo {
		user := p.UserInfo
		if e.Mode == Sentinel {
			if i := strings.LastIndexByte(user, '@'); i >= 0 {
				e.MasterSet, user = user[i+1:], user[:i]
			} else {
				e.MasterSet, user = user, ""
			}
			if e.MasterSet == "" {
				return bad("empty master name before '@'")
			}
			if strings.Contains(e.MasterSet, ":") {
				// "user:pass@host", the master left out: not quoted, it is
				// the credentials.
				return bad("missing master name after the credentials, or one holding ':' (want redis-sentinel://[user:pass@]master@host:port,...)")
			}
		}
		if user != "" {
			name, pass, hasPass := strings.Cut(user, ":")
			var err error
			if e.Username, err = url.PathUnescape(name); err != nil {
				// Not the escape's error: it quotes the escape, and the
				// name may be a password (redis://secret@host).
				return bad("user name is not properly escaped")
			}
			if hasPass {
				if e.Password, err = url.PathUnescape(pass); err != nil {
					return bad("password is not properly escaped")
				}
			}
		}
	}
	if e.Mode == Sentinel && e.MasterSet == "" {
		return bad("missing master name (want redis-sentinel://master@host:port,...)")
	}
	if hosts == "" {
		return bad("missing host")
	}
	defaultPort := ""
	if e.Mode == Standalone {
		defaultPort = "6379"
	}
	addrs, err := hostlist.Parse(hosts, "address", defaultPort)
	if err != nil {
		return bad("%v", err)
	}
	e.Addrs = addrs
	if e.Mode == Standalone && len(e.Addrs) > 1 {
		return bad("%s takes one host; use redis-cluster:// or redis-sentinel:// for several", scheme)
	}
	if path != "" {
		if e.Mode == Cluster {
			return bad("a cluster has no database number (got /%s)", path)
		}
		db, err := decimal(path, math.MaxInt32)
		if err != nil {
			return bad("database must be a non-negative integer in decimal digits (no sign), got %q", path)
		}
		e.DB = db
	}
	return e, nil
}

// parseQuery reads a store URL's query parameters into e. Its errors
// quote the name of a parameter (what precedes its '=') and the value of
// a known one, never an unknown one's value.
func parseQuery(e *Endpoint, query string) error {
	if strings.Contains(query, ";") {
		return errors.New("query: malformed (want wait_replicas=N&wait_timeout=DURATION)")
	}
	// Counted by name as read (escapes decoded): wait%5Freplicas is
	// wait_replicas, and a second one would silently replace the first.
	seen := map[string]int{}
	for _, kv := range strings.Split(query, "&") {
		k, _, _ := strings.Cut(kv, "=")
		if u, err := url.PathUnescape(k); err == nil {
			k = u
		}
		seen[k]++
	}
	for _, kv := range strings.Split(query, "&") {
		k, raw, ok := strings.Cut(kv, "=")
		if !ok {
			// Not quoted: it may be a password.
			return errors.New("a query parameter without '=' (want wait_replicas=N&wait_timeout=DURATION)")
		}
		// Percent-escapes are decoded; '+' is not a space (the values are
		// numbers and durations, and quoted as written).
		k, err := url.PathUnescape(k)
		if err != nil {
			return errors.New("query: malformed (want wait_replicas=N&wait_timeout=DURATION)")
		}
		v, err := url.PathUnescape(raw)
		if err != nil {
			v = "\x00" // refused below, quoted as written
		}
		if n := seen[k]; n > 1 {
			return fmt.Errorf("parameter %q given %d times", k, n)
		}
		switch k {
		case "wait_replicas":
			n, err := decimal(v, maxWaitReplicas)
			if err != nil {
				return fmt.Errorf("parameter wait_replicas=%q: want an integer from 0 to %d (the replicas that must acknowledge each write)", raw, maxWaitReplicas)
			}
			e.WaitReplicas = n
		case "wait_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Millisecond || d > maxWaitTimeout || strings.ContainsAny(v[:1], "+-") {
				return fmt.Errorf("parameter wait_timeout=%q: want a duration from 1ms to %v, e.g. 50ms", raw, maxWaitTimeout)
			}
			e.WaitTimeout = d
		default:
			return fmt.Errorf("unknown parameter %q (want wait_replicas or wait_timeout)", k)
		}
	}
	if e.WaitTimeout != 0 && e.WaitReplicas == 0 {
		return errors.New("parameter wait_timeout needs wait_replicas (1 or more)")
	}
	if e.WaitReplicas > 0 && e.WaitTimeout == 0 {
		e.WaitTimeout = DefaultWaitTimeout
	}
	return nil
}

// decimal parses s, decimal digits alone (no sign, no space; leading
// zeros are dropped), as a number from 0 to max.
func decimal(s string, max int) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, errors.New("not decimal digits")
	}
	n, err := strconv.ParseUint(s, 10, 63)
	if err != nil || n > uint64(max) {
		return 0, errors.New("out of range")
	}
	return int(n), nil
}

// redactURL returns a store URL as errors show it (store.RedactURL): a
// password replaced by "xxxxx", and user information without ':'
// (redis://secret@host, redis-sentinel://secret@master@host) hidden whole:
// floodgate reads it as a user name, as rueidis and go-redis do, but
// redis-cli reads it as a password, and so may whoever wrote it.
func redactURL(raw string) string { return store.RedactURL(raw) }

// tlsConfig returns the TLS configuration for e: the one given, or a
// default that verifies the server's certificate against its host name.
func tlsConfig(e Endpoint, given *tls.Config) *tls.Config {
	if given != nil {
		return given.Clone()
	}
	if !e.TLS {
		return nil
	}
	host, _, _ := net.SplitHostPort(e.Addrs[0])
	return &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
}
