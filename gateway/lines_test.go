package gateway_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/policy"
)

// sectionProblems are the problems of each fixture in testdata/lines, as
// floodgate validate prints them (file:line: message), in file order.
var sectionProblems = []struct {
	file string
	want []string
}{
	{"generic_key_no_value.yaml", []string{
		"8: gateway: routes[0].descriptors[0].entries[1].value: generic_key needs a value",
	}},
	{"match_no_value.yaml", []string{
		"7: gateway: routes[0].descriptors[0].entries[0].value: a match entry needs the value it takes when it matches",
		"9: gateway: routes[0].descriptors[1].entries[0].value: a match entry needs the value it takes when it matches",
	}},
	{"three.yaml", []string{
		`3: gateway: proxy_header: unknown proxy header "x-forwarded-fur" (want X-Forwarded-For, Forwarded or X-Real-IP)`,
		"4: gateway: ipv4_prefix: 33 is not in 1..32",
		"12: gateway: routes[0].descriptors[0].entries[1].value: generic_key needs a value",
	}},
	{"no_routes.yaml", []string{
		"3: gateway: routes: no routes (declare at least one, or drop the gateway section)",
	}},
	// What the entry lacks is the misspelt field: not reported twice.
	{"unknown_field.yaml", []string{
		`8: unknown field "valeu" in gateway.routes[0].descriptors[0].entries[0] (did you mean "value"?)`,
	}},
	{"unknown_fields.yaml", []string{
		"6: gateway: ipv4_prefix: 33 is not in 1..32",
		`13: unknown field "valeu" in gateway.routes[0].descriptors[0].entries[0] (did you mean "value"?)`,
		"14: gateway: routes[0].descriptors[0].entries[1].value: generic_key needs a value",
		`15: unknown field "kye" in gateway.routes[0].descriptors[0].entries[1] (did you mean "key"?)`,
		`17: unknown field "exct" in gateway.routes[0].descriptors[0].entries[2].match (did you mean "exact"?)`,
		`19: unknown field "path_prefx" in gateway.routes[1] (did you mean "path_prefix"?)`,
		`23: unknown field "colour" in gateway.routes[2]`,
	}},
	{"every_field.yaml", []string{
		`7: gateway: trusted_proxies[1]: "10.0.0.0/33" is not a CIDR or an IP address`,
		`8: gateway: proxy_header: unknown proxy header "via" (want X-Forwarded-For, Forwarded or X-Real-IP)`,
		"9: gateway: ipv4_prefix: -1 is not in 1..32",
		"10: gateway: ipv6_prefix: 129 is not in 1..128",
		`12: gateway: api_key.header: "X Key" is not a valid header name`,
		`13: gateway: api_key.scheme: "Bearer x" needs api_key.header and must be a token`,
		`14: gateway: user_header: "bad header" is not a valid header name`,
		`15: gateway: tenant_header: "x:y" is not a valid header name`,
		"16: gateway: refuse_status: 500 is not 429 or 503 (the status of a refusal by the routes' limits; default 429)",
		`18: gateway: routes[0].path_prefix: "api" must start with /`,
		`19: gateway: routes[0].host: "api.example.com:8080" is not a host name (no port, scheme or path; "*." only as a prefix)`,
		`20: gateway: routes[0].methods[1]: "P T" is not an HTTP method`,
		`20: gateway: routes[0].methods[2]: "" is not an HTTP method`,
		"23: gateway: routes[2]: matches the same requests as routes[1] (host, path_prefix and methods; a trailing / of the prefix and a HEAD beside GET change nothing), so one of them would never apply",
		"27: gateway: routes[3].descriptors[0].entries: no entries",
		"28: gateway: routes[3].descriptors[1].entries: no entries",
		`30: gateway: routes[3].descriptors[2].entries[0].source: unknown source "remote_adress" (want remote_address, header:<Name>, query:<name>, method, path, host, api_key, user, tenant or generic_key)`,
		"35: gateway: routes[3].descriptors[2].entries[3].ipv4_prefix: 40 is not in 1..32",
		"36: gateway: routes[3].descriptors[2].entries[3].ipv6_prefix: 200 is not in 1..128",
		"38: gateway: routes[3].descriptors[2].entries[4].routes: only the path source takes routes",
		"39: gateway: routes[3].descriptors[2].entries[4].default: default and skip_if_absent exclude each other",
		`42: gateway: routes[3].descriptors[2].entries[5].routes[1]: route "nope" must start with /`,
		"43: gateway: routes[3].descriptors[2].entries[6].value: generic_key needs a value",
		"44: gateway: routes[3].descriptors[2].entries[6].match: generic_key has nothing to match",
		"46: gateway: routes[3].descriptors[2].entries[7].match: set exactly one of exact, prefix and present",
		`48: gateway: routes[3].descriptors[2].entries[8].source: "bad header" is not a valid header name`,
	}},
}

// wantLines returns the fixture's expected problems with its path.
func wantLines(path string, want []string) string {
	lines := make([]string, len(want))
	for i, w := range want {
		lines[i] = path + ":" + w
	}
	return strings.Join(lines, "\n")
}

// TestSectionProblemLines: every problem of a gateway section is reported
// at the line of the field at fault, or of the entry that lacks a required
// field, all of them in one load, in file order.
func TestSectionProblemLines(t *testing.T) {
	for _, tc := range sectionProblems {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", "lines", tc.file)
			_, err := policy.Load(path)
			var ps policy.Problems
			if !errors.As(err, &ps) {
				t.Fatalf("Load = %v, want policy.Problems", err)
			}
			if got, want := err.Error(), wantLines(path, tc.want); got != want {
				t.Errorf("Load:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// TestReloadRefusesSectionAtItsLines: serve's hot reload (a policy.Watcher)
// refuses a configuration whose gateway section is bad with the problems
// validate prints, each at its line.
func TestReloadRefusesSectionAtItsLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	copyFixture(t, "valid.yaml", path)
	type result struct {
		cfg *policy.Config
		err error
	}
	got := make(chan result, 1)
	w, err := policy.NewWatcher(path, 0, func(c *policy.Config, err error) { got <- result{c, err} })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Load(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	copyFixture(t, "three.yaml", path)
	w.Reload()
	select {
	case r := <-got:
		if r.cfg != nil || r.err == nil {
			t.Fatalf("reload = %v, %v; want refused", r.cfg, r.err)
		}
		if want := wantLines(path, sectionProblems[2].want); r.err.Error() != want {
			t.Errorf("reload:\n got %s\nwant %s", r.err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reload")
	}
}

func copyFixture(t *testing.T, name, to string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "lines", name))
	if err == nil {
		err = os.WriteFile(to, data, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}
