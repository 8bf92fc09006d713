package server_test

import (
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/floodgate/floodgate/policy"
)

// overrideShadowConfig: rules in shadow mode three ways.
const overrideShadowConfig = `
domain: ovr
descriptors:
  - key: sh
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: qm
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: st
    rate_limit: {unit: minute, requests_per_unit: 100, strategy: shadow}
  - key: tiny
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestEnvoyRequestLimitIsEnforced: a descriptor's own limit is enforced
// even on a rule in shadow mode, as envoyproxy/ratelimit builds it
// (config_impl.go GetLimit: "When limit override is provided by envoy
// config, we don't want to enable shadow_mode"): two calls carrying 1 per
// hour, the second OVER_LIMIT. Before, the override inherited the rule's
// shadow_mode or quota_mode and answered OK forever. Without a limit of its
// own the rule stays a shadow one.
func TestEnvoyRequestLimitIsEnforced(t *testing.T) {
	for name, e := range storeEnvs(t, overrideShadowConfig) {
		t.Run(name, func(t *testing.T) {
			for _, viaJSON := range []bool{false, true} {
				v := transport(viaJSON)
				for _, key := range []string{"sh", "qm", "st"} {
					req := envoyReq("ovr", 0, []string{key, v})
					req.Descriptors[0].Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
					for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
						resp, _ := e.ask(t, req, viaJSON)
						if resp.OverallCode != want || resp.Statuses[0].Code != want {
							t.Errorf("%s: %s with a limit of 1 per hour, call %d: %v, want %v", v, key, i+1, resp, want)
						}
					}
				}
				// The configured shadow rule stays one.
				for i := range 3 {
					resp, _ := e.ask(t, envoyReq("ovr", 0, []string{"tiny", v}), viaJSON)
					if resp.OverallCode != rlsv3.RateLimitResponse_OK {
						t.Errorf("%s: shadow rule of 1 per minute, call %d: %v, want OK", v, i+1, resp)
					}
				}
			}
		})
	}
}

// TestEngineShadowModeStillCoversRequestLimits: the engine's global shadow
// mode (--shadow) covers a request's limit too: OVER_LIMIT under an
// overall OK, as envoyproxy/ratelimit's SHADOW_MODE answers.
func TestEngineShadowModeStillCoversRequestLimits(t *testing.T) {
	cfg, err := policy.Parse("ovr.yaml", []byte(overrideShadowConfig))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, cfg, []policy.Option{policy.WithShadowMode(true)})
	req := envoyReq("ovr", 0, []string{"sh", "global"})
	req.Descriptors[0].Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	e.ask(t, req, false)
	resp, _ := e.ask(t, req, false)
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("global shadow mode, a limit of 1 per hour, second call: %v, want OK overall, OVER_LIMIT for the descriptor", resp)
	}
}
