package memcached

import (
	"fmt"
	"strings"

	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/storeurl/hostlist"
)

// DefaultPort is used for a server given without a port.
const DefaultPort = "11211"

// ParseURL returns the servers (host:port) named by a store URL of the form
// memcached://host:port[,host:port…]. The host list follows the rule of
// every store URL (package hostlist), the Redis ones included: a server
// without a port gets DefaultPort; IPv6 hosts are written in brackets
// ([::1]:11211); a port is decimal digits from 1 to 65535 without sign or
// space, returned without leading zeros (021211 is 21211) so that one
// server written two ways is found listed twice rather than hashed on the
// ring as two; a list holds no space and no empty member. Every problem is
// an error that names the URL, the server and what is wrong.
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
	servers, err := hostlist.Parse(rest, "server", DefaultPort)
	if err != nil {
		return bad("%v", err)
	}
	return servers, nil
}
