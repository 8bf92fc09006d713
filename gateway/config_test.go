package gateway_test

import (
	"strings"
	"testing"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/policy"
)

func TestSectionLoads(t *testing.T) {
	cfg, err := policy.Parse("gw.yaml", []byte(routesConfig))
	if err != nil {
		t.Fatal(err)
	}
	s, ok := cfg.Domain("edge").Sections[gateway.SectionName].(*gateway.Section)
	if !ok || len(s.Routes) != 3 || s.Routes[0].Name != "search" || s.Routes[1].Methods[1] != "PUT" {
		t.Fatalf("section: %#v", cfg.Domain("edge").Sections)
	}
}

// Every problem of a gateway section is reported at its line.
func TestSectionErrors(t *testing.T) {
	head := "domain: edge\ngateway:\n"
	for _, tc := range []struct{ name, body, want string }{
		{"unknown field", "  routes:\n    - path_prefix: /a\n      metods: [GET]\n",
			`gw.yaml:5: unknown field "metods" in gateway.routes[0] (did you mean "methods"?)`},
		{"no routes", "  trusted_proxies: [10.0.0.0/8]\n",
			"gw.yaml:3: gateway: routes: no routes (declare at least one, or drop the gateway section)"},
		{"bad prefix", "  routes:\n    - path_prefix: api\n",
			`gw.yaml:4: gateway: routes[0].path_prefix: "api" must start with /`},
		// Request paths are matched decoded and cleaned: a prefix that
		// is not would never match, its route never apply.
		{"prefix not clean", "  routes:\n    - path_prefix: /api//v1/\n",
			`gw.yaml:4: gateway: routes[0].path_prefix: "/api//v1/" is not a clean path (paths are matched cleaned: dot segments resolved, repeated / merged; write "/api/v1"), so the route would never apply`},
		{"prefix with dot segment", "  routes:\n    - path_prefix: /api/../admin\n",
			`gw.yaml:4: gateway: routes[0].path_prefix: "/api/../admin" is not a clean path`},
		{"prefix as a pattern", "  routes:\n    - path_prefix: /api/*\n",
			`gw.yaml:4: gateway: routes[0].path_prefix: "/api/*" holds * ? or #: a prefix is literal`},
		{"prefix with a query", "  routes:\n    - path_prefix: /search?q=\n",
			`gw.yaml:4: gateway: routes[0].path_prefix: "/search?q=" holds * ? or #`},
		{"prefix escaped", "  routes:\n    - path_prefix: /caf%C3%A9\n",
			`gw.yaml:4: gateway: routes[0].path_prefix: "/caf%C3%A9" holds a percent escape: paths are matched percent-decoded`},
		{"bad method", "  routes:\n    - path_prefix: /a\n    - methods: [GET, \"PO ST\"]\n",
			`gw.yaml:5: gateway: routes[1].methods[1]: "PO ST" is not an HTTP method`},
		{"bad host", "  routes:\n    - host: api.example.com:8080\n",
			`gw.yaml:4: gateway: routes[0].host: "api.example.com:8080" is not a host name`},
		{"duplicate", "  routes:\n    - {path_prefix: /a, methods: [get, post]}\n    - {path_prefix: /a, methods: [POST, GET]}\n",
			"gw.yaml:5: gateway: routes[1]: matches the same requests as routes[0]"},
		{"same requests, trailing slash", "  routes:\n    - {path_prefix: /x}\n    - {path_prefix: /x/}\n",
			"gw.yaml:5: gateway: routes[1]: matches the same requests as routes[0]"},
		{"same requests, GET implies HEAD", "  routes:\n    - {path_prefix: /x, methods: [GET]}\n    - {path_prefix: /x, methods: [HEAD, GET]}\n",
			"gw.yaml:5: gateway: routes[1]: matches the same requests as routes[0]"},
		{"bad source", "  routes:\n    - path_prefix: /a\n      descriptors:\n        - entries:\n            - source: remote_adress\n",
			`gw.yaml:7: gateway: routes[0].descriptors[0].entries[0].source: unknown source "remote_adress"`},
		{"bad proxy", "  trusted_proxies: [10.0.0.0/33]\n  routes: [{path_prefix: /}]\n",
			`gw.yaml:3: gateway: trusted_proxies[0]: "10.0.0.0/33" is not a CIDR or an IP address`},
		{"bad refuse_status", "  refuse_status: 500\n  routes: [{path_prefix: /}]\n",
			"gw.yaml:3: gateway: refuse_status: 500 is not 429 or 503"},
		{"wrong type", "  routes: {path_prefix: /}\n",
			"gw.yaml:3: gateway: cannot unmarshal !!map into []gateway.RouteSpec"},
	} {
		_, err := policy.Parse("gw.yaml", []byte(head+tc.body))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %s", tc.name, err, tc.want)
		}
	}
}
