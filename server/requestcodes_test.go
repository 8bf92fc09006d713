package server_test

import (
	"context"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memory"
)

// TestRequestCodesTellClientFromServer: requests_total counts a request
// the client got wrong (gRPC INVALID_ARGUMENT, /json and /v1 bad JSON, a
// /v1 unknown domain, a bad /v1/release token) under code "invalid" and
// one the server failed (its store closed: 503, UNAVAILABLE) under
// "error", so that an alert on server failures does not fire on clients'
// mistakes. Both used to be "error".
func TestRequestCodesTellClientFromServer(t *testing.T) {
	cfg, err := policy.Load("testdata/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, st)
	if err != nil {
		t.Fatal(err)
	}
	h := newHandlers(t, srv)
	if _, err := srv.RLS().ShouldRateLimit(context.Background(), envoyReq("", 0, []string{"k", "v"})); err == nil {
		t.Fatal("a request without a domain was answered")
	}
	for _, r := range []struct{ path, body string }{
		{"/json", `{"domain": `},
		{"/v1/decide", `{"domain": `},
		{"/v1/decide", `{"domain": "nope", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`},
		{"/v1/release", `{"lease": "not a token"}`},
	} {
		if code, body, _ := do(t, "POST", h.http+r.path, "application/json", []byte(r.body)); code/100 != 4 {
			t.Fatalf("POST %s %s: %d %s, want a 4xx", r.path, r.body, code, body)
		}
	}
	st.Close()
	if _, err := srv.RLS().ShouldRateLimit(context.Background(), envoyReq("messaging", 0, []string{"to_number", "1"})); err == nil {
		t.Fatal("a decision on a closed store was answered")
	}
	if code, body, _ := do(t, "POST", h.http+"/v1/decide", "application/json",
		[]byte(`{"domain": "messaging", "descriptors": [{"entries": [{"key": "to_number", "value": "1"}]}]}`)); code != 503 {
		t.Fatalf("/v1/decide on a closed store: %d %s, want 503", code, body)
	}
	_, body, _ := do(t, "GET", h.admin+"/metrics", "", nil)
	for _, want := range []string{
		`floodgate_requests_total{code="invalid",transport="grpc"} 1`,
		`floodgate_requests_total{code="error",transport="grpc"} 1`,
		`floodgate_requests_total{code="invalid",transport="json"} 1`,
		`floodgate_requests_total{code="invalid",transport="v1"} 2`,
		`floodgate_requests_total{code="error",transport="v1"} 1`,
		`floodgate_requests_total{code="invalid",transport="v1-release"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(string(body), "requests_total"))
		}
	}
}

// TestBuildInfo: build_info is 1 for the version WithVersion gives and
// the Go version, and there without WithVersion too.
func TestBuildInfo(t *testing.T) {
	h := newHandlers(t, serverFor(t, "domain: d\n", server.WithVersion("v1.2.3")))
	_, body, _ := do(t, "GET", h.admin+"/metrics", "", nil)
	want := `floodgate_build_info{goversion="` + runtime.Version() + `",version="v1.2.3"} 1`
	if !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s:\n%s", want, grepLines(string(body), "build_info"))
	}
	h = newHandlers(t, serverFor(t, "domain: d\n"))
	_, body, _ = do(t, "GET", h.admin+"/metrics", "", nil)
	if !strings.Contains(string(body), `floodgate_build_info{goversion="`+runtime.Version()+`",version="`) {
		t.Errorf("/metrics without WithVersion lacks build_info:\n%s", grepLines(string(body), "build_info"))
	}
}

// handlers are a server's HTTP and admin handlers behind httptest servers,
// closed with the test.
type handlers struct{ http, admin string }

func newHandlers(t *testing.T, srv *server.Server) handlers {
	t.Helper()
	h, a := httptest.NewServer(srv.HTTPHandler()), httptest.NewServer(srv.AdminHandler())
	t.Cleanup(func() { h.Close(); a.Close() })
	return handlers{h.URL, a.URL}
}
