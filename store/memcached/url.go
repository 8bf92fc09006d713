package memcached

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/storeurl/hostlist"
)

// DefaultPort is used for a server given without a port.
const DefaultPort = "11211"

// ParseURL returns the servers (host:port) named by a store URL of the form
// memcached://host:port[,host:port…], or memcacheds://host:port[,…] for
// servers that speak TLS (see Open), which follows the same rules. The
// host list follows the rule of
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
// Every part of the URL an error shows is quoted (%q), so that a control
// character shows escaped ("\n") and the error stays one line; when the URL
// holds one, or ends or starts with spaces or control characters (a value
// read from a file or an environment variable with its line end), the
// error says so after its reason.
func ParseURL(rawURL string) ([]string, error) {
	servers, _, err := parseURL(rawURL)
	return servers, err
}

// parseURL is ParseURL, and reports whether the URL's scheme is
// memcacheds:// (TLS).
func parseURL(rawURL string) (servers []string, useTLS bool, err error) {
	shown := store.RedactURL(rawURL)
	bad := func(format string, args ...any) ([]string, bool, error) {
		return nil, false, fmt.Errorf("memcached: store URL %q: %s%s", shown, fmt.Sprintf(format, args...), strayHint(shown))
	}
	p, ok := store.SplitURL(rawURL)
	switch {
	case ok && strings.EqualFold(p.Scheme, "memcacheds"):
		useTLS = true
	case !ok || !strings.EqualFold(p.Scheme, "memcached"):
		return bad("want memcached://host:port[,host:port], or memcacheds://… for TLS")
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
	servers, err = hostlist.Parse(rest, "server", DefaultPort)
	if err != nil {
		return bad("%v", err)
	}
	return servers, useTLS, nil
}

// strayHint says, for a URL refused for another reason, that it ends or
// starts with spaces or control characters, or holds a control character
// (" (…)", the characters quoted), or "". shown is the URL with its
// credentials hidden, so the hint never quotes any of them.
func strayHint(shown string) string {
	stray := func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }
	if t := strings.TrimRightFunc(shown, stray); t != shown {
		return fmt.Sprintf(" (the URL ends with %q: trim what was read with it from a file or an environment variable)", shown[len(t):])
	}
	if t := strings.TrimLeftFunc(shown, stray); t != shown {
		return fmt.Sprintf(" (the URL starts with %q: trim what was read with it from a file or an environment variable)", shown[:len(shown)-len(t)])
	}
	if i := strings.IndexFunc(shown, unicode.IsControl); i >= 0 {
		r, _ := utf8.DecodeRuneInString(shown[i:])
		return fmt.Sprintf(" (the URL holds the control character %q)", string(r))
	}
	return ""
}
