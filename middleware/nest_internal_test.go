package middleware

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/policy"
)

// members reads RFC 9651 lists of Strings with parameters: a
// parameter's String may hold commas and semicolons, a value may be a
// Token, an Integer or a Byte Sequence, whitespace is allowed around
// commas and after semicolons, and a list of any length is read whole.
// A value that is not such a list (an inner list, a bare Token as the
// member, an empty member, a trailing comma, a String left open) is not
// read at all: ok is false, and the caller treats the unit as unknown.
func TestMembersShapes(t *testing.T) {
	var long []string
	var want100 []member
	for i := range 100 {
		long = append(long, fmt.Sprintf(`"p%d";q=%d;qu="content-bytes";w=60`, i, i+1))
		want100 = append(want100, member{fmt.Sprintf("p%d", i), "content-bytes"})
	}
	for _, tc := range []struct {
		name, v string
		want    []member // nil: not a list of the draft's members
	}{
		{"a String with a comma and a semicolon", `"a";x="1,2;3";qu="content-bytes", "b";qu="c;d,e"`,
			[]member{{"a", "content-bytes"}, {"b", "c;d,e"}}},
		{"escapes", `"a\"b\\";qu="x\"y", "c"`, []member{{`a"b\`, `x"y`}, {"c", ""}}},
		{"a Token, an Integer, a Byte Sequence, a Boolean", `"a";qu=tok;pk=:AbC+/w==:;q=5;f, "b";qu=?1`,
			[]member{{"a", "tok"}, {"b", "?1"}}},
		{"the last of a repeated parameter", `"a";qu="x";qu="y"`, []member{{"a", "y"}}},
		{"whitespace", "  \"a\";  qu=\"x\" ,\t\"b\"  ,  \"c\";q=1  ", []member{{"a", "x"}, {"b", ""}, {"c", ""}}},
		{"100 members", strings.Join(long, ", "), want100},
		{"an inner list", `("a" "b");q=1`, nil},
		{"a Token member", `a;q=1`, nil},
		{"an empty member", `"a";q=1,,"b";q=2`, nil},
		{"a trailing comma", `"a";q=1,`, nil},
		{"a String left open", `"a;q=1`, nil},
		{"a parameter's String left open", `"a";qu="x`, nil},
		{"a space before a semicolon", `"a" ;q=1`, nil},
		{"an empty value", `"a";q=, "b"`, nil},
		{"an upper-case key", `"a";Q=1`, nil},
		{"nothing", ``, nil},
	} {
		got, ok := members(nil, []string{tc.v}, "qu")
		if ok != (tc.want != nil) || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: members(%q) = %q, %v; want %q, %v", tc.name, tc.v, got, ok, tc.want, tc.want != nil)
		}
	}
}

// FuzzMembers: members never panics, whatever the field holds, and
// reads back the lists the headers package writes, a policy of any name
// among them (escaped as the Writer escapes it), with their qu and r.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{
		`"a";q=10;w=60, "b";q=5;qu="concurrent-requests"`,
		`"a,b";r=4;t=9, "c;d";x="e,f;g";r=1`,
		`"a";qu=tok;pk=:AbC+/w==:;q=5;f`,
		`("a" "b");q=1, "c"`,
		"\t\"a\" ,  \"b\";  r=1 ",
		`"a";q=1,,"b"`, `"a";q=1,`, `"a\`, `"a";qu="\`, `"a";=1`, `"a";q=`, `;`, `"`, ``,
		strings.Repeat(`"p";q=1;w=1, `, 99) + `"p";q=1;w=1`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, key := range []string{"qu", "r", ""} {
			if ms, ok := members(nil, []string{s, s}, key); ok && len(ms)%2 != 0 {
				t.Fatalf("members(%q twice, %q): %d members, want an even number", s, key, len(ms))
			}
		}
		ps := []headers.Policy{
			{Name: s, Quota: 10, Window: time.Minute, QuotaUnit: headers.ContentBytes, Remaining: 3, Reset: time.Second, Allowed: true},
			{Name: "b", Quota: 5, QuotaUnit: headers.ConcurrentRequests, Remaining: 4, Allowed: true},
		}
		fields := map[string]string{}
		for _, fl := range headers.Fields(ps, headers.Options{Set: headers.IETF}) {
			fields[fl[0]] = fl[1]
		}
		name := headers.PolicyName(s)
		for _, tc := range []struct {
			field, key string
			want       []member
		}{
			{"RateLimit-Policy", "qu", []member{{name, headers.ContentBytes}, {"b", headers.ConcurrentRequests}}},
			{"RateLimit", "r", []member{{name, "3"}, {"b", "4"}}},
		} {
			got, ok := members(nil, []string{fields[tc.field]}, tc.key)
			if !ok || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("%s %q: members = %q, %v; want %q", tc.field, fields[tc.field], got, ok, tc.want)
			}
			if !memberList([]string{fields[tc.field]}) {
				t.Fatalf("%s %q: memberList false", tc.field, fields[tc.field])
			}
		}
	})
}

// TestOuterSetKeptOffUnexplainedRefusal: a status the policy Engine
// marks OVER_LIMIT for a Take the store refused as a whole, while each
// of its limits alone passed (plan.unexplained), has only admitting
// limit decisions. On that 429 the outer middleware's X-RateLimit-* set,
// with fewer remaining, does not replace this middleware's, which tells
// of the limit that refused; admitted, the same statuses let the tighter
// outer set stand.
func TestOuterSetKeptOffUnexplainedRefusal(t *testing.T) {
	m := &Middleware{}
	m.fields = headers.NewWriter(m.o.headers)
	m.keys = fieldKeys(&m.o)
	d := algo.Decision{Allowed: true, Limit: 10, Remaining: 5, ResetAfter: 40 * time.Second}
	status := func(code policy.Code) []policy.Status {
		return []policy.Status{{Code: code, Matched: true, Rule: "per-route", Decision: d, Window: time.Minute,
			Limits: []policy.LimitStatus{{Name: "per-route", Decision: d, Window: time.Minute}}}}
	}
	outer := func() http.Header {
		h := http.Header{}
		h.Set("RateLimit-Policy", `"per-ip";q=100;w=60`)
		h.Set("RateLimit", `"per-ip";r=2;t=30`)
		h.Set("X-RateLimit-Limit", "100")
		h.Set("X-RateLimit-Remaining", "2")
		h.Set("X-RateLimit-Reset", "30")
		return h
	}
	for _, tc := range []struct {
		code                  policy.Code
		limit, remaining, rst string
	}{
		{policy.CodeOverLimit, "10", "5", "40"}, // this middleware's set: it refused
		{policy.CodeOK, "100", "2", "30"},       // the outer, tighter set
	} {
		h := outer()
		m.writeFields(h, status(tc.code))
		if got := [3]string{h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset")}; got != [3]string{tc.limit, tc.remaining, tc.rst} {
			t.Errorf("%v: X-RateLimit-Limit, -Remaining, -Reset = %q, want %q", tc.code, got, [3]string{tc.limit, tc.remaining, tc.rst})
		}
		if got, want := h.Get("RateLimit"), `"per-ip";r=2;t=30, "per-route";r=5;t=40`; got != want {
			t.Errorf("%v: RateLimit = %q, want %q", tc.code, got, want)
		}
	}
}
