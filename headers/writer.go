package headers

import (
	"cmp"
	"net/http"
	"net/textproto"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/policy"
)

// Writer sets a response's fields on an http.Header: the same fields and
// values as Write with FromStatuses, at a fraction of the cost. The field
// names are canonicalised once, by NewWriter; the values that depend only
// on the rule (the RateLimit-Policy value, X-RateLimit-Limit, the start of
// the RateLimit member) are formatted once per rule and reused; the others
// are appended to one buffer and cut from one string, and the values of a
// response share one []string backing. A response on one limit costs two
// allocations: that string and that backing.
//
// A Writer is safe for concurrent use. It keeps the values of at most
// maxRules rules (name, quota, window, quota unit); responses on further
// rules are formatted whole, as by Write.
type Writer struct {
	set   Set
	unit  string          // Options.CostUnit, "" for requests
	keys  [nFields]string // canonical field names, by field index
	names [nFields]string // the names as configured, for StatusFields

	mu    sync.Mutex                            // serialises additions to rules
	rules atomic.Pointer[map[ruleKey]*ruleVals] // replaced, never modified
}

// maxRules bounds the per-rule values kept: rules named by the descriptor's
// path (Envoy's per-descriptor limits) or whose quota moves (adaptive
// limits) would otherwise grow them without end.
const maxRules = 1024

// ruleKey is everything a rule's cached values depend on.
type ruleKey struct {
	name   string
	quota  int64
	window time.Duration
	unit   string
}

// ruleVals are one rule's values, formatted once.
type ruleVals struct {
	policy string // `"name";q=10;w=60`: the RateLimit-Policy value
	member string // `"name";r=`: the start of the RateLimit value
	limit  string // "10": X-RateLimit-Limit
}

// NewWriter returns a Writer for o (the zero Options: every field under
// its default name).
func NewWriter(o Options) *Writer {
	set, n := o.effective()
	w := &Writer{set: set, unit: o.costUnit(), names: n.fields()}
	for i, name := range w.names {
		w.keys[i] = textproto.CanonicalMIMEHeaderKey(name)
	}
	return w
}

// WriteRetryAfter sets the Retry-After field (under its configured name)
// on h to wait in seconds, rounded up, when the Writer's Set has
// RetryAfter and wait is positive: for a refusal that no limit's status
// describes, such as a shaper's turn that comes after the request's
// deadline.
func (w *Writer) WriteRetryAfter(h http.Header, wait time.Duration) {
	if w.set&RetryAfter == 0 || wait <= 0 {
		return
	}
	h.Set(w.keys[fRetryAfter], strconv.FormatInt(Seconds(wait), 10))
}

// WriteStatuses sets the fields for the matched, limited, decided
// statuses of st on h, replacing earlier values: the fields and values of
// Write(h, FromStatuses(st), o) for the Writer's Options o. It writes
// nothing when no status is limited and decided.
func (w *Writer) WriteStatuses(h http.Header, st []policy.Status) {
	one, n := limited(st)
	switch {
	case n == 0:
		return
	case n == 1 && len(one.Limits) <= 1:
		w.writeOne(h, one)
	default:
		var vs values
		var arr [256]byte
		all := vs.build(arr[:0], w.policies(st), w.set)
		w.set1(h, &vs, all)
	}
}

// StatusFields calls f with each field WriteStatuses would set for st, in
// the order of Fields, under the Options' names as given (not
// canonicalised): for transports that carry fields as a list (Envoy's
// response_headers_to_add). The values of one limited status share one
// string, its rule's own values coming from the cache.
func (w *Writer) StatusFields(st []policy.Status, f func(name, value string)) {
	one, n := limited(st)
	switch {
	case n == 0:
		return
	case n == 1 && len(one.Limits) <= 1:
		var fixed [nFields]string
		vs, all := w.one(one, &fixed)
		for i := range vs.n {
			if vs.from[i] < 0 {
				f(w.names[vs.field[i]], fixed[i])
			} else {
				f(w.names[vs.field[i]], vs.value(all, i))
			}
		}
	default:
		var vs values
		var arr [256]byte
		all := vs.build(arr[:0], w.policies(st), w.set)
		for i := range vs.n {
			f(w.names[vs.field[i]], vs.value(all, i))
		}
	}
}

// policies is FromStatuses(st) with the policies counted in the requests'
// cost stated in the Writer's CostUnit.
func (w *Writer) policies(st []policy.Status) []Policy {
	ps := FromStatuses(st)
	inUnit(ps, w.unit)
	return ps
}

// limited returns how many statuses of st are matched, limited and
// decided, and the last of them.
func limited(st []policy.Status) (one *policy.Status, n int) {
	for i := range st {
		if st[i].Matched && !st[i].Unlimited && !st[i].Undecided() {
			one = &st[i]
			n++
		}
	}
	return one, n
}

// writeOne is WriteStatuses for one limited status, the common case.
func (w *Writer) writeOne(h http.Header, s *policy.Status) {
	var fixed [nFields]string
	vs, all := w.one(s, &fixed)
	if vs.n == 0 {
		return
	}
	vals := make([]string, vs.n)
	for i := range vs.n {
		if vs.from[i] < 0 {
			vals[i] = fixed[i]
		} else {
			vals[i] = vs.value(all, i)
		}
		h[w.keys[vs.field[i]]] = vals[i : i+1 : i+1]
	}
}

// one computes the fields of one limited status measured against one
// limit (its rule's; a status with several goes through FromStatuses):
// the rule's values come
// from the cache (into fixed, marked by from = -1), and
// X-RateLimit-Remaining and -Reset are the numbers of the RateLimit value
// rather than copies of them; the rest are cut from all.
func (w *Writer) one(s *policy.Status, fixed *[nFields]string) (vs values, all string) {
	p := statusPolicy(s, s.Rule, s.Decision, s.Window, cmp.Or(s.QuotaUnit, w.unit), s.Shadow)
	rv := w.rule(p)
	var arr [96]byte
	buf := arr[:0]
	if w.set&IETF != 0 {
		fixed[vs.n] = rv.policy
		vs.add(fPolicy, -1, -1)
		buf = append(buf, rv.member...)
	}
	remFrom := len(buf)
	buf = strconv.AppendInt(buf, sfInt(p.Remaining), 10)
	remTo := len(buf)
	if p.timed() && w.set&IETF != 0 {
		buf = append(buf, ";t="...)
	}
	resetFrom := len(buf)
	buf = strconv.AppendInt(buf, sfInt(Seconds(p.Reset)), 10)
	resetTo := len(buf)
	if w.set&IETF != 0 {
		end := resetTo
		if !p.timed() {
			end = remTo // no t: the member ends at r; the digits after serve X-RateLimit-Reset
		}
		vs.add(fRateLimit, 0, end)
	}
	if w.set&XRateLimit != 0 && !p.Shadow {
		fixed[vs.n] = rv.limit
		vs.add(fLimit, -1, -1)
		vs.add(fRemaining, remFrom, remTo)
		vs.add(fReset, resetFrom, resetTo)
	}
	if w.set&RetryAfter != 0 {
		if wait, ok := RetryAfterOf([]Policy{p}); ok {
			from := len(buf)
			buf = strconv.AppendInt(buf, Seconds(wait), 10)
			vs.add(fRetryAfter, from, len(buf))
		}
	}
	if vs.n == 0 {
		return vs, ""
	}
	return vs, string(buf)
}

// set1 sets the values vs cut from all on h, sharing one backing array.
func (w *Writer) set1(h http.Header, vs *values, all string) {
	vals := make([]string, vs.n)
	for i := range vs.n {
		vals[i] = vs.value(all, i)
		h[w.keys[vs.field[i]]] = vals[i : i+1 : i+1]
	}
}

// rule returns p's rule values, from the cache when they are there.
func (w *Writer) rule(p Policy) *ruleVals {
	key := ruleKey{name: p.Name, quota: p.Quota, window: p.Window, unit: p.QuotaUnit}
	if m := w.rules.Load(); m != nil {
		if rv := (*m)[key]; rv != nil {
			return rv
		}
	}
	rv := &ruleVals{
		policy: string(appendPolicy(nil, p)),
		member: string(append(appendSFString(nil, p.Name), ";r="...)),
		limit:  strconv.FormatInt(sfInt(p.Quota), 10),
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var m map[ruleKey]*ruleVals
	if old := w.rules.Load(); old != nil {
		if len(*old) >= maxRules {
			return rv
		}
		m = make(map[ruleKey]*ruleVals, len(*old)+1)
		for k, v := range *old {
			m[k] = v
		}
	} else {
		m = make(map[ruleKey]*ruleVals, 1)
	}
	m[key] = rv
	w.rules.Store(&m)
	return rv
}
