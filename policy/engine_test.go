package policy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

func mustParse(t testing.TB, yaml string) *Config {
	t.Helper()
	cfg, err := Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	return cfg
}

// newMemEngine returns an engine on a memory store frozen at clock.
func newMemEngine(t testing.TB, cfg *Config, clock func() time.Time, opts ...Option) *Engine {
	t.Helper()
	var mo []memory.Option
	if clock != nil {
		mo = append(mo, memory.WithClock(clock))
	}
	st, err := memory.New(append(mo, memory.WithSweepInterval(0))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e, err := NewEngine(cfg, st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func frozen(t time.Time) func() time.Time { return func() time.Time { return t } }

func req(domain string, descs ...[]Entry) Request {
	r := Request{Domain: domain}
	for _, d := range descs {
		r.Descriptors = append(r.Descriptors, Descriptor{Entries: d})
	}
	return r
}

func ent(kv ...string) []Entry {
	var out []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{kv[i], kv[i+1]})
	}
	return out
}

const hierarchyConfig = `
domain: saas
hierarchy: true
rate_limit: {name: global, unit: minute, requests_per_unit: 1000}
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: minute, requests_per_unit: 400}
    descriptors:
      - key: user
        rate_limit: {name: user, unit: minute, requests_per_unit: 50}
`

// hierarchyRun drives 64 goroutines through the 3-level hierarchy (global
// 1000, 4 tenants × 400, 10 users each × 50) and checks that no level ever
// exceeds its budget, that every level's charged count equals exactly the
// admitted requests that crossed it (so no refused request left a level
// charged), and that the budget is reached exactly (no under-admission).
func hierarchyRun(t *testing.T, e *Engine) {
	const (
		workers  = 64
		attempts = 200
		tenants  = 4
		users    = 10
	)
	ctx := context.Background()
	var mu sync.Mutex
	admitted := map[[2]int]int{}
	var total atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for i := 0; i < attempts; i++ {
				tn, u := rng.IntN(tenants), rng.IntN(users)
				resp, err := e.Decide(ctx, req("saas", ent("tenant", fmt.Sprint("t", tn), "user", fmt.Sprint("u", u))))
				if err != nil {
					errc <- err
					return
				}
				if resp.Code == CodeOK {
					total.Add(1)
					mu.Lock()
					admitted[[2]int{tn, u}]++
					mu.Unlock()
				}
			}
		}(uint64(w))
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if got := total.Load(); got != 1000 {
		t.Errorf("admitted %d in total, want exactly the global budget 1000", got)
	}
	perTenant := map[int]int{}
	for k, n := range admitted {
		if n > 50 {
			t.Errorf("tenant t%d user u%d admitted %d > 50", k[0], k[1], n)
		}
		perTenant[k[0]] += n
	}
	for tn, n := range perTenant {
		if n > 400 {
			t.Errorf("tenant t%d admitted %d > 400", tn, n)
		}
	}
	// Every level's counter holds exactly what was admitted through it.
	for tn := 0; tn < tenants; tn++ {
		for u := 0; u < users; u++ {
			resp, err := e.Peek(ctx, req("saas", ent("tenant", fmt.Sprint("t", tn), "user", fmt.Sprint("u", u))))
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range resp.Statuses[0].Limits {
				var used int
				switch l.Name {
				case "user":
					used = admitted[[2]int{tn, u}]
				case "tenant":
					used = perTenant[tn]
				case "global":
					used = 1000
				}
				if left := l.Decision.Limit - int64(used); l.Decision.Remaining != max(left-1, 0) {
					t.Errorf("t%d/u%d: %s remaining %d, want %d (limit %d, admitted %d): a refusal left it charged",
						tn, u, l.Name, l.Decision.Remaining, max(left-1, 0), l.Decision.Limit, used)
				}
			}
		}
	}
}

func TestHierarchyConcurrentMemory(t *testing.T) {
	cfg := mustParse(t, hierarchyConfig)
	hierarchyRun(t, newMemEngine(t, cfg, frozen(time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC))))
}

const liveYAML = `
domain: live
descriptors:
  - key: x
    rate_limit: {name: V-x, unit: second, requests_per_unit: 1000000}
  - key: y
    rate_limit: {name: V-y, unit: second, requests_per_unit: 1000000}
`

// TestReloadUnderLoad swaps between two configurations while 16 goroutines
// decide: no request fails, and none sees half of a change (both of its
// descriptors answer from the same configuration).
func TestReloadUnderLoad(t *testing.T) {
	mk := func(v string) *Config { return mustParse(t, strings.ReplaceAll(liveYAML, "V", v)) }
	a, b := mk("a"), mk("b")
	e := newMemEngine(t, a, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var decided atomic.Int64
	errc := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000 && ctx.Err() == nil; i++ {
				resp, err := e.Decide(context.Background(), req("live", ent("x", "1"), ent("y", "1")))
				if err != nil {
					errc <- err
					return
				}
				x, y := resp.Statuses[0].Rule, resp.Statuses[1].Rule
				if resp.Code != CodeOK || x[0] != y[0] || !strings.HasSuffix(x, "-x") || !strings.HasSuffix(y, "-y") {
					errc <- fmt.Errorf("half-applied or lost: %s / %s, code %s", x, y, resp.Code)
					return
				}
				decided.Add(1)
			}
		}()
	}
	// Half the swaps go through a file and Reload, with a broken file in
	// between that must leave the rules in force.
	path := filepath.Join(t.TempDir(), "live.yaml")
	for i := 0; i < 200; i++ {
		cfg := a
		if i%2 == 0 {
			cfg = b
		}
		if i%4 < 2 {
			if err := e.SetConfig(cfg); err != nil {
				t.Fatal(err)
			}
			continue
		}
		before := e.Version()
		if err := os.WriteFile(path, []byte("domain: live\ndescriptors:\n  - key: x\n    rate_limit: {unit: parsec}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := e.Reload(path); err == nil || e.Version() != before {
			t.Fatalf("a broken file was installed (err %v, version %d -> %d)", err, before, e.Version())
		}
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(liveYAML, "V", string("ab"[i%2]))), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := e.Reload(path); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if decided.Load() != 16*2000 {
		t.Fatalf("decided %d requests, want %d", decided.Load(), 16*2000)
	}
	if e.Version() != 201 {
		t.Fatalf("version %d after 200 swaps, want 201", e.Version())
	}
}

func TestEnvoyRequestLimit(t *testing.T) {
	cfg := mustParse(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1000}
`)
	e := newMemEngine(t, cfg, frozen(scenarioT0))
	ctx := context.Background()
	r := Request{Domain: "d", Descriptors: []Descriptor{{Entries: ent("k", "v"), Limit: &LimitOverride{RequestsPerUnit: 2, Unit: time.Second}}}}
	for i, want := range []Code{CodeOK, CodeOK, CodeOverLimit} {
		resp, err := e.Decide(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Code != want {
			t.Fatalf("request %d: %s, want %s", i, resp.Code, want)
		}
		if s := resp.Statuses[0]; s.Rule != "k_v" || s.Decision.Limit != 2 || s.Window != time.Second {
			t.Fatalf("status %+v: want rule k_v, limit 2, window 1s", s)
		}
		if l := resp.Statuses[0].Limits; len(l) != 1 || l[0].Name != "k_v" {
			t.Fatalf("limits %+v: want one named k_v, as the status's rule", l)
		}
	}
	// The configured rule's counter is separate and untouched.
	resp, _ := e.Decide(ctx, req("d", ent("k", "v")))
	if resp.Statuses[0].Decision.Remaining != 999 {
		t.Fatalf("configured limit remaining %d, want 999", resp.Statuses[0].Decision.Remaining)
	}
	// requests_per_unit 0 blocks; a limit without a unit is a bad request.
	r.Descriptors[0].Limit = &LimitOverride{RequestsPerUnit: 0, Unit: time.Second}
	if resp, err := e.Decide(ctx, r); err != nil || resp.Code != CodeOverLimit {
		t.Fatalf("limit 0: %v %v, want OVER_LIMIT", resp.Code, err)
	} else if l := resp.Statuses[0].Limits; len(l) != 1 || l[0].Name != "k_v" || !l[0].Deny {
		t.Fatalf("limit 0: limits %+v, want one deny named k_v", l)
	}
	r.Descriptors[0].Limit = &LimitOverride{RequestsPerUnit: 5}
	if _, err := e.Decide(ctx, r); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("limit without unit: %v, want ErrBadRequest", err)
	}
	r.Descriptors[0].Limit = &LimitOverride{RequestsPerUnit: 5, Unit: time.Hour, Calendar: algo.CalendarMonth}
	if _, err := e.Decide(ctx, r); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("limit with a unit and a calendar period: %v, want ErrBadRequest", err)
	}
}

func TestBadRequests(t *testing.T) {
	e := newMemEngine(t, mustParse(t, "domain: d\n"), nil)
	ctx := context.Background()
	for name, r := range map[string]Request{
		"no domain":      {Descriptors: []Descriptor{{Entries: ent("a", "b")}}},
		"no descriptors": {Domain: "d"},
		"negative hits":  {Domain: "d", Hits: -1, Descriptors: []Descriptor{{Entries: ent("a", "b")}}},
		"negative desc":  {Domain: "d", Descriptors: []Descriptor{{Entries: ent("a", "b"), Hits: -2}}},
	} {
		if _, err := e.Decide(ctx, r); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", name, err)
		}
	}
	if _, err := NewEngine(nil, nil); err == nil {
		t.Error("NewEngine(nil store) succeeded")
	}
}

func TestMetricKey(t *testing.T) {
	cfg := mustParse(t, `
domain: m
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: key1
    value: value1
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        descriptors:
          - key: user
            rate_limit: {unit: minute, requests_per_unit: 60}
`)
	e := newMemEngine(t, cfg, nil)
	for _, tc := range []struct {
		entries []Entry
		want    string
	}{
		{ent("key1", "unspecified"), "m.key1_unspecified"},
		{ent("key1", "value1"), "m.key1_value1"},
		{ent("route", "/a", "method", "GET", "user", "u1"), "m.route_/a.method.user"},
	} {
		resp, err := e.Decide(context.Background(), req("m", tc.entries))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Statuses[0].MetricKey; got != tc.want {
			t.Errorf("%v: metric key %q, want %q", tc.entries, got, tc.want)
		}
	}
}

func TestGlobalShadowMode(t *testing.T) {
	cfg := mustParse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	e := newMemEngine(t, cfg, frozen(scenarioT0), WithShadowMode(true))
	for i := 0; i < 3; i++ {
		resp, err := e.Decide(context.Background(), req("d", ent("k", "v")))
		if err != nil || resp.Code != CodeOK || !resp.Statuses[0].Shadow {
			t.Fatalf("decision %d: %v %v, want OK in shadow", i, resp, err)
		}
		if i > 0 && (resp.Strategy != StrategyShadow || resp.Statuses[0].Decision.Allowed) {
			t.Fatalf("decision %d: want a reported shadow refusal, got %s allowed=%v", i, resp.Strategy, resp.Statuses[0].Decision.Allowed)
		}
	}
}

func TestConcurrencyRelease(t *testing.T) {
	cfg := mustParse(t, "domain: d\ndescriptors:\n  - key: job\n    rate_limit: {algorithm: concurrency, requests_per_unit: 2, lease_ttl: 1m}\n")
	e := newMemEngine(t, cfg, frozen(scenarioT0))
	ctx := context.Background()
	r := req("d", ent("job", "export"))
	first, _ := e.Decide(ctx, r)
	second, _ := e.Decide(ctx, r)
	third, _ := e.Decide(ctx, r)
	if first.Code != CodeOK || second.Code != CodeOK || third.Code != CodeOverLimit {
		t.Fatalf("codes %s %s %s, want OK OK OVER_LIMIT", first.Code, second.Code, third.Code)
	}
	if !first.Holds() || third.Holds() {
		t.Fatalf("Holds: admitted %v, refused %v", first.Holds(), third.Holds())
	}
	if err := e.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	if again, _ := e.Decide(ctx, r); again.Code != CodeOK {
		t.Fatalf("after Release: %s, want OK", again.Code)
	}
}

func TestOverrideErrors(t *testing.T) {
	cfg := mustParse(t, `
domain: d
hierarchy: true
rate_limit: {name: root, unit: second, requests_per_unit: 100}
descriptors:
  - key: free
    rate_limit: {unlimited: true}
  - key: kid
    rate_limit: {name: kid, unit: second, requests_per_unit: 5, ceil: 10}
  - key: jobs
    rate_limit: {name: jobs, algorithm: concurrency, requests_per_unit: 5, lease_ttl: 30s}
`)
	e := newMemEngine(t, cfg, nil)
	for _, tc := range []struct {
		domain, rule string
		o            Override
		want         error
	}{
		{"nope", "kid", Override{RequestsPerUnit: 1}, ErrUnknownRule},
		{"d", "nope", Override{RequestsPerUnit: 1}, ErrUnknownRule},
		{"d", "free", Override{RequestsPerUnit: 1}, ErrBadRequest},
		{"d", "kid", Override{RequestsPerUnit: 0}, ErrBadRequest},
		{"d", "kid", Override{RequestsPerUnit: 20}, ErrBadRequest}, // above its ceil
		{"d", "jobs", Override{RequestsPerUnit: 2, Period: time.Minute}, ErrBadRequest},
		{"d", "jobs", Override{RequestsPerUnit: 2, Burst: 3}, ErrBadRequest},
	} {
		if err := e.SetOverride(tc.domain, tc.rule, tc.o); !errors.Is(err, tc.want) {
			t.Errorf("SetOverride(%s, %s, %+v) = %v, want %v", tc.domain, tc.rule, tc.o, err, tc.want)
		}
	}
	if err := e.SetOverride("d", "kid", Override{RequestsPerUnit: 8, Period: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if got := e.EffectiveLimit("d", "kid").Params(); got.Limit != 8 || got.Period != time.Minute {
		t.Fatalf("effective %+v, want 8/1m", got)
	}
	if ov := e.Overrides(); len(ov) != 1 || !ov[0].Active || ov[0].Rule != "kid" {
		t.Fatalf("Overrides() = %+v", ov)
	}
	// A reload that drops the rule keeps the override, inactive.
	if err := e.SetConfig(mustParse(t, "domain: d\n")); err != nil {
		t.Fatal(err)
	}
	if ov := e.Overrides(); len(ov) != 1 || ov[0].Active {
		t.Fatalf("after reload Overrides() = %+v, want one inactive", ov)
	}
	if had, err := e.RemoveOverride("d", "kid"); !had || err != nil {
		t.Fatalf("RemoveOverride = %v, %v, want true, nil", had, err)
	}
	if had, err := e.RemoveOverride("d", "kid"); had || err != nil {
		t.Fatalf("second RemoveOverride = %v, %v, want false, nil", had, err)
	}
	if err := e.SetRateScale("d", "kid", 0.5, "x"); !errors.Is(err, ErrUnknownRule) {
		t.Fatalf("scale of a removed rule: %v", err)
	}
}

// TestStoreErrorsPropagate: a store failure is an error, not a decision.
func TestStoreErrorsPropagate(t *testing.T) {
	cfg := mustParse(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	st, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := e.Decide(context.Background(), req("d", ent("k", "v"))); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Decide on a closed store: %v, want store.ErrClosed", err)
	}
}

func TestKeysAreEscaped(t *testing.T) {
	cfg := mustParse(t, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	e := newMemEngine(t, cfg, frozen(scenarioT0))
	r := cfg.Domain("d").Rules()[0]
	k1 := e.baseKey("d", false, r, ent("a", "x|a=y"), "fp")
	k2 := e.baseKey("d", false, r, ent("a", "x"), "fp")
	if k1 == k2 || strings.ContainsAny(strings.TrimPrefix(k1, "fg:"), "{} ") || strings.Count(k1, "|") != 1 {
		t.Fatalf("keys %q and %q: separators not escaped", k1, k2)
	}
	if got := e.baseKey("d", false, r, ent("a", "{slot} x"), "fp"); got != "fg:d|a=%7Bslot%7D%20x#fp" {
		t.Fatalf("escaped key %q", got)
	}
}

// FuzzDecide: no request makes the engine panic; a request with entries
// is always decided (an error only for what checkRequest rejects).
func FuzzDecide(f *testing.F) {
	cfg, err := Load("../examples/config")
	if err != nil {
		f.Fatal(err)
	}
	e := newMemEngine(f, cfg, frozen(scenarioT0))
	f.Add("saas", "tenant\x00acme\x00user\x00bob\x00path\x00/reports/x", "high", int64(1))
	f.Add("api", "plan\x00pro\x00api_key\x00k", "", int64(3))
	f.Add("api", "remote_address\x00198.51.100.66", "", int64(0))
	f.Add("edge", "destination_cluster\x00a\x00source_cluster\x00b", "low", int64(2))
	f.Fuzz(func(t *testing.T, domain, entries, priority string, hits int64) {
		parts := strings.Split(entries, "\x00")
		var d Descriptor
		for i := 0; i+1 < len(parts); i += 2 {
			d.Entries = append(d.Entries, Entry{parts[i], parts[i+1]})
		}
		r := Request{Domain: domain, Descriptors: []Descriptor{d, d}, Hits: hits % 1000, Priority: priority}
		for _, decide := range []func(context.Context, Request) (Response, error){e.Decide, e.Peek} {
			resp, err := decide(context.Background(), r)
			if err != nil {
				if !errors.Is(err, ErrBadRequest) {
					t.Fatalf("%+v: %v", r, err)
				}
				continue
			}
			if len(resp.Statuses) != 2 {
				t.Fatalf("%d statuses for 2 descriptors", len(resp.Statuses))
			}
		}
	})
}

// TestOverrideWindowAndBurst: a status's window follows the limit in force
// (override, scale), not the configured one, and an override without a
// burst scales the configured burst with the quota.
func TestOverrideWindowAndBurst(t *testing.T) {
	cfg := mustParse(t, `
domain: api
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, algorithm: token_bucket, unit: second, requests_per_unit: 20, burst: 40}
`)
	now := time.Unix(1_700_000_000, 0)
	e := newMemEngine(t, cfg, frozen(now), WithClock(frozen(now)))
	ctx := context.Background()
	admitAll := func(ip string) (int, Status) {
		t.Helper()
		var first Status
		for n := 0; n < 100; n++ {
			resp, err := e.Decide(ctx, req("api", ent("remote_address", ip)))
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				first = resp.Statuses[0]
			}
			if resp.Code != CodeOK {
				return n, first
			}
		}
		return 100, first
	}
	if n, s := admitAll("192.0.2.1"); n != 40 || s.Window != 2*time.Second || s.Decision.Limit != 40 {
		t.Fatalf("configured: admitted %d at once, window %v, limit %d; want 40, 2s, 40", n, s.Window, s.Decision.Limit)
	}
	i := 0
	for _, tc := range []struct {
		name   string
		o      Override
		scale  float64
		admits int
		window time.Duration
	}{
		// 5 a minute keeps the configured burst of twice the quota: 10,
		// which refills in 2 minutes.
		{"override without burst", Override{RequestsPerUnit: 5, Period: time.Minute}, 1, 10, 2 * time.Minute},
		{"override with burst", Override{RequestsPerUnit: 5, Period: time.Minute, Burst: 5}, 1, 5, time.Minute},
		// A scale of 0.4 on top: 2 a minute, burst 4.
		{"override and scale", Override{RequestsPerUnit: 5, Period: time.Minute}, 0.4, 4, 2 * time.Minute},
	} {
		i++
		if err := e.SetOverride("api", "per-ip", tc.o); err != nil {
			t.Fatal(err)
		}
		if err := e.SetRateScale("api", "per-ip", tc.scale, "test"); err != nil {
			t.Fatal(err)
		}
		n, s := admitAll(fmt.Sprintf("198.51.100.%d", i))
		if n != tc.admits || s.Window != tc.window || s.Decision.Limit != int64(tc.admits) {
			t.Errorf("%s: admitted %d at once, window %v, limit %d; want %d, %v, %d", tc.name, n, s.Window, s.Decision.Limit,
				tc.admits, tc.window, tc.admits)
		}
		if len(s.Limits) != 1 || s.Limits[0].Window != s.Window {
			t.Errorf("%s: limits %+v, want one with the status's window %v", tc.name, s.Limits, s.Window)
		}
	}
}

// TestStatusWindowGoesWithItsQuota: when an ancestor of a hierarchy is the
// tightest limit, the status reports its quota and its window together.
func TestStatusWindowGoesWithItsQuota(t *testing.T) {
	cfg := mustParse(t, `
domain: d
hierarchy: true
rate_limit: {name: root, unit: hour, requests_per_unit: 3}
descriptors:
  - key: user
    rate_limit: {name: user, unit: minute, requests_per_unit: 10}
`)
	now := time.Unix(1_700_000_000, 0)
	e := newMemEngine(t, cfg, frozen(now), WithClock(frozen(now)))
	resp, err := e.Decide(context.Background(), req("d", ent("user", "u1")))
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.Statuses[0]; s.Rule != "user" || s.Decision.Limit != 3 || s.Decision.Remaining != 2 || s.Window != time.Hour {
		t.Fatalf("status %s: limit %d, remaining %d, window %v; want the root's 3, 2, 1h", s.Rule, s.Decision.Limit, s.Decision.Remaining, s.Window)
	}
}

// TestSmoothStatusStatesTheRate: the Smooth algorithms' statuses state a
// quota and window that give their configured rate, which the header
// fields and Envoy's current_limit are made from. SmoothWarmup passes one
// request at a time (capacity 1, one every 100 ms at 10 per second): it
// reports its stable rate, 10 per second, rather than 1 per (rounded up)
// second. SmoothBursty reports its burst, 4 stored permits and the free
// ticket, and the time its rate takes to store them: 5 in 2.5 s at 2 per
// second.
func TestSmoothStatusStatesTheRate(t *testing.T) {
	cfg := mustParse(t, `
domain: api
descriptors:
  - key: warm
    rate_limit: {name: warm, algorithm: smooth_warmup, unit: second, requests_per_unit: 10, warmup_period: 5s, cold_factor: 3, max_wait: 1s}
  - key: bursty
    rate_limit: {name: bursty, algorithm: smooth_bursty, unit: second, requests_per_unit: 2, max_burst_seconds: 2}
`)
	now := time.Unix(1_700_000_000, 0)
	e := newMemEngine(t, cfg, frozen(now), WithClock(frozen(now)))
	for _, tc := range []struct {
		key    string
		limit  int64
		window time.Duration
	}{
		{"warm", 10, time.Second},
		{"bursty", 5, 2500 * time.Millisecond},
	} {
		resp, err := e.Decide(context.Background(), req("api", ent(tc.key, "v")))
		if err != nil {
			t.Fatal(err)
		}
		s := resp.Statuses[0]
		if s.Decision.Limit != tc.limit || s.Window != tc.window {
			t.Errorf("%s: status limit %d, window %v; want %d, %v", tc.key, s.Decision.Limit, s.Window, tc.limit, tc.window)
		}
		if len(s.Limits) != 1 || s.Limits[0].Decision.Limit != tc.limit || s.Limits[0].Window != tc.window {
			t.Errorf("%s: limits %+v, want one of limit %d, window %v", tc.key, s.Limits, tc.limit, tc.window)
		}
	}
}

// TestCalendarWindowReadsTheClock: with nothing stored for the key, a
// month's window is the length of the month the Engine's clock is in (28
// days in February 2026, 31 in March); a decision whose windows are all
// periods does not read the clock.
func TestCalendarWindowReadsTheClock(t *testing.T) {
	cfg := mustParse(t, `
domain: d
descriptors:
  - key: plan
    rate_limit: {name: monthly, unit: month, requests_per_unit: 1000}
  - key: ip
    rate_limit: {name: hourly, unit: hour, requests_per_unit: 10}
`)
	now := time.Date(2026, time.February, 10, 12, 0, 0, 0, time.UTC)
	reads := 0
	clock := func() time.Time { reads++; return now }
	e := newMemEngine(t, cfg, func() time.Time { return now }, WithClock(clock))
	for _, tc := range []struct {
		at     time.Time
		entry  []Entry
		window time.Duration
		reads  int
	}{
		{now, ent("plan", "feb"), 28 * 24 * time.Hour, 1},
		{time.Date(2026, time.March, 3, 0, 0, 0, 0, time.UTC), ent("plan", "mar"), 31 * 24 * time.Hour, 1},
		{now, ent("ip", "1.2.3.4"), time.Hour, 0},
	} {
		now, reads = tc.at, 0
		resp, err := e.Peek(context.Background(), req("d", tc.entry))
		if err != nil {
			t.Fatal(err)
		}
		if s := resp.Statuses[0]; s.Window != tc.window || len(s.Limits) != 1 || s.Limits[0].Window != tc.window {
			t.Errorf("%v at %v: window %v, limits %+v; want %v", tc.entry, tc.at, s.Window, s.Limits, tc.window)
		}
		if reads != tc.reads {
			t.Errorf("%v: the Engine read its clock %d times, want %d", tc.entry, reads, tc.reads)
		}
	}
}

// TestCalendarWindowFollowsTheStoredReset: two Engines on one store whose
// clocks disagree by 45 minutes across a month's or year's end state the
// same window for a key with stored state — the length of the period whose
// end is the key's reset on the store's clock — on Decide and on Peek,
// whichever of them is ahead.
func TestCalendarWindowFollowsTheStoredReset(t *testing.T) {
	cfg := mustParse(t, `
domain: d
descriptors:
  - key: plan
    rate_limit: {name: monthly, unit: month, requests_per_unit: 1000}
  - key: org
    rate_limit: {name: yearly, unit: year, requests_per_unit: 1000}
`)
	day := 24 * time.Hour
	for _, tc := range []struct {
		name   string
		store  time.Time // the store's clock, 30 minutes before a period ends
		entry  []Entry
		window time.Duration // the store's period's
	}{
		{"november", time.Date(2026, time.November, 30, 23, 30, 0, 0, time.UTC), ent("plan", "p"), 30 * day},
		{"january", time.Date(2027, time.January, 31, 23, 30, 0, 0, time.UTC), ent("plan", "p"), 31 * day},
		{"february", time.Date(2028, time.February, 29, 23, 30, 0, 0, time.UTC), ent("plan", "p"), 29 * day},
		{"2027", time.Date(2027, time.December, 31, 23, 30, 0, 0, time.UTC), ent("org", "o"), 365 * day},
		{"2028", time.Date(2028, time.December, 31, 23, 30, 0, 0, time.UTC), ent("org", "o"), 366 * day},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := memory.New(memory.WithClock(frozen(tc.store)), memory.WithSweepInterval(0))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			for _, skew := range []time.Duration{-45 * time.Minute, 0, 45 * time.Minute} {
				e, err := NewEngine(cfg, st, WithClock(frozen(tc.store.Add(skew))))
				if err != nil {
					t.Fatal(err)
				}
				for _, op := range []string{"decide", "peek"} {
					var resp Response
					if op == "decide" {
						resp, err = e.Decide(context.Background(), req("d", tc.entry))
					} else {
						resp, err = e.Peek(context.Background(), req("d", tc.entry))
					}
					if err != nil {
						t.Fatal(err)
					}
					s := resp.Statuses[0]
					if s.Window != tc.window || len(s.Limits) != 1 || s.Limits[0].Window != tc.window {
						t.Errorf("clock %+v, %s: window %v, limits %+v; want %v", skew, op, s.Window, s.Limits, tc.window)
					}
				}
			}
		})
	}
}
