package headers

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/policy"
)

// This file checks the fields against draft-ietf-httpapi-ratelimit-headers-10
// and RFC 9651 over random statuses and options: every field parses with
// the strict parser of sf_test.go, and what it states reads back to the
// statuses it was written from, computed here from the draft's words
// rather than from the package's code:
//
//   - one member per limit that applied (matched, limited, decided), in
//     the statuses' order, in RateLimit-Policy and RateLimit alike, a
//     limit two statuses state listed once;
//   - the member's String is the policy's name, bytes outside printable
//     ASCII and '%' as %xx (decoded back, the name itself);
//   - q and r are non-negative Integers of at most 15 digits; w is
//     present for a policy with a window, a positive Integer, the window
//     in seconds rounded up, with q scaled to it never stating a higher
//     rate than the limit's; t (absent for concurrent-requests) is the
//     seconds until the limit resets, rounded up, never negative, and for
//     a refusing policy never after its retry (§6);
//   - qu is the policy's unit, or the configured cost unit;
//   - X-RateLimit-* are the integers of one enforced policy, the refusing
//     one with the longest wait when any refused, else one with the
//     fewest remaining;
//   - Retry-After, when any enforced policy refused, is delay-seconds ≥ 1,
//     the longest wait rounded up, and no member's t points after it.

// randName returns a policy name: plain, with upper case and spaces,
// quotes and backslashes, '%', control bytes, non-ASCII, or empty.
func randName(r *rand.Rand) string {
	pool := []string{"per-ip", "Per User", "", "café", "q\"u\\o", "100%", "tab\tname", "\x00\x7f\xff", "日本", "a,b;c=d", "ÿ%41"}
	if r.IntN(3) > 0 {
		return pool[r.IntN(len(pool))]
	}
	b := make([]byte, r.IntN(12))
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return string(b)
}

// randCount returns a quota or a remaining count, edges included: negative,
// zero, around RFC 9651's 15 digits, up to the largest int64.
func randCount(r *rand.Rand) int64 {
	switch r.IntN(8) {
	case 0:
		return -r.Int64N(10) - 1
	case 1:
		return 0
	case 2:
		return sfIntMax - 1 + r.Int64N(3)
	case 3:
		return math.MaxInt64 - r.Int64N(3)
	case 4:
		return r.Int64N(1 << 53)
	}
	return r.Int64N(1000)
}

// randDuration returns a window, reset or wait: zero, negative, within
// a second, whole seconds, a calendar month, years, up to algo.Never.
func randDuration(r *rand.Rand) time.Duration {
	switch r.IntN(10) {
	case 0:
		return 0
	case 1:
		return -time.Duration(r.Int64N(int64(time.Hour)))
	case 2:
		return time.Duration(r.Int64N(int64(time.Second)))
	case 3:
		return time.Duration(r.Int64N(3600)) * time.Second
	case 4:
		return time.Duration(28+r.IntN(4)) * 24 * time.Hour // a calendar month
	case 5:
		return algo.Never - time.Duration(r.Int64N(int64(2*time.Second)))
	case 6:
		return time.Duration(r.Int64N(1<<53)) * time.Microsecond // up to algo's longest period
	}
	return time.Duration(r.Int64N(int64(10 * time.Minute)))
}

func randDecision(r *rand.Rand) algo.Decision {
	d := algo.Decision{Allowed: r.IntN(2) == 0, Limit: randCount(r), Remaining: randCount(r), ResetAfter: randDuration(r)}
	if !d.Allowed {
		switch r.IntN(4) {
		case 0:
			d.RetryAfter = algo.Never
		default:
			d.RetryAfter = max(randDuration(r), time.Microsecond) // a refusal's wait is positive
		}
	}
	if r.IntN(6) == 0 {
		d.Delay = randDuration(r)
	}
	return d
}

func randUnit(r *rand.Rand) string {
	return []string{"", "", "", ConcurrentRequests, ContentBytes}[r.IntN(5)]
}

// randStatuses returns the statuses of one response: unmatched,
// unlimited and undecided ones among limited ones, with zero to three
// limits each, shadow and borrowed ones among them.
func randStatuses(r *rand.Rand) []policy.Status {
	st := make([]policy.Status, r.IntN(5))
	for i := range st {
		s := &st[i]
		if i > 0 && r.IntN(5) == 0 {
			// A descriptor sent twice, or a parent reached twice: the
			// same limit in two statuses.
			*s = st[r.IntN(i)]
			s.Limits = slices.Clone(s.Limits)
			if len(s.Limits) > 2 && r.IntN(2) == 0 {
				s.Limits = s.Limits[1:]
			}
			continue
		}
		switch r.IntN(10) {
		case 0:
			continue // unmatched
		case 1:
			*s = policy.Status{Matched: true, Unlimited: true, Rule: randName(r)}
			continue
		case 2:
			*s = policy.Status{Matched: true, Rule: randName(r), Code: policy.CodeOK} // undecided
			continue
		}
		s.Matched, s.Rule = true, randName(r)
		s.Decision, s.Window, s.QuotaUnit, s.Shadow = randDecision(r), randDuration(r), randUnit(r), r.IntN(5) == 0
		if s.Decision == (algo.Decision{}) {
			s.Decision.Limit = 1 // a decided status's decision is never the zero one
		}
		if !s.Decision.Allowed && !s.Shadow || r.IntN(8) == 0 {
			s.Code = policy.CodeOverLimit
		}
		for range r.IntN(4) {
			s.Limits = append(s.Limits, policy.LimitStatus{Name: randName(r), Decision: randDecision(r),
				Window: randDuration(r), QuotaUnit: randUnit(r), Shadow: r.IntN(5) == 0, Borrowed: r.IntN(6) == 0})
		}
		if len(s.Limits) == 1 {
			// A status measured against one limit is that limit's: the
			// Engine's status is its rule's own limit then, which
			// borrowing (a ceil beside it) cannot have answered.
			l := &s.Limits[0]
			l.Name, l.Decision, l.Window, l.QuotaUnit, l.Shadow, l.Borrowed = s.Rule, s.Decision, s.Window, s.QuotaUnit, s.Shadow, false
		}
	}
	return st
}

func randOptions(r *rand.Rand) Options {
	o := Options{Set: Set(r.IntN(8)), CostUnit: []string{"", Requests, ContentBytes}[r.IntN(3)]}
	if r.IntN(3) == 0 {
		o.Names = Names{Policy: "Quota-Policy", RateLimit: "quota", Limit: "x-quota-limit", Remaining: "X-Quota-Left", Reset: "x-quota-reset", RetryAfter: "X-Retry-In"}
	}
	return o
}

// wantPolicy is what the draft has a client read for one limit.
type wantPolicy struct {
	name        string
	quota       int64
	window      time.Duration
	unit        string
	remaining   int64
	reset       time.Duration // the limit's reset, or its retry when that is sooner (§6)
	refusing    bool
	enforced    bool // counted for X-RateLimit-* and Retry-After
	retry       time.Duration
	concurrency bool
	id          limitID // a limit stated twice is listed once
}

// limitID is what a limit's statement says: two limits whose statements
// say the same are one member.
type limitID struct {
	name, unit                string
	quota, remaining          int64
	window, reset, retry      time.Duration
	allowed, shadow, borrowed bool
}

// wantPolicies lists the limits of st a response states, from the
// statuses' documented meaning: a matched, limited, decided status's
// limits (or itself when it has none); a limit refuses when it refused
// and its status is over the limit; shadow limits and borrowed rates are
// never enforced.
func wantPolicies(st []policy.Status, o Options) []wantPolicy {
	var out []wantPolicy
	for _, s := range st {
		if !s.Matched || s.Unlimited || len(s.Limits) == 0 && s.Decision == (algo.Decision{Allowed: s.Decision.Allowed}) {
			continue
		}
		ls := s.Limits
		if len(ls) == 0 {
			ls = []policy.LimitStatus{{Name: s.Rule, Decision: s.Decision, Window: s.Window, QuotaUnit: s.QuotaUnit, Shadow: s.Shadow}}
		}
		for _, l := range ls {
			unit := l.QuotaUnit
			if unit == "" && o.CostUnit != Requests {
				unit = o.CostUnit
			}
			w := wantPolicy{name: l.Name, quota: l.Decision.Limit, window: l.Window, unit: unit,
				remaining: l.Decision.Remaining, reset: l.Decision.ResetAfter, retry: l.Decision.RetryAfter,
				refusing: !l.Decision.Allowed && s.Code == policy.CodeOverLimit && !l.Shadow && !l.Borrowed,
				enforced: !l.Shadow && !l.Borrowed, concurrency: unit == ConcurrentRequests}
			if !l.Decision.Allowed && l.Decision.RetryAfter != algo.Never && l.Decision.RetryAfter < w.reset {
				w.reset = l.Decision.RetryAfter
			}
			w.id = limitID{name: l.Name, unit: l.QuotaUnit, quota: l.Decision.Limit, remaining: l.Decision.Remaining,
				window: l.Window, reset: w.reset, retry: l.Decision.RetryAfter,
				allowed: l.Decision.Allowed || s.Code != policy.CodeOverLimit || l.Shadow, shadow: l.Shadow, borrowed: l.Borrowed}
			if !slices.ContainsFunc(out, func(o wantPolicy) bool { return o.id == w.id }) {
				out = append(out, w)
			}
		}
	}
	return out
}

var bigSecond = big.NewInt(int64(time.Second))

// ceilSeconds is d in whole seconds rounded up, in exact arithmetic, as a
// structured-field Integer states it: 0 for d ≤ 0, at most sfIntMax.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	q, m := new(big.Int).DivMod(big.NewInt(int64(d)), bigSecond, new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return min(q.Int64(), sfIntMax)
}

func clampCount(n int64) int64 { return min(max(n, 0), sfIntMax) }

// unPercent decodes a member's name written %xx back to bytes.
func unPercent(s string) (string, error) {
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("%q: a %% without two hex digits", s)
		}
		n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil || s[i+1] >= 'A' && s[i+1] <= 'F' || s[i+2] >= 'A' && s[i+2] <= 'F' {
			return "", fmt.Errorf("%q: %%%s is not lowercase hex", s, s[i+1:i+3])
		}
		b = append(b, byte(n))
		i += 2
	}
	return string(b), nil
}

// checkIETFFields checks the fields h holds for st under o against the
// draft (see the file's comment).
func checkIETFFields(st []policy.Status, o Options, h http.Header) error {
	set := o.Set
	if set == 0 {
		set = Default
	}
	n := o.Names.WithDefaults()
	want := wantPolicies(st, o)
	if len(want) == 0 {
		if len(h) != 0 {
			return fmt.Errorf("no limit applied, yet fields %v", h)
		}
		return nil
	}
	if set&IETF == 0 {
		if h.Get(n.Policy) != "" || h.Get(n.RateLimit) != "" {
			return fmt.Errorf("IETF fields left out, yet %v", h)
		}
	} else {
		if len(h.Values(n.Policy)) != 1 || len(h.Values(n.RateLimit)) != 1 {
			return fmt.Errorf("%s %q, %s %q: want one line each", n.Policy, h.Values(n.Policy), n.RateLimit, h.Values(n.RateLimit))
		}
		pols, err := checkPolicyField(h.Get(n.Policy))
		if err != nil {
			return fmt.Errorf("%s %q: %v", n.Policy, h.Get(n.Policy), err)
		}
		rls, err := checkRateLimitField(h.Get(n.RateLimit))
		if err != nil {
			return fmt.Errorf("%s %q: %v", n.RateLimit, h.Get(n.RateLimit), err)
		}
		if len(pols) != len(want) || len(rls) != len(want) {
			return fmt.Errorf("%d and %d members for %d limits: %s / %s", len(pols), len(rls), len(want), h.Get(n.Policy), h.Get(n.RateLimit))
		}
		for i, w := range want {
			if err := checkMember(w, pols[i], rls[i]); err != nil {
				return fmt.Errorf("member %d: %v\n%s: %s\n%s: %s", i, err, n.Policy, h.Get(n.Policy), n.RateLimit, h.Get(n.RateLimit))
			}
		}
	}
	if err := checkSingleValued(want, set, n, h); err != nil {
		return fmt.Errorf("%v\nfields: %v", err, h)
	}
	return nil
}

// checkMember checks one limit's RateLimit-Policy and RateLimit members.
func checkMember(w wantPolicy, pol, rl sfItem) error {
	for _, it := range []sfItem{pol, rl} {
		got, err := unPercent(it.value.(string))
		if err != nil {
			return err
		}
		if got != w.name {
			return fmt.Errorf("names %q, which reads %q, for the limit %q", it.value, got, w.name)
		}
	}
	q, _ := pol.param("q")
	if q.(int64) > sfIntMax {
		return fmt.Errorf("q=%d", q)
	}
	wv, hasW := pol.param("w")
	switch {
	case w.window <= 0 && hasW:
		return fmt.Errorf("w=%v for a limit with no window", wv)
	case w.window > 0 && !hasW:
		return fmt.Errorf("no w for a window of %v", w.window)
	case hasW && wv.(int64) != ceilSeconds(w.window):
		return fmt.Errorf("w=%d for a window of %v, want %d", wv, w.window, ceilSeconds(w.window))
	}
	switch quota := clampCount(w.quota); {
	case !hasW || w.window%time.Second == 0:
		if q.(int64) != quota {
			return fmt.Errorf("q=%d for a quota of %d per %v, want %d", q, w.quota, w.window, quota)
		}
	case w.quota > 0:
		// q per w seconds never states more than quota per window,
		// nor less than the largest whole count that does not.
		lhs := new(big.Int).Mul(big.NewInt(q.(int64)), big.NewInt(int64(w.window)))
		rhs := new(big.Int).Mul(big.NewInt(w.quota), new(big.Int).Mul(big.NewInt(wv.(int64)), bigSecond))
		if lhs.Cmp(rhs) > 0 {
			return fmt.Errorf("q=%d;w=%d states more than %d per %v", q, wv, w.quota, w.window)
		}
		if next := new(big.Int).Add(lhs, big.NewInt(int64(w.window))); q.(int64) < sfIntMax && next.Cmp(rhs) <= 0 {
			return fmt.Errorf("q=%d;w=%d: q+1 per w still states no more than %d per %v", q, wv, w.quota, w.window)
		}
	case q.(int64) != 0:
		return fmt.Errorf("q=%d for a quota of %d", q, w.quota)
	}
	qu, hasQu := pol.param("qu")
	if w.unit == "" && hasQu || w.unit != "" && qu != w.unit {
		return fmt.Errorf("qu=%v (present %v), want %q", qu, hasQu, w.unit)
	}
	if _, ok := pol.param("pk"); ok {
		return fmt.Errorf("a pk: the key is never stated")
	}
	r, _ := rl.param("r")
	if r.(int64) != clampCount(w.remaining) {
		return fmt.Errorf("r=%d for %d remaining", r, w.remaining)
	}
	t, hasT := rl.param("t")
	switch {
	case w.concurrency && hasT:
		return fmt.Errorf("t=%v for a concurrency limit", t)
	case !w.concurrency && !hasT:
		return fmt.Errorf("no t")
	case hasT && t.(int64) != ceilSeconds(w.reset):
		return fmt.Errorf("t=%d for a reset in %v, want %d", t, w.reset, ceilSeconds(w.reset))
	}
	if _, ok := rl.param("pk"); ok {
		return fmt.Errorf("a pk: the key is never stated")
	}
	return nil
}

// checkSingleValued checks X-RateLimit-* and Retry-After.
func checkSingleValued(want []wantPolicy, set Set, n Names, h http.Header) error {
	var enforced, refusing []wantPolicy
	never, concurrency := false, false
	for _, w := range want {
		if w.enforced {
			enforced = append(enforced, w)
		}
		if w.refusing {
			refusing = append(refusing, w)
			never = never || w.retry == algo.Never
			concurrency = concurrency || w.concurrency
		}
	}
	limit, remaining, reset := h.Values(n.Limit), h.Values(n.Remaining), h.Values(n.Reset)
	if set&XRateLimit == 0 || len(enforced) == 0 {
		if len(limit)+len(remaining)+len(reset) != 0 {
			return fmt.Errorf("X-RateLimit fields %q %q %q, want none", limit, remaining, reset)
		}
	} else {
		if len(limit) != 1 || len(remaining) != 1 || len(reset) != 1 {
			return fmt.Errorf("X-RateLimit fields %q %q %q, want one value each", limit, remaining, reset)
		}
		var vals [3]int64
		for i, v := range []string{limit[0], remaining[0], reset[0]} {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil || x < 0 || x > sfIntMax || strconv.FormatInt(x, 10) != v {
				return fmt.Errorf("X-RateLimit value %q: want a non-negative integer of at most 15 digits", v)
			}
			vals[i] = x
		}
		// The set is one enforced policy's: a refusing one with the
		// longest wait when any refused, else one with the fewest remaining.
		candidates := enforced
		if len(refusing) > 0 {
			longest := time.Duration(0)
			for _, w := range refusing {
				longest = max(longest, w.retry)
			}
			candidates = nil
			for _, w := range refusing {
				if w.retry == longest {
					candidates = append(candidates, w)
				}
			}
		} else {
			fewest := int64(math.MaxInt64)
			for _, w := range enforced {
				fewest = min(fewest, w.remaining)
			}
			candidates = nil
			for _, w := range enforced {
				if w.remaining == fewest {
					candidates = append(candidates, w)
				}
			}
		}
		found := false
		for _, w := range candidates {
			found = found || vals == [3]int64{clampCount(w.quota), clampCount(w.remaining), ceilSeconds(w.reset)}
		}
		if !found {
			return fmt.Errorf("X-RateLimit %v is none of %+v", vals, candidates)
		}
	}
	ra := h.Values(n.RetryAfter)
	if set&RetryAfter == 0 || len(refusing) == 0 || never || concurrency {
		if len(ra) != 0 {
			return fmt.Errorf("%s %q, want none (refusing %d, never %v, concurrency %v)", n.RetryAfter, ra, len(refusing), never, concurrency)
		}
		return nil
	}
	if len(ra) != 1 {
		return fmt.Errorf("%s %q, want one value", n.RetryAfter, ra)
	}
	secs, err := strconv.ParseInt(ra[0], 10, 64)
	if err != nil || secs < 1 || strconv.FormatInt(secs, 10) != ra[0] {
		return fmt.Errorf("%s %q: want delay-seconds of at least 1", n.RetryAfter, ra[0])
	}
	longest := time.Duration(0)
	for _, w := range refusing {
		longest = max(longest, w.retry)
	}
	if secs != ceilSeconds(longest) {
		return fmt.Errorf("%s %d for a longest wait of %v, want %d", n.RetryAfter, secs, longest, ceilSeconds(longest))
	}
	for _, w := range refusing {
		if !w.concurrency && ceilSeconds(w.reset) > secs {
			return fmt.Errorf("%s %d points before the t=%d of %q (draft -10 §6)", n.RetryAfter, secs, ceilSeconds(w.reset), w.name)
		}
	}
	return nil
}

// checkRandomResponse writes the fields of one random response with Write,
// a Writer (twice: its rule values formatted, then reused) and
// StatusFields, and checks each against the draft.
func checkRandomResponse(t *testing.T, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	st, o := randStatuses(r), randOptions(r)
	hs := map[string]http.Header{"Write": {}, "Writer": {}, "Writer again": {}, "StatusFields": {}}
	Write(hs["Write"], FromStatuses(st), o)
	w := NewWriter(o)
	w.WriteStatuses(hs["Writer"], st)
	w.WriteStatuses(hs["Writer again"], st)
	w.StatusFields(st, func(name, value string) { hs["StatusFields"].Add(name, value) })
	for name, h := range hs {
		if err := checkIETFFields(st, o, h); err != nil {
			t.Fatalf("seed %d, %s, options %+v, statuses %+v:\n%v", seed, name, o, st, err)
		}
		if !reflect.DeepEqual(h, hs["Write"]) {
			t.Fatalf("seed %d: %s wrote %v, Write %v", seed, name, h, hs["Write"])
		}
	}
}

// TestIETFFieldsProperty: 20,000 random responses (statuses of every kind,
// names of any bytes, counts and durations at their edges, every field
// set, renamed fields, a cost unit) give fields that parse strictly and
// state what the draft has a client read.
func TestIETFFieldsProperty(t *testing.T) {
	n := uint64(20000)
	if testing.Short() {
		n = 2000
	}
	for seed := range n {
		checkRandomResponse(t, seed)
	}
}

// FuzzIETFFields explores further seeds: go test -fuzz FuzzIETFFields ./headers/
func FuzzIETFFields(f *testing.F) {
	for _, s := range []uint64{0, 1, 42, 1 << 40} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { checkRandomResponse(t, seed) })
}
