package headers

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/policy"
)

func TestWriteAllowed(t *testing.T) {
	h := http.Header{}
	Write(h, []Policy{
		{Name: "per-user", Quota: 100, Window: time.Minute, Remaining: 42, Reset: 16*time.Second + time.Millisecond, Allowed: true},
		{Name: "global", Quota: 1000, Window: time.Hour, Remaining: 900, Reset: time.Hour, Allowed: true},
	}, Options{})
	want := map[string]string{
		"RateLimit-Policy":      `"per-user";q=100;w=60, "global";q=1000;w=3600`,
		"RateLimit":             `"per-user";r=42;t=17, "global";r=900;t=3600`,
		"X-RateLimit-Limit":     "100",
		"X-RateLimit-Remaining": "42",
		"X-RateLimit-Reset":     "17",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if got := h.Get("Retry-After"); got != "" {
		t.Errorf("Retry-After = %q on an admitted request, want none", got)
	}
}

func TestWriteRefusedRoundsUp(t *testing.T) {
	h := http.Header{}
	Write(h, []Policy{
		{Name: "a", Quota: 10, Window: time.Second, Remaining: 0, Reset: 1500 * time.Millisecond, Allowed: false, RetryAfter: 1001 * time.Millisecond},
		{Name: "b", Quota: 5, Window: time.Minute, Remaining: 3, Reset: time.Second, Allowed: true},
	}, Options{})
	if got := h.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2 (1.001 s rounded up)", got)
	}
	if got := h.Get("X-RateLimit-Remaining"); got != "0" {
		t.Errorf("X-RateLimit-Remaining = %q, want the refusing policy's 0", got)
	}
}

func TestNeverHasNoRetryAfter(t *testing.T) {
	h := http.Header{}
	Write(h, []Policy{{Name: "a", Quota: 1, Allowed: false, RetryAfter: algo.Never}}, Options{})
	if got := h.Get("Retry-After"); got != "" {
		t.Errorf("Retry-After = %q for a cost that can never pass, want none", got)
	}
}

func TestSelectAndRename(t *testing.T) {
	h := http.Header{}
	Write(h, []Policy{{Name: `we"ird`, Quota: 1, Window: time.Second, Allowed: false, RetryAfter: time.Second}},
		Options{Set: IETF | RetryAfter, Names: Names{RateLimit: "X-Quota"}})
	if h.Get("X-RateLimit-Limit") != "" {
		t.Error("X-RateLimit-Limit written though not selected")
	}
	if got := h.Get("X-Quota"); got != `"we\"ird";r=0;t=0` {
		t.Errorf("renamed RateLimit field = %q", got)
	}
	if got := h.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
}

func TestFromStatusesSkipsUnlimitedAndUnmatched(t *testing.T) {
	ps := FromStatuses([]policy.Status{
		{Code: policy.CodeOK},
		{Code: policy.CodeOK, Matched: true, Unlimited: true, Rule: "u"},
		{Code: policy.CodeOK, Matched: true, Rule: "r", Window: time.Minute, Decision: algo.Decision{Allowed: true, Limit: 5, Remaining: 4}},
	})
	if len(ps) != 1 || ps[0].Name != "r" || ps[0].Quota != 5 || ps[0].Remaining != 4 || ps[0].Window != time.Minute {
		t.Fatalf("FromStatuses = %+v, want only rule r", ps)
	}
	if Fields(nil, Options{}) != nil {
		t.Error("no policies should give no fields")
	}
}

// A refusal's t is its retry when that comes before the full reset, so
// that Retry-After never points earlier than t (draft -10 §6).
func TestRefusedResetIsRetry(t *testing.T) {
	h := http.Header{}
	Write(h, []Policy{FromDecision("bucket", algo.Decision{Limit: 10, RetryAfter: 1500 * time.Millisecond, ResetAfter: 10 * time.Second}, 10*time.Second)}, Options{})
	for k, want := range map[string]string{"RateLimit": `"bucket";r=0;t=2`, "X-RateLimit-Reset": "2", "Retry-After": "2"} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	allowed := FromDecision("bucket", algo.Decision{Allowed: true, Limit: 10, Remaining: 3, ResetAfter: 7 * time.Second}, 10*time.Second)
	if allowed.Reset != 7*time.Second {
		t.Errorf("admitted: Reset %v, want the time to full capacity 7s", allowed.Reset)
	}
	never := FromDecision("bucket", algo.Decision{Limit: 10, RetryAfter: algo.Never, ResetAfter: 4 * time.Second}, 10*time.Second)
	if never.Reset != 4*time.Second {
		t.Errorf("never: Reset %v, want 4s", never.Reset)
	}
}

// BenchmarkFields: every field for two policies, on every limited response.
func BenchmarkFields(b *testing.B) {
	ps := []Policy{
		{Name: "per-user", Quota: 100, Window: time.Minute, Remaining: 42, Reset: 17 * time.Second, Allowed: true},
		{Name: "global", Quota: 1000, Window: time.Hour, Remaining: 900, Reset: time.Hour, Allowed: true},
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(Fields(ps, Options{})) != 5 {
			b.Fatal("fields")
		}
	}
}

// TestConcurrencyStatesNoTime: a concurrency limit's decision carries the
// lease's time-to-live as its reset (600 s here), but a slot frees when a
// request in flight completes: its IETF fields state no time (no t, no w)
// and a refusal no Retry-After, where they would have read "wait ten
// minutes". X-RateLimit-Reset, required on every limited response, keeps
// the bound. A rate limit beside it keeps its t.
func TestConcurrencyStatesNoTime(t *testing.T) {
	slots := policy.Status{Code: policy.CodeOverLimit, Matched: true, Rule: "slots", QuotaUnit: ConcurrentRequests,
		Decision: algo.Decision{Limit: 8, Remaining: 0, RetryAfter: 600 * time.Second, ResetAfter: 600 * time.Second}}
	rate := policy.Status{Code: policy.CodeOverLimit, Matched: true, Rule: "rate", Window: time.Minute,
		Decision: algo.Decision{Allowed: true, Limit: 100, Remaining: 42, ResetAfter: 17 * time.Second}}
	admitted := slots
	admitted.Code, admitted.Decision.Allowed, admitted.Decision.Remaining, admitted.Decision.RetryAfter = policy.CodeOK, true, 3, 0
	for _, tc := range []struct {
		name string
		st   []policy.Status
		want map[string]string // "" for absent
	}{
		{"refused", []policy.Status{slots}, map[string]string{
			"RateLimit-Policy": `"slots";q=8;qu="concurrent-requests"`, "RateLimit": `"slots";r=0`,
			"X-RateLimit-Limit": "8", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "600", "Retry-After": ""}},
		{"admitted", []policy.Status{admitted}, map[string]string{
			"RateLimit": `"slots";r=3`, "X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "600"}},
		{"beside a rate", []policy.Status{rate, slots}, map[string]string{
			"RateLimit": `"rate";r=42;t=17, "slots";r=0`, "X-RateLimit-Limit": "8", "X-RateLimit-Reset": "600", "Retry-After": ""}},
		{"admitted beside a rate", []policy.Status{rate, admitted}, map[string]string{
			"RateLimit": `"rate";r=42;t=17, "slots";r=3`, "X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "600"}},
	} {
		checkBothWriters(t, tc.name, tc.st, tc.want)
	}
}

// TestShadowNeverDrivesXRateLimit: a shadow (dry-run) limit is stated as
// it is in the IETF fields, r=0 included, but X-RateLimit-* show the
// tightest enforced limit and Retry-After only enforced refusals: an
// enforced child under a shadow parent over its quota must not read
// X-RateLimit-Remaining: 0, and a response under shadow limits alone has
// no X-RateLimit fields at all.
func TestShadowNeverDrivesXRateLimit(t *testing.T) {
	child := policy.LimitStatus{Name: "enforced-child", Window: time.Minute,
		Decision: algo.Decision{Allowed: true, Limit: 5, Remaining: 3, ResetAfter: 40 * time.Second}}
	parent := policy.LimitStatus{Name: "shadowed", Window: time.Minute, Shadow: true,
		Decision: algo.Decision{Limit: 2, RetryAfter: 50 * time.Second, ResetAfter: 50 * time.Second}}
	global := policy.LimitStatus{Name: "global", Window: time.Minute,
		Decision: algo.Decision{Allowed: true, Limit: 50, Remaining: 41, ResetAfter: 30 * time.Second}}
	underShadow := policy.Status{Code: policy.CodeOK, Matched: true, Rule: "enforced-child",
		Decision: child.Decision, Window: time.Minute, Limits: []policy.LimitStatus{child, parent, global}}

	alone := parent
	shadowAlone := policy.Status{Code: policy.CodeOK, Matched: true, Rule: "shadowed", Shadow: true,
		Decision: alone.Decision, Window: time.Minute, Limits: []policy.LimitStatus{alone}}

	globalRefused := global
	globalRefused.Decision = algo.Decision{Limit: 50, RetryAfter: 20 * time.Second, ResetAfter: 30 * time.Second}
	refusedByGlobal := policy.Status{Code: policy.CodeOverLimit, Matched: true, Rule: "shadowed", Shadow: true,
		Decision: globalRefused.Decision, Window: time.Minute, Limits: []policy.LimitStatus{parent, globalRefused}}

	for _, tc := range []struct {
		name string
		st   []policy.Status
		want map[string]string // "" for absent
	}{
		{"enforced child under a shadow parent", []policy.Status{underShadow}, map[string]string{
			"RateLimit":         `"enforced-child";r=3;t=40, "shadowed";r=0;t=50, "global";r=41;t=30`,
			"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "40", "Retry-After": ""}},
		{"shadow limit alone", []policy.Status{shadowAlone}, map[string]string{
			"RateLimit-Policy": `"shadowed";q=2;w=60`, "RateLimit": `"shadowed";r=0;t=50`,
			"X-RateLimit-Limit": "", "X-RateLimit-Remaining": "", "X-RateLimit-Reset": "", "Retry-After": ""}},
		{"shadow rule refused by an enforced parent", []policy.Status{refusedByGlobal}, map[string]string{
			"RateLimit":         `"shadowed";r=0;t=50, "global";r=0;t=20`,
			"X-RateLimit-Limit": "50", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "20", "Retry-After": "20"}},
		{"shadow alone beside an enforced descriptor", []policy.Status{shadowAlone, {Code: policy.CodeOK, Matched: true,
			Rule: "global", Decision: global.Decision, Window: time.Minute}}, map[string]string{
			"X-RateLimit-Limit": "50", "X-RateLimit-Remaining": "41", "Retry-After": ""}},
	} {
		checkBothWriters(t, tc.name, tc.st, tc.want)
	}
	if _, ok := Tightest([]Policy{{Name: "dry", Quota: 2, Shadow: true}}); ok {
		t.Error("Tightest chose a shadow policy")
	}
	if _, ok := RetryAfterOf([]Policy{{Name: "dry", Quota: 2, Shadow: true, RetryAfter: time.Second}}); ok {
		t.Error("RetryAfterOf counted a shadow policy's refusal")
	}
}

// checkBothWriters writes st's fields with Write and with a Writer and
// checks each field of want on both: its value, or its absence for "".
func checkBothWriters(t *testing.T, name string, st []policy.Status, want map[string]string) {
	t.Helper()
	for _, how := range []string{"Write", "Writer"} {
		h := http.Header{}
		if how == "Write" {
			Write(h, FromStatuses(st), Options{})
		} else {
			NewWriter(Options{}).WriteStatuses(h, st)
		}
		for k, v := range want {
			if got, ok := h[http.CanonicalHeaderKey(k)]; (v == "") != !ok || ok && got[0] != v {
				t.Errorf("%s, %s: %s = %q, want %q", name, how, k, got, v)
			}
		}
	}
}

// Integers in the IETF fields have at most 15 digits (RFC 9651 §3.3.1)
// and q, r, w and t are non-negative (draft -10 §3.1.1, §3.1.3, §4.1.1,
// §4.1.2): a quota configured up to 2^53 is stated as the largest one,
// so that a strict client does not throw the whole field away as
// malformed, every other policy in it included.
func TestIntegersFitStructuredFields(t *testing.T) {
	huge := policy.Status{Code: policy.CodeOK, Matched: true, Rule: "huge", Window: time.Second,
		Decision: algo.Decision{Allowed: true, Limit: 9_000_000_000_000_000, Remaining: 8_999_999_999_999_999, ResetAfter: time.Second}}
	negative := policy.Status{Code: policy.CodeOK, Matched: true, Rule: "neg", Window: time.Minute,
		Decision: algo.Decision{Allowed: true, Limit: 5, Remaining: -2, ResetAfter: time.Minute}}
	want := map[string]string{
		"RateLimit-Policy":      `"huge";q=999999999999999;w=1, "neg";q=5;w=60`,
		"RateLimit":             `"huge";r=999999999999999;t=1, "neg";r=0;t=60`,
		"X-RateLimit-Limit":     "5",
		"X-RateLimit-Remaining": "0",
	}
	for name, h := range map[string]http.Header{"Write": {}, "Writer": {}} {
		if name == "Write" {
			Write(h, FromStatuses([]policy.Status{huge, negative}), Options{})
		} else {
			NewWriter(Options{}).WriteStatuses(h, []policy.Status{huge, negative})
		}
		for k, v := range want {
			if got := h.Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", name, k, got, v)
			}
		}
		if _, err := checkPolicyField(h.Get("RateLimit-Policy")); err != nil {
			t.Errorf("%s: RateLimit-Policy: %v", name, err)
		}
		if _, err := checkRateLimitField(h.Get("RateLimit")); err != nil {
			t.Errorf("%s: RateLimit: %v", name, err)
		}
	}
	h := http.Header{} // one status: the Writer's cached path
	NewWriter(Options{}).WriteStatuses(h, []policy.Status{huge})
	if got, want := h.Get("RateLimit-Policy")+" | "+h.Get("RateLimit")+" | "+h.Get("X-RateLimit-Limit")+"/"+h.Get("X-RateLimit-Remaining"),
		`"huge";q=999999999999999;w=1 | "huge";r=999999999999999;t=1 | 999999999999999/999999999999999`; got != want {
		t.Errorf("one huge status: %s, want %s", got, want)
	}
}

// A window that is not whole seconds is stated rounded up with the quota
// scaled to it, rounded down: the rate stays the limit's (draft -10
// §3.1.3 has no sub-second w). q=3;w=1 for a bucket of 3 refilling at
// 1000 a second said a thousandth of its rate.
func TestSubSecondWindowKeepsTheRate(t *testing.T) {
	for _, c := range []struct {
		quota  int64
		window time.Duration
		want   string
	}{
		{3, 3 * time.Millisecond, `"p";q=1000;w=1`},              // token bucket: 1000/s, burst 3
		{4, 1333333 * time.Microsecond, `"p";q=6;w=2`},           // smooth_bursty: 3/s, 4 stored
		{5, 2500 * time.Millisecond, `"p";q=6;w=3`},              // shaper: 2/s, 4 queued
		{10, 5 * time.Second, `"p";q=10;w=5`},                    // whole seconds: as it is
		{1 << 53, time.Microsecond, `"p";q=999999999999999;w=1`}, // too many to state
		{0, 500 * time.Millisecond, `"p";q=0;w=1`},               // a zero quota stays zero
		{7, 0, `"p";q=7`}, // no window
	} {
		st := []policy.Status{{Code: policy.CodeOK, Matched: true, Rule: "p", Window: c.window,
			Decision: algo.Decision{Allowed: true, Limit: c.quota, ResetAfter: time.Second}}}
		h := http.Header{}
		Write(h, FromStatuses(st), Options{})
		hw := http.Header{}
		NewWriter(Options{}).WriteStatuses(hw, st)
		if got, gotW := h.Get("RateLimit-Policy"), hw.Get("RateLimit-Policy"); got != c.want || gotW != c.want {
			t.Errorf("quota %d per %v: RateLimit-Policy %s (Writer %s), want %s", c.quota, c.window, got, gotW, c.want)
		}
	}
}

// A name with bytes a String cannot hold (draft -10 §3: the policy is a
// String, printable ASCII) writes them as %xx; they were dropped, so that
// "café" read "caf" and "tab\tname" "tabname".
func TestNameBytesEscaped(t *testing.T) {
	h := http.Header{}
	Write(h, []Policy{
		{Name: "café", Quota: 3, Window: time.Minute, Remaining: 1, Reset: time.Second, Allowed: true},
		{Name: "tab\tname\"q\\", Quota: 3, Window: time.Minute, Remaining: 2, Reset: time.Second, Allowed: true},
	}, Options{Set: IETF})
	if got, want := h.Get("RateLimit-Policy"), `"caf%c3%a9";q=3;w=60, "tab%09name\"q\\";q=3;w=60`; got != want {
		t.Errorf("RateLimit-Policy = %s, want %s", got, want)
	}
	items, err := checkRateLimitField(h.Get("RateLimit"))
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"café", "tab\tname\"q\\"} {
		if got, want := items[i].value, PolicyName(name); got != want {
			t.Errorf("member %d names %q; PolicyName(%q) = %q", i, got, name, want)
		}
	}
	if got := PolicyName("per-user"); got != "per-user" {
		t.Errorf("PolicyName(per-user) = %q", got)
	}
}

// A '%' in a name is written %25, so that an escaped spelling reads back
// one way: "café" and a rule literally named "caf%c3%a9" both read
// "caf%c3%a9" when only the other bytes were escaped.
func TestNamePercentEscaped(t *testing.T) {
	if a, b := PolicyName("café"), PolicyName("caf%c3%a9"); a == b {
		t.Errorf("PolicyName(café) = PolicyName(caf%%c3%%a9) = %q", a)
	}
	if got, want := PolicyName("100%"), "100%25"; got != want {
		t.Errorf("PolicyName(100%%) = %q, want %q", got, want)
	}
	for _, name := range []string{"100%", "caf%c3%a9"} {
		st := []policy.Status{{Code: policy.CodeOK, Matched: true, Rule: name, Window: time.Minute,
			Decision: algo.Decision{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: time.Second}}}
		h, hw := http.Header{}, http.Header{}
		Write(h, FromStatuses(st), Options{Set: IETF})
		NewWriter(Options{Set: IETF}).WriteStatuses(hw, st)
		want := `"` + PolicyName(name) + `";q=3;w=60`
		if got, gotW := h.Get("RateLimit-Policy"), hw.Get("RateLimit-Policy"); got != want || gotW != want {
			t.Errorf("%q: RateLimit-Policy %s (Writer %s), want %s", name, got, gotW, want)
		}
	}
}

// TestCostUnitStatedAsQu: with requests charged in bytes of content
// (Options.CostUnit ContentBytes), RateLimit-Policy states qu="content-bytes"
// on every limit counted in them (draft -10 §3.1.2), through Write, Fields
// and a Writer alike, the first and the second time a Writer meets the
// rule, so that a client reads q and r in bytes; a concurrency limit keeps
// its own unit. Requests, the default unit, and "" write no qu.
func TestCostUnitStatedAsQu(t *testing.T) {
	rate := policy.Status{Code: policy.CodeOK, Matched: true, Rule: "upload", Window: time.Minute,
		Decision: algo.Decision{Allowed: true, Limit: 65535, Remaining: 1535, ResetAfter: 10 * time.Second}}
	slots := policy.Status{Code: policy.CodeOK, Matched: true, Rule: "slots", QuotaUnit: ConcurrentRequests,
		Decision: algo.Decision{Allowed: true, Limit: 8, Remaining: 7}}
	for _, tc := range []struct {
		name string
		unit string
		st   []policy.Status
		want string // RateLimit-Policy
	}{
		{"bytes", ContentBytes, []policy.Status{rate}, `"upload";q=65535;qu="content-bytes";w=60`},
		{"bytes beside slots", ContentBytes, []policy.Status{rate, slots}, `"upload";q=65535;qu="content-bytes";w=60, "slots";q=8;qu="concurrent-requests"`},
		{"requests", Requests, []policy.Status{rate}, `"upload";q=65535;w=60`},
		{"default", "", []policy.Status{rate, slots}, `"upload";q=65535;w=60, "slots";q=8;qu="concurrent-requests"`},
	} {
		o := Options{CostUnit: tc.unit}
		h := http.Header{}
		Write(h, FromStatuses(tc.st), o)
		if got := h.Get("RateLimit-Policy"); got != tc.want {
			t.Errorf("%s: Write: RateLimit-Policy = %s, want %s", tc.name, got, tc.want)
		}
		w := NewWriter(o)
		for round := range 2 {
			h := http.Header{}
			w.WriteStatuses(h, tc.st)
			if got := h.Get("RateLimit-Policy"); got != tc.want {
				t.Errorf("%s: Writer, round %d: RateLimit-Policy = %s, want %s", tc.name, round, got, tc.want)
			}
			var listed string
			w.StatusFields(tc.st, func(name, value string) {
				if name == "RateLimit-Policy" {
					listed = value
				}
			})
			if listed != tc.want {
				t.Errorf("%s: StatusFields, round %d: RateLimit-Policy = %s, want %s", tc.name, round, listed, tc.want)
			}
		}
		if got := h.Get("RateLimit"); got != `"upload";r=1535;t=10` && !strings.HasPrefix(got, `"upload";r=1535;t=10, `) {
			t.Errorf("%s: RateLimit = %s, want the rate's r and t unchanged", tc.name, got)
		}
	}
	// The policies given to Fields are not changed.
	ps := FromStatuses([]policy.Status{rate})
	Fields(ps, Options{CostUnit: ContentBytes})
	if ps[0].QuotaUnit != "" {
		t.Errorf("Fields set QuotaUnit %q on its argument", ps[0].QuotaUnit)
	}
}

// Seconds rounds up without overflowing: a duration within a second of
// the largest (algo.Never-1 is the wait algo reports past its range)
// added a second less a nanosecond before dividing, wrapped around and
// read -9223372035 s, so that such a reset was stated t=0 (quota back at
// once), X-RateLimit-Reset 0, and such a wait Retry-After: -9223372035.
func TestSecondsNearLargestDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{algo.Never, 9223372037},
		{algo.Never - 1, 9223372037},
		{algo.Never - algo.Never%time.Second, 9223372036},
		{algo.Never - algo.Never%time.Second + 1, 9223372037},
		{time.Second + 1, 2},
		{time.Nanosecond, 1},
		{0, 0},
		{-algo.Never, 0},
	} {
		if got := Seconds(c.d); got != c.want {
			t.Errorf("Seconds(%d) = %d, want %d", c.d, got, c.want)
		}
	}
	h := http.Header{}
	Write(h, []Policy{{Name: "p", Quota: 1, Window: time.Second, Reset: algo.Never - 1, RetryAfter: algo.Never - 1}}, Options{})
	for k, want := range map[string]string{"RateLimit": `"p";r=0;t=9223372037`, "X-RateLimit-Reset": "9223372037", "Retry-After": "9223372037"} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

// Options.Check refuses the names of written fields that are not tokens
// (net/http drops such a field from a response without a word) or that
// name one field twice (one value would hide the other); names the Set
// does not write are not checked.
func TestOptionsCheck(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{}, ""},
		{Options{Names: Names{Policy: "quota-policy", RateLimit: "Quota", Limit: "x-quota-limit", Remaining: "X-Quota-Left", Reset: "x-quota-reset", RetryAfter: "X-Retry-In"}}, ""},
		{Options{Names: Names{RateLimit: "Rate Limit"}}, `Names.RateLimit "Rate Limit" is not a header field name`},
		{Options{Names: Names{Limit: "X-Limit:"}}, `Names.Limit "X-Limit:" is not a header field name`},
		{Options{Names: Names{Remaining: "x-ratelimit-limit"}}, `Names.Limit "X-RateLimit-Limit" and Names.Remaining "x-ratelimit-limit" are one header field`},
		{Options{Set: IETF | RetryAfter, Names: Names{Policy: "Retry-After"}}, `Names.Policy "Retry-After" and Names.RetryAfter "Retry-After" are one header field`},
		{Options{Set: IETF, Names: Names{Limit: "Rate Limit", RetryAfter: "RateLimit"}}, ""},
	} {
		err := c.o.Check()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)) {
			t.Errorf("%+v: Check() = %v, want %q", c.o, err, c.want)
		}
	}
}
