package e2e

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/testserver"
)

// envoyConfig holds envoyproxy/ratelimit README examples (2, 5, 6 and 7)
// with day-long units, so that no window ends during the test; every
// domain carries the run's suffix so shared test servers never mix runs.
func envoyConfig(sfx string) string {
	return strings.ReplaceAll(`
domain: messaging{S}
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
---
domain: internal{S}
descriptors:
  - key: ldap
    rate_limit: {unlimited: true}
---
domain: shadow{S}
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit: {requests_per_unit: 3, unit: day}
        shadow_mode: true
---
domain: replaces{S}
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: day}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 10
          unit: day
`, "{S}", sfx)
}

func post(t *testing.T, url, body string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func envoyRequest(domain string, hits uint32, descs ...[]string) *rlsv3.RateLimitRequest {
	r := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, kv := range descs {
		d := &commonrl.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &commonrl.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		r.Descriptors = append(r.Descriptors, d)
	}
	return r
}

// TestEnvoySemanticsOnRealStores: the answers envoyproxy/ratelimit
// documents — most specific match, unlimited, shadow mode, replaces,
// hits_addend — through the binary on Redis, Redis Cluster and Memcached,
// plus our stated difference: all or nothing across descriptors.
func TestEnvoySemanticsOnRealStores(t *testing.T) {
	stores := map[string]func(t *testing.T) string{
		"redis":     func(t *testing.T) string { return "redis://" + testserver.Redis(t) },
		"cluster":   func(t *testing.T) string { return "redis-cluster://" + strings.Join(testserver.RedisCluster(t), ",") },
		"memcached": func(t *testing.T) string { return "memcached://" + testserver.Memcached(t) },
	}
	for _, name := range []string{"redis", "cluster", "memcached"} {
		t.Run(name, func(t *testing.T) {
			sfx := "-" + uniqueDomain(name)
			p := start(t, envoyConfig(sfx), "--store", stores[name](t), "--store-timeout", "10s")
			rls, _ := rlsClient(t, p.grpc)
			ask := func(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
				t.Helper()
				resp, err := rls.ShouldRateLimit(context.Background(), req)
				if err != nil {
					t.Fatalf("%v: %v", req, err)
				}
				return resp
			}
			ok := rlsv3.RateLimitResponse_OK
			over := rlsv3.RateLimitResponse_OVER_LIMIT

			// Most specific match: 5 marketing messages a day to a number.
			marketing := []string{"message_type", "marketing", "to_number", "2061234567"}
			for i := 1; i <= 6; i++ {
				resp := ask(envoyRequest("messaging"+sfx, 0, marketing))
				want := ok
				if i == 6 {
					want = over
				}
				st := resp.Statuses[0]
				if resp.OverallCode != want || st.CurrentLimit.GetRequestsPerUnit() != 5 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_DAY {
					t.Fatalf("marketing message %d: %v, want %v at 5 per DAY", i, resp, want)
				}
			}
			if resp := ask(envoyRequest("messaging"+sfx, 0, []string{"to_number", "2061234567"})); resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 100 {
				t.Fatalf("to_number alone: %v, want the 100 per day rule", resp)
			}
			// hits_addend: 3 of 5, then 3 more is over.
			d := []string{"message_type", "marketing", "to_number", "555"}
			if resp := ask(envoyRequest("messaging"+sfx, 3, d)); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 2 {
				t.Fatalf("hits_addend 3 of 5: %v", resp)
			}
			if resp := ask(envoyRequest("messaging"+sfx, 3, d)); resp.OverallCode != over {
				t.Fatalf("hits_addend 3 with 2 left: %v", resp)
			}
			// All or nothing: the refused request charged the other descriptor nothing.
			other := []string{"to_number", fmt.Sprint(math.MaxInt32)}
			if resp := ask(envoyRequest("messaging"+sfx, 3, other, d)); resp.OverallCode != over || resp.Statuses[0].Code != ok {
				t.Fatalf("two descriptors, one over: %v", resp)
			}
			if resp := ask(envoyRequest("messaging"+sfx, 0, other)); resp.Statuses[0].LimitRemaining != 99 {
				t.Fatalf("after a refused request the other descriptor has %d left, want 99", resp.Statuses[0].LimitRemaining)
			}
			// Unlimited.
			if resp := ask(envoyRequest("internal"+sfx, 0, []string{"ldap", "x"})); resp.OverallCode != ok ||
				resp.Statuses[0].CurrentLimit != nil || resp.Statuses[0].LimitRemaining != math.MaxUint32 {
				t.Fatalf("unlimited: %v", resp)
			}
			// Shadow mode: over its 3 a day, still OK.
			for i := 1; i <= 5; i++ {
				if resp := ask(envoyRequest("shadow"+sfx, 0, []string{"service", "s", "user", "user-a"})); resp.OverallCode != ok {
					t.Fatalf("shadow request %d: %v", i, resp)
				}
			}
			// The HTTP twins: /json and /v1/decide answer 429; /v1 with the
			// header fields, /json without them (--envoy-headers is off).
			body := `{"domain":"messaging` + sfx + `","descriptors":[{"entries":[{"key":"message_type","value":"marketing"},{"key":"to_number","value":"2061234567"}]}]}`
			code, hdr, got := post(t, "http://"+p.http+"/v1/decide", body)
			if code != 429 || hdr.Get("Retry-After") == "" || hdr.Get("RateLimit-Policy") != `"message_type_marketing.to_number";q=5;w=86400` ||
				!strings.Contains(got, "OVER_LIMIT") {
				t.Fatalf("POST /v1/decide: %d %v %s", code, hdr, got)
			}
			code, hdr, got = post(t, "http://"+p.http+"/json", body)
			if code != 429 || hdr.Get("Retry-After") != "" || hdr.Get("RateLimit-Policy") != "" || !strings.Contains(got, "OVER_LIMIT") ||
				strings.Contains(got, "responseHeadersToAdd") {
				t.Fatalf("POST /json: %d %v %s, want 429 without header fields", code, hdr, got)
			}
			// A 100 KiB value on one descriptor does not fail the call, so
			// the other descriptor's limit holds; two values that share
			// their first KiB count apart.
			prefix := strings.Repeat("/p", 512)
			for i, v := range []string{prefix + strings.Repeat("a", 100<<10), prefix + strings.Repeat("b", 100<<10)} {
				number := []string{"message_type", "marketing", "to_number", fmt.Sprint("long-", i)}
				long := []string{"to_number", v}
				if resp := ask(envoyRequest("messaging"+sfx, 4, number, long)); resp.OverallCode != ok || resp.Statuses[1].LimitRemaining != 96 {
					t.Fatalf("long value %d: %v, want OK with 96 left of the long value's own 100", i, resp)
				}
				if resp := ask(envoyRequest("messaging"+sfx, 4, number, long)); resp.OverallCode != over || resp.Statuses[0].Code != over {
					t.Fatalf("long value %d, again: %v, want the marketing limit (1 of 5 left) over", i, resp)
				}
			}
			if code, _, got := post(t, "http://"+p.http+"/v1/decide", `{"domain":"messaging`+sfx+`","descriptors":[]}`); code != 400 ||
				!strings.Contains(got, "descriptors must not be empty") {
				t.Fatalf("bad /v1 request: %d %s", code, got)
			}
			// Replaces: with both descriptors only the 10 a day applies.
			d1 := []string{"key_1", "value_1", "user", "bkthomps"}
			d2 := []string{"key_2", "value_2", "user", "bkthomps"}
			for i := 1; i <= 11; i++ {
				resp := ask(envoyRequest("replaces"+sfx, 0, d1, d2))
				if (resp.OverallCode == ok) != (i <= 10) {
					t.Fatalf("replaces request %d: %v", i, resp.OverallCode)
				}
			}
		})
	}
}
