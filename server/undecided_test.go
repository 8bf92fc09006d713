package server_test

import (
	"encoding/json"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memory"
)

// undecidedServer is a server whose deny rule (ban) refuses a request
// while its store, closed, fails the look the refusal takes at the other
// keys: the statuses of the user and shadowed rules are undecided (no
// limit, the zero decision), as when a Redis Cluster node holding their
// keys is down while another key refuses (store.Result.Partial).
func undecidedServer(t *testing.T, opts ...server.Option) *server.Server {
	t.Helper()
	cfg, err := policy.Parse("u.yaml", []byte(`
domain: u
descriptors:
  - key: ban
    rate_limit: {name: ban, unit: minute, requests_per_unit: 0}
  - key: user
    rate_limit: {name: user, unit: minute, requests_per_unit: 10}
  - key: sh
    shadow_mode: true
    rate_limit: {name: shadowed, unit: minute, requests_per_unit: 5}
`))
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
	srv, err := server.New(eng, st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	st.Close() // every look fails from now on: store.ErrClosed
	return srv
}

var undecidedEnvoyRequest = &rlsv3.RateLimitRequest{Domain: "u", Descriptors: []*commonrl.RateLimitDescriptor{
	{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "ban", Value: "x"}}},
	{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "user", Value: "y"}}},
	{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "sh", Value: "z"}}},
}}

// TestUndecidedV1: /v1 answers an undecided status "undecided": true with
// no limit, remaining, reset or window (it answered "limit":0,
// "remaining":0, a quota the rule does not have), and its headers name
// the refusing deny rule alone; the deny rule's status is as before.
func TestUndecidedV1(t *testing.T) {
	h := httptest.NewServer(undecidedServer(t).HTTPHandler())
	defer h.Close()
	code, body, hdr := do(t, "POST", h.URL+"/v1/decide", "application/json",
		[]byte(`{"domain":"u","descriptors":[{"entries":[{"key":"ban","value":"x"}]},{"entries":[{"key":"user","value":"y"}]},{"entries":[{"key":"sh","value":"z"}]}]}`))
	if code != 429 {
		t.Fatalf("status %d, body %s; want 429", code, body)
	}
	var out struct {
		Statuses []json.RawMessage `json:"statuses"`
		Headers  map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Statuses) != 3 {
		t.Fatalf("body %s: %v; want three statuses", body, err)
	}
	for i, want := range []string{
		`{"code":"OVER_LIMIT","matched":true,"rule":"ban","limit":0,"remaining":0,"retry_after_ms":-1,"reset_after_ms":60000,"window_ms":60000,"limits":[{"name":"ban","allowed":false,"limit":0,"remaining":0,"retry_after_ms":-1,"reset_after_ms":60000,"window_ms":60000}]}`,
		`{"code":"OK","matched":true,"rule":"user","undecided":true}`,
		`{"code":"OK","matched":true,"rule":"shadowed","shadow":true,"undecided":true}`,
	} {
		got := string(out.Statuses[i])
		if i == 0 {
			// The deny rule's reset is until its window's end: mask it.
			got = maskReset(got)
			want = maskReset(want)
		}
		if got != want {
			t.Errorf("statuses[%d] = %s\nwant %s", i, got, want)
		}
	}
	for name, v := range out.Headers {
		if strings.Contains(v, "user") || strings.Contains(v, "shadowed") {
			t.Errorf("headers: %s: %s names an undecided rule", name, v)
		}
	}
	for _, name := range []string{"RateLimit-Policy", "RateLimit"} {
		if got := hdr.Get(name); got == "" || strings.Contains(got, "user") || strings.Contains(got, "shadowed") {
			t.Errorf("response field %s: %q; want the ban rule's member alone", name, got)
		}
	}
}

// maskReset blanks a status's reset_after_ms values, which count to the
// end of the current minute.
func maskReset(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, `"reset_after_ms":`)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		i += len(`"reset_after_ms":`)
		b.WriteString(s[:i] + "_")
		s = s[i:]
		s = s[strings.IndexAny(s, ",}"):]
	}
}

// undecidedEnvoyStatuses checks Envoy's answer to undecidedEnvoyRequest:
// OVER_LIMIT on the deny rule, and the undecided statuses OK with no
// current_limit, limit_remaining or duration_until_reset, as
// envoyproxy/ratelimit answers a descriptor it has no limit for (they had
// current_limit {requests_per_unit: 0} and limit_remaining 0).
func undecidedEnvoyStatuses(t *testing.T, what string, resp *rlsv3.RateLimitResponse) {
	t.Helper()
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(resp.Statuses) != 3 {
		t.Fatalf("%s: %v; want OVER_LIMIT with three statuses", what, resp)
	}
	if s := resp.Statuses[0]; s.Code != rlsv3.RateLimitResponse_OVER_LIMIT || s.CurrentLimit == nil || s.CurrentLimit.RequestsPerUnit != 0 || s.DurationUntilReset == nil {
		t.Errorf("%s: the deny rule's status %v; want OVER_LIMIT, 0 per MINUTE, with its reset", what, s)
	}
	for i, s := range resp.Statuses[1:] {
		if s.Code != rlsv3.RateLimitResponse_OK || s.CurrentLimit != nil || s.LimitRemaining != 0 || s.DurationUntilReset != nil {
			t.Errorf("%s: undecided statuses[%d] = %v; want OK and nothing else", what, i+1, s)
		}
	}
	for _, f := range resp.ResponseHeadersToAdd {
		if strings.Contains(f.Value, "user") || strings.Contains(f.Value, "shadowed") {
			t.Errorf("%s: response_headers_to_add %s: %s names an undecided rule", what, f.Key, f.Value)
		}
	}
}

// TestUndecidedJSON: /json (Envoy's answer as protojson).
func TestUndecidedJSON(t *testing.T) {
	h := httptest.NewServer(undecidedServer(t, server.WithEnvoyHeaders(true)).HTTPHandler())
	defer h.Close()
	in, err := protojson.Marshal(undecidedEnvoyRequest)
	if err != nil {
		t.Fatal(err)
	}
	code, body, _ := do(t, "POST", h.URL+"/json", "application/json", in)
	var resp rlsv3.RateLimitResponse
	if err := protojson.Unmarshal(body, &resp); err != nil {
		t.Fatalf("status %d, body %s: %v", code, body, err)
	}
	undecidedEnvoyStatuses(t, "/json", &resp)
}

// TestUndecidedGRPC: ShouldRateLimit over gRPC, with --envoy-headers.
func TestUndecidedGRPC(t *testing.T) {
	srv := undecidedServer(t, server.WithEnvoyHeaders(true))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.GRPCServer().Serve(ln)
	defer srv.GRPCServer().Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(t.Context(), undecidedEnvoyRequest)
	if err != nil {
		t.Fatal(err)
	}
	undecidedEnvoyStatuses(t, "gRPC", resp)
}
