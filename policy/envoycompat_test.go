package policy

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// TestEmptyDescriptorMatchesNothing: a descriptor without entries is OK
// with no rule, as envoyproxy/ratelimit answers it, and does not stop the
// request's other descriptors from being decided.
func TestEmptyDescriptorMatchesNothing(t *testing.T) {
	cfg := mustParse(t, "domain: d\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	e := newMemEngine(t, cfg, frozen(scenarioT0))
	ctx := context.Background()
	r := Request{Domain: "d", Descriptors: []Descriptor{{}, {Entries: ent("ip", "a")}}}
	for i, want := range []Code{CodeOK, CodeOverLimit} {
		resp, err := e.Decide(ctx, r)
		if err != nil {
			t.Fatalf("decision %d: %v, want a decision", i, err)
		}
		if resp.Code != want || resp.Statuses[0].Code != CodeOK || resp.Statuses[0].Matched {
			t.Fatalf("decision %d: %v %+v, want %v with the empty descriptor OK and unmatched", i, resp.Code, resp.Statuses[0], want)
		}
	}
	// With a per-descriptor limit too: there is nothing to count it on.
	r = Request{Domain: "d", Descriptors: []Descriptor{{Limit: &LimitOverride{RequestsPerUnit: 0, Unit: time.Second}}}}
	if resp, err := e.Decide(ctx, r); err != nil || resp.Code != CodeOK || resp.Statuses[0].Matched {
		t.Fatalf("empty descriptor with a limit: %v %+v %v, want OK unmatched", resp.Code, resp.Statuses, err)
	}
	keys, err := e.Keys(Request{Domain: "d", Descriptors: []Descriptor{{}}})
	if err != nil || len(keys) != 0 {
		t.Fatalf("Keys of an empty descriptor: %q %v, want none", keys, err)
	}
}

// TestLongValuesInKeys: a key or value longer than maxKeyPart goes into
// the store key as its digest, so that keys stay short; values that share
// a long prefix keep their own counters, and rules still match the whole
// value.
func TestLongValuesInKeys(t *testing.T) {
	cfg := mustParse(t, `
domain: d
descriptors:
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: exact
    value: `+strings.Repeat("e", 300)+`
    rate_limit: {name: exact-long, unit: hour, requests_per_unit: 5}
  - key: exact
    rate_limit: {name: exact-other, unit: hour, requests_per_unit: 7}
`)
	e := newMemEngine(t, cfg, frozen(scenarioT0))
	ctx := context.Background()
	prefix := strings.Repeat("p", 1024)
	a, b := prefix+strings.Repeat("a", 100<<10), prefix+strings.Repeat("b", 100<<10)
	keyOf := func(v string) string {
		t.Helper()
		keys, err := e.Keys(req("d", ent("path", v)))
		if err != nil || len(keys) != 1 {
			t.Fatalf("Keys: %q %v", keys, err)
		}
		return keys[0]
	}
	ka, kb := keyOf(a), keyOf(b)
	if ka == kb || len(ka) > 100 || len(kb) > 100 || !strings.Contains(ka, "|path=%H") {
		t.Fatalf("keys of two 101 KiB values: %q and %q, want distinct digests under 100 bytes", ka, kb)
	}
	if k := keyOf("short"); !strings.Contains(k, "|path=short#") {
		t.Fatalf("key of a short value %q, want the value itself", k)
	}
	// 200 bytes stay as they are, 201 become a digest; so does a value
	// whose percent-encoding passes 200 bytes.
	if k := keyOf(strings.Repeat("x", maxKeyPart)); !strings.Contains(k, strings.Repeat("x", maxKeyPart)) {
		t.Fatalf("a %d-byte value was digested: %q", maxKeyPart, k)
	}
	if k := keyOf(strings.Repeat("x", maxKeyPart+1)); strings.Contains(k, "xxxx") {
		t.Fatalf("a %d-byte value was kept: %q", maxKeyPart+1, k)
	}
	if k := keyOf(strings.Repeat(" ", 100)); !strings.Contains(k, "%H") {
		t.Fatalf("100 spaces (300 bytes encoded) were kept: %q", k)
	}
	for _, v := range []string{a, b} {
		for i, want := range []Code{CodeOK, CodeOverLimit} {
			if resp, err := e.Decide(ctx, req("d", ent("path", v))); err != nil || resp.Code != want {
				t.Fatalf("value %q…: decision %d: %v %v, want %v (each value its own counter)", v[1020:1030], i, resp.Code, err, want)
			}
		}
	}
	resp, err := e.Decide(ctx, req("d", ent("exact", strings.Repeat("e", 300))))
	if err != nil || resp.Statuses[0].Rule != "exact-long" {
		t.Fatalf("a 300-byte configured value: %+v %v, want rule exact-long", resp.Statuses, err)
	}
	resp, err = e.Decide(ctx, req("d", ent("exact", strings.Repeat("e", 299)+"f")))
	if err != nil || resp.Statuses[0].Rule != "exact-other" {
		t.Fatalf("a 300-byte value that differs in its last byte: %+v %v, want rule exact-other", resp.Statuses, err)
	}
	// A per-descriptor limit's name (the descriptor's path) is bounded too.
	r := req("d", ent("path", a))
	r.Descriptors[0].Limit = &LimitOverride{RequestsPerUnit: 3, Unit: time.Hour}
	if resp, err := e.Decide(ctx, r); err != nil || len(resp.Statuses[0].Rule) > 100 {
		t.Fatalf("per-descriptor limit on a long value: rule name of %d bytes, %v", len(resp.Statuses[0].Rule), err)
	}
}

// TestStatusNamesItsOwnRule: a status carries its own rule's configured
// name (empty without rate_limit.name) and limit in force, whatever other
// rule shares the name; a per-descriptor limit has no configured name and
// its own limit.
func TestStatusNamesItsOwnRule(t *testing.T) {
	cfg := mustParse(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {name: shared, unit: minute, requests_per_unit: 3}
  - key: b
    rate_limit: {name: shared, unit: hour, requests_per_unit: 100}
  - key: c
    value: secret
    rate_limit: {unit: second, requests_per_unit: 9}
  - key: z
    rate_limit: {unit: day, requests_per_unit: 0}
`)
	e := newMemEngine(t, cfg, frozen(scenarioT0))
	ctx := context.Background()
	check := func(r Request, name string, quota int64, period time.Duration) {
		t.Helper()
		resp, err := e.Decide(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		s := resp.Statuses[0]
		var got algo.Params
		if s.RuleLimit != nil {
			got = s.RuleLimit.Params()
		}
		if s.ConfiguredName != name || got.Limit != quota || got.Period != period {
			t.Errorf("%v: configured name %q, limit %d per %v; want %q, %d per %v", r.Descriptors[0].Entries, s.ConfiguredName, got.Limit, got.Period, name, quota, period)
		}
	}
	check(req("d", ent("a", "1")), "shared", 3, time.Minute)
	check(req("d", ent("b", "1")), "shared", 100, time.Hour)
	check(req("d", ent("c", "secret")), "", 9, time.Second)
	check(req("d", ent("z", "1")), "", 0, 0)
	r := req("d", ent("a", "2"))
	r.Descriptors[0].Limit = &LimitOverride{RequestsPerUnit: 2, Unit: time.Hour}
	check(r, "", 2, time.Hour)
	// A runtime override of the rules named shared applies to both.
	if err := e.SetOverride("d", "shared", Override{RequestsPerUnit: 50, Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	check(req("d", ent("b", "3")), "shared", 50, time.Minute)
}

// TestDenyResetsAtWindowEnd: a requests_per_unit: 0 rule refuses for
// good (RetryAfter Never) and says its window ends when the unit's
// epoch-aligned window or calendar period does, as envoyproxy/ratelimit's
// duration_until_reset; not 0, which would read "retry now".
func TestDenyResetsAtWindowEnd(t *testing.T) {
	cfg := mustParse(t, `
domain: d
descriptors:
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: mo
    rate_limit: {unit: month, requests_per_unit: 0}
`)
	now := time.Date(2026, 2, 27, 12, 0, 20, 0, time.UTC)
	e := newMemEngine(t, cfg, frozen(now), WithClock(frozen(now)))
	ctx := context.Background()
	perDescriptor := req("d", ent("x", "1"))
	perDescriptor.Descriptors[0].Limit = &LimitOverride{RequestsPerUnit: 0, Unit: time.Hour}
	for _, tc := range []struct {
		name   string
		r      Request
		reset  time.Duration
		window time.Duration
	}{
		{"minute", req("d", ent("m", "1")), 40 * time.Second, time.Minute},
		{"month", req("d", ent("mo", "1")), 36*time.Hour - 20*time.Second, 28 * 24 * time.Hour},
		{"per-descriptor hour", perDescriptor, 60*time.Minute - 20*time.Second, time.Hour},
	} {
		resp, err := e.Decide(ctx, tc.r)
		if err != nil {
			t.Fatal(err)
		}
		s := resp.Statuses[0]
		if s.Code != CodeOverLimit || s.Decision.Allowed || s.Decision.RetryAfter != algo.Never ||
			s.Decision.ResetAfter != tc.reset || s.Window != tc.window || s.Limits[0].Decision.ResetAfter != tc.reset {
			t.Errorf("%s: %+v, want OVER_LIMIT, retry never, reset after %v, window %v", tc.name, s, tc.reset, tc.window)
		}
	}
}

// TestGlobalShadowKeepsStatusOverLimit: in the global shadow mode the
// response admits, and a descriptor over its limit says so
// (ShadowOverLimit), as envoyproxy/ratelimit's SHADOW_MODE keeps its
// status OVER_LIMIT; a rule's own shadow_mode does not.
func TestGlobalShadowKeepsStatusOverLimit(t *testing.T) {
	cfg := mustParse(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: s
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: z
    rate_limit: {unit: hour, requests_per_unit: 0}
`)
	ctx := context.Background()
	for _, global := range []bool{false, true} {
		e := newMemEngine(t, cfg, frozen(scenarioT0), WithShadowMode(global))
		for _, tc := range []struct {
			key       string
			n         int
			code      Code
			shadowOut bool
		}{
			{"k", 2, map[bool]Code{false: CodeOverLimit, true: CodeOK}[global], global},
			{"s", 2, CodeOK, false},
			{"z", 1, map[bool]Code{false: CodeOverLimit, true: CodeOK}[global], global},
		} {
			var resp Response
			for range tc.n {
				var err error
				if resp, err = e.Decide(ctx, req("d", ent(tc.key, "v"))); err != nil {
					t.Fatal(err)
				}
			}
			s := resp.Statuses[0]
			if resp.Code != tc.code || s.ShadowOverLimit != tc.shadowOut || (global && s.Code != CodeOK) {
				t.Errorf("global shadow %v, key %s: %v, status %v ShadowOverLimit %v; want %v, ShadowOverLimit %v",
					global, tc.key, resp.Code, s.Code, s.ShadowOverLimit, tc.code, tc.shadowOut)
			}
		}
	}
}

// costZeroConfig has one rule per algorithm, each of 3 units.
const costZeroConfig = `
domain: z
descriptors:
  - key: fixed_window
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: sliding_log
    rate_limit: {algorithm: sliding_log, unit: minute, requests_per_unit: 3}
  - key: sliding_window
    rate_limit: {algorithm: sliding_window, unit: minute, requests_per_unit: 3, sub_windows: 4}
  - key: token_bucket
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 3}
  - key: gcra
    rate_limit: {algorithm: gcra, unit: minute, requests_per_unit: 3}
  - key: shaper
    rate_limit: {algorithm: shaper, unit: minute, requests_per_unit: 3, queue_size: 2}
  - key: smooth_bursty
    rate_limit: {algorithm: smooth_bursty, unit: second, requests_per_unit: 3, max_burst_seconds: 1}
  - key: smooth_warmup
    rate_limit: {algorithm: smooth_warmup, unit: second, requests_per_unit: 3, warmup_period: 2s, cold_factor: 3}
  - key: concurrency
    rate_limit: {algorithm: concurrency, requests_per_unit: 3, lease_ttl: 1m}
`

// testCostZero: on every algorithm, a descriptor whose cost is set to 0
// (HitsSet, Envoy's per-descriptor hits_addend: 0) is decided and charges
// nothing — a key that took 1, 1, then three checks, then 1 answers as one
// that took 1, 1, 1 — even when the request's own cost is 5; a check on a
// spent budget charges nothing either.
func testCostZero(t *testing.T, open func(t *testing.T, clock func() time.Time) (store.Store, []Option)) {
	cfg := mustParse(t, costZeroConfig)
	now := scenarioT0
	st, opts := open(t, frozen(now))
	e, err := NewEngine(cfg, st, append(opts, WithClock(frozen(now)))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	decide := func(key, value string, cost int64) Status {
		t.Helper()
		r := req("z", ent(key, value))
		r.Hits = 5
		r.Descriptors[0].Hits, r.Descriptors[0].HitsSet = cost, true
		resp, err := e.Decide(ctx, r)
		if err != nil {
			t.Fatalf("%s: cost %d: %v", key, cost, err)
		}
		return resp.Statuses[0]
	}
	for _, r := range cfg.Domain("z").Rules() {
		key := r.Node.Key
		t.Run(key, func(t *testing.T) {
			var checked, plain Status
			for _, c := range []int64{1, 1, 0, 0, 0, 1} {
				checked = decide(key, "checked", c)
			}
			for _, c := range []int64{1, 1, 1} {
				plain = decide(key, "plain", c)
			}
			if checked.Decision != plain.Decision {
				t.Errorf("after 1, 1, three checks and 1: %+v; after 1, 1, 1: %+v (a check charged something)", checked.Decision, plain.Decision)
			}
			if r.Params.Algorithm == algo.SmoothBursty || r.Params.Algorithm == algo.SmoothWarmup {
				return // their checks wait for the next ticket like any request
			}
			spent := plain
			for spent.Decision.Allowed {
				spent = decide(key, "plain", 1)
			}
			before := decide(key, "plain", 0)
			after := decide(key, "plain", 0)
			if !before.Decision.Allowed || before.Decision.Remaining != 0 || before.Decision != after.Decision {
				t.Errorf("checks on a spent budget: %+v then %+v, want admitted with 0 remaining, the same twice", before.Decision, after.Decision)
			}
		})
	}
}

func TestCostZeroMemory(t *testing.T) {
	testCostZero(t, func(t *testing.T, clock func() time.Time) (store.Store, []Option) {
		st, err := memory.New(memory.WithClock(clock), memory.WithSweepInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st, nil
	})
}

func TestCostZeroRedis(t *testing.T) {
	testCostZero(t, func(t *testing.T, clock func() time.Time) (store.Store, []Option) {
		return openRedis(t, redisURL(t), clock), []Option{redisPrefix()}
	})
}

// A per-descriptor limit keys (and names) its counter by every entry the
// request sends, and a request may send any number: past maxKeyPath bytes
// the entries go in as one digest, so 20 000 short entries make a short
// key and a short rule name (a metrics label), and two such descriptors
// that differ in their last entry still count apart.
func TestManyEntriesMakeShortKeys(t *testing.T) {
	cfg := mustParse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	e := newMemEngine(t, cfg, frozen(scenarioT0))
	many := func(last string) Request {
		var kv []string
		for i := range 20000 {
			kv = append(kv, "e"+strconv.Itoa(i), "v")
		}
		kv = append(kv, "last", last)
		r := req("d", ent(kv...))
		r.Descriptors[0].Limit = &LimitOverride{RequestsPerUnit: 1, Unit: time.Hour}
		return r
	}
	ctx := context.Background()
	ka, err := e.Keys(many("a"))
	if err != nil || len(ka) != 1 {
		t.Fatalf("Keys: %v %v", len(ka), err)
	}
	kb, _ := e.Keys(many("b"))
	if len(ka[0]) > maxKeyPath+100 || ka[0] == kb[0] || !strings.Contains(ka[0], "|%P") {
		t.Fatalf("keys of 20 001 entries: %d and %d bytes (%.80q…), want distinct digests under %d bytes", len(ka[0]), len(kb[0]), ka[0], maxKeyPath+100)
	}
	for _, last := range []string{"a", "b"} {
		resp, err := e.Decide(ctx, many(last))
		if err != nil || resp.Code != CodeOK {
			t.Fatalf("first request ending %s: %v %v, want OK (its own counter)", last, resp.Code, err)
		}
		if n := len(resp.Statuses[0].Rule); n > maxKeyPath+100 || !utf8.ValidString(resp.Statuses[0].Rule) {
			t.Fatalf("rule name of %d bytes (valid UTF-8: %v), want a short one", n, utf8.ValidString(resp.Statuses[0].Rule))
		}
	}
	if resp, _ := e.Decide(ctx, many("a")); resp.Code != CodeOverLimit {
		t.Fatalf("second request ending a: %v, want OVER_LIMIT", resp.Code)
	}
}
