package gateway_test

import (
	"testing"

	"github.com/floodgate/floodgate/gateway"
	"github.com/floodgate/floodgate/policy"
)

// A route keyed on a hop-by-hop field (RFC 9110 §7.6.1) limits by a field
// that the proxies on the way drop, the gateway among them: the upstream
// never gets it, and a proxy in front may have removed it already. Check
// warns, at the entry, naming the route and the field, whichever source
// reads it (header:, api_key's header, user_header, tenant_header).
func TestHopByHopKeyWarns(t *testing.T) {
	cfg, err := policy.Parse("h.yaml", []byte(`domain: edge
gateway:
  user_header: Proxy-Authorization
  api_key: {header: te}
  routes:
    - name: by-keepalive
      path_prefix: /a
      descriptors:
        - entries:
            - source: header:Keep-Alive
              default: none
    - name: by-user
      path_prefix: /u
      descriptors:
        - entries: [{source: user}]
    - name: by-key
      path_prefix: /k
      descriptors:
        - entries: [{source: api_key}]
    - name: fine
      path_prefix: /f
      descriptors:
        - entries: [{source: header:X-Api-Key}]
descriptors:
  - key: Keep-Alive
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: X-Api-Key
    rate_limit: {unit: minute, requests_per_unit: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	warnings, err := gateway.Check(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`h.yaml:10: gateway: routes[0].descriptors[0].entries[0]: route "by-keepalive" is keyed on Keep-Alive, a hop-by-hop field (RFC 9110 §7.6.1): every proxy on the way drops it, the gateway too, so the upstream never gets it and a proxy in front may have removed it before the gateway reads it`,
		`h.yaml:15: gateway: routes[1].descriptors[0].entries[0]: route "by-user" is keyed on Proxy-Authorization (user_header), a hop-by-hop field (RFC 9110 §7.6.1): every proxy on the way drops it, the gateway too, so the upstream never gets it and a proxy in front may have removed it before the gateway reads it`,
		`h.yaml:19: gateway: routes[2].descriptors[0].entries[0]: route "by-key" is keyed on te (api_key.header), a hop-by-hop field (RFC 9110 §7.6.1): every proxy on the way drops it, the gateway too, so the upstream never gets it and a proxy in front may have removed it before the gateway reads it`,
	}
	if len(warnings) != len(want) {
		t.Fatalf("%d warnings, want %d:\n%v", len(warnings), len(want), warnings)
	}
	for i := range want {
		if got := warnings[i].String(); got != want[i] {
			t.Errorf("warning %d:\n got %s\nwant %s", i, got, want[i])
		}
	}
}
