package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/resilient"
)

// downStore is a store whose every decision fails as the Redis store's do
// when its server refuses connections: the error names the operation and
// the key, and wraps store.ErrUnavailable and the network error.
type downStore struct{ store.Store }

func refused(op, key string) error {
	return fmt.Errorf("redis: %s %q: %w: %w", op, key, store.ErrUnavailable,
		&net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6399}, Err: syscall.ECONNREFUSED})
}

func (d downStore) Take(_ context.Context, reqs []store.Request, _ []algo.Decision) (store.Result, error) {
	return store.Result{}, refused("take", reqs[0].Key)
}

func (d downStore) Peek(_ context.Context, reqs []store.Request, _ []algo.Decision) error {
	return refused("peek", reqs[0].Key)
}

const fallbackConfig = `
domain: api
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, algorithm: token_bucket, unit: second, requests_per_unit: 20, burst: 40}
`

// fallbackEnv is a server on a store that refuses every connection, behind
// store/resilient with policy p and instances n.
func fallbackEnv(t *testing.T, p resilient.Policy, n int, opts ...server.Option) (*server.Server, *metrics.Metrics) {
	t.Helper()
	mem, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	m := metrics.New()
	st, err := resilient.New(downStore{mem}, resilient.WithPolicy(p), resilient.WithInstances(n), resilient.WithHooks(m.StoreHooks()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg, err := policy.Parse("test.yaml", []byte(fallbackConfig))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, st, append([]server.Option{server.WithMetrics(m)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return srv, m
}

func scrapeMetrics(t *testing.T, srv *server.Server) string {
	t.Helper()
	h := httptest.NewServer(srv.AdminHandler())
	defer h.Close()
	resp, err := http.Get(h.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

const ipRequest = `{"domain":"api","descriptors":[{"entries":[{"key":"remote_address","value":"7.7.7.7"}]}]}`

// TestFallbackDecisionsHaveTheirOwnOutcome: under --on-store-error closed,
// the refusals of a store outage are counted as fallback_refused, not as
// over_limit beside store_fallbacks_total: a dashboard of
// decisions_total{outcome="over_limit"} showed an outage as clients
// hitting their limits. Under open, the admissions are fallback_ok.
func TestFallbackDecisionsHaveTheirOwnOutcome(t *testing.T) {
	for _, tc := range []struct {
		p       resilient.Policy
		outcome string
	}{{resilient.FailClosed, "fallback_refused"}, {resilient.FailOpen, "fallback_ok"}} {
		t.Run(tc.p.String(), func(t *testing.T) {
			srv, _ := fallbackEnv(t, tc.p, 1)
			h := httptest.NewServer(srv.HTTPHandler())
			defer h.Close()
			for range 3 {
				code, body, _ := do(t, "POST", h.URL+"/v1/decide", "application/json", []byte(ipRequest))
				if !strings.Contains(string(body), `"store_fallback":true`) || (tc.p == resilient.FailClosed) != (code == 429) {
					t.Fatalf("/v1/decide with the store down: %d %s", code, body)
				}
				if code, body, _ := do(t, "POST", h.URL+"/json", "application/json", []byte(ipRequest)); code != 200 && code != 429 {
					t.Fatalf("/json with the store down: %d %s", code, body)
				}
			}
			text := scrapeMetrics(t, srv)
			want := fmt.Sprintf(`floodgate_decisions_total{domain="api",outcome=%q,rule="per-ip"} 6`, tc.outcome)
			if !strings.Contains(text, want) {
				t.Errorf("metrics lack %s:\n%s", want, grepLines(text, "floodgate_decisions_total")+"\n"+grepLines(text, "floodgate_store_fallbacks_total"))
			}
			for _, no := range []string{`outcome="over_limit"`, `outcome="ok"`} {
				if strings.Contains(grepLines(text, "floodgate_decisions_total"), no) {
					t.Errorf("the failure policy's decisions counted as %s:\n%s", no, grepLines(text, "floodgate_decisions_total"))
				}
			}
		})
	}
}

// TestLocalFallbackCurrentLimit: under --on-store-error local with
// --instances 4, the Envoy APIs' current_limit is the share the policy
// decides on (20/s burst 40 → 5/s burst 10), as /v1's limit (10) and the
// header fields say, not the configured 20 per second, which read as
// "20 per second, 9 left" while 10 was all this instance would admit.
func TestLocalFallbackCurrentLimit(t *testing.T) {
	srv, _ := fallbackEnv(t, resilient.FailLocal, 4, server.WithInstances(4), server.WithEnvoyHeaders(true))
	h := httptest.NewServer(srv.HTTPHandler())
	defer h.Close()
	code, body, _ := do(t, "POST", h.URL+"/v1/decide", "application/json", []byte(ipRequest))
	var v1 server.V1Response
	if err := json.Unmarshal(body, &v1); err != nil || code != 200 || !v1.StoreFallback || v1.Statuses[0].Limit == nil || *v1.Statuses[0].Limit != 10 {
		t.Fatalf("/v1/decide under local with 4 instances: %d %s, want limit 10 and store_fallback", code, body)
	}
	code, body, hdr := do(t, "POST", h.URL+"/json", "application/json", []byte(ipRequest))
	var out struct {
		Statuses []struct {
			CurrentLimit struct {
				Name            string `json:"name"`
				RequestsPerUnit uint32 `json:"requestsPerUnit"`
				Unit            string `json:"unit"`
			} `json:"currentLimit"`
			LimitRemaining uint32 `json:"limitRemaining"`
		} `json:"statuses"`
	}
	if err := json.Unmarshal(body, &out); err != nil || code != 200 || len(out.Statuses) != 1 {
		t.Fatalf("/json: %d %s %v", code, body, err)
	}
	cl := out.Statuses[0].CurrentLimit
	if cl.RequestsPerUnit != 5 || cl.Unit != "SECOND" || cl.Name != "per-ip" || out.Statuses[0].LimitRemaining != 8 {
		t.Errorf("/json under local with 4 instances: currentLimit %+v, remaining %d; want per-ip 5 per SECOND (20 ÷ 4), 8 left of 10",
			cl, out.Statuses[0].LimitRemaining)
	}
	if got := hdr.Get("X-Ratelimit-Limit"); got != "10" {
		t.Errorf("/json X-RateLimit-Limit under local with 4 instances: %q, want 10 (burst 40 ÷ 4)", got)
	}
	// gRPC: the same.
	resp, err := srv.RLS().ShouldRateLimit(context.Background(), envoyIPRequest())
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Statuses[0].CurrentLimit.GetRequestsPerUnit(); got != 5 {
		t.Errorf("gRPC current_limit under local with 4 instances: %d per %v, want 5", got, resp.Statuses[0].CurrentLimit.GetUnit())
	}
}

// TestLocalCurrentLimitOnlyWhileTheFallbackDecides: with the store
// answering, current_limit stays the configured limit, --instances or not.
func TestLocalCurrentLimitOnlyWhileTheFallbackDecides(t *testing.T) {
	cfg, err := policy.Parse("test.yaml", []byte(fallbackConfig))
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := memory.New(memory.WithSweepInterval(0))
	defer mem.Close()
	st, err := resilient.New(mem, resilient.WithPolicy(resilient.FailLocal), resilient.WithInstances(4))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	eng, _ := policy.NewEngine(cfg, st)
	srv, err := server.New(eng, st, server.WithInstances(4))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.RLS().ShouldRateLimit(context.Background(), envoyIPRequest())
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Statuses[0].CurrentLimit.GetRequestsPerUnit(); got != 20 {
		t.Errorf("current_limit with the store up: %d, want the configured 20", got)
	}
}

func envoyIPRequest() *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonrl.RateLimitDescriptor{
		{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "7.7.7.7"}}}}}
}
