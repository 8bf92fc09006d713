package server_test

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestEnvoyShadowOverLimitRemainsZero: a shadow_mode rule over its limit
// answers its descriptor OK with limit_remaining 0, as envoyproxy/ratelimit
// does, whatever a smaller cost could still take. The "quiet" rule allows
// 1 an hour: a request of hits_addend 3 is over it, and the status said 1
// left before; one of hits_addend 1 then still has its unit.
func TestEnvoyShadowOverLimitRemainsZero(t *testing.T) {
	e := compatEnv(t, nil)
	for _, viaJSON := range []bool{false, true} {
		v := transport(viaJSON) + "-shadow-remaining"
		resp, _ := e.ask(t, envoyReq("misc", 3, []string{"quiet", v}), viaJSON)
		st := resp.Statuses[0]
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 0 {
			t.Errorf("%s: a shadow rule of 1/hour with hits_addend 3: overall %v, status %v, %d left; want OK, OK, 0 left",
				transport(viaJSON), resp.OverallCode, st.Code, st.LimitRemaining)
		}
		resp, _ = e.ask(t, envoyReq("misc", 1, []string{"quiet", v}), viaJSON)
		if st := resp.Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 0 || st.CurrentLimit == nil {
			t.Errorf("%s: then hits_addend 1: status %v, %d left, limit %v; want OK, 0 left (the unit taken), a current_limit",
				transport(viaJSON), st.Code, st.LimitRemaining, st.CurrentLimit)
		}
	}
}
