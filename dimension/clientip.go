package dimension

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// ProxyHeader is the header trusted proxies use to pass the client's address
// on. Only one is honoured: a proxy that appends to X-Forwarded-For does not
// strip a Forwarded header the client made up, so reading both would let the
// client choose its own address.
type ProxyHeader int

const (
	// XForwardedFor reads X-Forwarded-For, a comma-separated list of
	// addresses, each proxy appending the address it received the request
	// from. All X-Forwarded-For header lines form one list. The default.
	XForwardedFor ProxyHeader = iota
	// Forwarded reads the for= parameters of RFC 7239's Forwarded header,
	// e.g. `for=192.0.2.60;proto=http, for="[2001:db8::1]:4711"`.
	Forwarded
	// XRealIP reads X-Real-IP, a single address set by the proxy (its last
	// line when there are several). There is no chain to walk.
	XRealIP
)

// String returns the header's name: "X-Forwarded-For", "Forwarded" or
// "X-Real-IP".
func (h ProxyHeader) String() string {
	switch h {
	case Forwarded:
		return "Forwarded"
	case XRealIP:
		return "X-Real-IP"
	}
	return "X-Forwarded-For"
}

// ParseProxyHeader parses a header name, case-insensitively: "" and
// "x-forwarded-for" give XForwardedFor, "forwarded" Forwarded, "x-real-ip"
// XRealIP.
func ParseProxyHeader(s string) (ProxyHeader, error) {
	switch strings.ToLower(s) {
	case "", "x-forwarded-for":
		return XForwardedFor, nil
	case "forwarded":
		return Forwarded, nil
	case "x-real-ip":
		return XRealIP, nil
	}
	return 0, fmt.Errorf("unknown proxy header %q (want X-Forwarded-For, Forwarded or X-Real-IP)", s)
}

// Proxies says which peers are trusted proxies and which header they fill
// in. The zero Proxies trusts nobody: the client is always the direct peer.
type Proxies struct {
	// Trusted are the proxies' networks. Prefixes of IPv4-mapped IPv6
	// addresses (::ffff:0:0/96 and longer) match the IPv4 addresses they
	// map.
	Trusted []netip.Prefix
	// Header is where the trusted proxies put the client's address.
	Header ProxyHeader
}

// ClientIP returns the client's address as the direct peer and the X-Forwarded-For
// chain show it, trusting the chain only from peers inside trusted. It is
// Proxies{Trusted: trusted}.ClientIP(r); see there.
func ClientIP(r *http.Request, trusted []netip.Prefix) netip.Addr {
	return Proxies{Trusted: trusted}.ClientIP(r)
}

// ClientIP returns the request's client address, IPv4-mapped IPv6 addresses
// unmapped and zones dropped:
//
//   - the direct peer (r.RemoteAddr) when it is not a trusted proxy: what
//     it sends in any header is ignored, so a client cannot spoof its key;
//   - otherwise, with X-Forwarded-For or Forwarded, the chain is walked
//     from the right (the hop the peer added) to the left, skipping trusted
//     proxies; the first untrusted address is the client. When every hop
//     is trusted the leftmost is. When a hop is malformed, "unknown" or an
//     obfuscated identifier, or a Forwarded line does not parse, the walk
//     stops and the last trusted hop is the client: no address the client
//     could have written is ever used;
//   - with X-Real-IP, its address, or the peer when it is missing or
//     malformed.
//
// It returns the zero Addr when r.RemoteAddr is not an IP address (a Unix
// socket peer, for one). It never panics and allocates only for Forwarded
// chains longer than 16 hops or with escaped quotes.
func (p Proxies) ClientIP(r *http.Request) netip.Addr {
	peer, ok := parseHop(r.RemoteAddr)
	if !ok || !p.trusted(peer) {
		return peer
	}
	switch p.Header {
	case Forwarded:
		return p.walkForwarded(r.Header["Forwarded"], peer)
	case XRealIP:
		v := r.Header["X-Real-Ip"]
		if len(v) == 0 {
			return peer
		}
		if a, ok := parseHop(v[len(v)-1]); ok {
			return a
		}
		return peer
	}
	return p.walkXFF(r.Header["X-Forwarded-For"], peer)
}

// TrustsEveryPeer reports whether a trusted network holds every IPv4 or
// every IPv6 address (0.0.0.0/0, ::/0, ::ffff:0:0/96): then every peer is
// a trusted proxy, and any client can choose the address it is keyed by.
func (p Proxies) TrustsEveryPeer() bool {
	for _, pfx := range p.Trusted {
		if pfx.Bits() == 0 || (pfx.Addr().Is4In6() && pfx.Bits() <= 96) {
			return true
		}
	}
	return false
}

// trusted reports whether a (unmapped, without zone) is inside a trusted
// network. A prefix of IPv4-mapped IPv6 addresses is read as the IPv4
// network it maps, as Trusted's doc says and as a Spec's trusted_proxies
// are when compiled: netip.Prefix.Contains never matches an IPv4 address
// against an IPv6 prefix.
func (p Proxies) trusted(a netip.Addr) bool {
	for _, pfx := range p.Trusted {
		if a.Is4() && pfx.Addr().Is4In6() {
			pfx = normPrefix(pfx)
		}
		if pfx.Contains(a) {
			return true
		}
	}
	return false
}

// walkXFF walks X-Forwarded-For lines right to left, each line's
// comma-separated hops right to left. Empty list elements are skipped.
func (p Proxies) walkXFF(lines []string, client netip.Addr) netip.Addr {
	for i := len(lines) - 1; i >= 0; i-- {
		v := lines[i]
		for {
			j := strings.LastIndexByte(v, ',')
			if hop := trimOWS(v[j+1:]); hop != "" {
				a, ok := parseHop(hop)
				if !ok {
					return client
				}
				if !p.trusted(a) {
					return a
				}
				client = a
			}
			if j < 0 {
				break
			}
			v = v[:j]
		}
	}
	return client
}

// walkForwarded walks Forwarded lines right to left. An element without a
// for= parameter counts as an unknown hop.
func (p Proxies) walkForwarded(lines []string, client netip.Addr) netip.Addr {
	var buf [16]forHop
	for i := len(lines) - 1; i >= 0; i-- {
		hops, ok := parseForwarded(buf[:0], lines[i])
		if !ok {
			return client
		}
		for k := len(hops) - 1; k >= 0; k-- {
			if !hops[k].ok {
				return client
			}
			a, ok := parseHop(hops[k].node)
			if !ok {
				return client
			}
			if !p.trusted(a) {
				return a
			}
			client = a
		}
	}
	return client
}

// forHop is one Forwarded element's for= node, unquoted; ok is false when
// the element had none.
type forHop struct {
	node string
	ok   bool
}

// parseForwarded appends the for= node of every element of one Forwarded
// header line (RFC 7239 §4) to dst. It reports false when the line does not
// parse: a pair without '=', an unterminated quoted string, a repeated for=
// parameter, or junk after a value.
func parseForwarded(dst []forHop, v string) ([]forHop, bool) {
	i := 0
	for {
		var hop forHop
		for { // the pairs of one element
			i = skipOWS(v, i)
			if i == len(v) || v[i] == ',' {
				break
			}
			if v[i] == ';' {
				i++
				continue
			}
			start := i
			for i < len(v) && isTokenChar(v[i]) {
				i++
			}
			if i == start || i == len(v) || v[i] != '=' {
				return dst, false
			}
			name := v[start:i]
			i++
			var val string
			if i < len(v) && v[i] == '"' {
				var ok bool
				val, i, ok = quoted(v, i)
				if !ok {
					return dst, false
				}
			} else {
				start = i
				for i < len(v) && isTokenChar(v[i]) {
					i++
				}
				val = v[start:i]
			}
			if strings.EqualFold(name, "for") {
				if hop.ok {
					return dst, false
				}
				hop = forHop{node: val, ok: true}
			}
			i = skipOWS(v, i)
			if i < len(v) && v[i] != ';' && v[i] != ',' {
				return dst, false
			}
		}
		dst = append(dst, hop)
		if i == len(v) {
			return dst, true
		}
		i++ // the ','
	}
}

// quoted reads the quoted string starting at v[i] == '"' and returns its
// content, unescaped, and the index after the closing quote.
func quoted(v string, i int) (string, int, bool) {
	i++
	start := i
	escaped := false
	for ; i < len(v); i++ {
		switch v[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			s := v[start:i]
			if escaped {
				s = unescape(s)
			}
			return s, i + 1, true
		}
	}
	return "", i, false
}

func unescape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseHop parses one hop: "192.0.2.1", "192.0.2.1:80", "2001:db8::1",
// "[2001:db8::1]", "[2001:db8::1]:80", surrounding spaces allowed. The
// result is unmapped and without zone.
func parseHop(s string) (netip.Addr, bool) {
	s = trimOWS(s)
	host := s
	// Pick the form first: a failed netip.ParseAddr allocates its error.
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 || (end+1 < len(s) && !validPort(s[end+1:])) {
			return netip.Addr{}, false
		}
		host = s[1:end]
	case strings.Count(s, ":") == 1:
		c := strings.IndexByte(s, ':')
		if !validPort(s[c:]) {
			return netip.Addr{}, false
		}
		host = s[:c]
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// validPort reports whether s is ":" and 1 to 5 digits; RFC 7239 also
// allows an obfuscated port ("_abc"), which is accepted as well.
func validPort(s string) bool {
	if len(s) < 2 || len(s) > 6 && s[1] != '_' || s[0] != ':' {
		return false
	}
	if s[1] == '_' {
		for i := 2; i < len(s); i++ {
			if c := s[i]; !(isAlnum(c) || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return true
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// isTokenChar reports whether c may appear in an RFC 9110 token.
func isTokenChar(c byte) bool {
	return isAlnum(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func skipOWS(v string, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
		i++
	}
	return i
}

// trimOWS trims optional whitespace (spaces and tabs) from both ends of s;
// by hand, since strings.Trim builds its set of bytes on every call (it
// showed in the extractor's profile).
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// Collapse returns the network of the given length around a: v4bits for an
// IPv4 address, v6bits for IPv6. An IPv6 client usually owns a whole /64, so
// limiting each address alone lets it rotate through 2^64 keys. An
// IPv4-mapped IPv6 address counts as the IPv4 address it maps (its /64
// would be ::/64, one network for every IPv4 client), and a zone is
// dropped. It returns the zero Prefix for an invalid a or an out-of-range
// length.
func Collapse(a netip.Addr, v4bits, v6bits int) netip.Prefix {
	a = a.Unmap()
	bits := v6bits
	if a.Is4() {
		bits = v4bits
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// normPrefix masks p and turns an IPv4-mapped IPv6 prefix into the IPv4
// prefix it covers, since client addresses are unmapped before matching.
func normPrefix(p netip.Prefix) netip.Prefix {
	a := p.Addr().WithZone("")
	if a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return netip.PrefixFrom(a, p.Bits()).Masked()
}
