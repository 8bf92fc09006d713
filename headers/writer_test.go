package headers

import (
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/policy"
)

// writerCases are statuses a response can carry: one limit admitted or
// refused (with a finite or never retry), a quota unit, an odd name, no
// window, unmatched and unlimited descriptors beside limited ones, several
// limits.
func writerCases() map[string][]policy.Status {
	admitted := policy.Status{Code: policy.CodeOK, Matched: true, Rule: "per-client", Window: time.Minute,
		Decision: algo.Decision{Allowed: true, Limit: 100, Remaining: 42, ResetAfter: 16*time.Second + time.Millisecond}}
	refused := policy.Status{Code: policy.CodeOverLimit, Matched: true, Rule: "global", Window: time.Hour,
		Decision: algo.Decision{Limit: 1000, RetryAfter: 1500 * time.Millisecond, ResetAfter: time.Hour}}
	never := refused
	never.Decision.RetryAfter = algo.Never
	slots := policy.Status{Code: policy.CodeOK, Matched: true, Rule: "slots", QuotaUnit: "concurrent-requests",
		Decision: algo.Decision{Allowed: true, Limit: 8, Remaining: 7}}
	odd := admitted
	odd.Rule = `we"ird\name` + "\x01"
	shadow := policy.Status{Code: policy.CodeOK, Matched: true, Rule: "dry-run", Shadow: true, Window: time.Minute,
		Decision: algo.Decision{Limit: 2, RetryAfter: time.Second, ResetAfter: time.Minute}}
	shadow.Limits = []policy.LimitStatus{{Name: "dry-run", Decision: shadow.Decision, Window: time.Minute, Shadow: true}}
	underShadow := admitted
	underShadow.Limits = []policy.LimitStatus{{Name: "per-client", Decision: admitted.Decision, Window: time.Minute},
		shadow.Limits[0]}
	return map[string][]policy.Status{
		"none":             nil,
		"unmatched":        {{Code: policy.CodeOK}},
		"unlimited":        {{Code: policy.CodeOK, Matched: true, Unlimited: true, Rule: "u"}},
		"admitted":         {admitted},
		"refused":          {refused},
		"never":            {never},
		"concurrency":      {slots},
		"odd name":         {odd},
		"among unlimited":  {{Code: policy.CodeOK}, {Code: policy.CodeOK, Matched: true, Unlimited: true, Rule: "u"}, refused},
		"two limits":       {admitted, refused},
		"three with never": {admitted, never, slots},
		"two admitted":     {admitted, slots},
		"shadow":           {shadow},
		"under shadow":     {underShadow},
		"shadow and other": {shadow, refused},
	}
}

var writerOptions = map[string]Options{
	"default":        {},
	"all":            {Set: Default},
	"IETF":           {Set: IETF},
	"X-RateLimit":    {Set: XRateLimit},
	"Retry-After":    {Set: RetryAfter},
	"X and retry":    {Set: XRateLimit | RetryAfter},
	"IETF and retry": {Set: IETF | RetryAfter},
	"content-bytes":  {CostUnit: ContentBytes},
	"renamed": {Names: Names{Policy: "quota-policy", RateLimit: "Quota", Limit: "x-quota-limit",
		Remaining: "X-Quota-Left", Reset: "x-quota-reset", RetryAfter: "X-Retry-In"}},
}

// A Writer writes the fields and values Write does, for every case and
// set of options, the first time (rule values formatted) and the second
// (rule values reused).
func TestWriterMatchesWrite(t *testing.T) {
	for oname, o := range writerOptions {
		w := NewWriter(o)
		for cname, st := range writerCases() {
			want := http.Header{}
			Write(want, FromStatuses(st), o)
			for round := range 2 {
				got := http.Header{}
				w.WriteStatuses(got, st)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s, %s, round %d: WriteStatuses wrote\n%v\nWrite wrote\n%v", oname, cname, round, got, want)
				}
			}
		}
	}
}

// StatusFields lists exactly what Fields lists, in its order and under
// its names, for every option set and status mix.
func TestStatusFieldsMatchesFields(t *testing.T) {
	for oname, o := range writerOptions {
		w := NewWriter(o)
		for cname, st := range writerCases() {
			want := Fields(FromStatuses(st), o)
			for round := range 2 {
				var got [][2]string
				w.StatusFields(st, func(name, value string) { got = append(got, [2]string{name, value}) })
				if !reflect.DeepEqual(got, want) && (len(got) != 0 || len(want) != 0) {
					t.Errorf("%s, %s, round %d: StatusFields listed\n%q\nFields lists\n%q", oname, cname, round, got, want)
				}
			}
		}
	}
}

// WriteStatuses replaces the values a field had, as Header.Set does.
func TestWriterReplaces(t *testing.T) {
	h := http.Header{"Ratelimit": {"stale"}, "X-Ratelimit-Remaining": {"1", "2"}}
	NewWriter(Options{}).WriteStatuses(h, writerCases()["admitted"])
	if got := h.Values("RateLimit"); len(got) != 1 || got[0] != `"per-client";r=42;t=17` {
		t.Errorf("RateLimit = %q, want one value", got)
	}
	if got := h.Values("X-RateLimit-Remaining"); len(got) != 1 || got[0] != "42" {
		t.Errorf("X-RateLimit-Remaining = %q, want [42]", got)
	}
}

// A value added to a written field goes into a new backing array: the
// other fields of the response, which share one, keep their values.
func TestWriterAddDoesNotOverwrite(t *testing.T) {
	h := http.Header{}
	NewWriter(Options{}).WriteStatuses(h, writerCases()["admitted"])
	h.Add("RateLimit-Policy", "extra")
	if got := h.Get("RateLimit"); got != `"per-client";r=42;t=17` {
		t.Errorf("RateLimit = %q after adding to RateLimit-Policy", got)
	}
	if got := h.Values("RateLimit-Policy"); len(got) != 2 || got[1] != "extra" {
		t.Errorf("RateLimit-Policy = %q", got)
	}
}

// Beyond maxRules rules the values are still right, only no longer kept.
func TestWriterManyRules(t *testing.T) {
	w := NewWriter(Options{})
	for i := range maxRules + 50 {
		st := []policy.Status{{Code: policy.CodeOK, Matched: true, Rule: fmt.Sprintf("rule-%d", i), Window: time.Second,
			Decision: algo.Decision{Allowed: true, Limit: int64(i + 1), Remaining: int64(i), ResetAfter: time.Second}}}
		want, got := http.Header{}, http.Header{}
		Write(want, FromStatuses(st), Options{})
		w.WriteStatuses(got, st)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("rule %d: WriteStatuses wrote %v, Write %v", i, got, want)
		}
	}
	if n := len(*w.rules.Load()); n != maxRules {
		t.Errorf("%d rules kept, want the bound %d", n, maxRules)
	}
}

// Concurrent writers of different rules (run with -race) each get their
// own rule's values.
func TestWriterConcurrent(t *testing.T) {
	w := NewWriter(Options{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				name := fmt.Sprintf("r%d-%d", g, i%20)
				h := http.Header{}
				w.WriteStatuses(h, []policy.Status{{Code: policy.CodeOK, Matched: true, Rule: name, Window: time.Second,
					Decision: algo.Decision{Allowed: true, Limit: 5, Remaining: 4}}})
				if got, want := h.Get("RateLimit-Policy"), `"`+name+`";q=5;w=1`; got != want {
					t.Errorf("RateLimit-Policy = %q, want %q", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A response on one limit costs two allocations once its rule's values
// are kept: the string its numbers are cut from, and the values' backing.
func TestWriterAllocations(t *testing.T) {
	w := NewWriter(Options{})
	st := writerCases()["admitted"]
	h := http.Header{}
	w.WriteStatuses(h, st)
	if n := testing.AllocsPerRun(100, func() { w.WriteStatuses(h, st) }); n > 2 {
		t.Errorf("WriteStatuses on one limit: %v allocations, want at most 2", n)
	}
}

// BenchmarkWriteStatuses: every field for one limit, the common response,
// against Write with FromStatuses.
func BenchmarkWriteStatuses(b *testing.B) {
	st := writerCases()["admitted"]
	b.Run("Writer", func(b *testing.B) {
		w := NewWriter(Options{})
		h := http.Header{}
		b.ReportAllocs()
		for b.Loop() {
			w.WriteStatuses(h, st)
		}
	})
	b.Run("Write", func(b *testing.B) {
		h := http.Header{}
		b.ReportAllocs()
		for b.Loop() {
			Write(h, FromStatuses(st), Options{})
		}
	})
}

// WriteRetryAfter writes Retry-After, rounded up to seconds, under its
// configured name, and nothing when the set leaves it out or there is no
// wait.
func TestWriteRetryAfter(t *testing.T) {
	for _, c := range []struct {
		o    Options
		wait time.Duration
		name string
		want string
	}{
		{Options{}, 1500 * time.Millisecond, "Retry-After", "2"},
		{Options{Names: Names{RetryAfter: "X-Retry-In"}}, time.Second, "X-Retry-In", "1"},
		{Options{Set: IETF}, time.Second, "Retry-After", ""},
		{Options{}, 0, "Retry-After", ""},
	} {
		h := http.Header{}
		NewWriter(c.o).WriteRetryAfter(h, c.wait)
		if got := h.Get(c.name); got != c.want || (c.want == "" && len(h) != 0) {
			t.Errorf("%+v, wait %v: %v; want %s: %q", c.o, c.wait, h, c.name, c.want)
		}
	}
}
