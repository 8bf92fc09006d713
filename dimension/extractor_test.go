package dimension

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

type userKey struct{}

func ctxUser(r *http.Request) string {
	u, _ := r.Context().Value(userKey{}).(string)
	return u
}

// render writes descriptors as "k=v k2=v2 | k=v".
func render(ds []Descriptor) string {
	var b strings.Builder
	for i, d := range ds {
		if i > 0 {
			b.WriteString(" | ")
		}
		for j, e := range d.Entries {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(e.Key + "=" + e.Value)
		}
	}
	return b.String()
}

var fullSpec = Spec{
	TrustedProxies: []string{"10.0.0.0/8", "2001:db8:ffff::/48"},
	APIKey:         APIKeySpec{Header: "Authorization", Scheme: "Bearer", Query: "api_key"},
	TenantHeader:   "x-tenant",
	Descriptors: []DescriptorSpec{
		{Entries: []EntrySpec{{Source: "remote_address"}}},
		{Entries: []EntrySpec{{Source: "remote_address", Key: "net", IPv4Prefix: 24, IPv6Prefix: 48}}},
		{Entries: []EntrySpec{{Source: "api_key"}, {Source: "path", Routes: []string{"/api/users", "/api/", "/health"}}}},
		{Entries: []EntrySpec{{Source: "tenant"}, {Source: "user"}, {Source: "method"}}},
		{Entries: []EntrySpec{{Source: "generic_key", Value: "global"}}},
		{Entries: []EntrySpec{{Source: "header:X-Plan", Key: "plan", Default: "free"}, {Source: "query:region", SkipIfAbsent: true}}},
		{Entries: []EntrySpec{{Source: "header:User-Agent", Match: &MatchSpec{Prefix: "curl/"}, Value: "curl"}}},
		{Entries: []EntrySpec{{Source: "host"}, {Source: "path"}}},
	},
}

type reqCase struct {
	name   string
	method string
	target string
	remote string
	h      map[string]string
	user   string
	want   string
}

func (tc reqCase) request() *http.Request {
	r := httptest.NewRequest(cmpOr(tc.method, "GET"), tc.target, nil)
	r.RemoteAddr = tc.remote
	for k, v := range tc.h {
		r.Header.Set(k, v)
	}
	if tc.user != "" {
		r = r.WithContext(context.WithValue(r.Context(), userKey{}, tc.user))
	}
	return r
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestDescriptors(t *testing.T) {
	x, err := NewExtractor(fullSpec, WithUser(ctxUser))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []reqCase{
		{
			name: "IPv4 client, key in the query", target: "http://Example.COM/api/users/7?api_key=k1", remote: "203.0.113.7:1",
			want: "remote_address=203.0.113.7 | net=203.0.113.0/24 | api_key=k1 path=/api/users | generic_key=global | plan=free | host=example.com path=/api/users/7",
		},
		{
			name: "IPv6 client behind a proxy, every source", method: "POST", target: "/api/orders//x/../y?region=eu%2Dwest&region=us", remote: "10.0.0.1:80",
			h:    map[string]string{"X-Forwarded-For": "1.2.3.4, 2001:db8:1:2:3:4:5:6", "Authorization": "bearer tok", "X-Tenant": "acme", "X-Plan": "pro", "User-Agent": "curl/8.0"},
			user: "alice",
			want: "remote_address=2001:db8:1:2::/64 | net=2001:db8:1::/48 | api_key=tok path=/api/ | tenant=acme user=alice method=POST | generic_key=global | plan=pro region=eu-west | header_match=curl | host=example.com path=/api/orders/y",
		},
		{
			name: "spoofing client, wrong scheme, path outside the routes", target: "/healthz", remote: "[::ffff:203.0.113.9]:5",
			h:    map[string]string{"X-Forwarded-For": "1.1.1.1", "Authorization": "Basic abc", "User-Agent": "Mozilla/5.0"},
			want: "remote_address=203.0.113.9 | net=203.0.113.0/24 | generic_key=global | plan=free | host=example.com path=/healthz",
		},
		{
			name: "route boundary and header key first", target: "/health/live?api_key=q", remote: "203.0.113.9:5",
			h:    map[string]string{"Authorization": "Bearer   h  "},
			want: "remote_address=203.0.113.9 | net=203.0.113.0/24 | api_key=h path=/health | generic_key=global | plan=free | host=example.com path=/health/live",
		},
		{
			name: "user without tenant drops the descriptor", target: "/", remote: "203.0.113.9:5", user: "bob",
			h:    map[string]string{"X-Tenant": ""},
			want: "remote_address=203.0.113.9 | net=203.0.113.0/24 | generic_key=global | plan=free | host=example.com path=/",
		},
	} {
		got, err := x.Descriptors(tc.request(), nil)
		if err != nil {
			t.Errorf("%s: Descriptors error %v", tc.name, err)
			continue
		}
		if s := render(got); s != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, s, tc.want)
		}
	}
}

func TestMatchAndSources(t *testing.T) {
	for _, tc := range []struct {
		entry EntrySpec
		req   reqCase
		want  string
	}{
		{EntrySpec{Source: "header:X-Env", Match: &MatchSpec{Exact: "prod"}, Value: "p"}, reqCase{h: map[string]string{"X-Env": "prod"}}, "header_match=p"},
		{EntrySpec{Source: "header:X-Env", Match: &MatchSpec{Exact: "prod"}, Value: "p"}, reqCase{h: map[string]string{"X-Env": "prod2"}}, ""},
		{EntrySpec{Source: "header:X-Env", Match: &MatchSpec{Exact: "prod", Invert: true}, Value: "np"}, reqCase{h: map[string]string{"X-Env": "dev"}}, "header_match=np"},
		{EntrySpec{Source: "header:X-Env", Match: &MatchSpec{Exact: "prod", Invert: true}, Value: "np"}, reqCase{}, "header_match=np"},
		{EntrySpec{Source: "header:X-Env", Match: &MatchSpec{Present: true}, Value: "set"}, reqCase{h: map[string]string{"X-Env": ""}}, "header_match=set"},
		{EntrySpec{Source: "header:X-Env", Match: &MatchSpec{Present: true}, Value: "set"}, reqCase{}, ""},
		{EntrySpec{Source: "query:debug", Match: &MatchSpec{Present: true}, Value: "dbg"}, reqCase{target: "/?debug"}, "query_match=dbg"},
		{EntrySpec{Source: "method", Key: "write", Match: &MatchSpec{Exact: "GET", Invert: true}, Value: "yes"}, reqCase{method: "DELETE"}, "write=yes"},
		{EntrySpec{Source: "path", Match: &MatchSpec{Prefix: "/admin"}, Value: "admin"}, reqCase{target: "/admin/x"}, "path_match=admin"},
		{EntrySpec{Source: "header:x-empty"}, reqCase{h: map[string]string{"X-Empty": ""}}, "x-empty="},
		{EntrySpec{Source: "query:q"}, reqCase{target: "/?a=1&q=x+y%21&q=2"}, "q=x y!"},
		{EntrySpec{Source: "query:q"}, reqCase{target: "/?q=%zz&q=ok"}, "q=ok"},
		{EntrySpec{Source: "query:q", Default: "none"}, reqCase{target: "/?q;x=1"}, "q=none"},
		{EntrySpec{Source: "query:a b"}, reqCase{target: "/?a+b=1"}, "a b=1"},
		{EntrySpec{Source: "api_key"}, reqCase{h: map[string]string{"X-Api-Key": "k9"}}, "api_key=k9"},
		{EntrySpec{Source: "api_key"}, reqCase{h: map[string]string{"X-Api-Key": "  "}}, ""},
		{EntrySpec{Source: "host"}, reqCase{target: "http://API.example.com:8443/"}, "host=api.example.com"},
		{EntrySpec{Source: "path", Routes: []string{"/"}}, reqCase{target: "/anything"}, "path=/"},
		{EntrySpec{Source: "path"}, reqCase{target: "/a/b/"}, "path=/a/b"},
		{EntrySpec{Source: "remote_address", IPv6Prefix: 128}, reqCase{remote: "[2001:db8::7]:1"}, "remote_address=2001:db8::7"},
		{EntrySpec{Source: "remote_address", IPv4Prefix: 16}, reqCase{remote: "203.0.113.7:1"}, "remote_address=203.0.0.0/16"},
	} {
		x, err := NewExtractor(Spec{Descriptors: []DescriptorSpec{{Entries: []EntrySpec{tc.entry}}}})
		if err != nil {
			t.Fatalf("%+v: %v", tc.entry, err)
		}
		tc.req.target = cmpOr(tc.req.target, "/")
		tc.req.remote = cmpOr(tc.req.remote, "192.0.2.1:1")
		got, err := x.Descriptors(tc.req.request(), nil)
		if err != nil || render(got) != tc.want {
			t.Errorf("%+v on %s %v: got %q, %v; want %q", tc.entry, tc.req.target, tc.req.h, render(got), err, tc.want)
		}
	}
}

func TestRequestErrors(t *testing.T) {
	x, err := NewExtractor(Spec{Descriptors: []DescriptorSpec{
		{Entries: []EntrySpec{{Source: "header:X-User", Key: "user"}}},
		{Entries: []EntrySpec{{Source: "generic_key", Value: "g"}, {Source: "remote_address"}}},
	}}, WithMaxValueLen(10))
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "@"
	_, err = x.Descriptors(r, nil)
	var de *Error
	if !errors.Is(err, ErrNoClientIP) || !errors.As(err, &de) || de.Field != "descriptors[1].entries[1]" {
		t.Errorf("unix peer: err = %v, want ErrNoClientIP at descriptors[1].entries[1]", err)
	}
	if want := `dimension: descriptors[1].entries[1] (remote_address): no client IP: RemoteAddr "@" is not an IP address`; err == nil || err.Error() != want {
		t.Errorf("error text %q, want %q", err, want)
	}
	r.RemoteAddr = "192.0.2.1:1"
	r.Header.Set("X-User", "12345678901")
	if _, err = x.Descriptors(r, nil); !errors.Is(err, ErrValueTooLong) || err.Error() != "dimension: descriptors[0].entries[0] (header:X-User): value too long: 11 bytes, at most 10" {
		t.Errorf("long value: err = %v", err)
	}
	r.Header.Set("X-User", "1234567890")
	if got, err := x.Descriptors(r, nil); err != nil || render(got) != "user=1234567890 | generic_key=g remote_address=192.0.2.1" {
		t.Errorf("at the bound: %q, %v", render(got), err)
	}
}

func TestSpecErrors(t *testing.T) {
	one := func(e EntrySpec) Spec { return Spec{Descriptors: []DescriptorSpec{{Entries: []EntrySpec{e}}}} }
	ok := one(EntrySpec{Source: "method"})
	with := func(f func(*Spec)) Spec {
		s := ok
		f(&s)
		return s
	}
	for _, tc := range []struct {
		spec Spec
		opts []Option
		want string
	}{
		{Spec{}, nil, "dimension: descriptors: no descriptors"},
		{Spec{Descriptors: []DescriptorSpec{{}}}, nil, "dimension: descriptors[0].entries: no entries"},
		{one(EntrySpec{}), nil, "dimension: descriptors[0].entries[0].source: missing (want " + sourceList + ")"},
		{one(EntrySpec{Source: "cookie:x"}), nil, `dimension: descriptors[0].entries[0].source: unknown source "cookie:x" (want ` + sourceList + ")"},
		{one(EntrySpec{Source: "methods"}), nil, `dimension: descriptors[0].entries[0].source: unknown source "methods" (want ` + sourceList + ")"},
		{one(EntrySpec{Source: "header:"}), nil, `dimension: descriptors[0].entries[0].source: "" is not a valid header name`},
		{one(EntrySpec{Source: "header:X User"}), nil, `dimension: descriptors[0].entries[0].source: "X User" is not a valid header name`},
		{one(EntrySpec{Source: "query:"}), nil, "dimension: descriptors[0].entries[0].source: query: needs a parameter name"},
		{one(EntrySpec{Source: "generic_key"}), nil, "dimension: descriptors[0].entries[0].value: generic_key needs a value"},
		{one(EntrySpec{Source: "generic_key", Value: "v", Match: &MatchSpec{Present: true}}), nil, "dimension: descriptors[0].entries[0].match: generic_key has nothing to match"},
		{one(EntrySpec{Source: "method", Match: &MatchSpec{Exact: "GET"}}), nil, "dimension: descriptors[0].entries[0].value: a match entry needs the value it takes when it matches"},
		{one(EntrySpec{Source: "method", Value: "x"}), nil, "dimension: descriptors[0].entries[0].value: only generic_key and match entries take a value"},
		{one(EntrySpec{Source: "method", Value: "x", Match: &MatchSpec{Exact: "a", Prefix: "b"}}), nil, "dimension: descriptors[0].entries[0].match: set exactly one of exact, prefix and present"},
		{one(EntrySpec{Source: "method", Value: "x", Match: &MatchSpec{}}), nil, "dimension: descriptors[0].entries[0].match: set exactly one of exact, prefix and present"},
		{one(EntrySpec{Source: "host", Routes: []string{"/"}}), nil, "dimension: descriptors[0].entries[0].routes: only the path source takes routes"},
		{one(EntrySpec{Source: "path", Routes: []string{"/a", "b"}}), nil, `dimension: descriptors[0].entries[0].routes[1]: route "b" must start with /`},
		{one(EntrySpec{Source: "path", Routes: []string{"/a", "/api//v1"}}), nil, `dimension: descriptors[0].entries[0].routes[1]: route "/api//v1" is not a clean path (paths are matched cleaned: dot segments resolved, repeated / merged; write "/api/v1"), so no request path would fall under it`},
		{one(EntrySpec{Source: "path", Routes: []string{"/api/../admin/"}}), nil, `dimension: descriptors[0].entries[0].routes[0]: route "/api/../admin/" is not a clean path (paths are matched cleaned: dot segments resolved, repeated / merged; write "/admin"), so no request path would fall under it`},
		{one(EntrySpec{Source: "path", Routes: []string{"/api/*"}}), nil, `dimension: descriptors[0].entries[0].routes[0]: route "/api/*" holds * ? or #: a prefix is literal, no pattern or query ("/api" covers /api and everything below it), so no request path would fall under it`},
		{one(EntrySpec{Source: "path", Routes: []string{"/search?q="}}), nil, `dimension: descriptors[0].entries[0].routes[0]: route "/search?q=" holds * ? or #: a prefix is literal, no pattern or query ("/api" covers /api and everything below it), so no request path would fall under it`},
		{one(EntrySpec{Source: "path", Routes: []string{"/files/a%20b"}}), nil, `dimension: descriptors[0].entries[0].routes[0]: route "/files/a%20b" holds a percent escape: paths are matched percent-decoded; write the character itself, so no request path would fall under it`},
		{one(EntrySpec{Source: "host", Default: "d", SkipIfAbsent: true}), nil, "dimension: descriptors[0].entries[0].default: default and skip_if_absent exclude each other"},
		{one(EntrySpec{Source: "host", IPv4Prefix: 24}), nil, "dimension: descriptors[0].entries[0].ipv4_prefix: only remote_address takes a prefix length"},
		{one(EntrySpec{Source: "host", IPv6Prefix: 48}), nil, "dimension: descriptors[0].entries[0].ipv6_prefix: only remote_address takes a prefix length"},
		{one(EntrySpec{Source: "remote_address", IPv4Prefix: 33}), nil, "dimension: descriptors[0].entries[0].ipv4_prefix: 33 is not in 1..32"},
		{one(EntrySpec{Source: "remote_address", IPv6Prefix: -1}), nil, "dimension: descriptors[0].entries[0].ipv6_prefix: -1 is not in 1..128"},
		{one(EntrySpec{Source: "user"}), nil, "dimension: descriptors[0].entries[0].source: user needs user_header or the WithUser option"},
		{one(EntrySpec{Source: "tenant"}), nil, "dimension: descriptors[0].entries[0].source: tenant needs tenant_header or the WithTenant option"},
		{with(func(s *Spec) { s.TrustedProxies = []string{"10.0.0.0/8", "10.0.0.0/33"} }), nil, `dimension: trusted_proxies[1]: "10.0.0.0/33" is not a CIDR or an IP address`},
		{with(func(s *Spec) { s.TrustedProxies = []string{"localhost"} }), nil, `dimension: trusted_proxies[0]: "localhost" is not a CIDR or an IP address`},
		{with(func(s *Spec) { s.ProxyHeader = "X-Client-IP" }), nil, `dimension: proxy_header: unknown proxy header "X-Client-IP" (want X-Forwarded-For, Forwarded or X-Real-IP)`},
		{with(func(s *Spec) { s.IPv4Prefix = 40 }), nil, "dimension: ipv4_prefix: 40 is not in 1..32"},
		{with(func(s *Spec) { s.IPv6Prefix = 200 }), nil, "dimension: ipv6_prefix: 200 is not in 1..128"},
		{with(func(s *Spec) { s.APIKey.Header = "X Key" }), nil, `dimension: api_key.header: "X Key" is not a valid header name`},
		{with(func(s *Spec) { s.APIKey = APIKeySpec{Query: "k", Scheme: "Bearer"} }), nil, `dimension: api_key.scheme: "Bearer" needs api_key.header and must be a token`},
		{with(func(s *Spec) { s.UserHeader = "X-User" }), []Option{WithUser(ctxUser)}, "dimension: user_header: set together with a function option; choose one (the header is client-controlled)"},
		{with(func(s *Spec) { s.TenantHeader = "X:T" }), nil, `dimension: tenant_header: "X:T" is not a valid header name`},
		{ok, []Option{WithMaxValueLen(0)}, "dimension: WithMaxValueLen(0): must be at least 1"},
	} {
		_, err := NewExtractor(tc.spec, tc.opts...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("NewExtractor(%+v) error:\n got %v\nwant %s", tc.spec, err, tc.want)
		}
	}
}

func TestTrustedProxyForms(t *testing.T) {
	x, err := NewExtractor(Spec{
		TrustedProxies: []string{" 10.1.2.3 ", "::ffff:192.168.0.0/112", "2001:db8::1", "fe80::1%eth0"},
		ProxyHeader:    "Forwarded",
		Descriptors:    []DescriptorSpec{{Entries: []EntrySpec{{Source: "remote_address"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "[10.1.2.3/32 192.168.0.0/16 2001:db8::1/128 fe80::1/128]"
	p := x.Proxies()
	if got := stringsOf(p.Trusted); got != want || p.Header != Forwarded {
		t.Errorf("Proxies() = %v %v, want %s Forwarded", p.Trusted, p.Header, want)
	}
	for remote, client := range map[string]string{"10.1.2.3:1": "203.0.113.7", "10.1.2.4:1": "10.1.2.4", "192.168.9.9:1": "203.0.113.7", "[2001:db8::1]:1": "203.0.113.7"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		r.Header.Set("Forwarded", "for=203.0.113.7")
		if got := x.ClientIP(r).String(); got != client {
			t.Errorf("ClientIP from %s = %s, want %s", remote, got, client)
		}
	}
}

func stringsOf[T interface{ String() string }](xs []T) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, x.String())
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// TestDstReuse checks that a reused dst is overwritten cleanly: no entry of
// an earlier request leaks into a later one.
func TestDstReuse(t *testing.T) {
	x, err := NewExtractor(fullSpec, WithUser(ctxUser))
	if err != nil {
		t.Fatal(err)
	}
	big := reqCase{method: "POST", target: "/api/x?api_key=k&region=eu", remote: "203.0.113.7:1", user: "u",
		h: map[string]string{"X-Tenant": "t", "User-Agent": "curl/1"}}.request()
	small := reqCase{target: "/", remote: "203.0.113.8:1"}.request()
	dst, err := x.Descriptors(big, nil)
	if err != nil {
		t.Fatal(err)
	}
	dst, err = x.Descriptors(small, dst)
	if err != nil {
		t.Fatal(err)
	}
	want := "remote_address=203.0.113.8 | net=203.0.113.0/24 | generic_key=global | plan=free | host=example.com path=/"
	if render(dst) != want {
		t.Errorf("reused dst: %s, want %s", render(dst), want)
	}
}

func TestAllocations(t *testing.T) {
	noIP, err := NewExtractor(Spec{Descriptors: []DescriptorSpec{
		{Entries: []EntrySpec{{Source: "api_key"}, {Source: "path", Routes: []string{"/api/"}}}},
		{Entries: []EntrySpec{{Source: "header:X-Tenant"}, {Source: "method"}, {Source: "query:region"}}},
		{Entries: []EntrySpec{{Source: "generic_key", Value: "g"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	withIP, err := NewExtractor(fullSpec, WithUser(ctxUser))
	if err != nil {
		t.Fatal(err)
	}
	r := reqCase{target: "/api/users/7?api_key=k&region=eu", remote: "10.0.0.1:1", user: "u",
		h: map[string]string{"X-Tenant": "t", "X-Forwarded-For": "203.0.113.7, 10.0.0.2"}}.request()
	for _, tc := range []struct {
		name string
		x    *Extractor
		max  float64
	}{{"no remote_address", noIP, 0}, {"two remote_address prefixes", withIP, 2}} {
		dst, _ := tc.x.Descriptors(r, nil)
		if got := testing.AllocsPerRun(100, func() { dst, _ = tc.x.Descriptors(r, dst) }); got > tc.max {
			t.Errorf("%s: %v allocations per request, want at most %v", tc.name, got, tc.max)
		}
	}
}

// FuzzDescriptors feeds arbitrary header values, queries and peers through
// every source: the extractor never panics, and every value it returns is
// within the length bound.
func FuzzDescriptors(f *testing.F) {
	f.Add("10.0.0.1:80", "1.2.3.4, 2001:db8::1", "Bearer x", "/api/users?api_key=a%20b&region=%zz", "curl/1")
	f.Add("@", "", "", "", "")
	f.Add("[::ffff:10.0.0.1]:1", "garbage,,", "bearer", "//a/../../b?;", "")
	x, err := NewExtractor(fullSpec, WithUser(func(r *http.Request) string { return r.Header.Get("X-Plan") }), WithMaxValueLen(64))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, remote, fwdFor, auth, target, ua string) {
		u, err := url.Parse(target)
		if err != nil {
			return
		}
		r := &http.Request{Method: "GET", URL: u, Host: u.Host, RemoteAddr: remote, Header: http.Header{
			"X-Forwarded-For": {fwdFor}, "Authorization": {auth}, "User-Agent": {ua}, "X-Plan": {ua}, "X-Tenant": {auth},
		}}
		ds, err := x.Descriptors(r, nil)
		if err != nil {
			if !errors.Is(err, ErrNoClientIP) && !errors.Is(err, ErrValueTooLong) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		for _, d := range ds {
			if len(d.Entries) == 0 {
				t.Fatal("empty descriptor")
			}
			for _, e := range d.Entries {
				if len(e.Value) > 64 || e.Key == "" {
					t.Fatalf("entry %+v breaks the bounds", e)
				}
			}
		}
	})
}

// FuzzLookupQuery holds the allocation-free query lookup to url.ParseQuery.
func FuzzLookupQuery(f *testing.F) {
	f.Add("a=1&b=2&a=3", "a")
	f.Add("a=%zz&a=2", "a")
	f.Add("a%20b=1;c=2&a+b=3", "a b")
	f.Add("q", "q")
	f.Fuzz(func(t *testing.T, raw, name string) {
		got, ok := lookupQuery(raw, name)
		vs, _ := url.ParseQuery(raw)
		want, wantOK := "", false
		if v, has := vs[name]; has {
			want, wantOK = v[0], true
		}
		if got != want || ok != wantOK {
			t.Fatalf("lookupQuery(%q, %q) = %q, %v; url.ParseQuery says %q, %v", raw, name, got, ok, want, wantOK)
		}
		if first, n := countQuery(raw, name); first != want || n != len(vs[name]) {
			t.Fatalf("countQuery(%q, %q) = %q, %d; url.ParseQuery says %q, %d", raw, name, first, n, want, len(vs[name]))
		}
	})
}

// WithRejectAmbiguous refuses what another parser could read as another
// value; without it the first value is read, as Go's Get does.
func TestRejectAmbiguous(t *testing.T) {
	spec := Spec{
		APIKey:     APIKeySpec{Header: "X-API-Key", Query: "api_key"},
		UserHeader: "X-User",
		Descriptors: []DescriptorSpec{
			{Entries: []EntrySpec{{Source: "query:user", SkipIfAbsent: true}, {Source: "header:X-Plan", SkipIfAbsent: true}}},
			{Entries: []EntrySpec{{Source: "api_key"}}},
			{Entries: []EntrySpec{{Source: "user", Key: "u"}}},
		},
	}
	lax, err := NewExtractor(spec)
	if err != nil {
		t.Fatal(err)
	}
	strict, err := NewExtractor(spec, WithRejectAmbiguous(true))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		target  string
		h       []string // name, value pairs, added
		lax     string
		wantErr string // "" when strict reads as lax
	}{
		{"/?user=a", nil, "user=a", ""},
		{"/?user=a+b&x=1&x=2", nil, "user=a b", ""},   // x is not read
		{"/?user=a;user=b&user=c", nil, "user=c", ""}, // Go (and the proxy) drop the ";" pair
		{"/?user=%zz&user=c", nil, "user=c", ""},
		{"/?user=%C3%A9", nil, "user=é", ""},
		{"/?user=a&user=b", nil, "user=a", `(query:user): ambiguous: query parameter "user" sent 2 times`},
		{"/?user=a&us%65r=b", nil, "user=a", `sent 2 times`},
		{"/?user=%E9", nil, "user=\\xe9", `"user" is not valid UTF-8 once decoded`},
		{"/?user=victim%00x", nil, "user=victim\\x00x", `"user" holds a control character once decoded`},
		{"/", []string{"X-Plan", "a", "X-Plan", "b"}, "X-Plan=a", `(header:X-Plan): ambiguous: header X-Plan sent 2 times`},
		{"/", []string{"X-Api-Key", "k", "X-Api-Key", "j"}, "api_key=k", `(api_key): ambiguous: header X-Api-Key sent 2 times`},
		{"/?api_key=k", []string{"X-Api-Key", "k"}, "api_key=k", ""},
		{"/?api_key=j", []string{"X-Api-Key", "k"}, "api_key=k", `API key sent in both the X-Api-Key header and the "api_key" query parameter`},
		{"/?api_key=j&api_key=k", nil, "api_key=j", `query parameter "api_key" sent 2 times`},
		{"/", []string{"X-User", "a", "X-User", "b"}, "u=a", `(user): ambiguous: header X-User sent 2 times`},
	} {
		r := httptest.NewRequest("GET", tc.target, nil)
		r.RemoteAddr = "192.0.2.1:1"
		for i := 0; i+1 < len(tc.h); i += 2 {
			r.Header.Add(tc.h[i], tc.h[i+1])
		}
		got, err := lax.Descriptors(r, nil)
		if g := strings.Trim(fmt.Sprintf("%q", render(got)), `"`); err != nil || g != tc.lax {
			t.Errorf("lax %s %v: %s, %v; want %s", tc.target, tc.h, g, err, tc.lax)
		}
		got, err = strict.Descriptors(r, nil)
		switch {
		case tc.wantErr == "" && (err != nil || strings.Trim(fmt.Sprintf("%q", render(got)), `"`) != tc.lax):
			t.Errorf("strict %s %v: %q, %v; want %s", tc.target, tc.h, render(got), err, tc.lax)
		case tc.wantErr != "" && (!errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("strict %s %v: %q, %v; want ErrAmbiguous %q", tc.target, tc.h, render(got), err, tc.wantErr)
		}
	}
}

func BenchmarkDescriptors(b *testing.B) {
	x, err := NewExtractor(fullSpec, WithUser(ctxUser))
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  reqCase
	}{
		{"ipv4-direct", reqCase{target: "/api/users/7?api_key=k", remote: "203.0.113.7:1"}},
		{"ipv6-behind-proxies", reqCase{method: "POST", target: "/api/orders/1?region=eu", remote: "10.0.0.1:1", user: "alice",
			h: map[string]string{"X-Forwarded-For": "1.2.3.4, 2001:db8:1:2::9, 10.0.0.2", "Authorization": "Bearer t", "X-Tenant": "acme", "User-Agent": "curl/8"}}},
	} {
		r := tc.req.request()
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var dst []Descriptor
				for pb.Next() {
					var err error
					if dst, err = x.Descriptors(r, dst); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkDescriptorsClients: the client address behind a trusted proxy
// for 10 000 clients, each seen before, as in a warm service.
func BenchmarkDescriptorsClients(b *testing.B) {
	x, err := NewExtractor(Spec{TrustedProxies: []string{"127.0.0.1"},
		Descriptors: []DescriptorSpec{{Entries: []EntrySpec{{Source: "remote_address"}}}}})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*http.Request, 10_000)
	for i := range reqs {
		reqs[i] = &http.Request{RemoteAddr: "127.0.0.1:1234", Header: xff(fmt.Sprintf("198.18.%d.%d", i/256, i%256))}
		if _, err := x.Descriptors(reqs[i], nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var dst []Descriptor
		i := 0
		for pb.Next() {
			var err error
			if dst, err = x.Descriptors(reqs[i%len(reqs)], dst); err != nil {
				b.Fatal(err)
			}
			i += 7919
		}
	})
}

func BenchmarkClientIP(b *testing.B) {
	p := Proxies{Trusted: testTrusted}
	r := &http.Request{RemoteAddr: "10.0.0.1:80", Header: xff("1.2.3.4, 203.0.113.7, 10.0.0.2")}
	b.ReportAllocs()
	for b.Loop() {
		p.ClientIP(r)
	}
}

// TestHostSource: the host value is the host as route matching sees it, so
// that a client cannot sidestep a per-host limit by spelling its Host
// differently: lower case, no port, no trailing dot, IPv6 literals without
// brackets and in canonical form.
func TestHostSource(t *testing.T) {
	x, err := NewExtractor(Spec{Descriptors: []DescriptorSpec{{Entries: []EntrySpec{{Source: "host"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ host, want string }{
		{"a.example.com", "a.example.com"},
		{"A.EXAMPLE.COM:80", "a.example.com"},
		{"a.example.com.", "a.example.com"},
		{"A.Example.Com.:8443", "a.example.com"},
		{"a.example.com..", "a.example.com."}, // one dot only
		{"192.0.2.1:80", "192.0.2.1"},
		{"[::1]:80", "::1"},
		{"[::1]", "::1"},
		{"[0:0::1]:80", "::1"},
		{"[2001:DB8::1]:443", "2001:db8::1"},
		{"::1", "::1"},
		{"[::ffff:192.0.2.1]", "192.0.2.1"},
		// A zone is the client's to choose: one counter, whatever it says.
		{"[fe80::1%25eth0]:80", "fe80::1"},
		{"[fe80::1%25x]", "fe80::1"},
		{"[FE80::1%eth0]", "fe80::1"},
		{"", ""},
		{":80", ""},
		{".", ""},
	} {
		r := &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, Host: tc.host, RemoteAddr: "192.0.2.9:1"}
		got, err := x.Descriptors(r, nil)
		if err != nil {
			t.Fatalf("Host %q: %v", tc.host, err)
		}
		var v string
		if len(got) > 0 {
			v = got[0].Entries[0].Value
		}
		if v != tc.want || (v == "") != (len(got) == 0) {
			t.Errorf("Host %q: host = %q (%d descriptors), want %q", tc.host, v, len(got), tc.want)
		}
	}
}

// Routes as users write them load and key their paths: a dot in a
// segment, ~, @, a space, ; and non-ASCII characters written decoded are
// all path characters, matched on the decoded, cleaned path.
func TestRoutesUsersWrite(t *testing.T) {
	for _, tc := range []struct{ route, target string }{
		{"/api/v1.0", "/api/v1.0/users"},
		{"/~user", "/~user/index.html"},
		{"/files/a b", "/files/a%20b/c"},
		{"/@scope", "/@scope/pkg"},
		{"/café", "/caf%C3%A9/menu"},
		{"/a;b", "/a;b/c"},
		{"/api/", "/api//x/../y"},
	} {
		x, err := NewExtractor(Spec{Descriptors: []DescriptorSpec{{Entries: []EntrySpec{{Source: "path", Routes: []string{tc.route}}}}}})
		if err != nil {
			t.Errorf("route %q: %v", tc.route, err)
			continue
		}
		ds, err := x.Descriptors(httptest.NewRequest("GET", tc.target, nil), nil)
		if err != nil || len(ds) != 1 || ds[0].Entries[0].Value != tc.route {
			t.Errorf("route %q, request %s: descriptors %+v, %v; want the route's value", tc.route, tc.target, ds, err)
		}
	}
}
