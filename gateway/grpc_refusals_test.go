package gateway_test

import (
	"net"
	"net/http/httptest"
	"testing"

	"github.com/floodgate/floodgate/gateway"
)

// The gateway's own answers to a gRPC call are gRPC errors (HTTP 200,
// trailers-only): the upstream unreachable is UNAVAILABLE, a limit's
// refusal RESOURCE_EXHAUSTED with Retry-After (whatever refuse_status
// says), a key sent twice INVALID_ARGUMENT; an HTTP client over the same
// limit still gets refuse_status and the problem body.
func TestGRPCRefusals(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close() // nothing listens: every proxied call gets 502
	e := engine(t, `
domain: edge
gateway:
  refuse_status: 503
  routes:
    - {path_prefix: /pkg.Svc, descriptors: [{entries: [{source: "header:x-api-key"}]}]}
descriptors:
  - key: x-api-key
    rate_limit: {name: per-key, unit: minute, requests_per_unit: 1}
`, newClock(t0))
	gw, err := gateway.New(e.Config(), e, "h2c://"+dead)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		contentType string
		keys        []string
		status      int
		grpcStatus  string
		message     string
		retryAfter  string
	}{
		{"application/grpc", []string{"k"}, 200, "14", "the upstream could not be reached", ""},
		{"application/grpc+proto", []string{"k"}, 200, "8", "per-key: rate limit exceeded; retry in 50 s", "50"},
		{"application/grpc", []string{"a", "b"}, 200, "3", "", ""},
		{"application/json", []string{"k"}, 503, "", "", "50"},
	} {
		r := httptest.NewRequest("POST", "/pkg.Svc/Method", nil)
		r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/2.0", 2, 0 // as gRPC clients send
		r.RemoteAddr = "192.0.2.1:1234"
		r.Header.Set("Content-Type", c.contentType)
		r.Header["X-Api-Key"] = c.keys
		w := httptest.NewRecorder()
		gw.ServeHTTP(w, r)
		h := w.Result().Header
		if w.Code != c.status || h.Get("Grpc-Status") != c.grpcStatus || c.message != "" && h.Get("Grpc-Message") != c.message ||
			h.Get("Retry-After") != c.retryAfter || c.grpcStatus != "" && (w.Body.Len() != 0 || h.Get("Content-Type") != "application/grpc") {
			t.Errorf("call %d (%s): %d %v %q; want %d, grpc-status %q %q, Retry-After %q", i+1, c.contentType, w.Code, h, w.Body, c.status, c.grpcStatus, c.message, c.retryAfter)
		}
	}
}
