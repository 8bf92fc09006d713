package middleware

import (
	"cmp"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/policy"
)

// The header fields a middleware writes, by index into fieldKeys.
const (
	kPolicy = iota
	kRateLimit
	kLimit
	kRemaining
	kReset
	kRetryAfter
	nKeys
)

// fieldKeys returns the canonical names of the fields o writes, in the
// order of the k constants.
func fieldKeys(o *options) [nKeys]string {
	n := o.headers.Names.WithDefaults()
	names := [nKeys]string{n.Policy, n.RateLimit, n.Limit, n.Remaining, n.Reset, n.RetryAfter}
	var keys [nKeys]string
	for i, name := range names {
		keys[i] = textproto.CanonicalMIMEHeaderKey(name)
	}
	return keys
}

// writeFields sets the fields of st on h, as the headers Writer does,
// and nests them in the fields a middleware around this one (another
// Floodgate middleware, say a per-IP limit around a per-route one)
// already set: the Writer alone replaces them, and the client would
// learn only of the inner limits. RateLimit-Policy and RateLimit are
// lists of named policies (draft-ietf-httpapi-ratelimit-headers-10 §2):
// this middleware's members are added after the ones there, when those
// are such a list (each member a String with parameters, memberList);
// another value (an older draft's `limit=100, remaining=5`, set by other
// code) is replaced, as the Writer alone does, since one malformed member
// makes a client drop the whole field, this middleware's members too.
// The single-valued X-RateLimit-* fields describe one limit: see
// outerTighter for which. Retry-After is the longer of the two: after
// it, both admit again. A request that no middleware before this one
// limited costs six map lookups more, no allocation.
func (m *Middleware) writeFields(h http.Header, st []policy.Status) {
	var outer [nKeys][]string
	nested := false
	for i, k := range m.keys {
		if v := h[k]; len(v) > 0 {
			outer[i], nested = v, true
		}
	}
	m.fields.WriteStatuses(h, st)
	if nested {
		m.nest(h, &outer, st)
	}
}

// nest merges the outer values (those on h before this middleware wrote
// st's fields) with the ones it wrote: see writeFields.
func (m *Middleware) nest(h http.Header, outer *[nKeys][]string, st []policy.Status) {
	k := &m.keys
	for _, i := range []int{kPolicy, kRateLimit} {
		if inner := h[k[i]]; wrote(inner, outer[i]) && len(outer[i]) > 0 && memberList(outer[i]) {
			h[k[i]] = []string{strings.Join(outer[i], ", ") + ", " + strings.Join(inner, ", ")}
		}
	}
	if m.outerTighter(h, outer, st) {
		for _, i := range []int{kLimit, kRemaining, kReset} {
			h[k[i]] = outer[i]
		}
	}
	if inner := h[k[kRetryAfter]]; wrote(inner, outer[kRetryAfter]) && len(outer[kRetryAfter]) > 0 {
		o, err1 := strconv.ParseInt(outer[kRetryAfter][0], 10, 64)
		i, err2 := strconv.ParseInt(inner[0], 10, 64)
		if err1 == nil && err2 == nil && o > i {
			h[k[kRetryAfter]] = outer[kRetryAfter]
		}
	}
}

// outerTighter reports whether the X-RateLimit-Limit, -Remaining and
// -Reset already on h (outer's) should replace the ones this middleware
// wrote for st. The trio describes one limit, and a client reads
// Remaining against Limit and Reset, so the outer set is taken whole or
// not at all, and only when it describes the tighter limit of the same
// kind:
//
//   - this middleware wrote the set, and the outer one is all there and
//     readable (a client must not pair one limit's remaining with
//     another's reset);
//   - this middleware's limit did not refuse the request, nor did any
//     of its statuses (overLimit): on a refusal, the refusing limit's set
//     says why (as headers.Tightest picks a refusing limit first), where
//     an admitting one's Remaining above 0 would tell the client to go
//     on;
//   - both count in the same quota unit (requests, content-bytes,
//     concurrent-requests; outerUnit): remaining bytes, or free slots,
//     are no fewer or more than remaining requests;
//   - it has fewer remaining, or as many and the later reset (with none
//     remaining, the client waits for the later one either way).
//
// Otherwise this middleware's set stays; the RateLimit list states
// every limit either way.
func (m *Middleware) outerTighter(h http.Header, outer *[nKeys][]string, st []policy.Status) bool {
	k := &m.keys
	inner := h[k[kRemaining]]
	if !wrote(inner, outer[kRemaining]) || len(outer[kLimit]) == 0 || len(outer[kRemaining]) == 0 || len(outer[kReset]) == 0 {
		return false
	}
	oRem, err1 := strconv.ParseInt(outer[kRemaining][0], 10, 64)
	iRem, err2 := strconv.ParseInt(inner[0], 10, 64)
	oReset, err3 := strconv.ParseInt(outer[kReset][0], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return false
	}
	iReset := int64(-1)
	if v := h[k[kReset]]; len(v) > 0 {
		iReset, _ = strconv.ParseInt(v[0], 10, 64)
	}
	if oRem > iRem || oRem == iRem && oReset <= iReset {
		return false // the common case when this limit is the tighter: nothing more to read
	}
	tight, ok := headers.Tightest(headers.FromStatuses(st)) // the limit of the set this middleware wrote
	if !ok || !tight.Allowed || overLimit(st) {
		return false
	}
	set := m.o.headers.Set
	u, ok := outerUnit(outer, oRem, set == 0 || set&headers.IETF != 0)
	return ok && u == unitOf(cmp.Or(tight.QuotaUnit, m.o.headers.CostUnit))
}

// overLimit reports whether a status of st refused the request
// (OVER_LIMIT, not a shadow rule's). A refusal the store made as a whole
// while each of its limits alone passed (the policy Engine's
// unexplained refusal) has every limit's decision admitting: Tightest
// then picks an admitting limit although this middleware refused.
func overLimit(st []policy.Status) bool {
	return slices.ContainsFunc(st, func(s policy.Status) bool { return s.Code == policy.CodeOverLimit && !s.Shadow })
}

// outerUnit returns the quota unit of the outer X-RateLimit-* set, whose
// Remaining is rem ("" for requests), from the outer RateLimit-Policy and
// RateLimit lists: the qu of the policies whose RateLimit member has
// r=rem (without a RateLimit list, of every policy). ok is false when
// they disagree, none matches, or the policy field is not a list of the
// draft's members: the unit is then unknown. With no RateLimit-Policy on
// the response, the set counts requests, the unit X-RateLimit-* fields
// conventionally count and the draft's default, when lists is true: this
// middleware writes the IETF fields, so an outer one configured as it is
// would have written its list. When lists is false (a header set without
// them, WithHeaders), no middleware writes one, whatever its unit: a
// concurrency limit's free slots would read as requests, so the unit is
// unknown.
func outerUnit(outer *[nKeys][]string, rem int64, lists bool) (unit string, ok bool) {
	if len(outer[kPolicy]) == 0 {
		return "", lists
	}
	var pbuf, rbuf [8]member // on the stack for lists of up to 8 policies
	pols, ok := members(pbuf[:0], outer[kPolicy], "qu")
	if !ok || len(pols) == 0 {
		return "", false
	}
	rls, ok := members(rbuf[:0], outer[kRateLimit], "r")
	all := !ok || len(rls) == 0 // no RateLimit list to tell which policies have r=rem
	found := false
	for _, p := range pols {
		if !all && !slices.ContainsFunc(rls, func(r member) bool {
			n, err := strconv.ParseInt(r.param, 10, 64)
			return r.name == p.name && err == nil && n == rem
		}) {
			continue
		}
		if u := unitOf(p.param); !found {
			unit, found = u, true
		} else if u != unit {
			return "", false
		}
	}
	return unit, found
}

// unitOf is quota unit u as outerUnit compares it: "" for requests,
// which a policy may state as qu="requests" or not at all.
func unitOf(u string) string {
	if u == headers.Requests {
		return ""
	}
	return u
}

// member is one member of a RateLimit or RateLimit-Policy list: its
// policy's name and the value of one of its parameters ("" when absent;
// a String's unquoted).
type member struct{ name, param string }

// members parses vs as lists of the draft's members (RFC 9651 §3.1: a
// String with parameters, members separated by commas), appending each
// member, with its parameter key's value, to ms. ok is false when a
// value is not such a list.
func members(ms []member, vs []string, key string) (_ []member, ok bool) {
	for _, v := range vs {
		for i := 0; ; {
			i = skipOWS(v, i)
			var mb member
			if mb.name, i, ok = sfString(v, i); !ok {
				return nil, false
			}
			for i < len(v) && v[i] == ';' {
				i++
				for i < len(v) && v[i] == ' ' {
					i++
				}
				from := i
				for i < len(v) && (v[i] >= 'a' && v[i] <= 'z' || v[i] >= '0' && v[i] <= '9' || strings.IndexByte("_-.*", v[i]) >= 0) {
					i++
				}
				if i == from {
					return nil, false
				}
				name, val := v[from:i], ""
				if i < len(v) && v[i] == '=' {
					if i++; i < len(v) && v[i] == '"' {
						if val, i, ok = sfString(v, i); !ok {
							return nil, false
						}
					} else {
						from := i
						for i < len(v) && strings.IndexByte(";, \t", v[i]) < 0 {
							i++
						}
						if i == from {
							return nil, false
						}
						val = v[from:i]
					}
				}
				if name == key {
					mb.param = val
				}
			}
			ms = append(ms, mb)
			if i = skipOWS(v, i); i == len(v) {
				break
			}
			if v[i] != ',' {
				return nil, false
			}
			i++
		}
	}
	return ms, true
}

// skipOWS returns the index of the first byte of v from i on that is not
// a space or a tab.
func skipOWS(v string, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
		i++
	}
	return i
}

// sfString reads the String (RFC 9651 §3.3.3) at v[i:], unescaped, and
// returns the index after it; ok is false when none starts there or it
// does not end.
func sfString(v string, i int) (s string, next int, ok bool) {
	if i >= len(v) || v[i] != '"' {
		return "", i, false
	}
	from := i + 1
	var b []byte // the String unescaped, once it holds an escape
	for i = from; i < len(v); i++ {
		switch c := v[i]; c {
		case '"':
			if b == nil {
				return v[from:i], i + 1, true // no escape: no copy
			}
			return string(b), i + 1, true
		case '\\':
			if b == nil {
				b = append([]byte{}, v[from:i]...)
			}
			if i++; i == len(v) {
				return "", i, false
			}
			b = append(b, v[i])
		default:
			if b != nil {
				b = append(b, c)
			}
		}
	}
	return "", i, false
}

// wrote reports whether inner, a field's values after this middleware
// wrote, are new: the Writer sets a new slice for each field it writes,
// and leaves the others as they were (outer).
func wrote(inner, outer []string) bool {
	return len(inner) > 0 && (len(outer) == 0 || &inner[0] != &outer[0])
}

// memberList reports whether each of vs is a non-empty List whose members
// are Strings with parameters (RFC 9651 §3.1), the draft's form of the
// RateLimit-Policy and RateLimit members (`"name";q=10;w=60`): each member
// starts with a quoted String, and every String, a parameter's included,
// ends. It checks the shape the merge depends on, not every rule of a
// structured field.
func memberList(vs []string) bool {
	for _, v := range vs {
		start, quoted := true, false // start: before a member's String
		for i := 0; i < len(v); i++ {
			c := v[i]
			switch {
			case quoted:
				if c == '\\' {
					i++
				} else if c == '"' {
					quoted = false
				}
			case start:
				if c == ' ' || c == '\t' {
					continue
				}
				if c != '"' {
					return false
				}
				start, quoted = false, true
			case c == '"':
				quoted = true // a parameter's String value
			case c == ',':
				start = true
			}
		}
		if start || quoted {
			return false // empty, a trailing comma, or a String left open
		}
	}
	return true
}
