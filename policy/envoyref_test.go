package policy

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

// The tables below hold envoyproxy/ratelimit's answers (the version
// docs/CONFIG.md says Floodgate tracks, v1.4.1-0.20260122083618-3fb702589d36)
// for the same YAML and requests: its config_impl.go GetLimit for the rule
// and the stats key, its service's constructLimitsToCheck for replaces and
// unlimited. Each row was checked against that code, run on the row.

// envoyDescriptor reads "k=v,k2=v2" as a descriptor's entries.
func envoyDescriptor(s string) []Entry {
	var es []Entry
	for kv := range strings.SplitSeq(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		es = append(es, Entry{Key: k, Value: v})
	}
	return es
}

// TestEnvoyMatchTable: the rule each descriptor selects where value-specific,
// wildcard and value-less descriptors are siblings at several depths; a
// descriptor longer or shorter than the configured path, in another order,
// or with a key twice, selects none.
func TestEnvoyMatchTable(t *testing.T) {
	cfg := mustParse(t, `
domain: p
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1}
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2}
        descriptors:
          - key: path
            rate_limit: {unit: minute, requests_per_unit: 3}
          - key: path
            value: /admin
            rate_limit: {unit: minute, requests_per_unit: 4}
      - key: user
        value: bob
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tenant
    value: acme
    rate_limit: {unit: minute, requests_per_unit: 6}
    descriptors:
      - key: user
        value: bo*
        rate_limit: {unit: minute, requests_per_unit: 7}
      - key: user
        value: b*
        rate_limit: {unit: minute, requests_per_unit: 8}
        descriptors:
          - key: path
            rate_limit: {unit: minute, requests_per_unit: 9}
      - key: user
        value: bob
        rate_limit: {unit: minute, requests_per_unit: 10}
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 11}
  - key: tenant
    value: ac*
    rate_limit: {unit: minute, requests_per_unit: 12}
`)
	for _, tc := range []struct{ desc, path string }{
		{"tenant=x", "tenant"},
		{"tenant=acme", "tenant_acme"},
		{"tenant=acmex", "tenant_ac*"},
		{"tenant=ac*", "tenant_ac*"}, // the pattern itself, matched exactly
		{"tenant=x,user=bob", "tenant.user_bob"},
		{"tenant=x,user=al", "tenant.user"},
		{"tenant=x,user=al,path=/admin", "tenant.user.path_/admin"},
		{"tenant=x,user=al,path=/y", "tenant.user.path"},
		// user_bob has no children: no backtracking to the value-less user.
		{"tenant=x,user=bob,path=/admin", ""},
		{"tenant=acme,user=bob", "tenant_acme.user_bob"},   // exact before any wildcard
		{"tenant=acme,user=bobby", "tenant_acme.user_bo*"}, // the first wildcard in file order
		{"tenant=acme,user=bill", "tenant_acme.user_b*"},
		{"tenant=acme,user=al", "tenant_acme.user"},
		{"tenant=acme,user=bill,path=/x", "tenant_acme.user_b*.path"},
		{"tenant=acme,user=bobby,path=/x", ""}, // bo* wins and has no children
		{"tenant=acme,user=al,path=/admin", ""},
		{"tenant=acmex,user=al", ""}, // ac* has no children
		{"user=bob,tenant=x", ""},
		{"tenant=x,user=al,path=/y,extra=1", ""},
		{"tenant=x,tenant=x", ""},
	} {
		got := ""
		if r := cfg.Match("p", envoyDescriptor(tc.desc)); r != nil {
			got = r.Path
		}
		if got != tc.path {
			t.Errorf("Match(%s) = rule %q, want %q (envoyproxy/ratelimit's)", tc.desc, got, tc.path)
		}
	}
}

// TestEnvoyMetricKeyTable: Status.MetricKey is envoyproxy/ratelimit's
// stats key. detailed_metric puts every entry's key_value of the request in
// it ("key_" for an empty value), not only the matched value-less one's,
// unless a share_threshold wildcard matched an entry, which is then the
// wildcard; value_to_metric puts the request's value of a wildcard entry in
// it, and of a value-less one only when not empty.
func TestEnvoyMetricKeyTable(t *testing.T) {
	cfg := mustParse(t, `
domain: m
descriptors:
  - key: route
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: "/api*"
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: file
    value: "img*"
    share_threshold: true
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tag
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: host
    value: "*"
    descriptors:
      - key: verb
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plain
    value: "p*"
    rate_limit: {unit: minute, requests_per_unit: 6}
`)
	e := newMemEngine(t, cfg, frozen(scenarioT0))
	for _, tc := range []struct{ desc, want string }{
		{"route=/a,user=u1", "m.route_/a.user_u1"},
		{"route=,user=u1", "m.route_.user_u1"},
		{"path=/api/v1", "m.path_/api/v1"},
		{"path=/api*", "m.path_/api*"},
		{"file=img1,user=u1", "m.file_img*.user_u1"},
		{"file=img1,user=", "m.file_img*.user"},
		// The pattern sent as the value matches exactly, not as a
		// wildcard: no share_threshold, so detailed_metric's "key_".
		{"file=img*,user=", "m.file_img*.user_"},
		{"tag=", "m.tag"},
		{"tag=t", "m.tag_t"},
		{"host=h,verb=GET", "m.host_h.verb_GET"},
		{"host=,verb=", "m.host_.verb_"},
		{"plain=pq", "m.plain_p*"},
	} {
		resp, err := e.Peek(context.Background(), req("m", envoyDescriptor(tc.desc)))
		if err != nil {
			t.Fatalf("%s: %v", tc.desc, err)
		}
		if got := resp.Statuses[0].MetricKey; got != tc.want {
			t.Errorf("%s: MetricKey %q, want %q (envoyproxy/ratelimit's)", tc.desc, got, tc.want)
		}
	}
}

// TestEnvoyReplacesTable: replaces across the descriptors of one request.
// Every matched rule's replaces count, a replaced rule's own included; a
// replaced rule is neither decided nor charged; an unlimited rule is never
// replaced (envoyproxy/ratelimit sets unlimited rules aside before it
// drops replaced ones: OK with limit_remaining 2^32-1), though its own
// replaces count; a per-descriptor limit neither replaces nor is replaced.
func TestEnvoyReplacesTable(t *testing.T) {
	cfg := mustParse(t, `
domain: r
descriptors:
  - key: a
    rate_limit: {name: a, unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {name: b, unit: minute, requests_per_unit: 2, replaces: [{name: a}]}
  - key: c
    rate_limit: {name: c, unit: minute, requests_per_unit: 3, replaces: [{name: b}]}
  - key: u
    rate_limit: {name: u, unlimited: true, replaces: [{name: c}]}
  - key: v
    rate_limit: {name: v, unit: minute, requests_per_unit: 4, replaces: [{name: u}]}
  - key: s
    shadow_mode: true
    rate_limit: {name: s, unit: minute, requests_per_unit: 5, replaces: [{name: a}]}
`)
	e := newMemEngine(t, cfg, frozen(scenarioT0))
	override := &LimitOverride{RequestsPerUnit: 9, Unit: time.Minute}
	for _, tc := range []struct {
		descs    string // descriptors separated by ' '; a '!' after one gives it a per-descriptor limit
		statuses string // per descriptor: the rule applied, "-" for none, "unlimited"
	}{
		{"a=1 b=1", "- b"},
		{"a=1 b=1 c=1", "- - c"},
		{"c=1 u=1", "- unlimited"},
		{"u=1 v=1", "unlimited v"},
		{"c=1 u=1 v=1", "- unlimited v"},
		{"a=1 s=1", "- s"},
		{"a=1 b=1!", "a b_1"}, // a per-descriptor limit is named by its path
		{"a=1! b=1", "a_1 b"},
	} {
		var r Request
		r.Domain = "r"
		for d := range strings.FieldsSeq(tc.descs) {
			desc := Descriptor{Entries: envoyDescriptor(strings.TrimSuffix(d, "!"))}
			if strings.HasSuffix(d, "!") {
				desc.Limit = override
			}
			r.Descriptors = append(r.Descriptors, desc)
		}
		resp, err := e.Peek(context.Background(), r)
		if err != nil {
			t.Fatalf("%s: %v", tc.descs, err)
		}
		var got []string
		for _, s := range resp.Statuses {
			switch {
			case !s.Matched:
				got = append(got, "-")
			case s.Unlimited:
				got = append(got, "unlimited")
				if s.Code != CodeOK || s.Decision.Remaining != math.MaxUint32 {
					t.Errorf("%s: unlimited status %v remaining %d, want OK with 2^32-1", tc.descs, s.Code, s.Decision.Remaining)
				}
			default:
				got = append(got, s.Rule)
			}
		}
		if g := strings.Join(got, " "); g != tc.statuses {
			t.Errorf("%s: rules %q, want %q (envoyproxy/ratelimit's)", tc.descs, g, tc.statuses)
		}
	}
}

// TestUnlimitedWithUnknownUnitLoads: envoyproxy/ratelimit refuses a unit
// beside unlimited: true only when it is a unit it knows; an empty or null
// one (a template's empty value) or any other string loads there. It loads
// here too, with a warning; a real unit stays an error.
func TestUnlimitedWithUnknownUnitLoads(t *testing.T) {
	for _, unit := range []string{`""`, ``, `~`, `foo`, `unknown`} {
		src := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: " + unit + "}\n"
		cfg, err := Parse("u.yaml", []byte(src))
		if err != nil {
			t.Errorf("unit: %s beside unlimited: %v, want it loaded as envoyproxy/ratelimit loads it", unit, err)
			continue
		}
		if r := cfg.Match("d", ent("k", "x")); r == nil || !r.Unlimited {
			t.Errorf("unit: %s beside unlimited: rule %+v, want the unlimited rule", unit, r)
		}
		if warns := cfg.Warnings(); len(warns) != 1 || warns[0].Line != 4 || !strings.Contains(warns[0].Message, "ignored") {
			t.Errorf("unit: %s beside unlimited: warnings %v, want one at line 4 saying the unit is ignored", unit, cfg.Warnings())
		}
	}
	for _, unit := range []string{"minute", "WEEK", "Year"} {
		src := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: " + unit + "}\n"
		if _, err := Parse("u.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), "u.yaml:4: should not specify rate limit unit when unlimited") {
			t.Errorf("unit: %s beside unlimited: %v, want envoyproxy/ratelimit's error at line 4", unit, err)
		}
	}
}

// TestEnvoyHitsAddendTable: each descriptor's cost is its own hits_addend
// when set, 0 included (a check that charges nothing), else the request's,
// and a request's 0 (unset) is 1 — envoyproxy/ratelimit's GetHitsAddends.
func TestEnvoyHitsAddendTable(t *testing.T) {
	cfg := mustParse(t, "domain: h\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10}\n")
	e := newMemEngine(t, cfg, frozen(scenarioT0))
	for _, tc := range []struct {
		hits int64
		want [3]int64 // remaining of k=a (no hits_addend), k=b (hits_addend 0), k=c (hits_addend 3)
	}{
		{0, [3]int64{9, 10, 7}},
		{2, [3]int64{7, 10, 4}},
	} {
		r := Request{Domain: "h", Hits: tc.hits, Descriptors: []Descriptor{
			{Entries: ent("k", "a")},
			{Entries: ent("k", "b"), HitsSet: true},
			{Entries: ent("k", "c"), Hits: 3, HitsSet: true},
		}}
		resp, err := e.Decide(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range resp.Statuses {
			if s.Code != CodeOK || s.Decision.Remaining != tc.want[i] {
				t.Errorf("request hits_addend %d, descriptor %d: %v with %d remaining, want OK with %d", tc.hits, i, s.Code, s.Decision.Remaining, tc.want[i])
			}
		}
	}
}
