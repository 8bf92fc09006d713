package middleware_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/middleware"
	"github.com/floodgate/floodgate/policy"
)

// descConfig is the domain the descriptor checks run against: a per-IP
// limit, a per-key limit nested per route, a per-user limit and a
// constant generic_key.
const descConfig = `
domain: api
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: api_key
    descriptors:
      - key: path
        value: /v1/search
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: generic_key
    value: checkout
    rate_limit: {unit: second, requests_per_unit: 50}
`

func descs(ds ...[]dimension.EntrySpec) dimension.Spec {
	var s dimension.Spec
	for _, es := range ds {
		s.Descriptors = append(s.Descriptors, dimension.DescriptorSpec{Entries: es})
	}
	return s
}

// A misspelt key makes a descriptor that no rule limits: New refuses the
// Extractor, naming the descriptor by its index and keys, the domain, and
// the keys the domain's rules start with. One dead descriptor is enough,
// even beside live ones.
func TestNewRefusesDescriptorNoRuleLimits(t *testing.T) {
	e := engine(t, descConfig, nil)
	x := extractor(t, descs(
		[]dimension.EntrySpec{{Source: "remote_address"}},
		[]dimension.EntrySpec{{Source: "remote_address", Key: "remote_adress"}},
	))
	_, err := middleware.New(e, "api", x)
	want := `middleware: extractor descriptors[1] [remote_adress]: no rule of domain "api" matches these keys in this order (its top-level keys are remote_address, api_key, user, generic_key="checkout"), so this descriptor would limit nothing`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("New = %v\nwant an error starting %s", err, want)
	}
	if !strings.Contains(err.Error(), "WithDescriptorCheck(false)") {
		t.Errorf("New = %v, want the way out named", err)
	}

	// A header's name where the rules say api_key: the key is the header's.
	x = extractor(t, descs([]dimension.EntrySpec{{Source: "header:X-Api-Key"}, {Source: "path"}}))
	if _, err := middleware.New(e, "api", x); err == nil || !strings.Contains(err.Error(), "descriptors[0] [X-Api-Key, path]: no rule") {
		t.Errorf("header key: New = %v, want descriptors[0] [X-Api-Key, path] named", err)
	}

	// Every dead descriptor is named, in Spec order.
	x = extractor(t, descs(
		[]dimension.EntrySpec{{Source: "host"}},
		[]dimension.EntrySpec{{Source: "remote_address"}},
		[]dimension.EntrySpec{{Source: "method"}},
	))
	if _, err := middleware.New(e, "api", x); err == nil ||
		!strings.Contains(err.Error(), "extractor descriptors[0] [host], descriptors[2] [method]: no rule") ||
		!strings.Contains(err.Error(), "so these descriptors would limit nothing") {
		t.Errorf("two dead: New = %v", err)
	}

	// A domain without descriptors says so.
	empty := engine(t, "domain: api\n", nil)
	if _, err := middleware.New(empty, "api", extractor(t, perIP)); err == nil || !strings.Contains(err.Error(), "(the domain has no descriptors)") {
		t.Errorf("empty domain: New = %v", err)
	}

	// WithDescriptorCheck(false) accepts it: an Extractor shared by domains.
	x = extractor(t, descs([]dimension.EntrySpec{{Source: "remote_address", Key: "remote_adress"}}))
	if _, err := middleware.New(e, "api", x, middleware.WithDescriptorCheck(false)); err != nil {
		t.Errorf("WithDescriptorCheck(false): %v", err)
	}
	if _, err := middleware.New(e, "api", x, middleware.WithDescriptorCheck(true)); err == nil {
		t.Error("WithDescriptorCheck(true): no error")
	}
	// A Decider without a configuration is not checked.
	if _, err := middleware.New(errDecider{}, "api", x); err != nil {
		t.Errorf("Decider without Config: %v", err)
	}
}

// Each kind of descriptor the analysis must read right: nested paths in
// the rules' order, skip_if_absent entries, generic_key constants against
// the rules' values, user and tenant sources (whose values come from the
// caller's function), match entries and explicit keys.
func TestNewDescriptorCheck(t *testing.T) {
	e := engine(t, descConfig, nil)
	user := dimension.WithUser(func(*http.Request) string { return "u" })
	for _, tc := range []struct {
		name string
		es   []dimension.EntrySpec
		opts []dimension.Option
		dead string // "" when New must accept it
	}{
		{"top-level key", []dimension.EntrySpec{{Source: "remote_address"}}, nil, ""},
		{"parent then child", []dimension.EntrySpec{{Source: "api_key"}, {Source: "path", Routes: []string{"/v1/search"}}}, nil, ""},
		{"child then parent", []dimension.EntrySpec{{Source: "path"}, {Source: "api_key"}}, nil, "[path, api_key]"},
		{"parent alone: no rule of its own", []dimension.EntrySpec{{Source: "api_key"}}, nil, "[api_key]"},
		{"parent, misspelt child", []dimension.EntrySpec{{Source: "api_key"}, {Source: "path", Key: "route"}}, nil, "[api_key, route]"},
		{"skipped trailing entry", []dimension.EntrySpec{{Source: "remote_address"}, {Source: "header:X-Plan", SkipIfAbsent: true}}, nil, ""},
		{"skipped leading entry", []dimension.EntrySpec{{Source: "header:X-Org", SkipIfAbsent: true}, {Source: "remote_address"}}, nil, ""},
		{"skipped entry, dead rest", []dimension.EntrySpec{{Source: "header:X-Org", SkipIfAbsent: true}, {Source: "host"}}, nil, "[X-Org, host]"},
		{"skippable only, no rule", []dimension.EntrySpec{{Source: "header:X-Org", SkipIfAbsent: true}}, nil, "[X-Org]"},
		{"generic_key matching", []dimension.EntrySpec{{Source: "generic_key", Value: "checkout"}}, nil, ""},
		{"generic_key not matching", []dimension.EntrySpec{{Source: "generic_key", Value: "chekout"}}, nil, `[generic_key="chekout"]`},
		{"generic_key under another key", []dimension.EntrySpec{{Source: "generic_key", Key: "api_key", Value: "k"}, {Source: "path"}}, nil, ""},
		{"user from WithUser", []dimension.EntrySpec{{Source: "user"}}, []dimension.Option{user}, ""},
		{"user from a header", []dimension.EntrySpec{{Source: "user"}}, nil, ""},
		{"user under another key", []dimension.EntrySpec{{Source: "user", Key: "user_id"}}, []dimension.Option{user}, "[user_id]"},
		{"tenant from WithTenant", []dimension.EntrySpec{{Source: "tenant"}}, []dimension.Option{dimension.WithTenant(func(*http.Request) string { return "t" })}, "[tenant]"},
		{"match entry keyed as a rule", []dimension.EntrySpec{{Source: "header:X-Key", Key: "api_key", Match: &dimension.MatchSpec{Present: true}, Value: "any"}, {Source: "path"}}, nil, ""},
		{"match entry, default key", []dimension.EntrySpec{{Source: "header:X-Key", Match: &dimension.MatchSpec{Present: true}, Value: "any"}}, nil, `[header_match="any"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := descs(tc.es)
			if tc.opts == nil {
				spec.UserHeader = "X-User"
			}
			_, err := middleware.New(e, "api", extractor(t, spec, tc.opts...))
			switch {
			case tc.dead == "" && err != nil:
				t.Errorf("New = %v, want it accepted", err)
			case tc.dead != "" && (err == nil || !strings.Contains(err.Error(), "descriptors[0] "+tc.dead+": no rule of domain \"api\"")):
				t.Errorf("New = %v, want descriptors[0] %s named", err, tc.dead)
			}
		})
	}
}

// Limited is the analysis New and the gateway share, on a domain's tree.
func TestLimited(t *testing.T) {
	cfg, err := policy.Parse("t.yaml", []byte(descConfig))
	if err != nil {
		t.Fatal(err)
	}
	dom := cfg.Domain("api")
	if !middleware.Limited(dom, []dimension.EntrySpec{{Source: "api_key"}, {Source: "path"}}) {
		t.Error("[api_key, path] = false, want true")
	}
	if middleware.Limited(dom, []dimension.EntrySpec{{Source: "path"}}) {
		t.Error("[path] = true, want false: path is only under api_key")
	}
	if middleware.Limited(dom, nil) || middleware.Limited(nil, []dimension.EntrySpec{{Source: "remote_address"}}) {
		t.Error("no entries or no domain = true, want false")
	}
}

// A match entry (Envoy's header_value_match) has a constant value, its
// Value when the test passes: a value no rule of its key matches limits
// nothing, as a generic_key's constant that none matches (it passed the
// check, the value unread), while one that a rule's value or pattern
// matches is limited.
func TestNewComparesMatchEntryValue(t *testing.T) {
	e := engine(t, `
domain: api
descriptors:
  - key: header_match
    value: admin-*
    rate_limit: {unit: second, requests_per_unit: 10}
`, nil)
	admin := &dimension.MatchSpec{Exact: "admin"}
	x := extractor(t, descs([]dimension.EntrySpec{{Source: "header:X-Role", Match: admin, Value: "adm"}}))
	want := `descriptors[0] [header_match="adm"]: no rule of domain "api"`
	if _, err := middleware.New(e, "api", x); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("match entry whose value no rule matches: New = %v, want an error with %s", err, want)
	}
	x = extractor(t, descs([]dimension.EntrySpec{{Source: "header:X-Role", Match: admin, Value: "admin-paths"}}))
	if _, err := middleware.New(e, "api", x); err != nil {
		t.Errorf("match entry whose value a rule's pattern matches: New = %v, want nil", err)
	}
}

// An entry whose values are known beforehand may take its Default too: a
// match entry whose test fails, a path under none of its routes. A rule
// for the Default limits it (a match entry with a default was refused
// when only its Value was compared); a path entry whose routes and
// default no rule's value matches limits nothing, one route matching is
// enough.
func TestNewKnownValuesWithDefault(t *testing.T) {
	e := engine(t, `
domain: api
descriptors:
  - key: header_match
    value: public
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /v1/search*
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: route
    value: other
    rate_limit: {unit: second, requests_per_unit: 10}
`, nil)
	admin := &dimension.MatchSpec{Exact: "admin"}
	for _, tc := range []struct {
		name string
		es   []dimension.EntrySpec
		dead string
	}{
		{"match entry, rule for its default", []dimension.EntrySpec{{Source: "header:X-Role", Match: admin, Value: "staff", Default: "public"}}, ""},
		{"match entry, no rule for value or default", []dimension.EntrySpec{{Source: "header:X-Role", Match: admin, Value: "staff", Default: "pub"}}, `[header_match="staff"|"pub"]`},
		{"routes, one a rule matches", []dimension.EntrySpec{{Source: "path", Routes: []string{"/v1/users", "/v1/search"}}}, ""},
		{"routes none matches", []dimension.EntrySpec{{Source: "path", Routes: []string{"/v1/users", "/v2/"}}}, `[path="/v1/users"|"/v2/"]`},
		{"routes none matches, rule for the default", []dimension.EntrySpec{{Source: "path", Key: "route", Routes: []string{"/v1/users"}, Default: "other"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := middleware.New(e, "api", extractor(t, descs(tc.es)))
			switch {
			case tc.dead == "" && err != nil:
				t.Errorf("New = %v, want it accepted", err)
			case tc.dead != "" && (err == nil || !strings.Contains(err.Error(), "descriptors[0] "+tc.dead+": no rule of domain \"api\"")):
				t.Errorf("New = %v, want descriptors[0] %s named", err, tc.dead)
			}
		})
	}
}
