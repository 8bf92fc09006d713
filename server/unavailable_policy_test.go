package server_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestUnavailablePolicyFailsRequests: under --on-store-error unavailable a
// store outage (a killed memcached) is answered by no policy: gRPC
// ShouldRateLimit fails with UNAVAILABLE (Envoy's failure_mode_deny
// decides; its message /json's and the store's words, naming no key), /json and /v1/decide
// answer 503 with a JSON error (a /v1 batch's element that error), and
// store_fallbacks_total counts them under policy="unavailable".
func TestUnavailablePolicyFailsRequests(t *testing.T) {
	mc := testserver.NewMemcached(t)
	if mc == nil {
		t.Skip("no memcached")
	}
	inner, err := memcached.Open("memcached://"+mc.Addr, memcached.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	logs := &logBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	storeLog := server.NewStoreLog(logger)
	st, err := resilient.New(inner, resilient.WithPolicy(resilient.FailUnavailable), resilient.WithTimeout(time.Second),
		resilient.WithHooks(storeLog.Hooks(m.StoreHooks())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m.StoreSeries(resilient.FailUnavailable)
	cfg, err := policy.Parse("test.yaml", []byte(fallbackConfig))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, st, server.WithMetrics(m), server.WithStoreLog(storeLog), server.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	h := httptest.NewServer(srv.HTTPHandler())
	defer h.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.GRPCServer().Serve(ln)
	defer srv.GRPCServer().Stop()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rls := rlsv3.NewRateLimitServiceClient(cc)
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonrl.RateLimitDescriptor{
		{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "7.7.7.7"}}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := rls.ShouldRateLimit(ctx, req); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit with the store up: %v, %v", resp, err)
	}
	if err := mc.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		resp, err := rls.ShouldRateLimit(ctx, req)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("ShouldRateLimit %d with the store down: %v, %v; want status UNAVAILABLE", i, resp, err)
		}
		// The message says what /json's body says, then the store's
		// words, without the store key (a descriptor value: 7.7.7.7) or
		// the wrappers' chain.
		if msg := status.Convert(err).Message(); !strings.HasPrefix(msg, "rate limit decision failed: the store is unavailable: ") ||
			!strings.Contains(msg, "connect: connection refused") || strings.Contains(msg, "7.7.7.7") || strings.Contains(msg, "failure policy unavailable") {
			t.Fatalf("ShouldRateLimit %d with the store down: message %q, want \"rate limit decision failed: the store is unavailable: \" and the store's words, without the key", i, msg)
		}
		for _, path := range []string{"/json", "/v1/decide"} {
			code, body, hdr := do(t, "POST", h.URL+path, "application/json", []byte(ipRequest))
			var e struct{ Error string }
			if code != 503 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") || json.Unmarshal(body, &e) != nil ||
				e.Error != "rate limit decision failed: the store is unavailable" {
				t.Fatalf("%s %d with the store down: %d %s %s; want 503 with a JSON error saying the store is unavailable", path, i, code, hdr.Get("Content-Type"), body)
			}
		}
		// A batch's element says the same, not the store error's text
		// with the store key.
		code, body, _ := do(t, "POST", h.URL+"/v1/decide", "application/json", []byte(`{"requests":[`+ipRequest+`]}`))
		if want := `{"results":[{"error":"requests[0]: rate limit decision failed: the store is unavailable"}]}` + "\n"; code != 200 || string(body) != want {
			t.Fatalf("/v1/decide batch %d with the store down: %d %s, want 200 %s", i, code, body, want)
		}
	}
	// The WARN lines say the requests failed: no policy answered them.
	for _, want := range []string{
		"store did not answer a take, the failure policy (unavailable) failed the request: dial tcp",
		"store circuit breaker opened, the failure policy (unavailable) fails the requests until a probe succeeds: ",
	} {
		if len(logs.lines("level=WARN", want)) == 0 {
			t.Errorf("no WARN line with %q; the log:\n%s", want, logs)
		}
	}
	if answered := logs.lines("(unavailable) answer"); len(answered) > 0 {
		t.Errorf("lines say the unavailable policy answered: %q", answered)
	}
	text := scrapeMetrics(t, srv)
	if want := `floodgate_store_fallbacks_total{op="take",policy="unavailable"} 12`; !strings.Contains(text, want) {
		t.Errorf("metrics lack %s:\n%s", want, grepLines(text, "floodgate_store_fallbacks_total"))
	}
}
