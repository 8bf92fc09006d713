package memcached

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// DefaultPort is used for a server given without a port.
const DefaultPort = "11211"

// ParseURL returns the servers (host:port) named by a store URL of the form
// memcached://host:port[,host:port…]. A server without a port gets
// DefaultPort; IPv6 hosts are written in brackets ([::1]:11211). Every
// problem is an error that names the URL and what is wrong.
func ParseURL(rawURL string) ([]string, error) {
	bad := func(format string, args ...any) ([]string, error) {
		return nil, fmt.Errorf("memcached: store URL %q: %s", rawURL, fmt.Sprintf(format, args...))
	}
	const scheme = "memcached://"
	if len(rawURL) < len(scheme) || !strings.EqualFold(rawURL[:len(scheme)], scheme) {
		return bad("want memcached://host:port[,host:port]")
	}
	rest := strings.TrimSuffix(rawURL[len(scheme):], "/")
	if i := strings.IndexAny(rest, "/?#@"); i >= 0 {
		return bad("unexpected %q: only a list of host:port is allowed", rest[i:])
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
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return bad("server %d %q: port must be 1-65535", i+1, part)
		}
		addr := net.JoinHostPort(host, port)
		if seen[addr] {
			return bad("server %q is listed twice", addr)
		}
		seen[addr] = true
		servers = append(servers, addr)
	}
	return servers, nil
}
