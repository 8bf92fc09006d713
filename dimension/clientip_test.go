package dimension

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

var testTrusted = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("2001:db8:ffff::/48"),
	normPrefix(netip.MustParsePrefix("::ffff:192.168.0.0/112")), // 192.168.0.0/16
}

type ipCase struct {
	name   string
	header ProxyHeader
	remote string
	h      http.Header
	want   string // "" for the zero Addr
}

func xff(v ...string) http.Header { return http.Header{"X-Forwarded-For": v} }
func fwd(v ...string) http.Header { return http.Header{"Forwarded": v} }
func xri(v ...string) http.Header { return http.Header{"X-Real-Ip": v} }

var ipCases = []ipCase{
	// The direct peer.
	{"untrusted peer", XForwardedFor, "203.0.113.7:5555", nil, "203.0.113.7"},
	{"untrusted peer spoofing XFF", XForwardedFor, "203.0.113.7:5555", xff("1.2.3.4"), "203.0.113.7"},
	{"untrusted peer spoofing Forwarded", Forwarded, "203.0.113.7:5555", fwd("for=1.2.3.4"), "203.0.113.7"},
	{"untrusted peer spoofing X-Real-IP", XRealIP, "203.0.113.7:5555", xri("1.2.3.4"), "203.0.113.7"},
	{"untrusted peer inside no prefix", XForwardedFor, "11.0.0.1:1", xff("1.2.3.4"), "11.0.0.1"},
	{"peer without port", XForwardedFor, "203.0.113.7", nil, "203.0.113.7"},
	{"IPv6 peer", XForwardedFor, "[2001:db8::1]:443", xff("1.2.3.4"), "2001:db8::1"},
	{"IPv4-mapped peer", XForwardedFor, "[::ffff:203.0.113.7]:80", nil, "203.0.113.7"},
	{"peer with zone", XForwardedFor, "[fe80::1%eth0]:80", nil, "fe80::1"},
	{"unix socket peer", XForwardedFor, "@", xff("1.2.3.4"), ""},
	{"empty RemoteAddr", XForwardedFor, "", nil, ""},
	{"trusted peer, no header", XForwardedFor, "10.0.0.1:80", nil, "10.0.0.1"},

	// X-Forwarded-For from a trusted peer, walked right to left.
	{"XFF one hop", XForwardedFor, "10.0.0.1:80", xff("203.0.113.7"), "203.0.113.7"},
	{"XFF client spoofs the left", XForwardedFor, "10.0.0.1:80", xff("1.2.3.4, 203.0.113.7"), "203.0.113.7"},
	{"XFF skips trusted hops", XForwardedFor, "10.0.0.1:80", xff("1.2.3.4, 203.0.113.7, 10.0.0.2, 10.9.9.9"), "203.0.113.7"},
	{"XFF lines joined", XForwardedFor, "10.0.0.1:80", xff("1.2.3.4", "203.0.113.7, 10.0.0.3"), "203.0.113.7"},
	{"XFF client in the first line", XForwardedFor, "10.0.0.1:80", xff("203.0.113.9", "10.0.0.3"), "203.0.113.9"},
	{"XFF all trusted", XForwardedFor, "10.0.0.1:80", xff("10.1.1.1, 10.0.0.2"), "10.1.1.1"},
	{"XFF malformed hop stops at the last trusted", XForwardedFor, "10.0.0.1:80", xff("203.0.113.7, garbage, 10.0.0.2"), "10.0.0.2"},
	{"XFF malformed rightmost", XForwardedFor, "10.0.0.1:80", xff("203.0.113.7, 300.1.1.1"), "10.0.0.1"},
	{"XFF unknown", XForwardedFor, "10.0.0.1:80", xff("unknown"), "10.0.0.1"},
	{"XFF empty elements", XForwardedFor, "10.0.0.1:80", xff(" 203.0.113.7 ,, 10.0.0.2,"), "203.0.113.7"},
	{"XFF empty line", XForwardedFor, "10.0.0.1:80", xff(""), "10.0.0.1"},
	{"XFF IPv4 with port", XForwardedFor, "10.0.0.1:80", xff("203.0.113.7:5555"), "203.0.113.7"},
	{"XFF bracketed IPv6 with port", XForwardedFor, "10.0.0.1:80", xff("[2001:db8::1]:80"), "2001:db8::1"},
	{"XFF bare IPv6", XForwardedFor, "10.0.0.1:80", xff("2001:db8::1"), "2001:db8::1"},
	{"XFF IPv4-mapped hop", XForwardedFor, "10.0.0.1:80", xff("::ffff:203.0.113.7"), "203.0.113.7"},
	{"XFF bad port", XForwardedFor, "10.0.0.1:80", xff("203.0.113.7:http"), "10.0.0.1"},
	{"XFF unclosed bracket", XForwardedFor, "10.0.0.1:80", xff("[2001:db8::1"), "10.0.0.1"},
	{"XFF from IPv4-mapped trusted peer", XForwardedFor, "[::ffff:10.0.0.1]:80", xff("203.0.113.7"), "203.0.113.7"},
	{"XFF from peer in a mapped prefix", XForwardedFor, "192.168.3.4:80", xff("203.0.113.7"), "203.0.113.7"},
	{"XFF from IPv6 trusted peer", XForwardedFor, "[2001:db8:ffff:1::1]:80", xff("2001:db8:1:2::3"), "2001:db8:1:2::3"},
	{"XFF mapped trusted hop skipped", XForwardedFor, "10.0.0.1:80", xff("203.0.113.7, ::ffff:10.0.0.9"), "203.0.113.7"},
	{"XFF ignored in Forwarded mode", Forwarded, "10.0.0.1:80", xff("203.0.113.7"), "10.0.0.1"},

	// Forwarded (RFC 7239) from a trusted peer.
	{"Forwarded RFC example", Forwarded, "10.0.0.1:80", fwd(`for=192.0.2.60;proto=http;by=203.0.113.43`), "192.0.2.60"},
	{"Forwarded quoted IPv6 with port", Forwarded, "10.0.0.1:80", fwd(`for=192.0.2.43, for="[2001:db8:cafe::17]:4711"`), "2001:db8:cafe::17"},
	{"Forwarded quoted IPv6", Forwarded, "10.0.0.1:80", fwd(`for="[2001:db8:cafe::17]"`), "2001:db8:cafe::17"},
	{"Forwarded quoted IPv4 with port", Forwarded, "10.0.0.1:80", fwd(`for="203.0.113.7:8080"`), "203.0.113.7"},
	{"Forwarded skips trusted", Forwarded, "10.0.0.1:80", fwd(`for=1.2.3.4, for=203.0.113.7;proto=https, for=10.0.0.5`), "203.0.113.7"},
	{"Forwarded lines joined", Forwarded, "10.0.0.1:80", fwd(`for=203.0.113.7`, `for=10.0.0.5`), "203.0.113.7"},
	{"Forwarded case and spaces", Forwarded, "10.0.0.1:80", fwd(` proto=https ; For=203.0.113.7 ;by=10.0.0.1 `), "203.0.113.7"},
	{"Forwarded empty pairs", Forwarded, "10.0.0.1:80", fwd(`;;for=203.0.113.7;`), "203.0.113.7"},
	{"Forwarded unknown", Forwarded, "10.0.0.1:80", fwd(`for=203.0.113.7, for=unknown`), "10.0.0.1"},
	{"Forwarded obfuscated", Forwarded, "10.0.0.1:80", fwd(`for=_hidden`), "10.0.0.1"},
	{"Forwarded obfuscated port", Forwarded, "10.0.0.1:80", fwd(`for="203.0.113.7:_p1"`), "203.0.113.7"},
	{"Forwarded element without for", Forwarded, "10.0.0.1:80", fwd(`for=203.0.113.7, proto=https`), "10.0.0.1"},
	{"Forwarded unterminated quote", Forwarded, "10.0.0.1:80", fwd(`for="203.0.113.7`), "10.0.0.1"},
	{"Forwarded comma inside quotes", Forwarded, "10.0.0.1:80", fwd(`for="1.2.3.4, 5.6.7.8"`), "10.0.0.1"},
	{"Forwarded escaped quote", Forwarded, "10.0.0.1:80", fwd(`for="\[2001:db8::1\]"`), "2001:db8::1"},
	{"Forwarded repeated for", Forwarded, "10.0.0.1:80", fwd(`for=1.2.3.4;for=203.0.113.7`), "10.0.0.1"},
	{"Forwarded pair without =", Forwarded, "10.0.0.1:80", fwd(`for`), "10.0.0.1"},
	{"Forwarded junk after value", Forwarded, "10.0.0.1:80", fwd(`for=1.2.3.4 x`), "10.0.0.1"},
	{"Forwarded bad line stops before it", Forwarded, "10.0.0.1:80", fwd(`for="1.2.3.4`, `for=203.0.113.7`), "203.0.113.7"},
	{"Forwarded unbracketed IPv6 with port", Forwarded, "10.0.0.1:80", fwd(`for="2001:db8::1:80"`), "2001:db8::1:80"},
	{"Forwarded empty", Forwarded, "10.0.0.1:80", fwd(``), "10.0.0.1"},

	// X-Real-IP from a trusted peer.
	{"X-Real-IP", XRealIP, "10.0.0.1:80", xri("203.0.113.7"), "203.0.113.7"},
	{"X-Real-IP last line", XRealIP, "10.0.0.1:80", xri("1.2.3.4", "203.0.113.7"), "203.0.113.7"},
	{"X-Real-IP malformed", XRealIP, "10.0.0.1:80", xri("nope"), "10.0.0.1"},
	{"X-Real-IP missing", XRealIP, "10.0.0.1:80", nil, "10.0.0.1"},
}

func TestClientIP(t *testing.T) {
	for _, tc := range ipCases {
		r := &http.Request{RemoteAddr: tc.remote, Header: tc.h}
		got := Proxies{Trusted: testTrusted, Header: tc.header}.ClientIP(r)
		want := netip.Addr{}
		if tc.want != "" {
			want = netip.MustParseAddr(tc.want)
		}
		if got != want {
			t.Errorf("%s: ClientIP(RemoteAddr %q, %v) = %v, want %v", tc.name, tc.remote, tc.h, got, want)
		}
	}
}

func TestClientIPTrustsNobodyByDefault(t *testing.T) {
	r := &http.Request{RemoteAddr: "10.0.0.1:80", Header: xff("203.0.113.7")}
	if got := ClientIP(r, nil); got != netip.MustParseAddr("10.0.0.1") {
		t.Errorf("ClientIP(nil trusted) = %v, want the peer", got)
	}
	if got := ClientIP(r, testTrusted); got != netip.MustParseAddr("203.0.113.7") {
		t.Errorf("ClientIP(trusted) = %v, want the XFF client", got)
	}
}

func TestParseProxyHeader(t *testing.T) {
	for in, want := range map[string]ProxyHeader{"": XForwardedFor, "X-Forwarded-For": XForwardedFor, "FORWARDED": Forwarded, "x-real-ip": XRealIP} {
		if got, err := ParseProxyHeader(in); err != nil || got != want {
			t.Errorf("ParseProxyHeader(%q) = %v, %v, want %v", in, got, err, want)
		}
	}
	if _, err := ParseProxyHeader("X-Client-IP"); err == nil || err.Error() != `unknown proxy header "X-Client-IP" (want X-Forwarded-For, Forwarded or X-Real-IP)` {
		t.Errorf("ParseProxyHeader(bad) error = %v", err)
	}
	for h, want := range map[ProxyHeader]string{XForwardedFor: "X-Forwarded-For", Forwarded: "Forwarded", XRealIP: "X-Real-IP"} {
		if h.String() != want {
			t.Errorf("%d.String() = %q, want %q", h, h, want)
		}
	}
}

func TestCollapse(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		v4, v6 int
		want   string
	}{
		{"203.0.113.7", 32, 64, "203.0.113.7/32"},
		{"203.0.113.7", 24, 64, "203.0.113.0/24"},
		{"2001:db8:1:2:3:4:5:6", 32, 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 32, 48, "2001:db8:1::/48"},
		{"2001:db8:1:2:3:4:5:6", 32, 128, "2001:db8:1:2:3:4:5:6/128"},
		{"2001:db8::1", 32, 129, "invalid Prefix"},
		{"203.0.113.7", 33, 64, "invalid Prefix"},
		// A mapped address is its IPv4 address (not ::/64, which every
		// mapped address shares); a zone is dropped.
		{"::ffff:203.0.113.7", 24, 64, "203.0.113.0/24"},
		{"::ffff:203.0.113.7", 32, 64, "203.0.113.7/32"},
		{"fe80::1:2:3:4%eth0", 32, 64, "fe80::/64"},
	} {
		if got := Collapse(netip.MustParseAddr(tc.addr), tc.v4, tc.v6).String(); got != tc.want {
			t.Errorf("Collapse(%s, %d, %d) = %s, want %s", tc.addr, tc.v4, tc.v6, got, tc.want)
		}
	}
	if got := Collapse(netip.Addr{}, 32, 64); got.IsValid() {
		t.Errorf("Collapse(zero) = %v, want the zero Prefix", got)
	}
}

// refWalk is a plain model of the X-Forwarded-For walk: split everything,
// then go right to left.
func refWalk(trusted []netip.Prefix, peer netip.Addr, lines []string) netip.Addr {
	var hops []string
	for _, l := range lines {
		for h := range strings.SplitSeq(l, ",") {
			if h = strings.Trim(h, " \t"); h != "" {
				hops = append(hops, h)
			}
		}
	}
	p := Proxies{Trusted: trusted}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			return client
		}
		if !p.trusted(a) {
			return a
		}
		client = a
	}
	return client
}

// FuzzClientIP checks every proxy header mode on arbitrary input: no panic,
// an untrusted peer is always the answer, the answer is always the peer or a
// hop the header held, and the X-Forwarded-For walk matches the plain model.
func FuzzClientIP(f *testing.F) {
	for _, tc := range ipCases {
		var v string
		for _, vs := range tc.h {
			v = strings.Join(vs, "\n")
		}
		f.Add(tc.remote, v)
	}
	f.Fuzz(func(t *testing.T, remote, value string) {
		lines := strings.Split(value, "\n")
		peer, peerOK := parseHop(remote)
		for _, mode := range []ProxyHeader{XForwardedFor, Forwarded, XRealIP} {
			r := &http.Request{RemoteAddr: remote, Header: http.Header{
				"X-Forwarded-For": lines, "Forwarded": lines, "X-Real-Ip": lines,
			}}
			p := Proxies{Trusted: testTrusted, Header: mode}
			got := p.ClientIP(r)
			switch {
			case !peerOK:
				if got.IsValid() {
					t.Fatalf("%v: RemoteAddr %q is no IP, got %v", mode, remote, got)
				}
				continue
			case !p.trusted(peer):
				if got != peer {
					t.Fatalf("%v: untrusted peer %v, got %v", mode, peer, got)
				}
				continue
			case !got.IsValid() || got.Zone() != "" || got.Is4In6():
				t.Fatalf("%v: got %v, want a plain valid address", mode, got)
			}
			if mode == XForwardedFor {
				if want := refWalk(testTrusted, peer, lines); got != want {
					t.Fatalf("XFF walk of %q from %v = %v, model says %v", lines, peer, got, want)
				}
			}
			if got != peer && !mentions(value, got) && !mentions(unescape(value), got) {
				t.Fatalf("%v: %v is neither the peer nor in %q", mode, got, value)
			}
		}
	})
}

// mentions reports whether some hop in v parses to a, with v cut into
// lines, into list elements, or at every Forwarded delimiter.
func mentions(v string, a netip.Addr) bool {
	for _, seps := range []string{"\n", ",\n", ",;=\"\n \t"} {
		for h := range strings.FieldsFuncSeq(v, func(r rune) bool { return strings.ContainsRune(seps, r) }) {
			if b, ok := parseHop(h); ok && b == a {
				return true
			}
		}
	}
	return false
}

func FuzzParseForwarded(f *testing.F) {
	for _, tc := range ipCases {
		if tc.header == Forwarded {
			for _, v := range tc.h["Forwarded"] {
				f.Add(v)
			}
		}
	}
	f.Fuzz(func(t *testing.T, v string) {
		hops, ok := parseForwarded(nil, v)
		if !ok {
			return
		}
		if n := strings.Count(v, ","); len(hops) > n+1 {
			t.Fatalf("%q: %d elements from %d commas", v, len(hops), n)
		}
		for _, h := range hops {
			if h.ok && !strings.Contains(v, h.node) && !strings.Contains(unescape(v), h.node) {
				t.Fatalf("%q: node %q is not in the input", v, h.node)
			}
		}
	})
}

// FuzzTrimOWS holds the hand-written trim to strings.Trim(s, " \t").
func FuzzTrimOWS(f *testing.F) {
	for _, s := range []string{"", " ", "\t \t", " 1.2.3.4\t", "a b", "\t\x00 ", " ,  "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := trimOWS(s), strings.Trim(s, " \t"); got != want {
			t.Fatalf("trimOWS(%q) = %q, want %q", s, got, want)
		}
	})
}

// TestClientIPMappedTrustedPrefix: a Proxies built in code, not compiled
// from a Spec, holds its prefixes as given; one of IPv4-mapped addresses
// matches the IPv4 peers it maps, as Proxies.Trusted's doc says, and no
// IPv4 peer outside it.
func TestClientIPMappedTrustedPrefix(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")} // 10.0.0.0/8
	for _, tc := range []struct{ remote, xff, want string }{
		{"10.1.2.3:5555", "203.0.113.7", "203.0.113.7"},
		{"[::ffff:10.1.2.3]:5555", "203.0.113.7", "203.0.113.7"},
		{"10.1.2.3:5555", "203.0.113.7, 10.9.9.9", "203.0.113.7"},
		{"11.1.2.3:5555", "203.0.113.7", "11.1.2.3"},
	} {
		r := &http.Request{RemoteAddr: tc.remote, Header: xff(tc.xff)}
		if got := ClientIP(r, trusted).String(); got != tc.want {
			t.Errorf("ClientIP(peer %s, X-Forwarded-For %q, trusted ::ffff:10.0.0.0/104) = %s, want %s", tc.remote, tc.xff, got, tc.want)
		}
	}
}
