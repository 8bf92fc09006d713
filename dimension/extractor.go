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
	"unicode/utf8"
)

// Entry is one key/value pair of a descriptor, shaped as policy.Entry
// (Envoy's RateLimitDescriptor.Entry): the same fields in the same order,
// so that one converts to the other (policy.Entry(e)); the package keeps a
// type of its own so that it does not import policy.
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
	// ErrAmbiguous: with WithRejectAmbiguous, a header or query parameter
	// an entry reads could be read otherwise by the server behind: it was
	// sent more than once, or a query value decodes to bytes that are not
	// valid UTF-8 or hold a control character, or the API key came in
	// both its header and its query parameter with different values.
	ErrAmbiguous = errors.New("ambiguous")
)

// Error is a request that could not be mapped: which entry and why.
type Error struct {
	// Field is the entry, e.g. "descriptors[0].entries[1]".
	Field string
	// Source is the entry's source, e.g. "remote_address".
	Source string
	// Err wraps ErrNoClientIP, ErrValueTooLong or ErrAmbiguous with the
	// details.
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
	strict       bool
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

// WithRejectAmbiguous(true) fails a request with ErrAmbiguous, instead of
// reading the first value, when a header or query parameter an entry reads
// (header:, query:, api_key, and user and tenant through their headers) is
// one that another parser could read as another value:
//
//   - sent more than once: "?user=a&user=b" (after decoding the names, so
//     "?user=a&us%65r=b" too), or two X-Api-Key lines. Go's Query().Get
//     and Header.Get take the first; PHP takes the last, Express and
//     Python's parse_qs a list, Node joins a repeated header with ", ";
//   - a query value that decodes to bytes that are not valid UTF-8
//     ("%E9", "%FF": Python, Node and Java read each as U+FFFD, one value
//     for many keys) or that hold a control character ("%00": C strings
//     end there, "victim%00x" is "victim");
//   - an API key sent in both its header and its query parameter with
//     different values (an upstream may prefer the query).
//
// Default false: the first value is read, as a Go handler reading the same
// request with Query().Get and Header.Get does, which is right for the
// middleware. The gateway sets it: its upstream is another program.
// Query pairs that Go's parser skips (holding ";" or a malformed escape)
// are not counted: httputil.ReverseProxy drops them before the upstream.
func WithRejectAmbiguous(on bool) Option { return func(o *options) { o.strict = on } }

// Extractor maps HTTP requests to descriptors. It is immutable and safe for
// concurrent use.
type Extractor struct {
	c      *compiled
	specs  []DescriptorSpec // as given, for DescriptorSpecs
	user   func(*http.Request) string
	tenant func(*http.Request) string
	maxLen int
	strict bool
}

// NewExtractor validates and compiles spec. Options and defaults: WithUser
// (none), WithTenant (none), WithMaxValueLen(1024),
// WithRejectAmbiguous(false). A problem in spec is a *SpecError naming the
// field; several are each reported, in field order, joined as errors.Join
// joins them (one per line): errors.As finds the first, and the error's
// Unwrap() []error lists them all.
func NewExtractor(spec Spec, opts ...Option) (*Extractor, error) {
	o := options{maxLen: 1024}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxLen < 1 {
		return nil, fmt.Errorf("dimension: WithMaxValueLen(%d): must be at least 1", o.maxLen)
	}
	c, errs := compile(spec, &o)
	switch len(errs) {
	case 0:
	case 1:
		return nil, errs[0]
	default:
		joined := make([]error, len(errs))
		for i, e := range errs {
			joined[i] = e
		}
		return nil, errors.Join(joined...)
	}
	return &Extractor{c: c, specs: cloneSpecs(spec.Descriptors), user: o.user, tenant: o.tenant, maxLen: o.maxLen, strict: o.strict}, nil
}

// DescriptorSpecs returns the Spec's Descriptors the Extractor was built
// from, as given (a copy: changing it changes nothing), for a caller that
// checks them against a configuration, as middleware.New does with the
// keys its domain's rules have.
func (x *Extractor) DescriptorSpecs() []DescriptorSpec { return cloneSpecs(x.specs) }

// cloneSpecs copies ds down to its entries' routes and matches.
func cloneSpecs(ds []DescriptorSpec) []DescriptorSpec {
	out := make([]DescriptorSpec, len(ds))
	for i, d := range ds {
		out[i].Entries = slices.Clone(d.Entries)
		for j := range out[i].Entries {
			e := &out[i].Entries[j]
			e.Routes = slices.Clone(e.Routes)
			if e.Match != nil {
				m := *e.Match
				e.Match = &m
			}
		}
	}
	return out
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
// is too long, a remote_address entry finds no client IP, or (with
// WithRejectAmbiguous) a value is ambiguous; it never
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
		vs := r.Header[e.name]
		if x.strict && len(vs) > 1 {
			return "", false, repeatedHeader(e.name, len(vs))
		}
		v, ok = first(vs)
	case srcQuery:
		if r.URL != nil {
			var err error
			if v, ok, err = x.query(r.URL.RawQuery, e.name); err != nil {
				return "", false, err
			}
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
		v = CanonicalHost(r.Host)
		ok = v != ""
	case srcAPIKey:
		var err error
		if v, ok, err = x.apiKey(r); err != nil {
			return "", false, err
		}
	case srcUser, srcTenant:
		fn, header := x.user, x.c.user
		if e.src == srcTenant {
			fn, header = x.tenant, x.c.tenant
		}
		if n := len(r.Header[header]); fn == nil && x.strict && n > 1 {
			return "", false, repeatedHeader(header, n)
		}
		v, ok = identity(r, fn, header)
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

func repeatedHeader(name string, n int) error {
	return fmt.Errorf("%w: header %s sent %d times", ErrAmbiguous, name, n)
}

// query reads the named parameter: lookupQuery, or with strict the same
// checked for repeats and for a value another parser could read otherwise.
func (x *Extractor) query(raw, name string) (string, bool, error) {
	if !x.strict {
		v, ok := lookupQuery(raw, name)
		return v, ok, nil
	}
	v, n := countQuery(raw, name)
	switch {
	case n == 0:
		return "", false, nil
	case n > 1:
		return "", false, fmt.Errorf("%w: query parameter %q sent %d times", ErrAmbiguous, name, n)
	case !utf8.ValidString(v):
		return "", false, fmt.Errorf("%w: query parameter %q is not valid UTF-8 once decoded", ErrAmbiguous, name)
	case strings.ContainsFunc(v, func(c rune) bool { return c < 0x20 || c == 0x7f }):
		return "", false, fmt.Errorf("%w: query parameter %q holds a control character once decoded", ErrAmbiguous, name)
	}
	return v, true, nil
}

func (x *Extractor) apiKey(r *http.Request) (string, bool, error) {
	k := x.c.apiKey
	var hv string
	if k.Header != "" {
		vs := r.Header[k.Header]
		if x.strict && len(vs) > 1 {
			return "", false, repeatedHeader(k.Header, len(vs))
		}
		if v, ok := first(vs); ok {
			if s := k.Scheme; s != "" {
				if len(v) <= len(s) || v[len(s)] != ' ' || !strings.EqualFold(v[:len(s)], s) {
					v = ""
				} else {
					v = v[len(s)+1:]
				}
			}
			hv = trimOWS(v)
		}
	}
	if k.Query != "" && r.URL != nil && (hv == "" || x.strict) {
		v, ok, err := x.query(r.URL.RawQuery, k.Query)
		switch {
		case err != nil:
			return "", false, err
		case hv == "" && ok && v != "":
			return v, true, nil
		case hv != "" && ok && v != "" && v != hv:
			return "", false, fmt.Errorf("%w: API key sent in both the %s header and the %q query parameter", ErrAmbiguous, k.Header, k.Query)
		}
	}
	return hv, hv != "", nil
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
		var v string
		var ok bool
		if v, ok, raw = nextQuery(raw, name); ok {
			return v, true
		}
	}
	return "", false
}

// nextQuery reads the first pair of raw, a non-empty query: its value
// when it carries name, and the rest of the query.
func nextQuery(raw, name string) (v string, ok bool, rest string) {
	part, rest, _ := strings.Cut(raw, "&")
	if part == "" || strings.IndexByte(part, ';') >= 0 {
		return "", false, rest
	}
	k, v, _ := strings.Cut(part, "=")
	if escaped(k) {
		var err error
		if k, err = url.QueryUnescape(k); err != nil {
			return "", false, rest
		}
	}
	if k != name {
		return "", false, rest
	}
	if escaped(v) {
		var err error
		if v, err = url.QueryUnescape(v); err != nil {
			return "", false, rest
		}
	}
	return v, true, rest
}

// countQuery is lookupQuery that goes on to the end: the first value and
// how many pairs carry the name.
func countQuery(raw, name string) (string, int) {
	var first string
	n := 0
	for raw != "" {
		var v string
		var ok bool
		v, ok, raw = nextQuery(raw, name)
		if ok {
			if n == 0 {
				first = v
			}
			n++
		}
	}
	return first, n
}

func escaped(s string) bool { return strings.ContainsAny(s, "%+") }

// CanonicalHost is the host source's value for a Host header: lower-cased,
// without the port and without one trailing dot, the way route matching
// sees it, so that "A.EXAMPLE.COM:80" and "a.example.com." share the
// counter of "a.example.com". An IP literal takes its canonical text: IPv6
// without its brackets and zeros compressed ("[0:0::1]:80" is "::1", as
// net/url's Hostname gives it), an IPv4-mapped one unmapped, a zone
// dropped ("[fe80::1%25eth0]" is "fe80::1": the zone names an interface
// of the client's, and any text would do, one counter per spelling). It
// allocates only when s has upper case or an IPv6 literal is not already
// canonical. The gateway matches its routes' hosts on it.
func CanonicalHost(s string) string {
	if strings.HasPrefix(s, "[") {
		if end := strings.IndexByte(s, ']'); end > 0 {
			s = s[1:end]
		}
	} else if c := strings.IndexByte(s, ':'); c >= 0 && strings.IndexByte(s[c+1:], ':') < 0 {
		s = s[:c] // host:port; a bare IPv6 literal (several colons) has no port
	}
	s = strings.TrimSuffix(s, ".")
	if ip, ok := CanonicalIP(s); ok {
		return ip
	}
	return lower(s)
}

// CanonicalIP returns s, an IPv6 literal (bracketed or not, with or without
// a zone), in its canonical text as CanonicalHost gives it: zeros
// compressed, an IPv4-mapped address unmapped, the zone dropped ("[0:0::1]"
// and "::1%eth0" are "::1"). ok is false for anything else (a name, an
// IPv4 address, a host:port), s returned as it is. It allocates only when
// the text changes.
func CanonicalIP(s string) (string, bool) {
	h := s
	if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
		h = h[1 : len(h)-1]
	}
	if strings.IndexByte(h, ':') < 0 {
		return s, false
	}
	a, err := netip.ParseAddr(h)
	if err != nil {
		return s, false
	}
	var buf [64]byte
	if t := a.Unmap().WithZone("").AppendTo(buf[:0]); string(t) != h {
		return string(t), true
	}
	return h, true
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
