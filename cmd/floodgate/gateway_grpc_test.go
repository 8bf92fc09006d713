package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcRules limits Health/Check to 3 a day per client address and the
// test's streaming method to 100 a day in all; anything else passes
// unlimited. Fixed windows on a real clock: a day's end among a test's
// calls would admit one it wants refused (24 times rarer than an hour's).
const grpcRules = `domain: edge
gateway:
  routes:
    - {name: checks, path_prefix: /grpc.health.v1.Health/Check, descriptors: [{entries: [{source: remote_address}]}]}
    - {name: counts, path_prefix: /floodgate.test.Stream/Count, descriptors: [{entries: [{source: generic_key, value: counts}]}]}
descriptors:
  - key: remote_address
    rate_limit: {name: checks, unit: day, requests_per_unit: 3}
  - {key: generic_key, value: counts, rate_limit: {name: counts, unit: day, requests_per_unit: 100}}
`

// countMethod is the test's server-streaming method: it sends the status
// SERVING, then, once next delivers, NOT_SERVING, and ends the call with
// its own status (ABORTED "counted 2") and a trailer of its own.
const countMethod = "/floodgate.test.Stream/Count"

// grpcUpstream serves the standard health service and the Count stream
// over h2c on a loopback port; next releases each Count call's second
// message.
func grpcUpstream(t *testing.T, next <-chan struct{}) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	gs.RegisterService(&grpc.ServiceDesc{
		ServiceName: "floodgate.test.Stream",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Count", ServerStreams: true, Handler: func(_ any, s grpc.ServerStream) error {
			if err := s.RecvMsg(new(healthpb.HealthCheckRequest)); err != nil {
				return err
			}
			s.SetTrailer(metadata.Pairs("x-counted", "2"))
			if err := s.SendMsg(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
				return err
			}
			select {
			case <-next:
			case <-s.Context().Done():
				return s.Context().Err()
			}
			if err := s.SendMsg(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}); err != nil {
				return err
			}
			return status.Error(codes.Aborted, "counted 2")
		}}},
	}, struct{}{})
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
	return l.Addr().String()
}

// A grpc-go client calls a grpc-go upstream through the real binary's
// gateway (--upstream h2c://…), on its plaintext --http address (h2c with
// prior knowledge): unary calls pass with the upstream's answer and its
// own status; over the route's budget of 3, exactly the calls beyond it
// fail with RESOURCE_EXHAUSTED, "rate limit exceeded" and the rate limit
// fields and Retry-After as trailer metadata (not UNAVAILABLE from an
// HTTP 429); a server-streaming call streams each message as it comes and
// ends with the upstream's status and trailer.
func TestBinaryGatewayGRPCClients(t *testing.T) {
	next := make(chan struct{})
	upstream := "h2c://" + grpcUpstream(t, next)
	dir, _ := writeConfig(t, grpcRules)
	p := startBinary(t, nil, "--config", dir, "--reload-interval", "0", "--upstream", upstream)
	conn, err := grpc.NewClient(gatewayAddr(t, p.Stdout()), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// (a) Admitted: the upstream's answer, and a status of its own from
	// its trailers, with the gateway's fields as header metadata.
	var hdr metadata.MD
	res, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check 1 through the gateway: %v %v, want SERVING", res, err)
	}
	if got := hdr.Get("x-ratelimit-remaining"); len(got) != 1 || got[0] != "2" {
		t.Errorf("Check 1: header metadata %v, want X-RateLimit-Remaining 2", hdr)
	}
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "unknown"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check 2 (an unknown service): %v, want the upstream's NotFound", err)
	}
	// (b) 3 + 2 calls: the third passes, the last two are refused.
	for i := 3; i <= 5; i++ {
		var tr metadata.MD
		res, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&tr))
		if i == 3 {
			if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("Check 3: %v %v, want SERVING", res, err)
			}
			continue
		}
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "checks: rate limit exceeded; retry in ") {
			t.Errorf("Check %d over the budget: %v, want ResourceExhausted saying the rate limit was exceeded", i, err)
		}
		ra, raErr := strconv.Atoi(first(tr, "retry-after"))
		if raErr != nil || ra <= 0 || ra > 86400 || first(tr, "x-ratelimit-limit") != "3" || first(tr, "x-ratelimit-remaining") != "0" ||
			first(tr, "ratelimit-policy") != `"checks";q=3;w=86400` || !strings.HasPrefix(first(tr, "ratelimit"), `"checks";r=0;t=`) {
			t.Errorf("Check %d: trailer metadata %v, want Retry-After within the day and the limit's fields", i, tr)
		}
	}

	// (c) A server-streaming call, admitted by its own route: the first
	// message arrives before the upstream sends the second, and the call
	// ends with the upstream's status and trailer.
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	stream, err := conn.NewStream(sctx, &grpc.StreamDesc{ServerStreams: true}, countMethod)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(&healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if h, err := stream.Header(); err != nil || first(h, "x-ratelimit-limit") != "100" {
		t.Errorf("Count's header metadata: %v %v, want the route's X-RateLimit-Limit 100", h, err)
	}
	for i, want := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING} {
		var m healthpb.HealthCheckResponse
		if err := stream.RecvMsg(&m); err != nil || m.GetStatus() != want {
			t.Fatalf("Count message %d: %v %v, want %v", i+1, m.GetStatus(), err, want)
		}
		if i == 0 {
			close(next) // the second message exists only now
		}
	}
	err = stream.RecvMsg(new(healthpb.HealthCheckResponse))
	if st := status.Convert(err); st.Code() != codes.Aborted || st.Message() != "counted 2" || first(stream.Trailer(), "x-counted") != "2" {
		t.Errorf("end of Count: %v, trailer %v; want the upstream's Aborted \"counted 2\" and its x-counted trailer", err, stream.Trailer())
	}
}

// first is md's first value of key, "" when none.
func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// The gateway's plaintext --http address speaks HTTP/2 with prior
// knowledge (h2c) and HTTP/1.1 on the same port: an HTTP/1.1 client and an
// h2c client are both proxied and limited (one budget of 3 for the
// address: 3 through, then 429), and an HTTP/1.1 request that offers to
// switch to h2c (Upgrade: h2c, what curl --http2 sends) is answered in
// HTTP/1.1, the upstream seeing neither Upgrade nor HTTP2-Settings.
func TestBinaryGatewayH2CAndHTTP1OnOneAddress(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s upgrade=%q settings=%q", r.Proto, r.URL.Path, r.Header.Get("Upgrade"), r.Header.Get("Http2-Settings"))
	}))
	defer up.Close()
	dir, _ := writeConfig(t, h2Rules)
	p := startBinary(t, nil, "--config", dir, "--reload-interval", "0", "--upstream", up.URL)
	addr := gatewayAddr(t, p.Stdout())

	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	defer h2c.CloseIdleConnections()
	h1 := &http.Transport{}
	defer h1.CloseIdleConnections()
	for i, tc := range []struct {
		rt    http.RoundTripper
		proto string
		want  int
	}{{h1, "HTTP/1.1", 200}, {h2c, "HTTP/2.0", 200}, {h1, "HTTP/1.1", 200}, {h2c, "HTTP/2.0", 429}, {h1, "HTTP/1.1", 429}} {
		client := &http.Client{Transport: tc.rt, Timeout: 10 * time.Second}
		resp, err := client.Get("http://" + addr + "/ip/x")
		if err != nil {
			t.Fatalf("request %d (%s): %v", i+1, tc.proto, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || resp.Proto != tc.proto || resp.Header.Get("X-RateLimit-Limit") != "3" {
			t.Errorf("request %d: %s %d %v; want %s %d with the limit's fields", i+1, resp.Proto, resp.StatusCode, resp.Header, tc.proto, tc.want)
		}
		if tc.want == 200 && string(b) != `HTTP/1.1 /ip/x upgrade="" settings=""` {
			t.Errorf("request %d: the upstream answered %q", i+1, b)
		}
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /other HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Proto != "HTTP/1.1" || string(b) != `HTTP/1.1 /other upgrade="" settings=""` {
		t.Errorf("Upgrade: h2c: %s %d %q; want the upstream's plain HTTP/1.1 answer, the offer not passed on", resp.Proto, resp.StatusCode, b)
	}
}
