package memcached

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/floodgate/floodgate/store"
)

// DefaultPort is used for a server given without a port.
const DefaultPort = "11211"

// ParseURL returns the servers (host:port) named by a store URL of the form
// memcached://host:port[,host:port…]. A server without a port gets
// DefaultPort; IPv6 hosts are written in brackets ([::1]:11211). A port is
// returned in decimal without sign or leading zeros (021211 and +21211 are
// 21211), so that one server written two ways is found listed twice and
// hashed on the ring as one. Every
// problem is an error that names the URL and what is wrong.
//
// Memcached's text protocol has no authentication: a URL with user
// information (anything before an '@') is refused. The URL is cut as
// store.SplitURL cuts it and quoted as store.RedactURL shows it, so an
// error never shows what precedes the '@', whatever it holds ('/', '?',
// '#', ':' or '@' included), and no reason quotes a query or fragment.
func ParseURL(rawURL string) ([]string, error) {
	shown := store.RedactURL(rawURL)
	bad := func(format string, args ...any) ([]string, error) {
		return nil, fmt.Errorf("memcached: store URL %q: %s", shown, fmt.Sprintf(format, args...))
	}
	p, ok := store.SplitURL(rawURL)
	if !ok || !strings.EqualFold(p.Scheme, "memcached") {
		return bad("want memcached://host:port[,host:port]")
	}
	if p.HasUserInfo {
		return bad("memcached takes no user name or password (remove what precedes '@'): its text protocol has no authentication; firewall the port instead")
	}
	rest := p.Rest
	if strings.ContainsAny(rest, "?#") {
		return bad("query parameters (?…) and fragments (#…) are not supported: only a list of host:port is allowed")
	}
	rest = strings.TrimSuffix(rest, "/")
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		// After the last '@': no part of a password.
		return bad("unexpected path %q: only a list of host:port is allowed", rest[i:])
	}
	if rest == "" {
		return bad("no server")
	}
	var servers []string
	seen := map[string]bool{}
	for i, part := range strings.Split(rest, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return bad("server %d is empty", i+1)
		}
		host, port, err := net.SplitHostPort(part)
		if err != nil {
			if strings.Contains(err.Error(), "missing port") {
				host, port = strings.Trim(part, "[]"), DefaultPort
			} else {
				return bad("server %d %q: %v", i+1, part, err)
			}
		}
		if host == "" {
			return bad("server %d %q has no host", i+1, part)
		}
		// The port as a number, written without sign or leading zeros:
		// the address is the duplicate check's, the ring's hash and the
		// server's name, and 021211 or +21211 must not make another
		// server of 21211.
		n, err := strconv.ParseUint(strings.TrimPrefix(port, "+"), 10, 16)
		if err != nil || n < 1 {
			return bad("server %d %q: port must be 1-65535", i+1, part)
		}
		addr := net.JoinHostPort(host, strconv.FormatUint(n, 10))
		// Host names ignore case (Cache1 and cache1 are one server), but
		// the ring hashes the server as written, as libketama does: the
		// duplicate check folds case, the address keeps it.
		key := strings.ToLower(addr)
		if seen[key] {
			return bad("server %q is listed twice", addr)
		}
		seen[key] = true
		servers = append(servers, addr)
	}
	return servers, nil
}
