package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/headers"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
)

// compatConfig holds the cases where envoyproxy/ratelimit's answers were
// not ours: two rules sharing a name, unnamed rules (one on a configured
// value), a requests_per_unit: 0 rule, a shadow rule.
const compatConfig = `
domain: misc
descriptors:
  - key: remote_address
    rate_limit: {name: per-ip, unit: hour, requests_per_unit: 1}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: a
    rate_limit: {name: shared, unit: minute, requests_per_unit: 3}
  - key: b
    rate_limit: {name: shared, unit: hour, requests_per_unit: 100}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: tenant
    value: secret-tenant
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 60, burst: 10}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: quiet
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`

func compatEnv(t *testing.T, engOpts []policy.Option, opts ...server.Option) *env {
	t.Helper()
	cfg, err := policy.Parse("misc.yaml", []byte(compatConfig))
	if err != nil {
		t.Fatal(err)
	}
	return newEnvWith(t, cfg, engOpts, opts...)
}

// ask sends req over gRPC, or over /json when viaJSON, and returns the
// answer and the HTTP status (0 over gRPC).
func (e *env) ask(t *testing.T, req *rlsv3.RateLimitRequest, viaJSON bool) (*rlsv3.RateLimitResponse, int) {
	t.Helper()
	if viaJSON {
		resp, code := e.json(t, req)
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Fatalf("/json answered %d to %.200v", code, req)
		}
		return resp, code
	}
	resp, err := e.rls.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp, 0
}

func transport(viaJSON bool) string {
	if viaJSON {
		return "/json"
	}
	return "gRPC"
}

// TestEnvoyLongRequestsAreDecided: a descriptor value of 100 KiB, a
// descriptor of 17 entries or 65 descriptors do not fail the call — Envoy
// would then fail open and charge none of the request's limits — so the
// per-IP limit beside them holds, over gRPC and /json; two long values
// that share their first KiB have their own counters.
func TestEnvoyLongRequestsAreDecided(t *testing.T) {
	e := compatEnv(t, nil)
	prefix := strings.Repeat("/p", 512)
	value := func(c string) string { return prefix + "?q=" + strings.Repeat(c, 100<<10) }
	entries17 := make([]string, 0, 34)
	for i := range 17 {
		entries17 = append(entries17, fmt.Sprint("k", i), "v")
	}
	for _, viaJSON := range []bool{false, true} {
		ip := transport(viaJSON)
		long, other := value("a"), value("b")
		if viaJSON {
			long, other = value("c"), value("d")
		}
		for _, tc := range []struct {
			name  string
			descs [][]string
		}{
			{"a 100 KiB value", [][]string{{"path", long}}},
			{"17 entries", [][]string{entries17}},
			{"65 descriptors", make([][]string, 64)},
		} {
			descs := append([][]string{{"remote_address", ip + " " + tc.name}}, tc.descs...)
			for i := range descs {
				if descs[i] == nil {
					descs[i] = []string{"k", "v"}
				}
			}
			for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
				resp, _ := e.ask(t, envoyReq("misc", 0, descs...), viaJSON)
				if resp.OverallCode != want || resp.Statuses[0].Code != want || len(resp.Statuses) != len(descs) {
					t.Fatalf("%s, %s, call %d: %v with %d statuses, want %v with the per-IP status %v", ip, tc.name, i+1,
						resp.OverallCode, len(resp.Statuses), want, want)
				}
			}
		}
		// Each long value counts on its own: the second is not over.
		if resp, _ := e.ask(t, envoyReq("misc", 0, []string{"path", other}), viaJSON); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%s: a long value sharing its first KiB with a spent one: %v, want OK (its own counter)", ip, resp.OverallCode)
		}
		if resp, _ := e.ask(t, envoyReq("misc", 0, []string{"path", other}), viaJSON); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%s: the same long value again: %v, want OVER_LIMIT", ip, resp.OverallCode)
		}
	}
}

// TestEnvoyCurrentLimitIsTheMatchedRules: current_limit describes the rule
// that matched — not another rule of the same name, not a configured rule
// whose name a per-request limit's path equals — with overrides and rate
// scales applied; its name is the configured one, empty without one.
func TestEnvoyCurrentLimitIsTheMatchedRules(t *testing.T) {
	e := compatEnv(t, nil)
	type limit struct {
		name string
		rpu  uint32
		unit rlsv3.RateLimitResponse_RateLimit_Unit
	}
	check := func(req *rlsv3.RateLimitRequest, want limit) {
		t.Helper()
		for _, viaJSON := range []bool{false, true} {
			resp, _ := e.ask(t, req, viaJSON)
			cl := resp.Statuses[0].CurrentLimit
			if got := (limit{cl.GetName(), cl.GetRequestsPerUnit(), cl.GetUnit()}); got != want {
				t.Errorf("%s %v: current_limit %+v, want %+v", transport(viaJSON), req.Descriptors[0].Entries, got, want)
			}
		}
	}
	minute, hour := rlsv3.RateLimitResponse_RateLimit_MINUTE, rlsv3.RateLimitResponse_RateLimit_HOUR
	check(envoyReq("misc", 0, []string{"a", "1"}), limit{"shared", 3, minute})
	check(envoyReq("misc", 0, []string{"b", "1"}), limit{"shared", 100, hour})
	check(envoyReq("misc", 0, []string{"key2", "1"}), limit{"", 20, minute})
	check(envoyReq("misc", 0, []string{"tenant", "secret-tenant"}), limit{"", 60, minute})
	check(envoyReq("misc", 0, []string{"banned", "1"}), limit{"", 0, minute})
	// A per-request limit on key2: its own 2 per hour, enforced and
	// reported, with no name.
	withLimit := envoyReq("misc", 0, []string{"key2", ""}) // its path is the name of the key2 rule
	withLimit.Descriptors[0].Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR}
	check(withLimit, limit{"", 2, hour}) // two calls: the limit's 2 spent
	if resp, _ := e.ask(t, withLimit, false); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 {
		t.Fatalf("third call under a per-request limit of 2 per hour: %v", resp)
	}
	// An override of the rules named shared, then a rate scale: each rule
	// reports the limit in force.
	if err := e.eng.SetOverride("misc", "shared", policy.Override{RequestsPerUnit: 50, Period: time.Hour}); err != nil {
		t.Fatal(err)
	}
	check(envoyReq("misc", 0, []string{"a", "2"}), limit{"shared", 50, hour})
	if err := e.eng.SetRateScale("misc", "shared", 0.5, "test"); err != nil {
		t.Fatal(err)
	}
	check(envoyReq("misc", 0, []string{"b", "2"}), limit{"shared", 25, hour})
}

// TestEnvoyHitsAddendZero: a per-descriptor hits_addend of 0 checks
// without charging, whatever the request's hits_addend; left out, the
// request's applies (envoyproxy/ratelimit's GetHitsAddends).
func TestEnvoyHitsAddendZero(t *testing.T) {
	e := compatEnv(t, nil)
	for _, viaJSON := range []bool{false, true} {
		v := transport(viaJSON)
		req := func(hits *wrapperspb.UInt64Value) *rlsv3.RateLimitRequest {
			r := envoyReq("misc", 5, []string{"key2", v})
			r.Descriptors[0].HitsAddend = hits
			return r
		}
		for i, tc := range []struct {
			hits *wrapperspb.UInt64Value
			left uint32
		}{{wrapperspb.UInt64(0), 20}, {wrapperspb.UInt64(0), 20}, {nil, 15}, {wrapperspb.UInt64(2), 13}, {wrapperspb.UInt64(0), 13}} {
			resp, _ := e.ask(t, req(tc.hits), viaJSON)
			if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != tc.left {
				t.Fatalf("%s call %d, descriptor hits_addend %v: %v, want OK with %d left", v, i+1, tc.hits, resp, tc.left)
			}
		}
	}
	// /json with a literal 0.
	body := `{"domain":"misc","hitsAddend":5,"descriptors":[{"entries":[{"key":"key2","value":"raw"}],"hitsAddend":0}]}`
	for range 2 {
		code, got, _ := do(t, "POST", e.http.URL+"/json", "application/json", []byte(body))
		var resp rlsv3.RateLimitResponse
		if err := protojson.Unmarshal(got, &resp); err != nil || code != http.StatusOK || resp.Statuses[0].LimitRemaining != 20 {
			t.Fatalf("/json with a descriptor hitsAddend 0: %d %s, want 200 with 20 left", code, got)
		}
	}
}

// TestEnvoyHeaderFieldsOffByDefault: the Envoy APIs answer no rate limit
// header fields unless WithEnvoyHeaders turns them on (as
// envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED); /v1 always has
// them; WithHeaders' names apply to both.
func TestEnvoyHeaderFieldsOffByDefault(t *testing.T) {
	req := envoyReq("misc", 0, []string{"key2", "h"})
	body, _ := protojson.Marshal(req)
	v1 := `{"domain":"misc","descriptors":[{"entries":[{"key":"key2","value":"h"}]}]}`
	for _, tc := range []struct {
		name  string
		opts  []server.Option
		field string // the X-RateLimit-Limit field's name; "" for none
	}{
		{"default", nil, ""},
		{"on", []server.Option{server.WithEnvoyHeaders(true)}, "X-RateLimit-Limit"},
		{"on, renamed", []server.Option{server.WithEnvoyHeaders(true), server.WithHeaders(headers.Options{Names: headers.Names{Limit: "RateLimit-Limit"}})}, "RateLimit-Limit"},
	} {
		e := compatEnv(t, nil, tc.opts...)
		resp, err := e.rls.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		fields := map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			fields[h.Key] = h.Value
		}
		if (tc.field == "" && len(fields) != 0) || (tc.field != "" && fields[tc.field] != "20") {
			t.Errorf("%s: gRPC response_headers_to_add %v, want %q: 20 (none when off)", tc.name, fields, tc.field)
		}
		code, out, hdr := do(t, "POST", e.http.URL+"/json", "application/json", body)
		var jresp rlsv3.RateLimitResponse
		if err := protojson.Unmarshal(out, &jresp); err != nil || code != 200 {
			t.Fatalf("%s: /json %d %s", tc.name, code, out)
		}
		if tc.field == "" && (hdr.Get("RateLimit-Policy") != "" || hdr.Get("X-RateLimit-Limit") != "" || len(jresp.ResponseHeadersToAdd) != 0) {
			t.Errorf("%s: /json header fields %v and response_headers_to_add %v, want none", tc.name, hdr, jresp.ResponseHeadersToAdd)
		}
		if tc.field != "" && (hdr.Get(tc.field) != "20" || len(jresp.ResponseHeadersToAdd) == 0) {
			t.Errorf("%s: /json header fields %v, want %s: 20 and response_headers_to_add", tc.name, hdr, tc.field)
		}
		if _, _, hdr := do(t, "POST", e.http.URL+"/v1/decide", "application/json", []byte(v1)); hdr.Get("RateLimit-Policy") != `"key2";q=20;w=60` {
			t.Errorf("%s: /v1/decide RateLimit-Policy %q, want the rule's", tc.name, hdr.Get("RateLimit-Policy"))
		}
	}
}

// TestEnvoyEmptyDescriptor: a descriptor without entries is OK (no rule
// can match it), as envoyproxy/ratelimit answers, not a failed call.
func TestEnvoyEmptyDescriptor(t *testing.T) {
	e := compatEnv(t, nil)
	for _, viaJSON := range []bool{false, true} {
		req := &rlsv3.RateLimitRequest{Domain: "misc", Descriptors: []*commonrl.RateLimitDescriptor{{},
			{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "empty " + transport(viaJSON)}}}}}
		for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
			resp, _ := e.ask(t, req, viaJSON)
			if resp.OverallCode != want || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil {
				t.Fatalf("%s call %d: %v, want %v with the empty descriptor OK and no limit", transport(viaJSON), i+1, resp, want)
			}
		}
	}
	code, body, _ := do(t, "POST", e.http.URL+"/json", "", []byte(`{"domain":"misc","descriptors":[{}]}`))
	var resp rlsv3.RateLimitResponse
	if err := protojson.Unmarshal(body, &resp); err != nil || code != 200 || resp.OverallCode != rlsv3.RateLimitResponse_OK ||
		len(resp.Statuses) != 1 || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("/json with one empty descriptor: %d %s, want 200 and one OK status", code, body)
	}
}

// TestEnvoyDenyRule: a requests_per_unit: 0 rule answers OVER_LIMIT with
// duration_until_reset to the end of its window, as envoyproxy/ratelimit
// does; its header fields say the same (t, X-RateLimit-Reset) and carry
// no Retry-After, since no wait admits the request.
func TestEnvoyDenyRule(t *testing.T) {
	e := compatEnv(t, nil, server.WithEnvoyHeaders(true))
	e.clock.Advance(20 * time.Second) // 20 s into the minute
	for _, viaJSON := range []bool{false, true} {
		resp, code := e.ask(t, envoyReq("misc", 0, []string{"banned", "x"}), viaJSON)
		st := resp.Statuses[0]
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() != 40*time.Second {
			t.Errorf("%s: %v, want OVER_LIMIT, 0 left, 40s until reset", transport(viaJSON), resp)
		}
		if viaJSON && code != http.StatusTooManyRequests {
			t.Errorf("/json: HTTP %d, want 429", code)
		}
		got := map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			got[h.Key] = h.Value
		}
		if got["RateLimit"] != `"banned";r=0;t=40` || got["X-RateLimit-Reset"] != "40" || got["Retry-After"] != "" {
			t.Errorf("%s: header fields %v, want t=40, X-RateLimit-Reset 40 and no Retry-After", transport(viaJSON), got)
		}
	}
}

// TestEnvoyGlobalShadowMode: the engine's global shadow mode answers an
// overall OK while a descriptor over its limit keeps its OVER_LIMIT status
// (envoyproxy/ratelimit's SHADOW_MODE flips only the overall code); a
// rule's own shadow_mode answers the descriptor OK, in either mode.
func TestEnvoyGlobalShadowMode(t *testing.T) {
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	for _, global := range []bool{false, true} {
		e := compatEnv(t, []policy.Option{policy.WithShadowMode(global)})
		for _, viaJSON := range []bool{false, true} {
			v := transport(viaJSON)
			for _, tc := range []struct {
				desc            []string
				n               int
				overall, status rlsv3.RateLimitResponse_Code
			}{
				{[]string{"remote_address", v}, 2, map[bool]rlsv3.RateLimitResponse_Code{false: over, true: ok}[global], over},
				{[]string{"banned", v}, 1, map[bool]rlsv3.RateLimitResponse_Code{false: over, true: ok}[global], over},
				{[]string{"quiet", v}, 2, ok, ok},
			} {
				var resp *rlsv3.RateLimitResponse
				var code int
				for range tc.n {
					resp, code = e.ask(t, envoyReq("misc", 0, tc.desc), viaJSON)
				}
				st := resp.Statuses[0]
				if resp.OverallCode != tc.overall || st.Code != tc.status || (st.Code == over && st.LimitRemaining != 0) {
					t.Errorf("global shadow %v, %s %v: overall %v, status %v (%d left); want %v, %v", global, v, tc.desc,
						resp.OverallCode, st.Code, st.LimitRemaining, tc.overall, tc.status)
				}
				if viaJSON && (code == http.StatusOK) != (tc.overall == ok) {
					t.Errorf("global shadow %v, /json %v: HTTP %d for %v", global, tc.desc, code, tc.overall)
				}
			}
		}
	}
}

// TestGRPCHealthRatelimitName: the health service answers for
// envoyproxy/ratelimit's name "ratelimit" as for "" and the rate limit
// service: SERVING while serving, NOT_SERVING once the drain begins.
func TestGRPCHealthRatelimitName(t *testing.T) {
	srv := serverFor(t, compatConfig)
	ls, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ls) }()
	conn, err := grpc.NewClient(ls.GRPC.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	wctx, stopWatching := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopWatching()
	names := []string{"", server.RLSServiceName, "ratelimit"}
	watches := make([]healthpb.Health_WatchClient, len(names))
	for i, name := range names {
		if watches[i], err = hc.Watch(wctx, &healthpb.HealthCheckRequest{Service: name}); err != nil {
			t.Fatal(err)
		}
		for {
			r, err := watches[i].Recv()
			if err != nil {
				t.Fatalf("watch %q: %v, want SERVING", name, err)
			}
			if r.Status == healthpb.HealthCheckResponse_SERVING {
				break
			}
		}
	}
	stop() // the drain: every name turns NOT_SERVING
	for i, name := range names {
		if r, err := watches[i].Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("%q once draining: %v %v, want NOT_SERVING", name, r, err)
		}
	}
	stopWatching() // the watches are the calls the drain waits for
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// TestHealthcheckBody: GET /healthcheck answers envoyproxy/ratelimit's
// exact body, for checks that grep for it.
func TestHealthcheckBody(t *testing.T) {
	e := compatEnv(t, nil)
	if code, body, _ := do(t, "GET", e.http.URL+"/healthcheck", "", nil); code != 200 || string(body) != "OK" {
		t.Fatalf("GET /healthcheck: %d %q, want 200 \"OK\"", code, body)
	}
}

// In a hierarchy, current_limit is the limit limit_remaining comes from:
// a parent tighter than the matched rule is the limit in force, so the
// two fields (and the X-RateLimit headers Envoy derives from them) agree.
func TestEnvoyCurrentLimitFollowsTheTightestLimit(t *testing.T) {
	cfg, err := policy.Parse("h.yaml", []byte(`domain: h
hierarchy: true
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: minute, requests_per_unit: 3}
    descriptors:
      - key: user
        rate_limit: {name: user, unit: hour, requests_per_unit: 100}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, cfg, nil)
	for _, viaJSON := range []bool{false, true} {
		req := envoyReq("h", 0, []string{"tenant", "t-" + transport(viaJSON), "user", "u"})
		resp, _ := e.ask(t, req, viaJSON)
		s := resp.Statuses[0]
		if cl := s.CurrentLimit; cl.GetName() != "tenant" || cl.GetRequestsPerUnit() != 3 ||
			cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || s.LimitRemaining != 2 {
			t.Errorf("%s: current_limit %v with limit_remaining %d, want the tenant's 3 per minute with 2 left", transport(viaJSON), cl, s.LimitRemaining)
		}
	}
}
