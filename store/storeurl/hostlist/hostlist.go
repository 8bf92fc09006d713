// Package hostlist reads the host list of a network store URL, the
// "host:port,host:port" between the scheme (or the credentials) and the
// path, by one rule for every store: the Redis URLs (redis://, rediss://,
// redis-cluster://, redis-sentinel://) and memcached://. It uses only the
// standard library, so that the store packages, which package storeurl
// opens, can import it.
//
// The rule, member by member (a member is what lies between commas):
//
//   - it is not empty (a,,b is refused, naming the empty member by its
//     position);
//   - it is host:port, or host alone where the store has a default port;
//     an IPv6 address is written in brackets, [::1]:6379 or [::1], and
//     its zone either as a URL writes it (RFC 6874, as net/url reads it):
//     "%25" then the zone percent-encoded, [fe80::1%25eth0]:6379, or as the
//     dialer takes it, '%' then the zone as is, [fe80::1%eth0]:6379. A zone
//     after "%25" is always read the first way (so a raw zone beginning
//     with "25" is written %2525...);
//   - the host is not empty and holds no space nor control character
//     (nor does the member: " a:1" and "a:1 " are refused, not trimmed);
//   - the port is ASCII decimal digits alone, from 1 to 65535: no sign,
//     space, '_' or base prefix. Leading zeros are read as the Go dialer
//     reads them (06379 is 6379), and the port is returned without them;
//   - no server is listed twice: host names are compared ignoring case,
//     ports as numbers (h:6379 and H:06379 are one server).
//
// Addresses come back as net.JoinHostPort writes them, the host as
// written but for an IPv6 zone, decoded for the dialer ([fe80::1%eth0]:6379). An error names the member (quoted, with its position when the
// list has more than one) and says what is wrong; it never quotes
// anything outside the list, so a caller that cut the credentials off
// first (store.SplitURL) shows no password through it.
package hostlist

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode"
)

// Parse reads list, a comma-separated host list, and returns its
// addresses in order. noun names a member in errors ("server",
// "address"); defaultPort is the port of a member given without one, or
// "" when every member must have a port.
func Parse(list, noun, defaultPort string) ([]string, error) {
	members := strings.Split(list, ",")
	addrs := make([]string, 0, len(members))
	seen := make(map[string]bool, len(members))
	for i, m := range members {
		if m == "" {
			return nil, fmt.Errorf("%s %d is empty (want %s)", noun, i+1, want(defaultPort))
		}
		addr, err := hostPort(m, defaultPort)
		if err != nil {
			if len(members) > 1 {
				return nil, fmt.Errorf("%s %d %q: %v", noun, i+1, m, err)
			}
			return nil, fmt.Errorf("%s %q: %v", noun, m, err)
		}
		// Host names ignore case (Cache1 and cache1 are one server); the
		// address keeps the case as written (memcached's ring hashes it as
		// libketama does).
		key := strings.ToLower(addr)
		if seen[key] {
			return nil, fmt.Errorf("%s %q is listed twice", noun, addr)
		}
		seen[key] = true
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

func want(defaultPort string) string {
	if defaultPort == "" {
		return "host:port"
	}
	return "host:port, or host for port " + defaultPort
}

// hostPort reads one member.
func hostPort(m, defaultPort string) (string, error) {
	var host, port string
	switch {
	case !strings.ContainsAny(m, ":[]"), len(m) > 1 && m[0] == '[' && m[len(m)-1] == ']' && !strings.ContainsAny(m[1:len(m)-1], "[]"):
		// host or [IPv6] alone.
		if defaultPort == "" {
			return "", fmt.Errorf("want %s", want(defaultPort))
		}
		host, port = strings.TrimSuffix(strings.TrimPrefix(m, "["), "]"), defaultPort
	default:
		var err error
		if host, port, err = net.SplitHostPort(m); err != nil {
			if strings.Count(m, ":") > 1 && !strings.Contains(m, "[") {
				return "", fmt.Errorf("want %s (an IPv6 address goes in brackets: [::1]:port)", want(defaultPort))
			}
			return "", fmt.Errorf("want %s", want(defaultPort))
		}
	}
	if host == "" {
		return "", errors.New("empty host")
	}
	if strings.ContainsFunc(host, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return "", errors.New("the host holds a space or a control character")
	}
	host, err := ipv6Zone(host)
	if err != nil {
		return "", err
	}
	n, ok := parsePort(port)
	if !ok {
		return "", fmt.Errorf("port must be 1-65535, got %q", port)
	}
	return net.JoinHostPort(host, strconv.Itoa(n)), nil
}

// ipv6Zone decodes the zone of an IPv6 host written as a URL writes it,
// "%25" then the zone percent-encoded (RFC 6874), into the form the dialer
// takes, '%' then the zone. Any other host, a zone written as the dialer
// takes it included, comes back unchanged.
func ipv6Zone(host string) (string, error) {
	i := strings.IndexByte(host, '%')
	if i < 0 || !strings.Contains(host, ":") {
		return host, nil
	}
	const example = " (in a URL an IPv6 zone is written %25 then the zone: [fe80::1%25eth0])"
	if i == len(host)-1 {
		return "", errors.New("empty IPv6 zone after %" + example)
	}
	if !strings.HasPrefix(host[i:], "%25") {
		return host, nil
	}
	zone, err := url.PathUnescape(host[i+3:])
	switch {
	case err != nil:
		return "", errors.New("the IPv6 zone after %25 is not properly percent-encoded" + example)
	case zone == "":
		return "", errors.New("empty IPv6 zone after %25" + example)
	case strings.ContainsFunc(zone, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return "", errors.New("the IPv6 zone holds a space or a control character")
	}
	return host[:i] + "%" + zone, nil
}

// parsePort reads decimal digits alone (leading zeros allowed) as a port
// from 1 to 65535.
func parsePort(s string) (int, bool) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n < 1 {
		return 0, false
	}
	return int(n), true
}
