package server_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/server"
)

func envoyReq(domain string, hits uint32, descs ...[]string) *rlsv3.RateLimitRequest {
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

// both sends req over gRPC and /json and checks they agree; it returns the
// gRPC answer and the /json status code.
func (e *env) both(t *testing.T, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, int) {
	t.Helper()
	g, err := e.rls.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	// The same request again over /json must get the next answer; the
	// test calls both only where the two answers are the same (unlimited,
	// shadow) or compares codes in sequence, so it sends /json separately.
	return g, 0
}

func (e *env) json(t *testing.T, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, int) {
	t.Helper()
	b, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	code, body, _ := do(t, "POST", e.http.URL+"/json", "application/json", b)
	var out rlsv3.RateLimitResponse
	if code == http.StatusOK || code == http.StatusTooManyRequests {
		if err := protojson.Unmarshal(body, &out); err != nil {
			t.Fatalf("/json answered %d with %q: %v", code, body, err)
		}
	}
	return &out, code
}

// TestEnvoyMostSpecificMatch: envoyproxy/ratelimit README example 2.
func TestEnvoyMostSpecificMatch(t *testing.T) {
	e := newEnv(t)
	marketing := []string{"message_type", "marketing", "to_number", "2061234567"}
	for i := 1; i <= 6; i++ {
		viaGRPC := i%2 == 1
		var resp *rlsv3.RateLimitResponse
		var code int
		if viaGRPC {
			resp, _ = e.both(t, envoyReq("messaging", 0, marketing))
		} else {
			resp, code = e.json(t, envoyReq("messaging", 0, marketing))
		}
		want := rlsv3.RateLimitResponse_OK
		if i == 6 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if resp.OverallCode != want {
			t.Fatalf("marketing message %d: %v, want %v", i, resp.OverallCode, want)
		}
		if !viaGRPC && (code == http.StatusOK) != (want == rlsv3.RateLimitResponse_OK) {
			t.Fatalf("marketing message %d over /json: HTTP %d for %v", i, code, want)
		}
		st := resp.Statuses[0]
		if st.CurrentLimit.GetRequestsPerUnit() != 5 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_DAY {
			t.Fatalf("marketing message %d: current limit %v, want 5 per DAY", i, st.CurrentLimit)
		}
		if wantRem := uint32(max(0, 5-i)); st.LimitRemaining != wantRem {
			t.Fatalf("marketing message %d: remaining %d, want %d", i, st.LimitRemaining, wantRem)
		}
		if st.DurationUntilReset.AsDuration() <= 0 || st.DurationUntilReset.AsDuration() > 24*time.Hour {
			t.Fatalf("marketing message %d: duration until reset %v", i, st.DurationUntilReset.AsDuration())
		}
	}
	// The plain per-number limit is a different rule: 100 a day.
	resp, _ := e.both(t, envoyReq("messaging", 0, []string{"to_number", "2061234567"}))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 100 {
		t.Fatalf("to_number alone: %v", resp)
	}
	// A deeper descriptor than any rule: no match, OK without a limit.
	resp, _ = e.both(t, envoyReq("messaging", 0, []string{"to_number", "1", "extra", "x"}))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unmatched descriptor: %v", resp)
	}
}

func TestEnvoyUnlimitedAndUnknownDomain(t *testing.T) {
	e := newEnv(t)
	resp, _ := e.both(t, envoyReq("internal", 0, []string{"ldap", "x"}))
	st := resp.Statuses[0]
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 {
		t.Fatalf("unlimited: %v, want OK, no limit, remaining 2^32-1 (envoyproxy/ratelimit's answer)", resp)
	}
	// envoyproxy/ratelimit answers OK for a domain it does not know.
	resp, code := e.json(t, envoyReq("no-such-domain", 0, []string{"k", "v"}))
	if code != http.StatusOK || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil {
		t.Fatalf("unknown domain over /json: HTTP %d %v", code, resp)
	}
}

func TestEnvoyShadowMode(t *testing.T) {
	e := newEnv(t)
	for i := 1; i <= 12; i++ {
		resp, _ := e.both(t, envoyReq("example6", 0, []string{"service", "s", "user", "user-a"}))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("shadow request %d: %v, want OK", i, resp)
		}
		for _, h := range resp.ResponseHeadersToAdd {
			if h.Key == "Retry-After" {
				t.Fatalf("shadow request %d carries Retry-After", i)
			}
		}
	}
	for i := 1; i <= 21; i++ {
		resp, _ := e.both(t, envoyReq("example6", 0, []string{"service", "s", "user", "user-b"}))
		if want := i <= 20; (resp.OverallCode == rlsv3.RateLimitResponse_OK) != want {
			t.Fatalf("user-b request %d: %v", i, resp.OverallCode)
		}
	}
}

// TestEnvoyReplaces: README example 7 — the limit named specific_limit is
// replaced when both descriptors are sent.
func TestEnvoyReplaces(t *testing.T) {
	e := newEnv(t)
	d1 := []string{"key_1", "value_1", "user", "bkthomps"}
	d2 := []string{"key_2", "value_2", "user", "bkthomps"}
	for i := 1; i <= 11; i++ {
		resp, _ := e.both(t, envoyReq("example7", 0, d1, d2))
		if want := i <= 10; (resp.OverallCode == rlsv3.RateLimitResponse_OK) != want {
			t.Fatalf("request %d with both descriptors: %v, want OK=%v (only the 10/s limit applies)", i, resp.OverallCode, want)
		}
		if resp.Statuses[0].CurrentLimit != nil || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d: the replaced descriptor reports %v", i, resp.Statuses[0])
		}
	}
	// Alone, the first descriptor has its own 5/s limit.
	for i := 1; i <= 6; i++ {
		resp, _ := e.both(t, envoyReq("example7", 0, d1))
		if want := i <= 5; (resp.OverallCode == rlsv3.RateLimitResponse_OK) != want {
			t.Fatalf("request %d with d1 alone: %v", i, resp.OverallCode)
		}
	}
}

func TestEnvoyHitsAddend(t *testing.T) {
	e := newEnv(t)
	d := []string{"message_type", "marketing", "to_number", "555"}
	resp, _ := e.both(t, envoyReq("messaging", 3, d))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("hits_addend 3 of 5: %v", resp)
	}
	resp, code := e.json(t, envoyReq("messaging", 3, d))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || code != http.StatusTooManyRequests || resp.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("second hits_addend 3 of 5: HTTP %d %v", code, resp)
	}
	// The refused 3 was charged the 2 that remained, as
	// envoyproxy/ratelimit's counter counts it: the key is spent.
	req := envoyReq("messaging", 3, d)
	req.Descriptors[0].HitsAddend = wrapperspb.UInt64(1)
	resp, _ = e.both(t, req)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("descriptor hits_addend 1 after 3 and a refused 3 of 5: %v, want OVER_LIMIT", resp)
	}
	// A per-descriptor hits_addend overrides the request's.
	req = envoyReq("messaging", 3, []string{"message_type", "marketing", "to_number", "556"})
	req.Descriptors[0].HitsAddend = wrapperspb.UInt64(2)
	resp, _ = e.both(t, req)
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 3 {
		t.Fatalf("descriptor hits_addend 2 of 5 (request's 3): %v, want OK with 3 left", resp)
	}
}

// TestAllOrNothing is our stated difference from envoyproxy/ratelimit: a
// refused descriptor leaves the others uncharged.
func TestAllOrNothing(t *testing.T) {
	e := newEnv(t)
	spent := []string{"message_type", "marketing", "to_number", "777"}
	for range 5 {
		e.both(t, envoyReq("messaging", 0, spent))
	}
	other := []string{"to_number", "888"}
	for range 3 {
		resp, _ := e.both(t, envoyReq("messaging", 0, other, spent))
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%v", resp)
		}
	}
	resp, _ := e.both(t, envoyReq("messaging", 0, other))
	if resp.Statuses[0].LimitRemaining != 99 {
		t.Fatalf("after 3 refused requests the other descriptor has %d left, want 99: refused requests must charge nothing", resp.Statuses[0].LimitRemaining)
	}
}

func TestEnvoyHeadersAndBucketLimit(t *testing.T) {
	e := newEnv(t, server.WithEnvoyHeaders(true))
	var resp *rlsv3.RateLimitResponse
	for range 11 {
		resp, _ = e.both(t, envoyReq("quota", 0, []string{"bucket", "b1"}))
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("11th take of a burst of 10: %v", resp.OverallCode)
	}
	cl := resp.Statuses[0].CurrentLimit
	if cl.GetName() != "per-bucket" || cl.GetRequestsPerUnit() != 60 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("current limit %v, want per-bucket 60 per MINUTE (the rate, not the burst)", cl)
	}
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	want := map[string]string{
		// q=10 refills in 10 s at 1 per second (w); refused, t is the
		// 1 s until the next token, which Retry-After must not undercut.
		"RateLimit-Policy": `"per-bucket";q=10;w=10`, "RateLimit": `"per-bucket";r=0;t=1`,
		"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1", "Retry-After": "1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("header %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d != 10*time.Second {
		t.Errorf("duration until reset %v, want 10s (a bucket refills in 6s per token)", d)
	}
}

func TestGRPCBadInput(t *testing.T) {
	e := newEnv(t)
	for _, r := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"empty domain", envoyReq("", 0, []string{"k", "v"}), "domain must not be empty"},
		{"no descriptors", envoyReq("messaging", 0), "descriptors must not be empty"},
		{"empty key", envoyReq("messaging", 0, []string{"", "v"}), "key must not be empty"},
		{"negative hits", func() *rlsv3.RateLimitRequest {
			r := envoyReq("messaging", 0, []string{"k", "v"})
			r.Descriptors[0].IsNegativeHits = true
			return r
		}(), "is_negative_hits"},
	} {
		_, err := e.rls.ShouldRateLimit(context.Background(), r.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), r.want) {
			t.Errorf("%s: %v, want InvalidArgument saying %q", r.name, err, r.want)
		}
	}
}

func TestGRPCHealth(t *testing.T) {
	e := newEnv(t)
	hc := healthpb.NewHealthClient(e.conn)
	if err := e.srv.CheckStore(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"} {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v %v", svc, r, err)
		}
	}
}

// TestGRPCReflection: grpcurl can list and describe the service without
// .proto files.
func TestGRPCReflection(t *testing.T) {
	e := newEnv(t)
	stream, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "envoy.service.ratelimit.v3.RateLimitService") {
		t.Fatalf("reflection lists %v", names)
	}
}

// TestEnvoyResponseShapes: a response on two descriptors carries a full
// status for each and one list member per limit in the headers, like two
// one-descriptor responses; a descriptor of many entries that no rule
// matches is OK with no limit and no headers.
func TestEnvoyResponseShapes(t *testing.T) {
	e := newEnv(t, server.WithEnvoyHeaders(true))
	resp, _ := e.both(t, envoyReq("quota", 0, []string{"bucket", "b1"}, []string{"client", "c1"}))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 2 {
		t.Fatalf("two descriptors: %v", resp)
	}
	for i, want := range []struct {
		name   string
		left   uint32
		unit   rlsv3.RateLimitResponse_RateLimit_Unit
		period time.Duration
	}{{"per-bucket", 9, rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Second}, {"hourly", 999, rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour}} {
		st := resp.Statuses[i]
		if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetName() != want.name || st.CurrentLimit.GetUnit() != want.unit || st.LimitRemaining != want.left {
			t.Errorf("status %d: %v, want OK, %s per %v, %d left", i, st, want.name, want.unit, want.left)
		}
		if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > want.period {
			t.Errorf("status %d: duration until reset %v, want in (0, %v]", i, d, want.period)
		}
	}
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if p := got["RateLimit-Policy"]; p != `"per-bucket";q=10;w=10, "hourly";q=1000;w=3600` {
		t.Errorf("RateLimit-Policy %q, want both limits", p)
	}
	if len(resp.ResponseHeadersToAdd) != 5 {
		t.Errorf("%d header fields, want 5: %v", len(resp.ResponseHeadersToAdd), got)
	}

	many := []string{"a", "1", "b", "2", "c", "3", "d", "4", "e", "5", "f", "6"}
	resp, _ = e.both(t, envoyReq("quota", 0, many))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 1 || resp.Statuses[0].CurrentLimit != nil ||
		resp.Statuses[0].DurationUntilReset != nil || len(resp.ResponseHeadersToAdd) != 0 {
		t.Fatalf("six entries matching no rule: %v, want OK with no limit and no headers", resp)
	}
}

// TestGRPCRequestMetrics: every gRPC request is counted by its overall
// code, and its descriptors by rule and outcome.
func TestGRPCRequestMetrics(t *testing.T) {
	e := newEnv(t)
	for range 11 {
		e.both(t, envoyReq("quota", 0, []string{"bucket", "metrics"}))
	}
	if _, err := e.rls.ShouldRateLimit(context.Background(), envoyReq("", 0, []string{"k", "v"})); err == nil {
		t.Fatal("a request without a domain was answered")
	}
	_, body, _ := do(t, "GET", e.admin.URL+"/metrics", "", nil)
	for _, want := range []string{
		`floodgate_requests_total{code="OK",transport="grpc"} 10`,
		`floodgate_requests_total{code="OVER_LIMIT",transport="grpc"} 1`,
		`floodgate_requests_total{code="invalid",transport="grpc"} 1`,
		`floodgate_request_duration_seconds_count{transport="grpc"} 12`,
		`floodgate_decisions_total{domain="quota",outcome="ok",rule="per-bucket"} 10`,
		`floodgate_decisions_total{domain="quota",outcome="over_limit",rule="per-bucket"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestEnvoyRequestLimitCalendar: a per-descriptor limit in MONTH or YEAR
// is the UTC calendar period, as `unit: month|year` is in the
// configuration: one hit per month at noon on 31 January resets at
// midnight on 1 February, not 30 days after some epoch-aligned start.
func TestEnvoyRequestLimitCalendar(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	withLimit := func(value string, unit typev3.RateLimitUnit, mult uint32) *rlsv3.RateLimitRequest {
		r := envoyReq("quota", 1, []string{"calendar", value})
		r.Descriptors[0].Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: unit}
		if mult > 0 {
			r.Descriptors[0].Limit.UnitMultiplier = wrapperspb.UInt32(mult)
		}
		return r
	}
	for _, tc := range []struct {
		name  string
		unit  typev3.RateLimitUnit
		at    time.Time
		reset time.Duration
		rl    rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{"month", typev3.RateLimitUnit_MONTH, time.Date(2025, 1, 31, 12, 0, 0, 0, time.UTC), 12 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH},
		{"year", typev3.RateLimitUnit_YEAR, time.Date(2025, 12, 31, 23, 0, 0, 0, time.UTC), time.Hour, rlsv3.RateLimitResponse_RateLimit_YEAR},
	} {
		e.clock.us.Store(tc.at.UnixMicro())
		var last *rlsv3.RateLimitResponse
		for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
			resp, err := e.rls.ShouldRateLimit(ctx, withLimit(tc.name, tc.unit, 0))
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetOverallCode() != want {
				t.Fatalf("%s: hit %d: %v, want %v", tc.name, i, resp.GetOverallCode(), want)
			}
			last = resp
		}
		st := last.GetStatuses()[0]
		if got := st.GetDurationUntilReset().AsDuration(); got != tc.reset {
			t.Errorf("%s: duration until reset %v, want %v (the calendar period's end)", tc.name, got, tc.reset)
		}
		if st.GetCurrentLimit().GetUnit() != tc.rl {
			t.Errorf("%s: current limit unit %v, want %v", tc.name, st.GetCurrentLimit().GetUnit(), tc.rl)
		}
		e.clock.Advance(tc.reset)
		if resp, err := e.rls.ShouldRateLimit(ctx, withLimit(tc.name, tc.unit, 0)); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Errorf("%s: at the period's end: %v %v, want OK", tc.name, resp.GetOverallCode(), err)
		}
	}
	if _, err := e.rls.ShouldRateLimit(ctx, withLimit("m2", typev3.RateLimitUnit_MONTH, 2)); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "calendar period takes no multiplier") {
		t.Errorf("MONTH with unit_multiplier 2: %v, want InvalidArgument saying a calendar period takes no multiplier", err)
	}
}

// Domains the configuration does not have count under one label: a client
// may name any domain (of any length), and each one used to become a
// series of its own, taking the room (metrics.MaxSeries) that the
// configured rules' series need — past it they all read "_other".
func TestUnknownDomainsShareOneSeries(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for i := range metrics.MaxSeries + 10 {
		if _, err := e.rls.ShouldRateLimit(ctx, envoyReq(fmt.Sprintf("made-up-%d-%s", i, strings.Repeat("x", 100)), 0, []string{"k", "v"})); err != nil {
			t.Fatal(err)
		}
	}
	e.both(t, envoyReq("quota", 0, []string{"bucket", "after"}))
	_, body, _ := do(t, "GET", e.admin.URL+"/metrics", "", nil)
	for _, want := range []string{
		fmt.Sprintf(`floodgate_decisions_total{domain="_unknown",outcome="no_rule",rule=""} %d`, metrics.MaxSeries+10),
		`floodgate_decisions_total{domain="quota",outcome="ok",rule="per-bucket"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(string(body), "made-up-") {
		t.Error("an unknown domain is a label")
	}
}
