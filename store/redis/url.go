package redis

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/store"
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
// fragment, or another query parameter, is an error. Errors wrap
// ErrBadURL and say what is wrong; the password never appears in them,
// nor does the query (only the name of a parameter and the value of a
// known one).
func ParseURL(raw string) (Endpoint, error) {
	// Cut as store.RedactURL cuts: the password it hides is the one read
	// here, whatever it holds.
	p, ok := store.SplitURL(raw)
	rest, query, hasQuery := strings.Cut(p.Rest, "?")
	shown := store.RedactURL(raw)
	if hasQuery {
		// Not quoted: an unknown parameter may carry a password
		// (?password=…).
		shown = store.RedactURL(strings.TrimSuffix(raw, p.Rest) + rest)
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
				return bad("user name: %v", err)
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
	for _, h := range strings.Split(hosts, ",") {
		addr, err := hostPort(h, e.Mode == Standalone)
		if err != nil {
			return bad("address %q: %v", h, err)
		}
		e.Addrs = append(e.Addrs, addr)
	}
	if e.Mode == Standalone && len(e.Addrs) > 1 {
		return bad("%s takes one host; use redis-cluster:// or redis-sentinel:// for several", scheme)
	}
	if path != "" {
		if e.Mode == Cluster {
			return bad("a cluster has no database number (got /%s)", path)
		}
		db, err := strconv.Atoi(path)
		if err != nil || db < 0 {
			return bad("database must be a non-negative integer, got %q", path)
		}
		e.DB = db
	}
	return e, nil
}

// parseQuery reads a store URL's query parameters into e. Its errors
// quote the name of a parameter (what precedes its '=') and the value of
// a known one, never an unknown one's value.
func parseQuery(e *Endpoint, query string) error {
	for _, kv := range strings.Split(query, "&") {
		if !strings.Contains(kv, "=") {
			// Not quoted: it may be a password.
			return errors.New("a query parameter without '=' (want wait_replicas=N&wait_timeout=DURATION)")
		}
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return errors.New("query: malformed (want wait_replicas=N&wait_timeout=DURATION)")
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return fmt.Errorf("parameter %q given %d times", k, len(vs))
		}
		v := vs[0]
		switch k {
		case "wait_replicas":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > maxWaitReplicas {
				return fmt.Errorf("parameter wait_replicas=%q: want an integer from 0 to %d (the replicas that must acknowledge each write)", v, maxWaitReplicas)
			}
			e.WaitReplicas = n
		case "wait_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Millisecond || d > maxWaitTimeout {
				return fmt.Errorf("parameter wait_timeout=%q: want a duration from 1ms to %v, e.g. 50ms", v, maxWaitTimeout)
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

// hostPort checks host:port; the port may be left out where a default
// applies.
func hostPort(h string, defaultPort bool) (string, error) {
	if h == "" {
		return "", errors.New("empty")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		if !defaultPort || (strings.Contains(h, ":") && !strings.HasPrefix(h, "[")) {
			return "", errors.New("want host:port")
		}
		host, port = strings.Trim(h, "[]"), "6379"
	}
	if host == "" {
		return "", errors.New("empty host")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port must be 1-65535, got %q", port)
	}
	return net.JoinHostPort(host, port), nil
}

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
