package server_test

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestUndecidedOnClusterPartialRefusal: a server on a real Redis Cluster
// (behind store/resilient failing open) one node of which is dead. A
// request whose descriptor a is spent on a live node and whose descriptor
// b lives on the dead node is refused by a (store.Result.Partial); /v1
// answers b "undecided": true with no limit or remaining (it answered
// "limit":0,"remaining":0), Envoy's answer b OK with no current_limit or
// limit_remaining (it answered current_limit 100 per DAY beside
// limit_remaining 0), and neither names b in the header fields; a's status
// is its refusal, 1 per day with 0 left.
func TestUndecidedOnClusterPartialRefusal(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	cfg, err := policy.Parse("u.yaml", []byte(`
domain: d
descriptors:
  - key: a
    rate_limit: {name: a, unit: day, requests_per_unit: 1}
  - key: b
    rate_limit: {name: b, unit: day, requests_per_unit: 100}
`))
	if err != nil {
		t.Fatal(err)
	}
	dead := new(testserver.DeadNodes)
	inner, err := redis.Open("redis-cluster://"+strings.Join(testserver.RedisCluster(t), ","), redis.WithClientOption(func(o *rueidis.ClientOption) { o.DialCtxFn = dead.Dial }), redis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	st, err := resilient.New(inner, resilient.WithPolicy(resilient.FailOpen), resilient.WithTimeout(2*time.Second), resilient.WithBreaker(100, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng, err := policy.NewEngine(cfg, st, policy.WithKeyPrefix("fg:test:undecided:"+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, st, server.WithEnvoyHeaders(true))
	if err != nil {
		t.Fatal(err)
	}
	master := func(d policy.Descriptor) string {
		t.Helper()
		keys, err := eng.Keys(policy.Request{Domain: "d", Descriptors: []policy.Descriptor{d}})
		if err != nil || len(keys) != 1 {
			t.Fatalf("Keys: %v, %v; want one key", keys, err)
		}
		for addr, n := range inner.Client().Nodes() {
			if err := n.Do(t.Context(), n.B().Get().Key(keys[0]).Build()).Error(); err == nil || rueidis.IsRedisNil(err) {
				return addr
			}
		}
		t.Fatalf("no node serves %s", keys[0])
		return ""
	}
	one := func(k, v string) policy.Descriptor {
		return policy.Descriptor{Entries: []policy.Entry{{Key: k, Value: v}}}
	}
	aAddr, b := master(one("a", "x")), ""
	for i := 0; b == ""; i++ {
		if i > 1000 {
			t.Fatal("no value of b whose key is on another node than a's")
		}
		if v := "y" + strconv.Itoa(i); master(one("b", v)) != aAddr {
			b = v
		}
	}
	bAddr := master(one("b", b))
	h := httptest.NewServer(srv.HTTPHandler())
	defer h.Close()
	if code, body, _ := do(t, "POST", h.URL+"/v1/decide", "application/json", []byte(`{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"x"}]}]}`)); code != 200 {
		t.Fatalf("spending a: %d %s", code, body)
	}
	dead.Down(bAddr)
	defer dead.Up(bAddr)

	code, body, _ := do(t, "POST", h.URL+"/v1/decide", "application/json",
		[]byte(`{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"x"}]},{"entries":[{"key":"b","value":"`+b+`"}]}]}`))
	var out struct {
		StoreFallback bool `json:"store_fallback"`
		Statuses      []struct {
			Code      string `json:"code"`
			Undecided bool   `json:"undecided"`
			Limit     *int64 `json:"limit"`
			Remaining *int64 `json:"remaining"`
		} `json:"statuses"`
		Headers map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(body, &out); err != nil || code != 429 || out.StoreFallback || len(out.Statuses) != 2 {
		t.Fatalf("/v1: %d %s (%v); want 429, a's refusal, with two statuses", code, body, err)
	}
	if s := out.Statuses[0]; s.Code != "OVER_LIMIT" || s.Undecided || s.Limit == nil || *s.Limit != 1 || s.Remaining == nil || *s.Remaining != 0 {
		t.Errorf("/v1: a's status in %s; want OVER_LIMIT, limit 1, remaining 0", body)
	}
	if s := out.Statuses[1]; s.Code != "OK" || !s.Undecided || s.Limit != nil || s.Remaining != nil {
		t.Errorf("/v1: b's status in %s; want OK, undecided, no limit nor remaining", body)
	}
	if got, want := out.Headers["RateLimit-Policy"], `"a";q=1;w=86400`; got != want {
		t.Errorf("/v1: RateLimit-Policy %q; want %q (a's alone)", got, want)
	}

	resp, err := srv.RLS().ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonrl.RateLimitDescriptor{
		{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "a", Value: "x"}}},
		{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "b", Value: b}}},
	}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(resp.Statuses) != 2 {
		t.Fatalf("Envoy: %v, %v; want OVER_LIMIT with two statuses", resp, err)
	}
	if s := resp.Statuses[0]; s.Code != rlsv3.RateLimitResponse_OVER_LIMIT || s.CurrentLimit.GetRequestsPerUnit() != 1 || s.LimitRemaining != 0 || s.DurationUntilReset == nil {
		t.Errorf("Envoy: a's status %v; want OVER_LIMIT, 1 per DAY, with its reset", s)
	}
	if s := resp.Statuses[1]; s.Code != rlsv3.RateLimitResponse_OK || s.CurrentLimit != nil || s.LimitRemaining != 0 || s.DurationUntilReset != nil {
		t.Errorf("Envoy: b's status %v; want OK and nothing else", s)
	}
	for _, hv := range resp.ResponseHeadersToAdd {
		if strings.Contains(hv.Value, `"b"`) {
			t.Errorf("Envoy: response_headers_to_add %s: %s names b", hv.Key, hv.Value)
		}
	}
}
