// Package headers writes a decision's state to HTTP header fields: the IETF
// RateLimit-Policy and RateLimit fields (draft-ietf-httpapi-ratelimit-headers-10,
// one list member per limit that applied), the common X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset, and Retry-After on refusals.
//
// Values come from the decision the store made (its stored reset time), so
// every instance reports the same numbers for the same key. Seconds are
// rounded up: a client that waits Retry-After and retries is admitted.
//
// # Concurrency limits
//
// A concurrency limit (quota unit "concurrent-requests") has no window and
// no reset time: a slot frees when a request in flight completes, which
// nobody can tell in advance. The only bound there is, the lease's
// time-to-live, would read as "wait ten minutes" where a slot may free in
// milliseconds. So a concurrency policy states no time in the IETF
// fields: no w in RateLimit-Policy, no t in its RateLimit member (draft
// -10 §4.1 makes t OPTIONAL, and its §4.2 shows a member without one for a
// quota that has no time window reset), and no Retry-After when it refused
// (see RetryAfterOf). Its q and r (slots, and slots free) are stated as
// usual. X-RateLimit-Reset, which the project's contract puts on every
// limited response, stays: for a concurrency limit it is the latest a slot
// comes back (the lease's time-to-live), a bound, not a forecast.
//
// # Shadow limits
//
// A limit in shadow mode (a dry run) is stated truthfully in the IETF
// fields, r=0 included once it is over its quota, but it never drives the
// single-valued fields: X-RateLimit-* show the tightest enforced limit,
// and are left out when every limit is a shadow one, and Retry-After
// counts enforced refusals only. Clients that honour X-RateLimit-Remaining
// or Retry-After would otherwise slow down for a limit that refuses
// nothing.
//
// # Hierarchies and borrowing
//
// A status measured against several limits (a hierarchy's levels, a
// ceil, priority pools) states each in the IETF fields; X-RateLimit-*
// report the one policy.Status.Decision reports, chosen the same way
// (Tightest): a refusing limit first, else the one with the fewest
// remaining. A rate whose refusal borrowing answered is stated (r=0) but
// never chosen: a borrowed admission reports the limits that admitted it,
// its ceil first of all.
//
// Fields lists the fields for transports that carry headers as a list;
// Write sets them on an http.Header. A server that writes them on every
// response uses a Writer, which formats what depends only on the rule once
// and costs two allocations per response.
package headers

import (
	"fmt"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/policy"
)

// Set selects which groups of fields are written.
type Set uint8

// Field groups. Default is all of them.
const (
	IETF       Set = 1 << iota // RateLimit-Policy and RateLimit
	XRateLimit                 // X-RateLimit-Limit, -Remaining, -Reset
	RetryAfter                 // Retry-After on refusals
	Default    = IETF | XRateLimit | RetryAfter
)

// Names are the field names written; rename any of them to suit clients
// that expect other spellings. The zero value of a name means its default.
type Names struct {
	Policy     string // default "RateLimit-Policy"
	RateLimit  string // default "RateLimit"
	Limit      string // default "X-RateLimit-Limit"
	Remaining  string // default "X-RateLimit-Remaining"
	Reset      string // default "X-RateLimit-Reset"
	RetryAfter string // default "Retry-After"
}

// WithDefaults returns n with each empty name set to its default.
func (n Names) WithDefaults() Names {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&n.Policy, "RateLimit-Policy")
	def(&n.RateLimit, "RateLimit")
	def(&n.Limit, "X-RateLimit-Limit")
	def(&n.Remaining, "X-RateLimit-Remaining")
	def(&n.Reset, "X-RateLimit-Reset")
	def(&n.RetryAfter, "Retry-After")
	return n
}

// Options choose the fields and their names. The zero value writes every
// field under its default name.
type Options struct {
	Set   Set
	Names Names
	// CostUnit is the unit requests are charged in, when it is not
	// requests (the draft's default unit): ContentBytes for a cost in
	// bytes of content (middleware.WithCostUnit). Every policy counted in
	// it, each one but a concurrency limit's (whose unit is
	// ConcurrentRequests), is then stated with that qu in
	// RateLimit-Policy, so that a client reads q and r in bytes, not in
	// requests. "" or Requests: no qu, as before.
	CostUnit string
}

// Check reports a field name of o that a response cannot carry: the name
// of a field o's Set writes that is not a token (RFC 9110 §5.1), which
// net/http drops from a response without a word, or two such names that
// are one field (names compare case-insensitively), which would leave one
// value, the later field's, under both. Names of fields the Set leaves
// out are not checked. Constructors taking Options (middleware.New) call
// it; the Writer does not, and writes what it is given.
func (o Options) Check() error {
	set, n := o.effective()
	fs := [nFields]struct {
		label, name string
		in          Set
	}{
		{"Policy", n.Policy, IETF}, {"RateLimit", n.RateLimit, IETF},
		{"Limit", n.Limit, XRateLimit}, {"Remaining", n.Remaining, XRateLimit}, {"Reset", n.Reset, XRateLimit},
		{"RetryAfter", n.RetryAfter, RetryAfter},
	}
	for i, f := range fs {
		if set&f.in == 0 {
			continue
		}
		if !isToken(f.name) {
			return fmt.Errorf("Names.%s %q is not a header field name (RFC 9110 §5.1: a token of letters, digits and !#$%%&'*+-.^_`|~); net/http would drop the field", f.label, f.name)
		}
		for _, g := range fs[:i] {
			if set&g.in != 0 && strings.EqualFold(f.name, g.name) {
				return fmt.Errorf("Names.%s %q and Names.%s %q are one header field: one value would hide the other", g.label, g.name, f.label, f.name)
			}
		}
	}
	return nil
}

// isToken reports whether s is an RFC 9110 token, the syntax of a field
// name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// Quota units (qu) of draft-ietf-httpapi-ratelimit-headers-10 §3.1.2, the
// three its RateLimit Quota Units registry holds.
const (
	// Requests is the default unit: a limit counted in requests is
	// stated without qu.
	Requests = "requests"
	// ContentBytes is the unit of a quota counted in bytes of content.
	ContentBytes = "content-bytes"
	// ConcurrentRequests is the quota unit (qu) of a concurrency limit.
	ConcurrentRequests = policy.ConcurrentRequests
)

// costUnit is the qu of policies counted in requests under o: "" for
// requests, which the draft's default says without a parameter.
// effective returns the Set o writes (Default for none) and its field
// names, the defaults filled in.
func (o Options) effective() (Set, Names) {
	set := o.Set
	if set == 0 {
		set = Default
	}
	return set, o.Names.WithDefaults()
}

// fields returns n's names in the order of the field indexes.
func (n Names) fields() [nFields]string {
	return [nFields]string{n.Policy, n.RateLimit, n.Limit, n.Remaining, n.Reset, n.RetryAfter}
}

// FieldNames returns the names of the fields o writes: RateLimit and
// RateLimit-Policy (IETF), X-RateLimit-Limit, -Remaining and -Reset
// (XRateLimit), Retry-After (RetryAfter), as o's Set and Names say them
// (for a CORS Access-Control-Expose-Headers).
func (o Options) FieldNames() []string {
	set, n := o.effective()
	var out []string
	if set&IETF != 0 {
		out = append(out, n.RateLimit, n.Policy)
	}
	if set&XRateLimit != 0 {
		out = append(out, n.Limit, n.Remaining, n.Reset)
	}
	if set&RetryAfter != 0 {
		out = append(out, n.RetryAfter)
	}
	return out
}

func (o Options) costUnit() string {
	if o.CostUnit == Requests {
		return ""
	}
	return o.CostUnit
}

// inUnit sets the quota unit of the policies of ps counted in the
// requests' cost (those with none of their own) to unit, in place.
func inUnit(ps []Policy, unit string) {
	if unit == "" {
		return
	}
	for i := range ps {
		if ps[i].QuotaUnit == "" {
			ps[i].QuotaUnit = unit
		}
	}
}

// Policy is one limit as clients see it.
type Policy struct {
	// Name identifies the policy in the IETF fields (a rule name); a
	// byte outside printable ASCII is written %xx there (PolicyName).
	Name string
	// Quota is the limit's capacity (q) and Window its period (w). A
	// window that is not whole seconds is stated rounded up, with the
	// quota scaled to it (see policyQuota); X-RateLimit-Limit is Quota.
	Quota  int64
	Window time.Duration
	// QuotaUnit (qu) is the quota's unit when it is not requests, e.g.
	// "concurrent-requests" (draft -10 §3.1.2); "" omits the parameter.
	QuotaUnit string
	// Remaining (r) and Reset (t) describe the current state. A
	// concurrency limit's Reset is not written as t (see the package doc).
	Remaining int64
	Reset     time.Duration
	// Allowed is false when this limit refused the request; RetryAfter is
	// then the wait (algo.Never when it can never pass).
	Allowed    bool
	RetryAfter time.Duration
	// Shadow marks a limit in shadow mode: it refuses nothing, and is
	// never chosen for X-RateLimit-* nor counted in Retry-After (see the
	// package doc), whatever Allowed says.
	Shadow bool
	// Borrowed marks a rate whose refusal borrowing answered
	// (policy.LimitStatus.Borrowed): the request passed on its rule's
	// ceil. It is stated in the IETF fields (r=0 when it is spent) but
	// never chosen for X-RateLimit-*, which report the limits that
	// admitted the request, as the status's Decision does.
	Borrowed bool
}

// FromStatuses returns the policies of the matched, limited statuses that
// were decided (an undecided one, see policy.Status.Undecided, has no
// policy): one per limit that applied (Status.Limits: a rule, the rules
// above it in a hierarchy, the derived limits of borrowing and priority
// classes), each under its own name with its own quota, window and
// state. A policy is refusing (Allowed false) only when its limit
// refused the request: not a shadow limit (which is marked Shadow), and
// not a rate whose refusal borrowing answered.
//
// A limit several statuses state (a hierarchy's parent reached by its own
// descriptor and as its child's ancestor, a descriptor sent twice) is
// listed once, where it first comes: a policy equal to one listed already
// is left out. Its members would say the same thing twice, and a client
// would read two limits where one was charged.
func FromStatuses(st []policy.Status) []Policy {
	n := 0
	for i := range st {
		n += max(1, len(st[i].Limits))
	}
	ps := make([]Policy, 0, n)
	add := func(p Policy) {
		if !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	for i := range st {
		s := &st[i]
		if !s.Matched || s.Unlimited || s.Undecided() {
			continue
		}
		if len(s.Limits) == 0 {
			add(statusPolicy(s, s.Rule, s.Decision, s.Window, s.QuotaUnit, s.Shadow))
			continue
		}
		for _, l := range s.Limits {
			p := statusPolicy(s, l.Name, l.Decision, l.Window, l.QuotaUnit, l.Shadow)
			p.Borrowed = l.Borrowed
			add(p)
		}
	}
	return ps
}

// statusPolicy is the Policy of one limit of status s: the limit's decision
// d under name, refusing only when it refused s's request (s over its
// limit, and the limit not a shadow one).
func statusPolicy(s *policy.Status, name string, d algo.Decision, window time.Duration, quotaUnit string, shadow bool) Policy {
	p := FromDecision(name, d, window)
	p.QuotaUnit = quotaUnit
	p.Allowed = p.Allowed || s.Code != policy.CodeOverLimit || shadow
	p.Shadow = shadow
	return p
}

// FromDecision describes one algorithm decision as a Policy. Reset (t) is
// the time until the key is back to full capacity, except for a refusal that
// can pass sooner: then it is the retry time, since
// draft-ietf-httpapi-ratelimit-headers-10 §6 asks that Retry-After not point
// earlier than t (a bucket refused for 1 s would otherwise say t=10).
func FromDecision(name string, d algo.Decision, window time.Duration) Policy {
	reset := d.ResetAfter
	if !d.Allowed && d.RetryAfter != algo.Never && d.RetryAfter < reset {
		reset = d.RetryAfter
	}
	return Policy{
		Name:       name,
		Quota:      d.Limit,
		Window:     window,
		Remaining:  d.Remaining,
		Reset:      reset,
		Allowed:    d.Allowed,
		RetryAfter: d.RetryAfter,
	}
}

// Seconds rounds d up to whole seconds, the unit every header uses: 0
// for d ≤ 0. It does not add before it divides, which overflowed for d
// within a second of the largest Duration (algo.Never-1, the wait algo
// reports past its range) and made the seconds negative.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// Fields returns the header fields for ps, in a stable order, for
// transports that carry headers as a list (Envoy's response_headers_to_add).
// A policy of ps without a QuotaUnit is stated in o's CostUnit.
func Fields(ps []Policy, o Options) [][2]string {
	if len(ps) == 0 {
		return nil
	}
	if unit := o.costUnit(); unit != "" {
		ps = slices.Clone(ps)
		inUnit(ps, unit)
	}
	set, n := o.effective()
	names := n.fields()
	var vs values
	all := vs.build(make([]byte, 0, 64+48*len(ps)), ps, set)
	out := make([][2]string, vs.n)
	for i := range vs.n {
		out[i] = [2]string{names[vs.field[i]], vs.value(all, i)}
	}
	return out
}

// values are the fields of one response, cut from one string: field[i]
// is the i-th value's field, and its text is all[from[i]:to[i]].
type values struct {
	n        int
	field    [nFields]int8
	from, to [nFields]int
}

// Field indexes, in the order Fields lists them.
const (
	fPolicy = iota
	fRateLimit
	fLimit
	fRemaining
	fReset
	fRetryAfter
	nFields
)

func (v *values) add(field, from, to int) {
	v.field[v.n], v.from[v.n], v.to[v.n] = int8(field), from, to
	v.n++
}

func (v *values) value(all string, i int) string { return all[v.from[i]:v.to[i]] }

// build appends the values of the fields in set for ps (at least one) to
// buf and returns them as one string; v records where each one is.
func (v *values) build(buf []byte, ps []Policy, set Set) string {
	if set&IETF != 0 {
		from := len(buf)
		for i, p := range ps {
			if i > 0 {
				buf = append(buf, ", "...)
			}
			buf = appendPolicy(buf, p)
		}
		v.add(fPolicy, from, len(buf))
		from = len(buf)
		for i, p := range ps {
			if i > 0 {
				buf = append(buf, ", "...)
			}
			buf = appendSFString(buf, p.Name)
			buf = append(buf, ";r="...)
			buf = strconv.AppendInt(buf, sfInt(p.Remaining), 10)
			if p.timed() {
				buf = append(buf, ";t="...)
				buf = strconv.AppendInt(buf, sfInt(Seconds(p.Reset)), 10)
			}
		}
		v.add(fRateLimit, from, len(buf))
	}
	if tight, ok := Tightest(ps); ok && set&XRateLimit != 0 {
		from := len(buf)
		buf = strconv.AppendInt(buf, sfInt(tight.Quota), 10)
		v.add(fLimit, from, len(buf))
		from = len(buf)
		buf = strconv.AppendInt(buf, sfInt(tight.Remaining), 10)
		v.add(fRemaining, from, len(buf))
		from = len(buf)
		buf = strconv.AppendInt(buf, sfInt(Seconds(tight.Reset)), 10)
		v.add(fReset, from, len(buf))
	}
	if set&RetryAfter != 0 {
		if wait, ok := RetryAfterOf(ps); ok {
			from := len(buf)
			buf = strconv.AppendInt(buf, Seconds(wait), 10)
			v.add(fRetryAfter, from, len(buf))
		}
	}
	return string(buf)
}

// timed reports whether p states a reset time in the IETF fields (t):
// every policy but a concurrency limit's (see the package doc).
func (p Policy) timed() bool { return p.QuotaUnit != ConcurrentRequests }

// appendPolicy appends p's RateLimit-Policy member.
func appendPolicy(buf []byte, p Policy) []byte {
	q, w := policyQuota(p.Quota, p.Window)
	buf = appendSFString(buf, p.Name)
	buf = append(buf, ";q="...)
	buf = strconv.AppendInt(buf, q, 10)
	if p.QuotaUnit != "" {
		buf = append(buf, ";qu="...)
		buf = appendSFString(buf, p.QuotaUnit)
	}
	if w > 0 {
		buf = append(buf, ";w="...)
		buf = strconv.AppendInt(buf, w, 10)
	}
	return buf
}

// policyQuota returns the q and w (whole seconds, 0 for none) that state
// quota per window. The draft's w has no sub-second precision (-10
// §3.1.3), and rounding a window up alone would understate the rate: a
// bucket of 3 refilling at 1000 a second (a 3 ms window) would read
// q=3;w=1, a thousandth of its rate, and 4 per 4/3 s would read 4 per 2 s.
// So a window that is not whole seconds is rounded up and the quota scaled
// to it, rounded down (1000 per 1 s; 6 per 2 s): the same rate, never
// more. A whole-second window keeps the quota as it is.
func policyQuota(quota int64, window time.Duration) (q, w int64) {
	q, w = sfInt(quota), sfInt(Seconds(window))
	if w == 0 || window%time.Second == 0 || quota <= 0 {
		return q, w
	}
	hi, lo := bits.Mul64(uint64(quota), uint64(w)*uint64(time.Second))
	if hi >= uint64(window) { // the quotient does not fit 64 bits
		return sfIntMax, w
	}
	scaled, _ := bits.Div64(hi, lo, uint64(window))
	return sfInt(int64(min(scaled, sfIntMax))), w
}

// Write sets the fields for ps on h, replacing earlier values. A Writer
// sets the same ones, cheaper.
func Write(h http.Header, ps []Policy, o Options) {
	for _, f := range Fields(ps, o) {
		h.Set(f[0], f[1])
	}
}

// Tightest returns the policy the single-valued X-RateLimit fields should
// show: among the enforced ones, a refusing one first (the longest retry of
// them), else the one with the fewest remaining; the first on a tie. That
// is how policy.Status.Decision is chosen among a status's limits, so the
// fields and the status report the same limit. A shadow policy, or a rate
// whose refusal borrowing answered, is never chosen: ok is false when ps
// holds no other (the fields are then left out).
func Tightest(ps []Policy) (tight Policy, ok bool) {
	for _, p := range ps {
		switch {
		case p.Shadow, p.Borrowed:
		case !ok, !p.Allowed && tight.Allowed,
			!p.Allowed && !tight.Allowed && p.RetryAfter > tight.RetryAfter,
			p.Allowed && tight.Allowed && p.Remaining < tight.Remaining:
			tight, ok = p, true
		}
	}
	return tight, ok
}

// RetryAfterOf returns the longest wait among the refusing policies: after
// it every one of them admits again. Shadow policies refuse nothing and
// are not counted. ok is false when none refused, when
// one can never admit the request (no Retry-After is better than a lie),
// or when a concurrency limit refused: a slot frees when a request in
// flight completes, which nobody can tell in advance, and the one bound
// there is (the lease's time-to-live, a minute by default) would hold a
// client that honours it far longer than needed, so the field is left out
// as nginx's limit_conn does.
func RetryAfterOf(ps []Policy) (wait time.Duration, ok bool) {
	for _, p := range ps {
		if p.Allowed || p.Shadow || p.Borrowed {
			continue
		}
		if p.RetryAfter == algo.Never || p.QuotaUnit == ConcurrentRequests {
			return 0, false
		}
		ok = true
		if p.RetryAfter > wait {
			wait = p.RetryAfter
		}
	}
	return wait, ok
}

// sfIntMax is the largest Integer a structured field holds (RFC 9651
// §3.3.1: at most 15 digits).
const sfIntMax = 999_999_999_999_999

// sfInt is n as the draft's Integer parameters take it: non-negative
// (q, r, w and t all are) and at most sfIntMax. A larger value (a quota
// configured up to 2^53) would make the whole field malformed, and the
// draft has clients ignore a malformed field, every policy in it; the
// X-RateLimit-* fields, which repeat these numbers, say the same.
func sfInt(n int64) int64 { return min(max(n, 0), sfIntMax) }

// appendSFString appends s as a structured-field string (RFC 9651
// §3.3.3): quoted, with backslash and quote escaped, and each byte a
// String cannot hold (a control byte, a byte of a non-ASCII letter)
// written as %xx in lowercase hex, as RFC 9651's Display Strings write
// theirs: a rule named "café" reads "caf%c3%a9". A '%' is written %25, so
// that a name reads back one way ("caf%c3%a9" as a name reads "caf%25c3%25a9"). The draft (-10 §3) wants
// a String, which holds printable ASCII only; dropping those bytes instead
// made "café" read "caf", which matched neither the name a problem body's
// violated-policies gives (PolicyName) nor, in general, only one rule.
func appendSFString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case !percentEscaped(c):
			b = append(b, c)
		default:
			b = append(b, '%', hex[c>>4], hex[c&0xf])
		}
	}
	return append(b, '"')
}

// percentEscaped reports whether a policy name's byte c is written %xx: a
// byte a String cannot hold (a control byte, a byte of a non-ASCII
// letter), and '%' itself, so that the spelling reads back one way.
func percentEscaped(c byte) bool { return c < 0x20 || c >= 0x7f || c == '%' }

// PolicyName is name as the IETF fields identify the policy, unquoted:
// name itself when it is printable ASCII without '%', else with each other
// byte, and '%', written as %xx (see appendSFString), so that two names
// never read the same. A problem body's violated-policies
// use it, so that a client finds each of them in RateLimit-Policy.
func PolicyName(name string) string {
	const hex = "0123456789abcdef"
	for i := 0; i < len(name); i++ {
		if percentEscaped(name[i]) {
			b := make([]byte, 0, len(name)+8)
			for j := 0; j < len(name); j++ {
				if c := name[j]; !percentEscaped(c) {
					b = append(b, c)
				} else {
					b = append(b, '%', hex[c>>4], hex[c&0xf])
				}
			}
			return string(b)
		}
	}
	return name
}
