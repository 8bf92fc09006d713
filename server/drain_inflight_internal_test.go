package server

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestDrainLogsRequestsInFlight holds an HTTP API request (its body half
// sent) and a gRPC decision (on a paused memcached, SIGSTOP) in flight
// when Serve's context ends: the drain's first line says how many
// requests are in flight, by listener, and the WARN at the drain timeout
// how many were cut, the gRPC calls counted too. Before, the drain said
// neither how many were in flight nor how many gRPC calls it cut.
func TestDrainLogsRequestsInFlight(t *testing.T) {
	mc := testserver.NewMemcached(t)
	if mc == nil {
		t.Skip("no memcached")
	}
	inner, err := memcached.Open("memcached://"+mc.Addr, memcached.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	st, err := resilient.New(inner, resilient.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg, err := policy.Parse("drain.yaml", []byte("domain: drain\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	srv, err := New(eng, st, WithLogger(slog.New(slog.NewTextHandler(logs, nil))), WithDrainTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ls, err := Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ls) }()

	// HTTP: the 100 Continue says the handler is reading the body.
	conn, err := net.Dial("tcp", ls.HTTP.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "POST /v1/decide HTTP/1.1\r\nHost: floodgate\r\nContent-Type: application/json\r\n"+
		"Expect: 100-continue\r\nContent-Length: 100\r\n\r\n")
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("want 100 Continue, got %q, %v", line, err)
	}

	// gRPC: a decision waiting on the paused memcached.
	if err := mc.Pause(); err != nil {
		t.Fatal(err)
	}
	defer mc.Resume()
	cc, err := grpc.NewClient(ls.GRPC.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	called := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: "drain",
			Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		called <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); srv.grpcInflight.Load() != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("the gRPC call not in flight 5s after it was sent (%d in flight)", srv.grpcInflight.Load())
		}
		time.Sleep(5 * time.Millisecond) // waiting for the call to reach the handler
	}

	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return 10s after its context ended (drain timeout 300ms)")
	}
	if err := <-called; err == nil {
		t.Error("the gRPC call cut by the drain succeeded")
	}
	out := logs.String()
	for _, want := range []string{
		`level=INFO msg="draining: 2 request(s) in flight (1 HTTP API, 1 gRPC); they have up to 300ms (drain timeout) to finish" event=drain`,
		`level=WARN msg="drain timed out after 300ms: closed the connections of 1 HTTP API request(s) and 1 gRPC decision call(s) (and any other gRPC streams) still in flight" event=drain`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s\nthe log:\n%s", want, out)
		}
	}
}
