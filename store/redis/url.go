package redis

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

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
}

// ParseURL parses a store URL:
//
//	redis://[user:pass@]host[:port][/db]           standalone (port 6379 by default)
//	rediss://[user:pass@]host[:port][/db]          standalone over TLS
//	redis-sentinel://[user:pass@]master@host:port,host:port[/db]
//	redis-cluster://[user:pass@]host:port,host:port
//
// The credentials end at the URL's last '@', so a password may hold '/',
// '?', '#', ':' or '@' as it is (percent-escapes are decoded too); a
// query or fragment after the hosts is an error. Errors wrap ErrBadURL
// and say what is wrong; the password never appears in them, nor does a
// query.
func ParseURL(raw string) (Endpoint, error) {
	shown := store.RedactURL(raw)
	bad := func(format string, args ...any) (Endpoint, error) {
		return Endpoint{}, fmt.Errorf("%w %q: %s", ErrBadURL, shown, fmt.Sprintf(format, args...))
	}
	// Cut as store.RedactURL cuts: the password it hides is the one read
	// here, whatever it holds.
	p, ok := store.SplitURL(raw)
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
	hosts, path, _ := strings.Cut(p.Rest, "/")
	if strings.ContainsAny(p.Rest, "?#") {
		// Not quoted: a query may carry a password (?password=…).
		return bad("query parameters (?…) and fragments (#…) are not supported")
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
