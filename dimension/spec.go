package dimension

import (
	"cmp"
	"fmt"
	"net/http"
	"net/netip"
	"path"
	"slices"
	"strings"
)

// Spec declares how requests become descriptors. It is plain data with yaml
// tags, decoded by the policy package from a rules file; NewExtractor
// validates and compiles it. The zero value of every optional field is its
// default.
type Spec struct {
	// TrustedProxies are the networks of the proxies whose ProxyHeader is
	// believed, as CIDRs ("10.0.0.0/8", "2001:db8::/32") or single
	// addresses. Empty: nobody is trusted, the client is the direct peer.
	// A network holding every address (0.0.0.0/0, ::/0) trusts every
	// peer, so any client picks its own address, and so its key, by
	// sending the header: use it only where no client reaches the listener
	// but through the proxies (Proxies.TrustsEveryPeer; the gateway's
	// configuration check warns of it).
	TrustedProxies []string `yaml:"trusted_proxies"`
	// ProxyHeader is the header the trusted proxies fill in:
	// "x-forwarded-for" (the default), "forwarded" (RFC 7239) or
	// "x-real-ip", case-insensitive.
	ProxyHeader string `yaml:"proxy_header"`
	// IPv4Prefix is how many leading bits of an IPv4 client address make
	// its remote_address value (default 32: the address itself); 1 to 32.
	IPv4Prefix int `yaml:"ipv4_prefix"`
	// IPv6Prefix is the same for IPv6 (default 64: a client's usual
	// allocation, so that it cannot rotate through its addresses); 1 to
	// 128.
	IPv6Prefix int `yaml:"ipv6_prefix"`
	// APIKey says where the api_key source reads the key.
	APIKey APIKeySpec `yaml:"api_key"`
	// UserHeader is the header the user source reads when no WithUser
	// function is given. Only safe behind a proxy that sets it.
	UserHeader string `yaml:"user_header"`
	// TenantHeader is the same for the tenant source and WithTenant.
	TenantHeader string `yaml:"tenant_header"`
	// Descriptors are produced in order, each when all its required
	// entries have a value.
	Descriptors []DescriptorSpec `yaml:"descriptors"`
}

// APIKeySpec says where an API key is read: the header first, then the
// query parameter. With neither set, the header is X-API-Key.
type APIKeySpec struct {
	// Header is the header holding the key, e.g. "X-API-Key" or
	// "Authorization".
	Header string `yaml:"header"`
	// Scheme, when set, is an authentication scheme the header value must
	// start with (case-insensitive, followed by a space), which is
	// stripped: "Bearer" reads "Authorization: Bearer abc" as "abc". A
	// header without it holds no key.
	Scheme string `yaml:"scheme"`
	// Query is the query parameter holding the key, e.g. "api_key".
	Query string `yaml:"query"`
}

// DescriptorSpec is one descriptor: an ordered list of entries, matched
// against the configuration's descriptor tree level by level.
type DescriptorSpec struct {
	// Entries are the descriptor's entries, at least one.
	Entries []EntrySpec `yaml:"entries"`
}

// EntrySpec is one entry of a descriptor: a key and where its value comes
// from. When the source has no value for a request (a missing header, a
// path outside every route, a failed match) the entry takes Default if set,
// is left out if SkipIfAbsent, and otherwise the whole descriptor is left
// out for that request, as Envoy does with its rate limit actions.
type EntrySpec struct {
	// Source is where the value comes from (required):
	//
	//	remote_address  the client IP (see Spec.TrustedProxies), IPv4 as
	//	                is, IPv6 collapsed to its /64 ("2001:db8:1:2::/64")
	//	header:<Name>   a request header's first value (an error for
	//	                a repeated one with WithRejectAmbiguous)
	//	query:<name>    a query parameter's first value, decoded as
	//	                url.ParseQuery does (with WithRejectAmbiguous,
	//	                an error when repeated, or not UTF-8 or holding
	//	                a control character once decoded)
	//	method          the request method, e.g. "GET"
	//	path            the URL path, cleaned; with Routes, the route
	//	host            the Host, lower-cased, without its port and one
	//	                trailing dot; an IPv6 literal without brackets
	//	                ("[::1]:80" is "::1")
	//	api_key         the API key (see Spec.APIKey)
	//	user, tenant    WithUser / WithTenant, else Spec.UserHeader /
	//	                Spec.TenantHeader
	//	generic_key     the constant Value
	Source string `yaml:"source"`
	// Key is the entry's key. Default: "header_match" / "query_match" /
	// "<source>_match" with Match, the header's or parameter's name for
	// header: and query:, otherwise the source's name (remote_address,
	// method, path, host, api_key, user, tenant, generic_key), Envoy's
	// well-known keys where Envoy has one.
	Key string `yaml:"key"`
	// Value is the constant value of a generic_key entry, and the value a
	// Match entry takes when it matches. Required for both, forbidden
	// otherwise.
	Value string `yaml:"value"`
	// Routes, for the path source only, are route prefixes; the entry's
	// value is the longest one the path falls under ("/api/users" covers
	// "/api/users" and "/api/users/7", not "/api/usersx"; "/api/" covers
	// everything below it), so that every path of a route shares one key.
	// A path outside them has no value. Paths are matched percent-decoded
	// and cleaned: a route no path can fall under (not clean, holding
	// * ? # or a percent escape) is an error.
	Routes []string `yaml:"routes"`
	// Match turns the entry into a test (Envoy's header_value_match): it
	// has the constant Value when the source's value matches, no value
	// otherwise.
	Match *MatchSpec `yaml:"match"`
	// Default is the value when the source has none. Exclusive with
	// SkipIfAbsent.
	Default string `yaml:"default"`
	// SkipIfAbsent leaves the entry out, instead of the whole descriptor,
	// when the source has no value (Envoy's skip_if_absent).
	SkipIfAbsent bool `yaml:"skip_if_absent"`
	// IPv4Prefix and IPv6Prefix override the Spec's for this
	// remote_address entry, e.g. one descriptor per /24 beside one per
	// address (Envoy's masked_remote_address).
	IPv4Prefix int `yaml:"ipv4_prefix"`
	IPv6Prefix int `yaml:"ipv6_prefix"`
}

// DescriptorKey is the key of the entries e produces: Key when set, else
// its default (see Key), e.g. "remote_address" for remote_address,
// "X-Api-Key" for header:X-Api-Key, "header_match" for a header: entry
// with Match. It derives the key from the text alone, without validating
// e: NewExtractor uses it, and so does a caller checking a Spec's keys
// against a configuration's descriptors before building it.
func (e EntrySpec) DescriptorKey() string {
	if e.Key != "" {
		return e.Key
	}
	src, name, hasName := strings.Cut(e.Source, ":")
	if e.Match != nil {
		return src + "_match"
	}
	if hasName {
		return name
	}
	return src
}

// MatchSpec is a test on a source's value. Exactly one of Exact, Prefix and
// Present is set.
type MatchSpec struct {
	// Exact matches the value itself.
	Exact string `yaml:"exact"`
	// Prefix matches values starting with it.
	Prefix string `yaml:"prefix"`
	// Present matches any value, even empty: the header or parameter is
	// there.
	Present bool `yaml:"present"`
	// Invert matches when the test fails, including when the source has
	// no value (Envoy's expect_match: false).
	Invert bool `yaml:"invert"`
}

// SpecError is a problem in a Spec: Field is the path of the offending
// field, e.g. "descriptors[1].entries[0].source", for the caller to map to
// a file and line.
type SpecError struct {
	// Field is the offending field's path in the Spec.
	Field string
	// Msg says what is wrong with it.
	Msg string
}

// Error returns "dimension: <field>: <message>".
func (e *SpecError) Error() string { return "dimension: " + e.Field + ": " + e.Msg }

type source uint8

const (
	srcRemoteAddress source = iota + 1
	srcHeader
	srcQuery
	srcMethod
	srcPath
	srcHost
	srcAPIKey
	srcUser
	srcTenant
	srcGeneric
)

// simpleSources are the sources named by a single word.
var simpleSources = map[string]source{
	"remote_address": srcRemoteAddress,
	"method":         srcMethod,
	"path":           srcPath,
	"host":           srcHost,
	"api_key":        srcAPIKey,
	"user":           srcUser,
	"tenant":         srcTenant,
	"generic_key":    srcGeneric,
}

const sourceList = "remote_address, header:<Name>, query:<name>, method, path, host, api_key, user, tenant or generic_key"

// entry is a compiled EntrySpec.
type entry struct {
	src     source
	srcName string // "remote_address", "header:X-User", … for errors
	key     string
	name    string   // canonical header name or query parameter name
	value   string   // generic_key's constant, Match's value
	routes  []string // longest first
	match   *MatchSpec
	def     string
	hasDef  bool
	skip    bool
	v4, v6  int
}

type descriptor struct{ entries []entry }

type compiled struct {
	proxies Proxies
	apiKey  APIKeySpec // Header canonical
	user    string     // canonical header names
	tenant  string
	descs   []descriptor
}

// compile validates and compiles s. It goes on past a problem, so that it
// reports every one it finds, in field order; a problem that only follows
// from another (an entry's user source beside an invalid user_header, the
// rest of an entry with an unknown source) is not reported.
func compile(s Spec, o *options) (*compiled, []*SpecError) {
	c := &compiled{}
	var errs []*SpecError
	bad := func(field, format string, args ...any) {
		errs = append(errs, &SpecError{field, fmt.Sprintf(format, args...)})
	}
	for i, t := range s.TrustedProxies {
		p, err := parsePrefix(t)
		if err != nil {
			bad(fmt.Sprintf("trusted_proxies[%d]", i), "%s", err)
			continue
		}
		c.proxies.Trusted = append(c.proxies.Trusted, p)
	}
	h, err := ParseProxyHeader(s.ProxyHeader)
	if err != nil {
		bad("proxy_header", "%s", err)
	}
	c.proxies.Header = h
	// An invalid length is reported once, here; the entries that would
	// inherit it are checked against the default instead.
	v4, v6 := cmp.Or(s.IPv4Prefix, 32), cmp.Or(s.IPv6Prefix, 64)
	if v4 < 1 || v4 > 32 {
		bad("ipv4_prefix", "%d is not in 1..32", s.IPv4Prefix)
		v4 = 32
	}
	if v6 < 1 || v6 > 128 {
		bad("ipv6_prefix", "%d is not in 1..128", s.IPv6Prefix)
		v6 = 64
	}

	c.apiKey = s.APIKey
	if c.apiKey.Header == "" && c.apiKey.Query == "" {
		c.apiKey.Header = "X-API-Key"
	}
	if c.apiKey.Header != "" {
		if !validToken(c.apiKey.Header) {
			bad("api_key.header", "%q is not a valid header name", c.apiKey.Header)
		}
		c.apiKey.Header = http.CanonicalHeaderKey(c.apiKey.Header)
	}
	if c.apiKey.Scheme != "" && (c.apiKey.Header == "" || !validToken(c.apiKey.Scheme)) {
		bad("api_key.scheme", "%q needs api_key.header and must be a token", c.apiKey.Scheme)
	}
	for _, f := range []struct {
		field, header string
		fn            bool
		dst           *string
	}{
		{"user_header", s.UserHeader, o.user != nil, &c.user},
		{"tenant_header", s.TenantHeader, o.tenant != nil, &c.tenant},
	} {
		switch {
		case f.header == "":
		case !validToken(f.header):
			bad(f.field, "%q is not a valid header name", f.header)
		case f.fn:
			bad(f.field, "set together with a function option; choose one (the header is client-controlled)")
		default:
			*f.dst = http.CanonicalHeaderKey(f.header)
		}
	}

	if len(s.Descriptors) == 0 {
		bad("descriptors", "no descriptors")
	}
	for i, d := range s.Descriptors {
		field := fmt.Sprintf("descriptors[%d]", i)
		if len(d.Entries) == 0 {
			bad(field+".entries", "no entries")
		}
		var cd descriptor
		for j, es := range d.Entries {
			e, ees := compileEntry(es, fmt.Sprintf("%s.entries[%d]", field, j), v4, v6, s, o)
			errs = append(errs, ees...)
			cd.entries = append(cd.entries, e)
		}
		c.descs = append(c.descs, cd)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// compileEntry compiles one entry of s, reporting each of its fields at
// fault; the checks that depend on the source are left out when the source
// itself is at fault.
func compileEntry(s EntrySpec, field string, v4, v6 int, spec Spec, o *options) (entry, []*SpecError) {
	var errs []*SpecError
	bad := func(sub, format string, args ...any) {
		f := field
		if sub != "" {
			f += "." + sub
		}
		errs = append(errs, &SpecError{f, fmt.Sprintf(format, args...)})
	}
	e := entry{srcName: s.Source, key: s.DescriptorKey(), value: s.Value, def: s.Default, hasDef: s.Default != "", skip: s.SkipIfAbsent}
	if s.Match != nil {
		m := *s.Match // the Extractor is immutable: a caller's later change to the Spec changes nothing
		e.match = &m
	}
	kind, name, hasName := strings.Cut(s.Source, ":")
	switch {
	case s.Source == "":
		bad("source", "missing (want %s)", sourceList)
	case hasName && kind == "header":
		if !validToken(name) {
			bad("source", "%q is not a valid header name", name)
		}
		e.src, e.name = srcHeader, http.CanonicalHeaderKey(name)
	case hasName && kind == "query":
		if name == "" {
			bad("source", "query: needs a parameter name")
		}
		e.src, e.name = srcQuery, name
	case !hasName && simpleSources[s.Source] != 0:
		e.src = simpleSources[s.Source]
	default:
		bad("source", "unknown source %q (want %s)", s.Source, sourceList)
	}
	known := len(errs) == 0 // the source, which the checks below depend on
	// An invalid user_header or tenant_header is the spec's problem, not
	// the entry's.
	switch {
	case !known:
	case e.src == srcUser && spec.UserHeader == "" && o.user == nil:
		bad("source", "user needs user_header or the WithUser option")
	case e.src == srcTenant && spec.TenantHeader == "" && o.tenant == nil:
		bad("source", "tenant needs tenant_header or the WithTenant option")
	}

	switch {
	case !known:
	case e.src == srcGeneric && s.Value == "":
		bad("value", "generic_key needs a value")
	case e.src != srcGeneric && s.Match != nil && s.Value == "":
		bad("value", "a match entry needs the value it takes when it matches")
	case s.Match == nil && e.src != srcGeneric && s.Value != "":
		bad("value", "only generic_key and match entries take a value")
	}
	if m := s.Match; m != nil {
		n := 0
		for _, set := range []bool{m.Exact != "", m.Prefix != "", m.Present} {
			if set {
				n++
			}
		}
		switch {
		case known && e.src == srcGeneric:
			bad("match", "generic_key has nothing to match")
		case n != 1:
			bad("match", "set exactly one of exact, prefix and present")
		}
	}
	if known && len(s.Routes) > 0 && e.src != srcPath {
		bad("routes", "only the path source takes routes")
	} else {
		for k, r := range s.Routes {
			if !strings.HasPrefix(r, "/") {
				bad(fmt.Sprintf("routes[%d]", k), "route %q must start with /", r)
			} else if why := DeadPathPrefix(r); why != "" {
				bad(fmt.Sprintf("routes[%d]", k), "route %q %s, so no request path would fall under it", r, why)
			}
		}
	}
	if s.Default != "" && s.SkipIfAbsent {
		bad("default", "default and skip_if_absent exclude each other")
	}
	for _, p := range []struct {
		field   string
		set     int
		max     int
		inherit int
		dst     *int
	}{{"ipv4_prefix", s.IPv4Prefix, 32, v4, &e.v4}, {"ipv6_prefix", s.IPv6Prefix, 128, v6, &e.v6}} {
		*p.dst = cmp.Or(p.set, p.inherit)
		switch {
		case p.set == 0:
		case known && e.src != srcRemoteAddress:
			bad(p.field, "only remote_address takes a prefix length")
		case p.set < 1 || p.set > p.max:
			bad(p.field, "%d is not in 1..%d", p.set, p.max)
		}
	}
	e.routes = slices.Clone(s.Routes)
	slices.SortStableFunc(e.routes, func(a, b string) int { return len(b) - len(a) })
	return e, errs
}

// DeadPathPrefix says why no request path can fall under prefix (one
// that starts with "/"), "" when one can: paths are matched
// percent-decoded and cleaned (routeOf), and a prefix is literal. A path
// entry's routes and the gateway's path_prefix are checked with it.
func DeadPathPrefix(prefix string) string {
	m := strings.TrimSuffix(prefix, "/")
	switch {
	case m != "" && path.Clean(m) != m:
		return fmt.Sprintf("is not a clean path (paths are matched cleaned: dot segments resolved, repeated / merged; write %q)", path.Clean(m))
	case strings.ContainsAny(m, "*?#"):
		return "holds * ? or #: a prefix is literal, no pattern or query (\"/api\" covers /api and everything below it)"
	case hasPercentEscape(m):
		return "holds a percent escape: paths are matched percent-decoded; write the character itself"
	}
	return ""
}

// hasPercentEscape reports whether s holds a "%" followed by two hex
// digits.
func hasPercentEscape(s string) bool {
	for i := 0; i+2 < len(s); i++ {
		if s[i] == '%' && isHex(s[i+1]) && isHex(s[i+2]) {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// parsePrefix parses a CIDR or a single address.
func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR or an IP address", s)
		}
		return normPrefix(p), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR or an IP address", s)
	}
	a = a.WithZone("")
	return normPrefix(netip.PrefixFrom(a, a.BitLen())), nil
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}
