package dimension

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strings"
)

// Entry is one key/value pair of a descriptor, shaped as policy.Entry
// (Envoy's RateLimitDescriptor.Entry). The package has its own type because
// policy imports it (a rules file holds a Spec); declaring policy.Entry as
// an alias of this one lets a caller pass Entries on without copying.
type Entry struct {
	Key   string
	Value string
}

// Descriptor is one descriptor a request produced: its entries in Spec
// order, never empty.
type Descriptor struct {
	Entries []Entry
}

// Errors a request can produce, wrapped in an *Error, for errors.Is.
var (
	// ErrNoClientIP: a remote_address entry needs the client's IP and the
	// request's RemoteAddr is not one (a Unix socket peer, say). Set
	// RemoteAddr in front of the extractor, or do not use remote_address.
	ErrNoClientIP = errors.New("no client IP")
	// ErrValueTooLong: a value is longer than WithMaxValueLen allows;
	// values become store keys, so a client must not choose their size.
	ErrValueTooLong = errors.New("value too long")
)

// Error is a request that could not be mapped: which entry and why.
type Error struct {
	// Field is the entry, e.g. "descriptors[0].entries[1]".
	Field string
	// Source is the entry's source, e.g. "remote_address".
	Source string
	// Err wraps ErrNoClientIP or ErrValueTooLong with the details.
	Err error
}

// Error returns e.g. `dimension: descriptors[0].entries[1] (remote_address):
// no client IP: RemoteAddr "@" is not an IP address`.
func (e *Error) Error() string {
	return "dimension: " + e.Field + " (" + e.Source + "): " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Option configures an Extractor; see NewExtractor for the defaults.
type Option func(*options)

type options struct {
	user, tenant func(*http.Request) string
	maxLen       int
}

// WithUser sets how the user source finds the request's user, typically
// from what authentication put in the request's context; "" means no user.
// Default: none (the Spec's UserHeader, when set, is read instead; setting
// both is an error).
func WithUser(fn func(*http.Request) string) Option { return func(o *options) { o.user = fn } }

// WithTenant is WithUser for the tenant source.
func WithTenant(fn func(*http.Request) string) Option { return func(o *options) { o.tenant = fn } }

// WithMaxValueLen bounds the length of every entry value in bytes (default
// 1024; at least 1). A longer value fails the request with ErrValueTooLong.
func WithMaxValueLen(n int) Option { return func(o *options) { o.maxLen = n } }

// Extractor maps HTTP requests to descriptors. It is immutable and safe for
// concurrent use.
type Extractor struct {
	c      *compiled
	user   func(*http.Request) string
	tenant func(*http.Request) string
	maxLen int
}

// NewExtractor validates and compiles spec. Options and defaults: WithUser
// (none), WithTenant (none), WithMaxValueLen(1024). Every problem is a
// *SpecError naming the field.
func NewExtractor(spec Spec, opts ...Option) (*Extractor, error) {
	o := options{maxLen: 1024}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxLen < 1 {
		return nil, fmt.Errorf("dimension: WithMaxValueLen(%d): must be at least 1", o.maxLen)
	}
	c, err := compile(spec, &o)
	if err != nil {
		return nil, err
	}
	return &Extractor{c: c, user: o.user, tenant: o.tenant, maxLen: o.maxLen}, nil
}

// Proxies returns the trusted proxies and header the Extractor honours.
func (x *Extractor) Proxies() Proxies {
	p := x.c.proxies
	p.Trusted = slices.Clone(p.Trusted)
	return p
}

// ClientIP returns the request's client address as the remote_address
// source sees it, before collapsing (see Proxies.ClientIP).
func (x *Extractor) ClientIP(r *http.Request) netip.Addr { return x.c.proxies.ClientIP(r) }

// Descriptors appends the request's descriptors to dst[:0] and returns the
// result: one per DescriptorSpec whose required entries all have a value,
// in Spec order. It reuses dst's descriptors' Entries arrays, so with a dst
// kept from an earlier call (and not retained elsewhere) it allocates
// nothing beyond the client IP's text. It fails with an *Error when a value
// is too long or a remote_address entry finds no client IP; it never
// panics, whatever the request holds.
func (x *Extractor) Descriptors(r *http.Request, dst []Descriptor) ([]Descriptor, error) {
	dst = dst[:0]
	var st reqState
	for i := range x.c.descs {
		d := &x.c.descs[i]
		n := len(dst)
		var entries []Entry
		if n < cap(dst) {
			entries = dst[:n+1][n].Entries[:0]
		}
		complete := true
		for j := range d.entries {
			e := &d.entries[j]
			v, ok, err := x.value(r, e, &st)
			if err == nil && ok && len(v) > x.maxLen {
				err = fmt.Errorf("%w: %d bytes, at most %d", ErrValueTooLong, len(v), x.maxLen)
			}
			if err != nil {
				return dst, &Error{Field: fmt.Sprintf("descriptors[%d].entries[%d]", i, j), Source: e.srcName, Err: err}
			}
			if !ok {
				switch {
				case e.hasDef:
					v = e.def
				case e.skip:
					continue
				default:
					complete = false
				}
			}
			if !complete {
				break
			}
			entries = append(entries, Entry{Key: e.key, Value: v})
		}
		if complete && len(entries) > 0 {
			dst = append(dst, Descriptor{Entries: entries})
		}
	}
	return dst, nil
}

// reqState caches the client IP across one request's entries.
type reqState struct {
	ipDone bool
	ip     netip.Addr
	text   string // ip collapsed to v4/v6 bits
	v4, v6 int
}

// value returns the entry's value for r and whether it has one.
func (x *Extractor) value(r *http.Request, e *entry, st *reqState) (string, bool, error) {
	var v string
	var ok bool
	switch e.src {
	case srcGeneric:
		return e.value, true, nil
	case srcRemoteAddress:
		if !st.ipDone {
			st.ip, st.ipDone = x.c.proxies.ClientIP(r), true
		}
		if !st.ip.IsValid() {
			return "", false, fmt.Errorf("%w: RemoteAddr %q is not an IP address", ErrNoClientIP, r.RemoteAddr)
		}
		if st.text == "" || st.v4 != e.v4 || st.v6 != e.v6 {
			st.text, st.v4, st.v6 = ipText(st.ip, e.v4, e.v6), e.v4, e.v6
		}
		v, ok = st.text, true
	case srcHeader:
		v, ok = first(r.Header[e.name])
	case srcQuery:
		if r.URL != nil {
			v, ok = lookupQuery(r.URL.RawQuery, e.name)
		}
	case srcMethod:
		v, ok = r.Method, true
		if v == "" {
			v = http.MethodGet
		}
	case srcPath:
		if r.URL != nil {
			v, ok = routeOf(r.URL.Path, e.routes)
		}
	case srcHost:
		v = hostValue(r.Host)
		ok = v != ""
	case srcAPIKey:
		v, ok = x.apiKey(r)
	case srcUser:
		v, ok = identity(r, x.user, x.c.user)
	case srcTenant:
		v, ok = identity(r, x.tenant, x.c.tenant)
	}
	if m := e.match; m != nil {
		hit := ok && (m.Present || m.Exact != "" && v == m.Exact || m.Prefix != "" && strings.HasPrefix(v, m.Prefix))
		if hit == m.Invert {
			return "", false, nil
		}
		return e.value, true, nil
	}
	return v, ok, nil
}

// ipText is the remote_address value: the address, or its network in CIDR
// form when collapsed.
//
// The text is allocated on every request: a cache of known clients' texts
// (a sharded map keyed by address) was tried and measured slower than the
// allocation, a 16-byte string, since its lookup misses the CPU caches
// with many clients (docs/BENCHMARKS.md, HTTP middleware).
func ipText(a netip.Addr, v4, v6 int) string {
	var buf [64]byte // one allocation: the string itself
	if a.Is4() && v4 == 32 || a.Is6() && v6 == 128 {
		return string(a.AppendTo(buf[:0]))
	}
	return string(Collapse(a, v4, v6).AppendTo(buf[:0]))
}

func first(vs []string) (string, bool) {
	if len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// identity reads a user or tenant: the function when set, else the header.
func identity(r *http.Request, fn func(*http.Request) string, header string) (string, bool) {
	if fn != nil {
		v := fn(r)
		return v, v != ""
	}
	v, _ := first(r.Header[header])
	return v, v != ""
}

func (x *Extractor) apiKey(r *http.Request) (string, bool) {
	k := x.c.apiKey
	if k.Header != "" {
		if v, ok := first(r.Header[k.Header]); ok {
			if s := k.Scheme; s != "" {
				if len(v) <= len(s) || v[len(s)] != ' ' || !strings.EqualFold(v[:len(s)], s) {
					v = ""
				} else {
					v = v[len(s)+1:]
				}
			}
			if v = trimOWS(v); v != "" {
				return v, true
			}
		}
	}
	if k.Query != "" && r.URL != nil {
		if v, ok := lookupQuery(r.URL.RawQuery, k.Query); ok && v != "" {
			return v, true
		}
	}
	return "", false
}

// routeOf cleans p ("/a//b/../c" is "/a/c"; no allocation when already
// clean) and returns it, or with routes the longest route covering it.
func routeOf(p string, routes []string) (string, bool) {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	p = path.Clean(p)
	if len(routes) == 0 {
		return p, true
	}
	for _, r := range routes {
		m := strings.TrimSuffix(r, "/")
		if p == m || len(p) > len(m) && p[len(m)] == '/' && strings.HasPrefix(p, m) {
			return r, true
		}
	}
	return "", false
}

// lookupQuery returns the first value of the named parameter in a raw
// query, as url.ParseQuery(raw).Get(name) would, without building the map:
// pairs with a ';' or a bad escape are skipped, keys and values unescaped.
func lookupQuery(raw, name string) (string, bool) {
	for raw != "" {
		var part string
		part, raw, _ = strings.Cut(raw, "&")
		if part == "" || strings.IndexByte(part, ';') >= 0 {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		if escaped(k) {
			var err error
			if k, err = url.QueryUnescape(k); err != nil {
				continue
			}
		}
		if k != name {
			continue
		}
		if escaped(v) {
			var err error
			if v, err = url.QueryUnescape(v); err != nil {
				continue
			}
		}
		return v, true
	}
	return "", false
}

func escaped(s string) bool { return strings.ContainsAny(s, "%+") }

// hostValue is the host source's value for a Host header: lower-cased,
// without the port and without one trailing dot, the way route matching
// sees it, so that "A.EXAMPLE.COM:80" and "a.example.com." share the
// counter of "a.example.com". An IP literal takes its canonical text: IPv6
// without its brackets and zeros compressed ("[0:0::1]:80" is "::1", as
// net/url's Hostname gives it), an IPv4-mapped one unmapped. It allocates
// only when s has upper case or an IPv6 literal is not already canonical.
func hostValue(s string) string {
	if strings.HasPrefix(s, "[") {
		if end := strings.IndexByte(s, ']'); end > 0 {
			s = s[1:end]
		}
	} else if c := strings.IndexByte(s, ':'); c >= 0 && strings.IndexByte(s[c+1:], ':') < 0 {
		s = s[:c] // host:port; a bare IPv6 literal (several colons) has no port
	}
	s = strings.TrimSuffix(s, ".")
	if strings.IndexByte(s, ':') >= 0 {
		if a, err := netip.ParseAddr(s); err == nil {
			var buf [64]byte
			if t := a.Unmap().AppendTo(buf[:0]); string(t) != s {
				return string(t)
			}
			return s
		}
	}
	return lower(s)
}

// lower lower-cases ASCII s, allocating only when it has upper case.
func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}
